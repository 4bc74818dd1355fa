"""``initorch run``: this process's rank, the per-rank output paths, the run itself, and
how it concludes (the run table and last line for people, or the ``run_summary`` event).

A run ends with exit code 0 only when every step succeeded, no peer was lost and every
teardown worked; :func:`failure_line` and :func:`unclean_line` say why otherwise, and
:func:`failed_exit_code` gives a failed run's code.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from initorch.cli.commands import selected_plan
from initorch.cli.output import emit
from initorch.errors import (
    EXIT_OK,
    EXIT_STEP_FAILED,
    InitorchError,
    PeerError,
    RunInterrupted,
    describe_exception,
    exception_message,
)
from initorch.execution.launchers import LaunchArguments, RankInfo, detect_rank
from initorch.files import OutputFile, check_outputs, write_atomically
from initorch.location import display_path
from initorch.plugins import Registry
from initorch.reporting.process_marks import mark
from initorch.resolution.plan import Plan

if TYPE_CHECKING:
    from initorch.execution.run import Run
    from initorch.reporting.report import RunReport
    from initorch.reporting.status import StatusFile
    from initorch.reporting.stderr_events import StderrEvents


def cmd_run(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.execution.watchdog import configure_watchdog
    from initorch.reporting.logs import configure_logging

    rank = job_rank(args)
    args.report, args.trace, args.status = (
        per_rank_path(option, path, rank) for option, path in
        (("--report", args.report), ("--trace", args.trace), ("--status", args.status)))
    level = logging.getLevelName(args.log_level.upper())
    if args.log_format == "json":
        # All of stderr becomes JSON lines: native output, warnings, the summary.
        from initorch.reporting.stderr_events import StderrEvents

        with StderrEvents() as capture:
            configure_logging("json", stream=capture.stream, level=level)
            configure_watchdog(capture.stream.fileno(), "json")
            return _run(args, registry, rank, capture)
    # The log formatter makes its own text safe and colours it: write it verbatim.
    configure_logging("console", stream=getattr(sys.stderr, "verbatim", sys.stderr),
                      level=level)
    configure_watchdog(None, "text")
    return _run(args, registry, rank, None)


def job_rank(args: argparse.Namespace) -> RankInfo:
    """This process's place in the job, from ``run``'s options and the launcher's variables."""
    return detect_rank(os.environ, launch_arguments(args))


def launch_arguments(args: argparse.Namespace) -> LaunchArguments:
    """The :class:`LaunchArguments` that ``run``'s options give (one option per field)."""
    return LaunchArguments(**{spec.name: getattr(args, spec.name)
                              for spec in fields(LaunchArguments)})


def per_rank_path(option: str, path: str | None, rank: RankInfo) -> str | None:
    """``path`` with ``{rank}`` and ``{local_rank}`` filled in; refused when it names
    another placeholder, or when several ranks of this job would write the same file
    (whether the file can be written is :func:`check_outputs`'s to say)."""
    if not path:
        return None
    placeholders = set(re.findall(r"{([^{}]*)}", path))
    unknown = placeholders - {"rank", "local_rank"}
    if unknown:
        raise InitorchError(f"{option} {path}: unknown placeholder {{{sorted(unknown)[0]}}}",
                            hint="use {rank} or {local_rank}")
    def filled(rank_number: int, local_rank: int) -> str:
        return path.replace("{rank}", str(rank_number)).replace("{local_rank}", str(local_rank))

    # Two ranks that differ in both numbers must get two files: judged on the paths the
    # placeholders make, not on their spelling ('out/{rank}/../run.json' is one file).
    if rank.world_size > 1 and os.path.normpath(filled(0, 0)) == os.path.normpath(filled(1, 1)):
        raise InitorchError(f"{option} {display_path(path)}: every one of the "
                            f"{rank.world_size} ranks would write this file",
                            hint="put {rank} in the name (run-{rank}.json), or {local_rank} "
                                 "on storage that is not shared between hosts")
    return filled(rank.rank, rank.local_rank)


