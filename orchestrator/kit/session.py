"""One rank's start-up under an integration: from where it begins to where it ends.

An engine builds one worker per rank process, and everything initorch models happens in
that worker's start-up.  The session begins there (the integration resolves the plan for
the engine's own arguments and starts a :class:`~initorch.kit.recorder.Recorder`), and
it ends when the start-up is over, writing the rank's report and trace
(:meth:`RankSession.finish`).  Engines frame that start-up in one of two ways:

- **in one call**, the rank's constructor: the integration hooks it and runs it inside
  :func:`run_framed`, which begins the session when the call is entered and ends it
  when the call returns or raises;
- **in several calls** that the engine makes one after another into the worker (build
  it, set up its device, load the model, warm it up), with no one function around them
  all: the session is the begin/end pair.  :func:`begin_hook` begins it on the first
  call, from that call's arguments; it stays active between the calls; the
  :func:`observer` of the last call (``last=True``) ends it when that call returns, and
  any observed call that raises ends it with the error (the start-up is over either
  way).  :func:`begin` and :func:`end` are the pair itself, for an integration that
  hooks these points another way.

While a session runs it is this process's :func:`active` session, which the hooks read:
:func:`observer` records an engine call as a step, :func:`set_device_observer` records
``set_device`` and the device it binds to the calling thread (from its argument: no
device query), and :func:`observe_vendor` opens the record of a vendor call.  Outside a
session (before it, after it) they call straight through.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import field
from typing import TYPE_CHECKING, Any, TypeVar

from initorch.kit.cost import COST, process_age
from initorch.kit.outputs import Idle, build_report, now_iso, rank_path, write_outputs
from initorch.kit.progress import Progress
from initorch.kit.vendor import call_site
from initorch.records import record

if TYPE_CHECKING:
    from initorch import Plan, RunReport
    from initorch.kit.recorder import Recorder, VendorRecord
    from initorch.kit.vendor import VendorCall

__all__ = ["Outputs", "RankSession", "active", "begin", "begin_hook", "end", "observe_vendor",
           "observer", "plan_or_off", "run_framed", "set_device_observer"]

T = TypeVar("T")


@record
class Outputs:
    """Where a rank's report and trace go (``{rank}`` filled in; ``None``: not written),
    the report's section for what only the integration knows, how to tell a call that
    did nothing (:class:`~initorch.kit.outputs.Idle`), and the logger of the session's
    lines (``None``: the integration's own, ``initorch-x`` as ``initorch_x``).

    A logger is only seen where the engine's logging configuration sends it: an engine
    that configures the root logger shows the integration's own; one that configures
    only its own hierarchy (and stops it propagating) shows a child of it, so the
    integration names one there and its lines appear with the engine's, in its format.

    ``status`` is the rank's status file (``{rank}`` filled in; ``None``: none) and
    ``progress_s`` how long a phase lasts before a progress line names it (``None``: no
    lines): :class:`~initorch.kit.progress.Progress`."""

    section: str
    report: str | None = None
    trace: str | None = None
    idle: Idle = field(default_factory=Idle)
    log: str | None = None
    status: str | None = None
    progress_s: float | None = None


@record(frozen=False)
class RankSession:
    """The plan, the recorder and what the report will say, for one rank.

    ``extra`` is the integration's section of the report (the selection, what it
    installed); ``driven`` is the run report of drive mode's steps, when it ran them."""

    plan: Plan
    recorder: Recorder
    rank: int
    mode: str
    outputs: Outputs
    started_at: str = field(default_factory=now_iso)
    extra: dict[str, Any] = field(default_factory=dict)
    driven: RunReport | None = None
    driven_offset: float = 0.0
    progress: Progress = field(init=False)

    def __post_init__(self) -> None:
        self.progress = Progress(
            integration=self.recorder.engine.integration, rank=self.rank,
            steps_total=len(self.plan.order), status=self.outputs.status,
            every_s=self.outputs.progress_s,
            logger=_logger(self.recorder.engine.integration, self.outputs.log))

    def adopt_drive(self, report: RunReport, offset: float) -> None:
        """Keep drive mode's run report; its times start ``offset`` s into the session."""
        self.driven, self.driven_offset = report, offset
        self.extra["drive"] = report.to_dict()

    def finish(self, error: BaseException | None = None) -> RunReport:
        """Write the report and trace, and say how the start-up went against the plan."""
        from initorch.renderers import run_summary_text

        engine = self.recorder.engine
        logger = _logger(engine.integration, self.outputs.log)
        self.progress.over(failed=error is not None)
        up = process_age()
        COST.add("recording", self.recorder.overhead)
        reporting = time.perf_counter()
        report = build_report(self.recorder, mode=self.mode, rank=self.rank,
                              started_at=self.started_at, idle=self.outputs.idle,
                              driven=self.driven, driven_offset=self.driven_offset)
        table = run_summary_text(report)
        self.extra |= {
            "table": table,
            "mode": self.mode,
            "calls": [call.to_dict() for call in self.recorder.calls],
            "vendor_calls": [record.to_dict() for record in self.recorder.vendor_calls],
            "violations": [str(violation) for violation in self.recorder.violations],
            "error": None if error is None else f"{type(error).__name__}: {error}",
        }
        COST.add("report", time.perf_counter() - reporting)  # its own write not counted
        self.extra["cost"] = COST.to_dict(up)
        for warning in write_outputs(report, self.extra, section=self.outputs.section,
                                     report_path=rank_path(self.outputs.report, self.rank),
                                     trace_path=rank_path(self.outputs.trace, self.rank),
                                     writer=engine.integration):
            logger.warning(warning)
        logger.info("%s: the start-up as initorch steps:\n%s", engine.integration, table)
        logger.info("%s: %s", engine.integration, COST.line(up))
        checked = sum(1 for name in self.plan.order if name in self.recorder.first_calls())
        if self.recorder.violations:
            for violation in self.recorder.violations:
                logger.error("%s: order violation: %s", engine.integration, violation)
        elif error is None:
            logger.info("%s: %s ok: %d of %d planned steps seen in %s's order (profiles %s, "
                        "fingerprint %s)", engine.integration, self.mode, checked,
                        len(self.plan.order), engine.name, " + ".join(self.plan.profiles),
                        self.plan.fingerprint[:12])
        return report


