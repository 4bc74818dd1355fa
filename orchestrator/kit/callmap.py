"""The shape of a call map: which function of an engine performs which initorch step.

An engine's start-up order lives in the order of its calls.  A *call map* writes down,
for one code layout of the engine (a stretch of releases whose start-up sits in the same
functions of the same files), every upstream name an integration touches: the function
it hooks to observe a step (:class:`EngineCall` ``target``), and the chain of calls that
leads to it from a function the engine runs (:class:`Hop` after hop), which drift and
audit follow in a release's source without importing it.  The maps are data, one module
per engine and layout, so that a new release of a known layout needs no code change and
a new layout is one new file; :func:`recognise` picks a tree's layout from the tree's own
files (:class:`Marker`), never from its version string.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from initorch.records import record

if TYPE_CHECKING:
    from initorch.kit.source import SourceTree

__all__ = ["DEVICE_MODULE", "CallMap", "EngineCall", "Hop", "Marker", "layout_named",
           "recognise"]

DEVICE_MODULE = "{device_module}"
"""Placeholder in a target for the profile's ``device.torch_module`` (``torch.cpu``,
``torch.npu``): engines set the device through ``torch.get_device_module(device)``, so
the function to hook depends on the device the plan is for."""


@record
class Hop:
    """In ``file`` (inside the engine's package), function ``function`` (qualified within
    the file: ``Scheduler.__init__``) calls ``calls`` (a name or attribute)."""

    file: str
    function: str
    calls: str

    def __str__(self) -> str:
        return f"{self.file} {self.function} -> {self.calls}"


@record
class EngineCall:
    """The engine's own function that performs initorch step ``step``.

    ``target`` is the dotted name an integration hooks to record the call (it may hold
    :data:`DEVICE_MODULE`); ``chain`` leads from a function the engine runs down to the
    call.  An empty chain means the call is hooked (verify mode records it) but its
    place is not followed in the source, so drift cannot order it."""

    step: str
    target: str
    chain: tuple[Hop, ...]

    def hook_target(self, device_module: str) -> str:
        """``target`` with the profile's device module filled in."""
        return self.target.replace(DEVICE_MODULE, device_module)


@record
class Marker:
    """``file`` defines ``function`` (qualified within the file) at module or class level,
    or, with ``function`` empty, ``file`` exists: how a layout is recognised from the tree
    itself, without importing it."""

    file: str
    function: str = ""

    def found_in(self, tree: SourceTree) -> bool:
        """Whether ``tree`` has this file (and defines this function in it)."""
        from initorch.kit.follow import find_function  # reading a tree: never in a rank

        if not tree.has(self.file):
            return False
        if not self.function:
            return True
        module = tree.module(self.file)
        return module is not None and find_function(module, self.function) is not None


class CallMap(Protocol):
    """What drift, audit and the hooks read of one layout's map.  An engine's own layout
    type adds its facts (a table it patches, the helper that runs a vendor call)."""

    @property
    def name(self) -> str: ...

    @property
    def markers(self) -> tuple[Marker, ...]: ...

    @property
    def absent(self) -> tuple[Marker, ...]: ...

    @property
    def calls(self) -> tuple[EngineCall, ...]: ...

    def call_for(self, step: str) -> EngineCall | None: ...

    def hook_targets(self) -> tuple[str, ...]: ...


Layout = TypeVar("Layout", bound=CallMap)


def recognise(tree: SourceTree, layouts: Sequence[Layout]) -> Layout | None:
    """The one layout of ``layouts`` whose markers ``tree`` defines and whose absent
    markers it does not; ``None`` when no layout, or more than one, fits (an unknown
    layout: the caller says so and never treats the release as clean)."""
    fitting = [layout for layout in layouts
               if all(marker.found_in(tree) for marker in layout.markers)
               and not any(marker.found_in(tree) for marker in layout.absent)]
    return fitting[0] if len(fitting) == 1 else None


def layout_named(layouts: Sequence[Layout], name: str) -> Layout:
    """The layout of ``layouts`` called ``name`` (``KeyError`` if none is)."""
    for layout in layouts:
        if layout.name == name:
            return layout
    raise KeyError(name)
