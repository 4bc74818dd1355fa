"""The one error hierarchy of initorch.

Every error carries the data it is about (a location, a cycle, a step name) and
the exit code the CLI turns it into, so that exactly one boundary (``cli.main``)
decides how it is printed.  Embedders catch :class:`InitorchError` and read the
attributes instead of parsing messages.  A public module: every error initorch
raises, or a step raises for it, is importable from here.
"""

from __future__ import annotations

import signal
from collections.abc import Iterable, Sequence
from typing import ClassVar

from initorch.location import SourceLocation
from initorch.printable import shown
from initorch.records import record

__all__ = [
    "EXIT_INTERNAL_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_INVALID_INPUT",
    "EXIT_OK",
    "EXIT_STEP_FAILED",
    "ActiveRunError",
    "ConditionError",
    "ConflictError",
    "CycleError",
    "DeviceError",
    "InitorchError",
    "InterruptedBySigint",
    "LaunchError",
    "PeerError",
    "PluginError",
    "Problem",
    "ProfileError",
    "ResolveError",
    "RunInterrupted",
    "SavedPlanError",
    "StepDefinitionError",
    "StepError",
    "StepFailedError",
    "UnknownStepError",
    "UnplannedStepWarning",
]

EXIT_OK = 0
EXIT_STEP_FAILED = 1
EXIT_INVALID_INPUT = 2
EXIT_INTERNAL_ERROR = 70  # a bug in initorch (sysexits' EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT) outside a run; a run exits 128+N itself


@record
class Problem:
    """One thing wrong with the input: what, where, and how to fix it."""

    message: str
    location: SourceLocation | None = None
    hint: str | None = None

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        tail = f" ({self.hint})" if self.hint else ""
        return f"{where}{self.message}{tail}"


class InitorchError(Exception):
    """Base of every error initorch raises on purpose.

    ``problems`` holds one or more :class:`Problem`; validation collects all of
    them before raising so that a user fixes a profile in one pass.
    """

    exit_code: ClassVar[int] = EXIT_INVALID_INPUT

    def __init__(
        self,
        message: str,
        *,
        location: SourceLocation | None = None,
        hint: str | None = None,
        problems: Iterable[Problem] = (),
    ) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems) or (
            Problem(message, location, hint),
        )
        super().__init__(str(self.problems[0]) if len(self.problems) == 1 else message)

    @property
    def location(self) -> SourceLocation | None:
        return self.problems[0].location


class ProfileError(InitorchError):
    """A profile could not be found, parsed or validated."""


class ConflictError(ProfileError):
    """Two profiles that are layered or inherited side by side disagree."""


class DeviceError(InitorchError):
    """A device string names no known device type."""


class ConditionError(InitorchError):
    """A ``when`` expression is malformed or names an unknown setting."""


class StepDefinitionError(InitorchError):
    """A step declaration in Python is invalid (bad name, duplicate, bad field)."""


class UnknownStepError(InitorchError):
    """A step name that no plugin registered.

    ``reason`` says why a name that looks registered is not (a look-alike
    character); it replaces the did-you-mean.
    """

    def __init__(
        self, name: str, *, location: SourceLocation | None = None,
        suggestion: str | None = None, reason: str | None = None,
    ) -> None:
        self.name = name
        self.suggestion = suggestion
        hint = f"did you mean '{suggestion}'?" if suggestion else (
            "no loaded plugin registers it: load a launcher's own steps with --plugin "
            "MODULE or INITORCH_PLUGINS (Registry.with_plugins([...]) in code); "
            "'initorch steps' lists the registered ones")
        message = (f"unknown step '{shown(name)}': {reason}" if reason
                   else f"unknown step '{shown(name)}'")
        super().__init__(message, location=location,
                         hint="retype the name in ASCII" if reason else hint)


class LaunchError(InitorchError, ValueError):
    """The launcher's description of the job is malformed or ambiguous (exit code 2)."""


class PluginError(InitorchError):
    """A plugin could not be loaded or failed while registering; ``plugin`` names it."""

    def __init__(self, plugin: str, message: str, *, hint: str | None = None) -> None:
        self.plugin = plugin
        super().__init__(message, hint=hint)


class ResolveError(InitorchError):
    """The selected steps cannot form a valid plan."""


class CycleError(ResolveError):
    """The ordering constraints contain cycles.

    ``cycles`` lists every cycle, each a tuple of step names rotated to start at
    its smallest name, in sorted order; ``edges`` maps each cycle to the edges
    (with where they were declared) that close it.
    """

    def __init__(self, cycles: tuple[tuple[str, ...], ...], problems: Iterable[Problem]) -> None:
        self.cycles = cycles
        count = len(cycles)
        super().__init__(
            f"{count} ordering cycle{'s' if count != 1 else ''} among steps",
            problems=problems,
        )


class SavedPlanError(InitorchError):
    """A saved plan cannot be run as it is: unreadable, changed after it was saved,
    in another format, or no longer matching the registered steps.  ``path`` is
    the file; the fix is always to save the plan again."""

    def __init__(self, path: str, message: str, *, hint: str | None = None,
                 problems: Iterable[Problem] = ()) -> None:
        self.path = path
        super().__init__(message, location=SourceLocation(path), hint=hint, problems=problems)