def _logger(integration: str, name: str | None = None) -> logging.Logger:
    """Logger ``name``, else the integration's own (``initorch-x`` logs as
    ``initorch_x``): the engine's logging configuration decides where it goes; a library
    never configures it."""
    return logging.getLogger(name or integration.replace("-", "_"))


class _Current:
    """The session of this process's start-up while it runs (one per process: an engine
    builds one worker per rank process), and whether a frame ends it (:func:`run_framed`)
    or the begin/end pair does."""

    session: RankSession | None = None
    framed: bool = False


def active() -> RankSession | None:
    """The session of this process's start-up, while it runs."""
    return _Current.session


def begin(make: Callable[[], RankSession | None]) -> RankSession | None:
    """Begin this process's session with the one ``make`` returns (``None``: the rank
    starts unobserved), unless one is active already: then nothing is made and ``None``
    returned.  It stays active until :func:`end`, across the engine's calls."""
    if _Current.session is not None:
        return None
    _Current.session, _Current.framed = make(), False
    return _Current.session


def end(session: RankSession, error: BaseException | None = None) -> RunReport | None:
    """End ``session`` if it is this process's active one: it is no longer active, and
    its report and trace are written (``error``: what ended the start-up).  Ending it
    again, or a session that is not active, does nothing and returns ``None``: every
    call around one that raised sees the error, and only the first ends it."""
    if _Current.session is not session:
        return None
    _Current.session = None
    return session.finish(error)


