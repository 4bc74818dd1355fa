"""The timeline of one ``initorch run`` process: from the interpreter's start to the
last teardown.

Before the first step the process passes moments that the command line records
(:mod:`~initorch.reporting.process_marks`): the first line of ``initorch`` runs
(``imports``), ``main`` is entered, the arguments are parsed, the plugins are
loaded, the plan is made, the run starts.  Each phase runs from one recorded
moment to the next; a phase whose ends were not both recorded is left out, and
the stretch it would have covered shows as "not measured"
(:meth:`~initorch.reporting.timeline.Timeline.with_gaps`).  The interpreter's own
start comes from ``/proc`` (:func:`~initorch.reporting.process_marks.process_start`).
Then the steps and the teardowns, from the run report.  What follows the last
teardown (writing this very report, exiting) cannot be in it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from initorch.location import SourceLocation, display_path
from initorch.reporting.process_marks import Moment, ProcessStart
from initorch.reporting.report import RunReport
from initorch.reporting.timeline import Phase, Process, Timeline

PROCESS_PHASES = (
    # (phase, from mark, to mark)
    ("imports", "imports_began", "main_entered"),
    ("parse arguments", "main_entered", "arguments_parsed"),
    ("plugins", "arguments_parsed", "plugins_loaded"),
    ("logging and rank", "plugins_loaded", "plan_began"),
    ("plan", "plan_began", "plan_ready"),
    ("prepare run", "plan_ready", "run_starting"),
)
"""The phases of the process before its first step, each between two marks; a phase
is labelled with the file:line that recorded its end."""


def run_timeline(report: RunReport, marks: Mapping[str, Moment], *, pid: int,
                 argv: Sequence[str], start: ProcessStart | None) -> Timeline:
    """This process's timeline: its start-up phases, the run's steps and teardowns."""
    main = threading.main_thread().name
    at = {name: moment.at for name, moment in marks.items()}
    phases: list[Phase] = []
    if start is not None and "imports_began" in at:
        phases.append(Phase("interpreter start", pid, main, start.at, at["imports_began"],
                            source="/proc/self/stat starttime",
                            detail=f"the kernel's start time, known to "
                                   f"{start.resolution * 1000:g} ms"))
    for name, began, ended in PROCESS_PHASES:
        if began in at and ended in at:
            where = marks[ended].where if ended in marks else None
            phases.append(Phase(name, pid, main, at[began], at[ended],
                                source=None if where is None else str(where)))
    ready = None
    origin = report.started_epoch
    if origin is not None and "run_starting" in at:  # signals, watchdog, atexit
        phases.append(Phase("run set-up", pid, main, at["run_starting"], origin,
                            source=f"{marks['run_starting'].where} (Run.start)"))
    if origin is not None:
        phases += _step_phases(report, origin, pid)
        ready = origin + report.wall_time
    process = Process(pid, f"initorch rank {report.rank} ({' + '.join(report.plan.profiles)})",
                      tuple(argv), ready)
    return Timeline([process], sorted(phases, key=lambda p: p.start), ready,
                    {"fingerprint": report.plan.fingerprint, "started_at": report.started_at})


def _step_phases(report: RunReport, origin: float, pid: int) -> list[Phase]:
    """The steps that ran and the teardowns, on the threads that ran them."""
    phases = []
    graph = report.plan.graph
    for outcome in report.outcomes.values():
        if outcome.started is None:
            continue
        step = report.plan.step(outcome.name).step
        ended = outcome.finished if outcome.finished is not None else report.wall_time
        phases.append(Phase(outcome.name, pid, outcome.thread or "?", origin + outcome.started,
                            origin + ended, kind="step", source=code_location(step.action,
                                                                              step.defined_at),
                            status=outcome.status, after=graph.predecessors(outcome.name)))
    for entry in report.teardown:
        ended = entry.finished if entry.finished is not None else entry.started
        step = report.plan.step(entry.step).step
        phases.append(Phase(f"teardown {entry.step}", pid, entry.thread or "?",
                            origin + entry.started, origin + ended, kind="teardown",
                            source=code_location(step.teardown, step.defined_at),
                            status=entry.status))
    return phases


def code_location(function: object, fallback: SourceLocation) -> str:
    """``file:line`` of ``function``'s code (where a phase's work is written), else of
    ``fallback`` (where the step was declared)."""
    code = getattr(function, "__code__", None)
    if code is None:
        return str(fallback)
    return f"{display_path(code.co_filename)}:{code.co_firstlineno}"
