"""The ``initorch`` command line: the one boundary that turns errors into exit codes.

Exit codes: 0 ok; 1 a step failed at run time; 2 invalid input or usage, or a
plugin that fails to load; 70 an internal error (a bug); 128+N interrupted by
signal N.
Invalid input prints one line per problem (``file:line:col: what (how to fix)``)
and no traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from typing import TYPE_CHECKING, Any, NoReturn

from initorch._version import __version__
from initorch.console import exit_process
from initorch.console import install as install_console
from initorch.errors import (
    EXIT_INTERNAL_ERROR,
    EXIT_INTERRUPTED,
    EXIT_INVALID_INPUT,
    EXIT_OK,
    EXIT_STEP_FAILED,
    InitorchError,
    PeerError,
    PluginError,
    RunInterrupted,
    UnplannedStepWarning,
    describe_exception,
    exception_message,
)
from initorch.execution.heartbeat import DEFAULT_INTERVAL_S
from initorch.files import OutputFile, check_outputs, write_atomically
from initorch.loading.catalog import AUTO_PROFILE
from initorch.loading.detection import DEEP_PROBE_TIMEOUT_S
from initorch.location import display_path
from initorch.plugins import Registry
from initorch.resolution.plan import Plan

if TYPE_CHECKING:
    from initorch.execution.launchers import RankInfo
    from initorch.execution.run import Run
    from initorch.reporting.report import RunReport
    from initorch.reporting.stderr_events import StderrEvents

EPILOG = """exit codes: 0 ok, 1 a step failed at run time, 2 invalid input or usage,
or a plugin that fails to load, 70 internal error (a bug; please report it),
128+N interrupted by signal N.
Profiles are built-in names (see 'initorch profiles') or paths to YAML files.
Plugins: INITORCH_PLUGINS=MODULE[:FUNCTION],no:NAME,... is read before --plugin;
INITORCH_PLUGINS_ALLOW=NAME,... limits the installed plugins besides builtin."""

Command = Callable[[argparse.Namespace, Registry], int]
AddCommand = Callable[..., argparse.ArgumentParser]
"""``add(name, handler, help_text, *parents)``: declares one command (``handler`` is a
:data:`Command`) with the options every command shares; extensions get it too."""

COMMANDS_GROUP = "initorch.commands"
"""Entry points of commands that installed packages add (``initorch sglang``): each is
a function ``add_command(add)`` that declares its command with :data:`AddCommand`."""

BUILTIN_COMMANDS = frozenset({"plan", "validate", "graph", "explain", "profiles", "steps",
                              "settings", "detect", "trace", "schema", "run"})
"""The commands :func:`build_parser` always declares (a test keeps it true)."""

# executors.DEFAULT_MAX_WORKERS and render.GRAPH_FORMATS, which a dry run does not import
# (tests keep them equal).
MAX_WORKERS_SHOWN = 256
GRAPH_FORMAT_NAMES = ("dot", "json", "mermaid")

PLUGIN_HELP = ("load the plugin function MODULE:FUNCTION (default MODULE:register), or "
               "skip the installed plugin NAME with no:NAME; repeatable, after "
               "INITORCH_PLUGINS")


def _selection_options() -> argparse.ArgumentParser:
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("profile selection")
    group.add_argument("-p", "--profile", action="append", default=[], metavar="NAME|FILE",
                       help="profile to apply; repeat to layer later over earlier")
    group.add_argument("-d", "--device", metavar="TYPE[:INDEX]",
                       help="device, e.g. npu:0; selects its profile if none sets a device")
    group.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                       dest="settings", help="override a setting (value typed as YAML)")
    return parent


def _plan(args: argparse.Namespace, registry: Registry) -> Plan:
    from initorch.api import load_plan, selected_profiles  # the resolver only when resolving

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnplannedStepWarning)
        plan = load_plan(args.profile, device=args.device, settings=args.settings,
                         registry=registry)
    if AUTO_PROFILE in selected_profiles(args.profile, args.device) and \
            getattr(args, "log_format", None) != "json":
        sys.stderr.write(f"initorch: profile auto: this machine is {plan.device.type} "
                         "('initorch detect' says why)\n")
    for warning in caught:
        if issubclass(warning.category, UnplannedStepWarning):
            sys.stderr.write(f"initorch: warning: {warning.message}\n")
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename,
                                 warning.lineno)
    return plan


def _emit(text: str) -> None:
    sys.stdout.write(text + "\n")


def cmd_plan(args: argparse.Namespace, registry: Registry) -> int:
    plan = _plan(args, registry)
    if args.out:
        from initorch.resolution.saved import save_plan

        check_outputs([OutputFile("--out", args.out)], registry.profiles.read_files())
        save_plan(plan, args.out)
    if args.json:
        from initorch.resolution.saved import plan_json

        _emit(json.dumps(plan_json(plan), indent=2))
    else:
        from initorch.reporting.render import plan_text

        _emit(plan_text(plan))
    if args.out:  # on stderr, so that --json output stays one JSON document
        shown = display_path(args.out)
        sys.stderr.write(f"initorch: saved the plan to {shown}; run exactly this plan with: "
                         f"initorch run --plan {shown}\n")
    return EXIT_OK


def _run_plan(args: argparse.Namespace, registry: Registry) -> Plan:
    """The plan ``run`` executes: the saved one (``--plan``), else resolved from profiles."""
    if not args.plan:
        return _plan(args, registry)
    if args.profile or args.device or args.settings:
        raise InitorchError("--plan runs a saved plan exactly as it is; it cannot be combined "
                            "with --profile, --device or --set",
                            hint="change the selection and save the plan again with "
                                 "'initorch plan ... --out FILE'")
    from initorch.resolution.saved import read_saved_plan

    return read_saved_plan(args.plan, registry.steps)


def cmd_graph(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.reporting.render import GRAPH_FORMATS

    _emit(GRAPH_FORMATS[args.format](_plan(args, registry)))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace, registry: Registry) -> int:
    plan = _plan(args, registry)
    from initorch.reporting.render import explain_step_text, explain_text

    if args.second is None:
        _emit(explain_step_text(plan, args.first))
    else:
        _emit(explain_text(args.first, args.second, plan.explain(args.first, args.second)))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.cli.validate import validate_all, validate_selection

    if args.profile or args.device is not None or args.settings:
        problems = validate_selection(registry, args.profile, args.device, args.settings)
    else:
        problems = validate_all(registry)
    for label, error in problems:
        # Problems that carry a file location already say where they are.
        _report(error, prefix="" if error.location else f"{label}: ")
    if problems:
        return EXIT_INVALID_INPUT
    _emit("ok: no problems found")
    return EXIT_OK


def cmd_profiles(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.cli.listing import profile_rows

    rows = profile_rows(registry)
    if args.json:
        _emit(json.dumps(rows, indent=2))
        return EXIT_OK
    width = max(len(r["name"]) for r in rows) if rows else 4
    for row in rows:
        replaced = row["replaces"]
        note = (f"  (replaces the profile of {replaced['plugin'] or 'code'})" if replaced
                else "")
        _emit(f"{row['name']:<{width}}  {row['device'] or '-':<8}  {_plugin_cell(row, rows)}  "
              f"{row['description']}{note}")
    return EXIT_OK


def _plugin_cell(row: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The plugin that provides ``row`` ('-' when added in code), padded for ``rows``."""
    width = max(len(r["plugin"] or "-") for r in rows)
    return f"{row['plugin'] or '-':<{width}}"


