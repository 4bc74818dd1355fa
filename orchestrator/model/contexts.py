"""What a step's code sees, as the step author writes against it.

A step's action receives a :class:`StepContext`, its preview a :class:`PreviewContext`.
Both are Protocols so that the model (and the author's kit, :mod:`initorch.plugin`)
can name them without importing the layers that implement them: the executors build
the run's context (:class:`initorch.execution.context.RunStepContext`), resolution the
preview's (:class:`initorch.resolution.preview.PlanPreviewContext`).  A test can hand a
step any object of this shape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from initorch.location import SourceLocation
from initorch.model.devices import DeviceRef

if TYPE_CHECKING:
    from initorch.model.step import Step

__all__ = ["PreviewContext", "RankView", "StepContext"]


class RankView(Protocol):
    """This process's place in the job (:class:`initorch.RankInfo` implements it)."""

    @property
    def rank(self) -> int: ...

    @property
    def local_rank(self) -> int: ...

    @property
    def world_size(self) -> int: ...

    @property
    def local_world_size(self) -> int | None:
        """The ranks on this host; ``None`` when the launcher does not say."""

    @property
    def rendezvous(self) -> str | None:
        """``HOST:PORT`` where the ranks meet; ``None`` leaves it to the settings."""

    @property
    def launcher(self) -> str:
        """Who described the job: ``torchrun``, ``env``, ``slurm``, ``args``, ``code``."""

    @property
    def spans_hosts(self) -> bool:
        """True unless every rank is known to run on this host."""

    def label(self) -> str:
        """``rank 1 of 4 (torchrun)``: for logs and messages."""


class StepContext(Protocol):
    """The view of a run that one step's action (and teardown) gets."""

    @property
    def step(self) -> str:
        """The running step's name."""

    @property
    def log(self) -> Any:
        """A structlog logger bound to the run, the rank and this step."""

    @property
    def device(self) -> DeviceRef:
        """The plan's device (``device.type``, ``device.index``)."""

    @property
    def rank(self) -> RankView: ...

    @property
    def declared(self) -> Step:
        """This step as the plan holds it: its declaration with the profile's
        overrides applied (``requires`` a profile added, a changed timeout)."""

    def setting(self, key: str) -> Any:
        """A setting the step declares (``@step(settings=...)``) by dotted key, or the
        core ``device.type``/``device.aliases``; any other key is refused."""

    def implementation(self, key: str) -> Any:
        """What the value of a declared setting with a table of choices
        (``choices={name: implementation}``) names, plugins' additions included;
        checked at plan time, so a run never meets a name without one."""

    def output(self, step: str) -> Any:
        """The output of a completed step the plan orders before this one."""

    def has_output(self, step: str) -> bool:
        """Whether ``step`` completed in this run and left an output."""

    def first_time(self, key: str) -> bool:
        """True only the first time any step of this run asks about ``key``."""

    def peers_gone(self, ranks: Iterable[int]) -> dict[int, str]:
        """Those of ``ranks`` known to be gone from the job, each with what this rank
        saw; empty before the job is joined or after it is left."""


class PreviewContext(Protocol):
    """What a step's preview sees at plan time; it must not import torch."""

    @property
    def step(self) -> str: ...

    @property
    def device(self) -> DeviceRef: ...

    @property
    def environ(self) -> Mapping[str, str]:
        """The environment the plan is made in (``WORLD_SIZE`` under torchrun)."""

    def setting(self, key: str) -> Any:
        """Any declared setting's value by dotted key."""

    def implementation(self, key: str) -> Any:
        """What the value of a setting with a table of choices names."""

    def where(self, key: str) -> SourceLocation | None:
        """Where a setting was last set (a profile line or the command line)."""

    def reject(self, message: str, *, setting: str | None = None,
               hint: str | None = None) -> NoReturn:
        """Refuse the plan: ``message`` is reported at ``setting``'s location."""