def run_framed(begin: Callable[[], RankSession | None], start: Callable[[], T]) -> T:
    """Run ``start`` (the engine's constructor of a rank) as this process's session:
    ``begin`` makes the session (``None``: the rank starts unobserved), which is active
    while ``start`` runs and finished when it returns or raises."""
    session = _Current.session = begin()
    if session is None:
        return start()
    _Current.framed = True
    try:
        result = start()
    except BaseException as error:
        end(session, error)
        raise
    finally:
        _Current.framed = False
    end(session)
    return result


def begin_hook(make: Callable[[dict[str, Any]], RankSession | None]) -> Callable[..., Any]:
    """An ``around`` hook on the call where a rank's start-up begins (the worker's
    constructor) that begins this process's session (:func:`begin`), then makes the
    call: ``make`` is given the call's arguments by parameter name (``self`` too), so
    that the integration plans from the engine's own configuration."""

    def begin_session(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if _Current.session is None:
            given = inspect.signature(original).bind(*args, **kwargs).arguments
            begin(lambda: make(given))
        return original(*args, **kwargs)

    return begin_session


def plan_or_off(make: Callable[[], Plan], *, mode: str, describe: str,
                integration: str, log: str | None = None) -> Plan | None:
    """The plan ``make`` resolves; ``None`` in verify mode when it cannot be made: verify
    only observes, so a plan problem is reported in one line on logger ``log`` (default:
    the integration's; ``describe``: the selection, as a command) and the engine starts
    as it would without initorch.  Drive mode needs the plan to run: there the problem
    stops the launch."""
    from initorch import InitorchError

    try:
        return make()
    except InitorchError as error:
        if mode == "drive":
            raise
        _logger(integration, log).error("%s: verify is off for this rank, no plan for this "
                                        "launch (%s): %s", integration, describe,
                                        str(error).splitlines()[0])
        return None


def observer(step: str, *, binds: Callable[..., str] | None = None,
             last: bool = False) -> Callable[..., Any]:
    """An ``around`` hook that records each call as a call of ``step``;
    ``binds(session, *args, **kwargs)`` names the device the call sets on its thread,
    from the call's own arguments (never a device query: asking can create a context).

    In a session of the begin/end pair, a call that raises ends the session with its
    error, and with ``last`` the call's return ends it: the rank's start-up is over.  A
    framed session ends with its frame only (an engine may catch an error inside it)."""

    def observe(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        session = _Current.session
        if session is None:
            return original(*args, **kwargs)
        device = None if binds is None else binds(session, *args, **kwargs)
        try:
            with session.recorder.observe(step, binds=device) as call, \
                    session.progress.phase(step):
                call.result = original(*args, **kwargs)
        except BaseException as error:
            if not _Current.framed:
                end(session, error)
            raise
        if last and not _Current.framed:
            end(session)
        return call.result

    observe.__qualname__ = f"observe_{step}"
    return observe


def set_device_observer(module_name: str) -> Callable[..., Any]:
    """The ``around`` hook on ``<device module>.set_device(index)``: records the call and
    the device it binds to the calling thread, from its argument (no device query)."""
    kind = module_name.rsplit(".", 1)[-1]

    def bound(_session: RankSession, device: Any, *_args: Any, **_kwargs: Any) -> str:
        return f"{kind}:{getattr(device, 'index', device)}"

    return observer("set_device", binds=bound)


class _Unrecorded:
    """A vendor call outside a session (after start-up): nothing to keep."""

    def returned(self, result: Any) -> None:
        pass


@contextmanager
def observe_vendor(call: VendorCall) -> Iterator[VendorRecord | _Unrecorded]:
    """Open the record of vendor call ``call`` in this process's session, if one runs
    (the ``observe`` of :func:`initorch.kit.vendor.install_vendor_hooks`); the call site
    is the innermost frame of the engine's package."""
    session = _Current.session
    if session is None:
        yield _Unrecorded()
        return
    site = call_site(session.recorder.engine.package_root())
    with session.recorder.observe_vendor(call, site) as record:
        yield record