def _run_plan(args: argparse.Namespace, registry: Registry) -> Plan:
    """The plan ``run`` executes: the saved one (``--plan``), else resolved from profiles."""
    if not args.plan:
        return selected_plan(args, registry)
    if args.profile or args.device or args.settings:
        raise InitorchError("--plan runs a saved plan exactly as it is; it cannot be combined "
                            "with --profile, --device or --set",
                            hint="change the selection and save the plan again with "
                                 "'initorch plan ... --out FILE'")
    from initorch.resolution.saved import read_saved_plan

    return read_saved_plan(args.plan, registry.steps)


def _status_file(path: str | None, rank: RankInfo, plan: Plan) -> StatusFile | None:
    """The ``--status`` file, begun in the phase before the first step."""
    if not path:
        return None
    from initorch.reporting.status import StatusFile

    status = StatusFile(path, rank=rank.rank, steps_total=len(plan.steps))
    status.phase("prepare run")
    return status


def _run(args: argparse.Namespace, registry: Registry, rank: RankInfo,
         capture: StderrEvents | None) -> int:
    """Run the plan once, tear it down, and conclude: the run table and the last line
    for people, or the ``run_summary`` (and ``run_failed``/``run_interrupted``) event."""
    from initorch.execution.run import Run

    mark("plan_began")
    plan = _run_plan(args, registry)
    mark("plan_ready")
    inputs = [*registry.profiles.read_files(), *([args.plan] if args.plan else [])]
    check_outputs([OutputFile("--report", args.report), OutputFile("--trace", args.trace),
                   OutputFile("--status", args.status)],
                  inputs)  # before anything runs: a bad path never costs a start-up
    status = _status_file(args.status, rank, plan)
    run = Run(plan, executor=args.executor, workers=args.workers, diagnoses=registry.diagnoses,
              rank=rank, handle_signals=True, teardown_at_exit=True,
              keep_going=args.keep_going, heartbeat=args.heartbeat or None,
              teardown=args.teardown, status=status)
    if capture is not None:
        capture.log = run.log  # native output carries the run's profile and rank
    interrupted: RunInterrupted | None = None
    try:
        mark("run_starting")
        run.start()
        run.teardown()  # the CLI only proves start-up works; a server keeps the run alive
    except RunInterrupted as interrupt:
        interrupted = interrupt
    finally:
        _write_outputs(run, args, in_json=capture is not None)
        if status is not None:
            status.close()
    if capture is not None:
        return _conclude_in_json(run, interrupted)
    return _conclude_for_people(run.report, interrupted, debug=args.debug)


def _conclude_for_people(report: RunReport, interrupted: RunInterrupted | None, *,
                         debug: bool) -> int:
    from initorch.reporting.render import run_summary_text

    emit(run_summary_text(report))
    sys.stdout.flush()
    if interrupted is not None:
        sys.stderr.write(f"initorch: {interrupted}; completed steps were torn down\n")
        return interrupted.exit_code
    if report.ok and not report.peers_lost and not report.teardown_failed:
        return EXIT_OK
    if report.ok:
        sys.stderr.write(unclean_line(report) + "\n")
        return EXIT_STEP_FAILED
    if debug:
        for outcome in report.failed:
            sys.stderr.write(f"initorch: step '{outcome.name}' failed with:\n"
                             f"{outcome.traceback}")
    sys.stderr.write(failure_line(report) + "\n")
    return failed_exit_code(report)


def _conclude_in_json(run: Run, interrupted: RunInterrupted | None) -> int:
    from initorch.reporting.redaction import redact

    report = run.report
    run.log.info("run_summary", **redact(report.to_dict()))
    if interrupted is not None:
        run.log.warning("run_interrupted", signal=signal.Signals(interrupted.signum).name,
                        exit_code=interrupted.exit_code)
        return interrupted.exit_code
    if report.ok and not report.peers_lost and not report.teardown_failed:
        return EXIT_OK
    if report.ok:
        run.log.error("run_failed", step=None, lost_ranks=sorted(report.peers_lost),
                      teardown_failed=[entry.step for entry in report.teardown_failed],
                      text=unclean_line(report))
        return EXIT_STEP_FAILED
    run.log.error("run_failed", step=report.failed[0].name, text=failure_line(report))
    return failed_exit_code(report)


