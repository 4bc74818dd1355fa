"""The vendor boundary: the calls that need a device context, recorded where they are made.

An engine's own functions (its call map) say which start-up step it is in; whether that
step works on an accelerator is decided one level down, by the vendor call it makes and
the thread it makes it on.  An engine may enter its engine-init wrapper on a rank's main
thread, where it set the device, and make the vendor call itself on a helper thread that
never set it (a deadline helper's daemon thread): on Ascend that call fails there
(``aclrtGetDevice``, 107002), and recording the wrapper's thread would call it correct.
So the vendor classes themselves are wrapped (:func:`install_vendor_hooks`), and each
call is told where it came from (:func:`call_site`: the innermost frame of the engine's
package, and the function its thread started in).

Two rules keep this an observation:

- **No import.**  A vendor module is never imported here: importing ``mooncake.engine``
  before ``set_device`` aborts an NPU worker (``../shared/CONTEXT.md``, field reports).
  A class is wrapped when the engine imports its module (:mod:`initorch.kit.imports`),
  or at once if it was already imported.
- **No device query.**  Which device a thread has bound is what the recorder saw
  ``set_device`` do on it; nothing here asks the runtime.  torch_npu 2.14.0's
  ``current_device()`` answers 0 on a thread without a context (``NPUFunctions.cpp:196-221``),
  which would pass an unbound thread for a bound one, and builds before Ascend/pytorch
  4d2bd5e93 bound device 0 there, changing what they observed
  (``tests/support/simulated/README.md``).

The calls themselves are a table of :class:`VendorCall` (Mooncake's:
:data:`initorch.kit.mooncake.MOONCAKE_CALLS`).
"""

from __future__ import annotations

import functools
import sys
import threading
import types
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from initorch.kit.imports import after_import
from initorch.records import record

__all__ = ["CallSite", "Observe", "VendorCall", "call_site", "install_vendor_hooks",
           "wrap_vendor_function"]


@record
class VendorCall:
    """A vendor method that needs the calling thread's device context: ``owner.method``
    of module ``module``.

    ``label`` names it as a person reports it upstream; ``step`` is the initorch step it
    performs; ``why`` is the vendor source that reads the thread's device.  ``protocols``
    narrows that to the transports whose code reads it (the plan's
    ``device.mooncake_protocol``); ``None`` means every one.  Verify mode refuses only what
    would fail: Mooncake's TCP transport and its MUSA build's transport install without
    asking the calling thread for a device, so an unbound thread is harmless there."""

    module: str
    owner: str
    method: str
    step: str
    why: str
    name: str | None = None
    protocols: frozenset[str] | None = None

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
        return f"{self.module.split('.')[0].capitalize()} {self.owner}.{self.method}"


Observe = Callable[[VendorCall], AbstractContextManager[Any]]
"""Opens the record of one vendor call; the block runs the call itself."""


@record
class CallSite:
    """Where a vendor call came from: the innermost frame of the engine's package that
    led to it, and the function the calling thread started in (``None`` on the main
    thread)."""

    file: str | None
    line: int | None
    function: str | None
    thread_entry: str | None

    def where(self) -> str:
        if self.file is None:
            return "(no frame of the engine's package on the stack)"
        return f"{self.file}:{self.line} ({self.function})"


def call_site(package_root: Path | None, *, skip: int = 1) -> CallSite:
    """The caller's :class:`CallSite` for files under ``package_root`` (paths made
    relative to it).  Only reads the stack: frames, not the objects in them."""
    frame: types.FrameType | None = sys._getframe(skip + 1)
    innermost: types.FrameType | None = None
    outermost: types.FrameType | None = None
    while frame is not None:
        path = frame.f_code.co_filename
        if innermost is None and package_root is not None and _under(path, package_root):
            innermost = frame
        if not path.endswith(("threading.py",)):
            outermost = frame
        frame = frame.f_back
    entry = None
    if threading.current_thread() is not threading.main_thread() and outermost is not None:
        code = outermost.f_code
        entry = f"{_qualname(code)} ({_relative(code.co_filename, package_root)}:" \
                f"{code.co_firstlineno})"
    if innermost is None:
        return CallSite(None, None, None, entry)
    return CallSite(_relative(innermost.f_code.co_filename, package_root), innermost.f_lineno,
                    _qualname(innermost.f_code), entry)


def _qualname(code: types.CodeType) -> str:
    """The function's qualified name (``co_qualname`` from Python 3.11 on)."""
    return str(getattr(code, "co_qualname", code.co_name))


def _under(path: str, root: Path) -> bool:
    return path.startswith(f"{root}/")


def _relative(path: str, root: Path | None) -> str:
    return path[len(str(root)) + 1:] if root is not None and _under(path, root) else path


# -- wrapping the vendor classes when their modules load ---------------------------------


def install_vendor_hooks(observe: Observe, calls: Sequence[VendorCall]) -> None:
    """Wrap each of ``calls`` with ``observe``: now for a module already imported, else
    right after the engine imports it (:func:`initorch.kit.imports.after_import`, whose
    finder goes first so that a class swapped by a later finder is the one wrapped).
    Idempotent per method."""
    for name in sorted({call.module for call in calls}):
        after_import(name, lambda module: _wrap_module(module, calls, observe))


def _wrap_module(module: types.ModuleType, calls: Sequence[VendorCall],
                 observe: Observe) -> None:
    for call in calls:
        if call.module != module.__name__:
            continue
        owner = getattr(module, call.owner, None)
        original = getattr(owner, call.method, None) if owner is not None else None
        if original is None or getattr(original, "__initorch_vendor__", False):
            continue
        setattr(owner, call.method, _wrapped(original, call, observe))


def wrap_vendor_function(original: Callable[..., Any], call: VendorCall,
                         observe: Observe) -> Callable[..., Any]:
    """``original`` recorded as ``call`` (for a function the engine looks up in a table)."""
    return _wrapped(original, call, observe)


def _wrapped(original: Callable[..., Any], call: VendorCall,
             observe: Observe) -> Callable[..., Any]:
    @functools.wraps(original)
    def vendor_call(*args: Any, **kwargs: Any) -> Any:
        with observe(call) as record:
            result = original(*args, **kwargs)
            record.returned(result)
            return result

    vendor_call.__initorch_vendor__ = True  # type: ignore[attr-defined]
    return vendor_call