class StepFailedError(InitorchError):
    """A step failed at run time; raised by runs after teardown has happened."""

    exit_code: ClassVar[int] = EXIT_STEP_FAILED

    def __init__(self, step: str, message: str, report: object | None = None) -> None:
        self.step = step
        self.report = report
        super().__init__(message)


class StepError(Exception):
    """Raised by step code for a failure it can describe.

    Not an :class:`InitorchError`: it happens at run time, inside a step, and the
    executor records it (and diagnoses it) instead of printing it as bad input.
    ``vendor_code`` is the vendor's numeric error (e.g. ACL 107002, CUDA 712);
    ``native_log`` holds what native code printed while failing (glog lines from
    Mooncake, say), so that diagnosis can match on it.
    """

    def __init__(
        self,
        message: str,
        *,
        vendor_code: int | str | None = None,
        native_log: str = "",
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.vendor_code = vendor_code
        self.native_log = native_log
        self.hint = hint


class PeerError(StepError):
    """The ranks of a job disagree on the plan, or one of them stopped, failed or never
    joined: found by the run through the job's store, not by a step's own code.

    ``ranks`` names the ranks it is about: a tuple, or a ``range`` when it was given one
    (a disagreement names every rank of the job, 0 to N-1, and each of the N ranks raises
    it: none of them builds the list of all).  ``details`` lists one line per difference
    (``hicache.host_pool_mb: 64 on ranks 0,2,3; 128 on rank 1``).  The message is
    complete, so it needs no diagnosis.
    """

    def __init__(self, message: str, *, ranks: Iterable[int] = (),
                 details: Iterable[str] = (), hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.ranks: Sequence[int] = ranks if isinstance(ranks, range) else tuple(ranks)
        self.details = tuple(details)

    def text(self) -> str:
        """The message, one indented line per detail, then the hint."""
        lines = [str(self), *(f"  {detail}" for detail in self.details)]
        if self.hint:
            lines.append(f"  ({self.hint})")
        return "\n".join(lines)


class ActiveRunError(InitorchError):
    """Another run is active in this process.  Runs share process-wide state (the
    default torch.distributed process group, the environment, fd 2, the device of
    the calling thread), so a second one may not start until the first is torn
    down.  ``active`` describes the run that holds the process."""

    def __init__(self, active: str) -> None:
        self.active = active
        super().__init__(f"another run is active in this process ({active}); runs share the "
                         "process group, the environment and the device context",
                         hint="tear the first run down (run.teardown(), or leave its 'with' "
                              "block) before starting another, or start it in another process")


class RunInterrupted(BaseException):
    """SIGINT or SIGTERM arrived while a run was alive or being planned (a
    BaseException, like KeyboardInterrupt, so that step code catching ``Exception``
    cannot swallow it; code that turns whatever a plugin raises into its failure
    lets it pass).  It is raised after the run has torn down.

    For SIGINT it is an :class:`InterruptedBySigint`, which is also a
    ``KeyboardInterrupt``: ``RunInterrupted(signal.SIGINT)`` makes one, so that a
    server's ``except KeyboardInterrupt`` catches Ctrl-C inside ``with
    initorch.start(..., handle_signals=True)`` as it would anywhere else in Python.
    """

    def __new__(cls, signum: int) -> RunInterrupted:
        made = InterruptedBySigint if cls is RunInterrupted and signum == signal.SIGINT \
            else cls
        return super().__new__(made, signum)

    def __init__(self, signum: int) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class InterruptedBySigint(RunInterrupted, KeyboardInterrupt):
    """The run was interrupted by SIGINT (Ctrl-C): a :class:`RunInterrupted` and a
    ``KeyboardInterrupt`` at once."""


def exception_message(exc: BaseException) -> str:
    """``str(exc)``, even when its ``__str__`` raises (a broken message must not hide
    the failure, nor turn it into an internal error)."""
    try:
        return str(exc)
    except Exception:
        return "(its message cannot be printed: its __str__ raised)"


def describe_exception(exc: BaseException) -> str:
    """One line about ``exc`` -- ``Type: first line of its message`` -- even when its
    ``__str__`` raises; ``sys.exit`` is said as such."""
    if isinstance(exc, SystemExit):
        return f"it called sys.exit({exc.code!r})"
    text = exception_message(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class UnplannedStepWarning(UserWarning):
    """A registered step that nothing pulls into any plan: no profile lists it, no
    step requires or wants it, and it declares no ``wanted_by``.  Usually a
    launcher registered a step and forgot to say when it runs."""

    def __init__(self, step: str, plugin: str | None) -> None:
        self.step = step
        self.plugin = plugin
        origin = f"plugin '{plugin}'" if plugin else "code"
        super().__init__(
            f"step '{step}' (registered by {origin}) is not in the plan: no profile lists "
            "it, no step requires or wants it, and it declares no wanted_by (list it in a "
            "profile, pass load_plan(steps=[...]), or declare @step(wanted_by=...))")