def cmd_steps(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.cli.listing import step_rows

    rows = step_rows(registry)
    if args.json:
        _emit(json.dumps(rows, indent=2))
    else:
        width = max(len(r["name"]) for r in rows) if rows else 4
        for row in rows:
            deps = ", ".join(f"{k} {','.join(row[k])}" for k in ("requires", "wants", "after",
                                                                 "before", "wanted_by")
                             if row[k])
            _emit(f"{row['name']:<{width}}  {_plugin_cell(row, rows)}  {row['description']}")
            if deps or row["when"]:
                when = f"  when {row['when']}" if row["when"] else ""
                _emit(f"{'':<{width}}    {deps}{when}")
    return EXIT_OK


def cmd_settings(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.api import load_settings
    from initorch.cli.listing import setting_lines, setting_rows

    selected = args.profile or args.device is not None or args.settings
    settled = load_settings(args.profile, device=args.device, settings=args.settings,
                            registry=registry) if selected else None
    rows = setting_rows(registry, settled)
    _emit(json.dumps(rows, indent=2) if args.json else "\n".join(setting_lines(rows)))
    return EXIT_OK


def cmd_run(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.execution.watchdog import configure_watchdog
    from initorch.reporting.logs import configure_logging

    rank = _rank(args)
    args.report, args.trace = (per_rank_path(option, path, rank) for option, path in
                               (("--report", args.report), ("--trace", args.trace)))
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


def _rank(args: argparse.Namespace) -> RankInfo:
    """This process's place in the job, from ``run``'s options and the launcher's variables."""
    from initorch.execution.launchers import LaunchArguments, detect_rank

    return detect_rank(os.environ, LaunchArguments(args.dist_init_addr, args.nnodes,
                                                   args.node_rank, args.nproc_per_node,
                                                   args.local_rank))


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


def _run(args: argparse.Namespace, registry: Registry, rank: RankInfo,
         capture: StderrEvents | None) -> int:
    """Run the plan once, tear it down, and conclude: the run table and the last line
    for people, or the ``run_summary`` (and ``run_failed``/``run_interrupted``) event."""
    from initorch.execution.run import Run

    plan = _run_plan(args, registry)
    inputs = [*registry.profiles.read_files(), *([args.plan] if args.plan else [])]
    check_outputs([OutputFile("--report", args.report), OutputFile("--trace", args.trace)],
                  inputs)  # before anything runs: a bad path never costs a start-up
    run = Run(plan, executor=args.executor, workers=args.workers, diagnoses=registry.diagnoses,
              rank=rank, handle_signals=True, teardown_at_exit=True,
              keep_going=args.keep_going, heartbeat=args.heartbeat or None)
    if capture is not None:
        capture.log = run.log  # native output carries the run's profile and rank
    interrupted: RunInterrupted | None = None
    try:
        run.start()
        run.teardown()  # the CLI only proves start-up works; a server keeps the run alive
    except RunInterrupted as interrupt:
        interrupted = interrupt
    finally:
        _write_outputs(run, args, in_json=capture is not None)
    if capture is not None:
        return _conclude_in_json(run, interrupted)
    return _conclude_for_people(run.report, interrupted, debug=args.debug)


def _conclude_for_people(report: RunReport, interrupted: RunInterrupted | None, *,
                         debug: bool) -> int:
    from initorch.reporting.render import run_summary_text

    _emit(run_summary_text(report))
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
    report = run.report
    run.log.info("run_summary", **report.to_dict())
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
    """Write ``--report`` and ``--trace``; a failure is a warning that never replaces
    the run's own outcome (its exit code, its summary)."""
    for option, path, data in (("--report", args.report, run.report.to_dict),
                               ("--trace", args.trace, run.report.trace_events)):
        if not path:
            continue
        try:
            write_atomically(path, json.dumps(data(), indent=2) + "\n")
        except Exception as exc:  # whatever it is, the run's outcome stands
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror \
                else describe_exception(exc)
            if in_json:
                run.log.warning("output_not_written", option=option, path=display_path(path),
                                error=reason)
            else:
                sys.stderr.write(f"initorch: warning: {option} {display_path(path)}: cannot "
                                 f"write it: {reason}; the run's outcome stands\n")


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


def cmd_detect(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.api import detect_device

    def announce(device: str) -> None:  # a deep probe's import may take long: say so
        sys.stderr.write(f"initorch: detect: importing the packages of {device} "
                         f"(at most {DEEP_PROBE_TIMEOUT_S:g}s)\n")

    detection = detect_device(registry, deep=args.deep, root=args.root, announce=announce)
    _emit(json.dumps(detection.to_dict(), indent=2) if args.json else detection.table())
    return EXIT_OK


def cmd_trace_merge(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.reporting.trace_merge import merge_traces

    check_outputs([OutputFile("--out", args.out)], args.files)
    merged = merge_traces(args.files)
    write_atomically(args.out, json.dumps(merged, indent=1, allow_nan=False))
    ranks = merged["otherData"]["ranks"]
    sys.stderr.write(f"initorch: merged {len(ranks)} rank(s) into {display_path(args.out)}; "
                     "open it in Perfetto (ui.perfetto.dev)\n")
    return EXIT_OK


def cmd_schema(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.loading.schema import profile_schema

    _emit(json.dumps(profile_schema(registry.settings, registry.steps), indent=2))
    return EXIT_OK


def _integer_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``minimum``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value
    return parse


_positive_int = _integer_at_least(1)
_whole_number = _integer_at_least(0)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def build_parser(with_extensions: bool = True) -> argparse.ArgumentParser:
    """The parser; ``with_extensions`` also declares the commands of installed packages
    (:data:`COMMANDS_GROUP`), which costs a scan of the installed distributions."""
    parser = argparse.ArgumentParser(
        prog="initorch", epilog=EPILOG,
        description="Declarative start-up orchestration for LLM inference servers.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks for errors")
    debug.add_argument("--plugin", action="append", default=argparse.SUPPRESS,
                       metavar="MODULE[:FUNCTION]", help=PLUGIN_HELP)
    parser.add_argument("--debug", action="store_true", help="show tracebacks for errors")
    parser.add_argument("--plugin", action="append", default=[], dest="early_plugins",
                        metavar="MODULE[:FUNCTION]", help=PLUGIN_HELP)
    parser.add_argument("--version", action="version", version=f"initorch {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    selection = _selection_options()

    def add(name: str, handler: Command, help_text: str, *parents: argparse.ArgumentParser
            ) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=help_text, description=help_text,
                                 parents=[*parents, debug], epilog=EPILOG)
        command.set_defaults(handler=handler)
        return command

    plan = add("plan", cmd_plan, "dry run: show the resolved start-up order", selection)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--out", metavar="FILE",
                      help="also save the plan to FILE, for 'initorch run --plan FILE'")
    add("validate", cmd_validate,
        "lint profiles (all available ones when none is selected)", selection)
    graph = add("graph", cmd_graph, "print the step graph", selection)
    graph.add_argument("--format", choices=GRAPH_FORMAT_NAMES, default="dot")
    explain = add("explain", cmd_explain, "explain why step FIRST runs before SECOND; with "
                  "one step, why it is planned or skipped (the whole reason)", selection)
    explain.add_argument("first", metavar="FIRST")
    explain.add_argument("second", metavar="SECOND", nargs="?")
    for name, handler, text in (("profiles", cmd_profiles, "list available profiles"),
                                ("steps", cmd_steps, "list registered steps")):
        listing = add(name, handler, text)
        listing.add_argument("--json", action="store_true", help="print as JSON")
    settings = add("settings", cmd_settings,
                   "list the declared settings (with a selection: their values and origins)",
                   selection)
    settings.add_argument("--json", action="store_true", help="print as JSON")
    detect = add("detect", cmd_detect,
                 "which device profile fits this machine, and why each other was rejected "
                 "(what --profile auto chooses)")
    _add_detect_options(detect)
    _add_trace_commands(sub, debug)
    schema = add("schema", cmd_schema,
                 "print the JSON Schema of profile files (for editors and CI)")
    schema.set_defaults(tolerate_broken_plugins=True)
    run = add("run", cmd_run, "run the plan for real (then tear it down)", selection)
    run.add_argument("--plan", metavar="FILE",
                     help="run exactly the plan saved by 'initorch plan --out FILE' "
                          "(no profiles are read, nothing is resolved)")
    run.add_argument("--executor", choices=["sequential", "parallel", "dry-run"],
                     default="sequential", help="how steps are scheduled (default sequential)")
    run.add_argument("--workers", type=_positive_int, default=None,
                     help="the most threads the parallel executor runs steps on (default: "
                          f"one per ready step, up to {MAX_WORKERS_SHOWN})")
    run.add_argument("--keep-going", action="store_true",
                     help="after a step fails, still run every step that does not require "
                          "it (default: fail fast, start no new step)")
    run.add_argument("--report", metavar="FILE",
                     help="write the run report as JSON ({rank} and {local_rank} are "
                          "filled in)")
    run.add_argument("--trace", metavar="FILE",
                     help="write a Chrome trace-event file (open it in Perfetto; {rank} "
                          "and {local_rank} are filled in; 'initorch trace merge' joins "
                          "the ranks' files)")
    _add_launch_options(run)
    run.add_argument("--log-format", choices=["console", "json"], default="console",
                     help="console for people (default), json for one event per line")
    run.add_argument("--heartbeat", type=_seconds, default=DEFAULT_INTERVAL_S,
                     metavar="SECONDS", help="log step_still_running every SECONDS while a "
                     f"step runs (default {DEFAULT_INTERVAL_S:g}; 0 turns it off)")
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                     default="info", help="the least severe events shown (default info); "
                     "console colours follow the terminal and NO_COLOR")
    if with_extensions:
        _add_extension_commands(add)
    return parser


def _add_extension_commands(add: AddCommand) -> None:
    """Declare the commands installed packages add; one that fails to load is left out
    with a warning, so that a broken extension never breaks the built-in commands."""
    from importlib.metadata import entry_points

    for entry in entry_points(group=COMMANDS_GROUP):
        try:
            entry.load()(add)
        except Exception as exc:
            sys.stderr.write(f"initorch: warning: command {entry.name!r} ({entry.value}) "
                             f"failed to load: {describe_exception(exc)} -- left out\n")


def _names_extension_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` may name a command of an installed package (or asks for help,
    which lists them): its first word is not a built-in command."""
    words = [word for word in argv if not word.startswith("-")]
    return not words or words[0] not in BUILTIN_COMMANDS


def _add_launch_options(run: argparse.ArgumentParser) -> None:
    launch = run.add_argument_group(
        "plain processes (SGLang style; torchrun and srun need none of these)")
    launch.add_argument("--dist-init-addr", metavar="HOST:PORT",
                        help="where the ranks meet: rank 0 serves torch.distributed's store "
                             "there ([v6]:PORT for IPv6)")
    launch.add_argument("--nnodes", type=_positive_int, metavar="N",
                        help="number of nodes (default 1)")
    launch.add_argument("--node-rank", type=_whole_number, metavar="R",
                        help="this node's rank, from 0 (default 0)")
    launch.add_argument("--nproc-per-node", type=_positive_int, metavar="K",
                        help="processes (ranks) per node (default 1)")
    launch.add_argument("--local-rank", type=_whole_number, metavar="L",
                        help="this process's rank on its node, from 0 (default 0); "
                             "its rank is node-rank * nproc-per-node + local-rank")


def _add_detect_options(detect: argparse.ArgumentParser) -> None:
    detect.add_argument("--import", dest="deep", action="store_true",
                        help="also import each candidate's packages and count its devices")
    detect.add_argument("--root", default="/", metavar="DIR",
                        help="look for device nodes and libraries under DIR (a host mounted "
                             "into a container; default /)")
    detect.add_argument("--json", action="store_true", help="print as JSON")


def _add_trace_commands(sub: Any, debug: argparse.ArgumentParser) -> None:
    trace = sub.add_parser("trace", help="work with --trace files",
                           description="work with the Chrome trace files of 'initorch run "
                                       "--trace'", epilog=EPILOG)
    commands = trace.add_subparsers(dest="trace_command", metavar="COMMAND", required=True)
    merge = commands.add_parser(
        "merge", parents=[debug], epilog=EPILOG,
        help="merge the ranks' trace files into one, a process per rank",
        description="merge the ranks' trace files (run --trace trace-{rank}.json) into one "
                    "Perfetto file with a process per rank, on one time line")
    merge.add_argument("files", nargs="+", metavar="FILE", help="one trace file per rank")
    merge.add_argument("-o", "--out", required=True, metavar="FILE",
                       help="where to write the merged trace")
    merge.set_defaults(handler=cmd_trace_merge)


def _report(error: InitorchError, prefix: str = "") -> None:
    problems = error.problems
    if len(problems) == 1:
        sys.stderr.write(f"initorch: error: {prefix}{problems[0]}\n")
        return
    sys.stderr.write(f"initorch: error: {prefix}{error.args[0]}\n")
    for problem in problems:
        sys.stderr.write(f"  {problem}\n")


def _report_json(message: str, exit_code: int, problems: list[str]) -> None:
    """An error of ``run --log-format json`` as one more JSON line on stderr."""
    fields: dict[str, Any] = {"text": message, "exit_code": exit_code}
    if len(problems) > 1:
        fields["problems"] = problems
    _write_json_event(logging.ERROR, "error", fields)


def _report_interrupted(args: argparse.Namespace, interrupted: RunInterrupted,
                        in_json: bool) -> None:
    """A signal before the run started (plugins loading, the plan being made): the same
    line, or ``run_interrupted`` event naming the rank, as during the run, without a
    run table."""
    if not in_json:
        sys.stderr.write(f"initorch: {interrupted}\n")
        return
    fields: dict[str, Any] = {"signal": signal.Signals(interrupted.signum).name,
                              "exit_code": interrupted.exit_code}
    with suppress(InitorchError):  # ambiguous launcher variables: name no rank
        fields["rank"] = _rank(args).rank
    _write_json_event(logging.WARNING, "run_interrupted", fields)


def _write_json_event(level: int, event: str, fields: dict[str, Any]) -> None:
    """One event on stderr without a configured logger (it may not be yet)."""
    from initorch.reporting.logs import json_event

    sys.stderr.write(json_event(level, event, fields) + "\n")


def _registry(args: argparse.Namespace) -> Registry:
    """The installed plugins and the ``--plugin`` ones; commands that need no step
    (``schema``) leave a broken plugin out with a warning instead of failing."""

    def leave_out(error: PluginError) -> None:
        sys.stderr.write(f"initorch: warning: {error} -- left out\n")

    return Registry.with_plugins(
        [*args.early_plugins, *getattr(args, "plugin", [])],
        on_error=leave_out if getattr(args, "tolerate_broken_plugins", False) else None)


def console_main() -> NoReturn:
    """The ``initorch`` console script: :func:`main` with the process's streams made
    safe (:mod:`initorch.console`) and an exit that no left-over thread can delay."""
    console = install_console()
    code = main()
    warning = console.output_lost_warning()
    if warning is not None:
        sys.stderr.write(warning + "\n")
    exit_process(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_names_extension_command(argv)).parse_args(argv)
    in_json = getattr(args, "log_format", None) == "json"
    # run: a signal while plugins load and the plan is made ends the command like one
    # during the run (a launcher's SIGTERM can come that early); the run takes over.
    guard: AbstractContextManager[None] = nullcontext()
    if args.handler is cmd_run:
        from initorch.execution.signals import interrupt_on_signals

        guard = interrupt_on_signals()
    try:
        with guard:
            registry = _registry(args)
            code: int = args.handler(args, registry)
            return code
    except RunInterrupted as interrupt:  # before the run started: nothing ran, nothing to undo
        if args.debug:
            raise
        _report_interrupted(args, interrupt, in_json)
        return interrupt.exit_code
    except InitorchError as error:
        if args.debug:
            raise
        if in_json:
            _report_json(error.args[0], error.exit_code, [str(p) for p in error.problems])
        else:
            _report(error)
        return error.exit_code
    except KeyboardInterrupt:  # Ctrl-C outside a run (a run turns it into its own 130)
        if args.debug:
            raise
        if in_json:
            _report_json("interrupted by SIGINT", EXIT_INTERRUPTED, [])
        else:
            sys.stderr.write("initorch: interrupted by SIGINT\n")
        return EXIT_INTERRUPTED
    except Exception as error:  # a bug: never let it pass for "a step failed" (exit 1)
        if args.debug:
            raise
        text = f"internal error: {type(error).__name__}: {error}"
        hint = "rerun with --debug for the traceback, and please report it"
        if in_json:
            _report_json(f"{text} ({hint})", EXIT_INTERNAL_ERROR, [])
        else:
            sys.stderr.write(f"initorch: {text} ({hint})\n")
        return EXIT_INTERNAL_ERROR