def _write_outputs(run: Run, args: argparse.Namespace, in_json: bool) -> None:
    """Write ``--report`` and ``--trace``, their secrets redacted; a failure is a
    warning that never replaces the run's own outcome (its exit code, its summary)."""
    from initorch.reporting.redaction import redact

    outputs: tuple[tuple[str, str | None, Callable[[], dict[str, Any]]], ...] = (
        ("--report", args.report, lambda: report_with_timeline(run)),
        ("--trace", args.trace, run.report.trace_events))
    for option, path, data in outputs:
        if not path:
            continue
        try:
            write_atomically(path, json.dumps(redact(data()), indent=2) + "\n")
        except Exception as exc:  # whatever it is, the run's outcome stands
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror \
                else describe_exception(exc)
            if in_json:
                run.log.warning("output_not_written", option=option, path=display_path(path),
                                error=reason)
            else:
                sys.stderr.write(f"initorch: warning: {option} {display_path(path)}: cannot "
                                 f"write it: {reason}; the run's outcome stands\n")


def report_with_timeline(run: Run) -> dict[str, Any]:
    """The run report with this process's timeline (``"timeline"``): from the
    interpreter's start to the last teardown (:mod:`initorch.reporting.run_timeline`)."""
    from initorch.reporting.process_marks import MARKS, process_start
    from initorch.reporting.run_timeline import run_timeline

    data = run.report.to_dict()
    data["timeline"] = run_timeline(run.report, MARKS.snapshot(), pid=os.getpid(),
                                    argv=sys.argv, start=process_start()).to_dict()
    return data


def failure_line(report: RunReport) -> str:
    """The last line of a failed run: the diagnosis, the ranks' disagreement (or the
    peer that stopped), an error a step or initorch described itself (with its hint),
    or a foreign error as it is -- only that one has "no known diagnosis"."""
    from initorch.errors import StepError
    from initorch.execution.invoke import StepAbortedError, StepTimeoutError

    first = report.failed[0]
    error = first.error
    if first.finding is not None:
        return first.finding.summary()
    if isinstance(error, PeerError):
        return f"initorch: error: rank {report.rank}: {error.text()}"
    # One line: the rest (a timeout's stack, native log lines) is in the step_failed event.
    message = exception_message(error).strip().splitlines() if error else []
    said = message[0] if message else ""
    if isinstance(error, InitorchError | StepTimeoutError | StepAbortedError):
        return f"initorch: step '{first.name}' failed: {said}"  # an InitorchError has its hint
    if isinstance(error, StepError):
        hint = f" ({error.hint})" if error.hint else ""
        return f"initorch: step '{first.name}' failed: {said}{hint}"
    return (f"initorch: step '{first.name}' failed: {type(error).__name__}: {said} "
            "(no known diagnosis)")


def unclean_line(report: RunReport) -> str:
    """The last line of a run whose steps all succeeded but that must not end as a
    success: a peer was lost (the job is not started, whatever this rank did), or a
    teardown failed (something it started did not end as it should: a managed master
    that died during the run)."""
    if report.peers_lost:
        first = min(report.peers_lost)
        return (f"initorch: error: rank {report.rank}: {report.peers_lost[first]}; every "
                "step of this rank succeeded, but the job is incomplete without it")
    broken = report.teardown_failed[0]
    return (f"initorch: error: rank {report.rank}: the teardown of step '{broken.step}' "
            f"failed: {broken.error}; every step succeeded, but the run did not end clean")


def failed_exit_code(report: RunReport) -> int:
    """A failed run's exit code: ``1``, or the error's own when the step found that the
    command itself is wrong (an :class:`InitorchError`: ``2``, a usage error)."""
    error = report.failed[0].error
    return error.exit_code if isinstance(error, InitorchError) else EXIT_STEP_FAILED
