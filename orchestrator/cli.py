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
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from initorch._version import __version__
from initorch.errors import (
    EXIT_INTERNAL_ERROR,
    EXIT_INVALID_INPUT,
    EXIT_OK,
    EXIT_STEP_FAILED,
    InitorchError,
    UnplannedStepWarning,
)
from initorch.execution.heartbeat import DEFAULT_INTERVAL_S
from initorch.location import display_path
from initorch.plugins import PluginError, Registry
from initorch.reporting.render import GRAPH_FORMATS, explain_text
from initorch.resolution.plan import Plan

if TYPE_CHECKING:
    from initorch.execution.run import Run
    from initorch.execution.signals import RunInterrupted
    from initorch.reporting.report import RunReport
    from initorch.reporting.stderr_events import StderrEvents

EPILOG = """exit codes: 0 ok, 1 a step failed at run time, 2 invalid input or usage,
or a plugin that fails to load, 70 internal error (a bug; please report it),
128+N interrupted by signal N.
Profiles are built-in names (see 'initorch profiles') or paths to YAML files.
Plugins: INITORCH_PLUGINS=MODULE[:FUNCTION],no:NAME,... is read before --plugin;
INITORCH_PLUGINS_ALLOW=NAME,... limits the installed plugins besides builtin."""

Command = Callable[[argparse.Namespace, Registry], int]

# executors.DEFAULT_MAX_WORKERS, which a dry run does not import (a test keeps them equal).
MAX_WORKERS_SHOWN = 256

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
    from initorch.api import load_plan  # the resolver only when resolving

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UnplannedStepWarning)
        plan = load_plan(args.profile, device=args.device, settings=args.settings,
                         registry=registry)
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
        plan.save(args.out)
    _emit(json.dumps(plan.to_dict(), indent=2) if args.json else str(plan))
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
    from initorch.resolution.saved import load_saved_plan

    return load_saved_plan(args.plan, registry)


def cmd_graph(args: argparse.Namespace, registry: Registry) -> int:
    _emit(GRAPH_FORMATS[args.format](_plan(args, registry)))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace, registry: Registry) -> int:
    plan = _plan(args, registry)
    _emit(explain_text(args.first, args.second, plan.explain(args.first, args.second)))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.validate import validate_all, validate_selection

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
    from initorch.listing import profile_rows

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
    from initorch.listing import step_rows

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
    from initorch.listing import setting_lines, setting_rows

    selected = args.profile or args.device is not None or args.settings
    settled = load_settings(args.profile, device=args.device, settings=args.settings,
                            registry=registry) if selected else None
    rows = setting_rows(registry, settled)
    _emit(json.dumps(rows, indent=2) if args.json else "\n".join(setting_lines(rows)))
    return EXIT_OK


def cmd_run(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.reporting.logs import configure_logging

    for option, path in (("--report", args.report), ("--trace", args.trace)):
        if path and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise InitorchError(f"{option} {display_path(path)}: the folder does not exist",
                                hint="create it first, or write the file elsewhere")
    level = logging.getLevelName(args.log_level.upper())
    if args.log_format == "json":
        # All of stderr becomes JSON lines: native output, warnings, the summary.
        from initorch.reporting.stderr_events import StderrEvents

        with StderrEvents() as capture:
            configure_logging("json", stream=capture.stream, level=level)
            return _run(args, registry, capture)
    configure_logging("console", level=level)
    return _run(args, registry, None)


def _run(args: argparse.Namespace, registry: Registry, capture: StderrEvents | None) -> int:
    """Run the plan once, tear it down, and conclude: the run table and the last line
    for people, or the ``run_summary`` (and ``run_failed``/``run_interrupted``) event."""
    from initorch.execution.context import RankInfo
    from initorch.execution.run import Run
    from initorch.execution.signals import RunInterrupted

    plan = _run_plan(args, registry)
    try:
        rank = RankInfo.from_env()
    except ValueError as exc:
        raise InitorchError(str(exc), hint="check the variables torchrun exports") from None
    run = Run(plan, executor=args.executor, workers=args.workers, diagnoses=registry.diagnoses,
              rank=rank, handle_signals=True, teardown_at_exit=True,
              heartbeat=args.heartbeat or None)
    if capture is not None:
        capture.log = run.log  # native output carries the run's profile and rank
    interrupted: RunInterrupted | None = None
    try:
        run.start()
        run.teardown()  # the CLI only proves start-up works; a server keeps the run alive
    except RunInterrupted as interrupt:
        interrupted = interrupt
    finally:
        _write_outputs(run, args)
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
    if report.ok:
        return EXIT_OK
    if debug:
        for outcome in report.failed:
            sys.stderr.write(f"initorch: step '{outcome.name}' failed with:\n"
                             f"{outcome.traceback}")
    sys.stderr.write(failure_line(report) + "\n")
    return EXIT_STEP_FAILED


def _conclude_in_json(run: Run, interrupted: RunInterrupted | None) -> int:
    report = run.report
    run.log.info("run_summary", **report.to_dict())
    if interrupted is not None:
        run.log.warning("run_interrupted", signal=signal.Signals(interrupted.signum).name,
                        exit_code=interrupted.exit_code)
        return interrupted.exit_code
    if report.ok:
        return EXIT_OK
    run.log.error("run_failed", step=report.failed[0].name, text=failure_line(report))
    return EXIT_STEP_FAILED


def _write_outputs(run: Run, args: argparse.Namespace) -> None:
    for path, data in ((args.report, run.report.to_dict), (args.trace, run.report.trace_events)):
        if path:
            try:
                with open(path, "w", encoding="utf-8") as handle:
                    json.dump(data(), handle, indent=2)
            except OSError as exc:
                raise InitorchError(f"cannot write {display_path(path)}: {exc.strerror}",
                                    hint="check the path and its permissions") from None


def failure_line(report: RunReport) -> str:
    """The last line of a failed run: the diagnosis, or the error as it is."""
    first = report.failed[0]
    if first.finding is not None:
        return first.finding.summary()
    # One line: the rest (a timeout's stack, native log lines) is in the step_failed event.
    message = str(first.error).strip().splitlines()
    return (f"initorch: step '{first.name}' failed: {type(first.error).__name__}: "
            f"{message[0] if message else ''} (no known diagnosis)")


def cmd_schema(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.loading.schema import profile_schema

    _emit(json.dumps(profile_schema(registry.settings, registry.steps), indent=2))
    return EXIT_OK


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
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
    graph.add_argument("--format", choices=sorted(GRAPH_FORMATS), default="dot")
    explain = add("explain", cmd_explain, "explain why step FIRST runs before SECOND",
                  selection)
    explain.add_argument("first", metavar="FIRST")
    explain.add_argument("second", metavar="SECOND")
    for name, handler, text in (("profiles", cmd_profiles, "list available profiles"),
                                ("steps", cmd_steps, "list registered steps")):
        listing = add(name, handler, text)
        listing.add_argument("--json", action="store_true", help="print as JSON")
    settings = add("settings", cmd_settings,
                   "list the declared settings (with a selection: their values and origins)",
                   selection)
    settings.add_argument("--json", action="store_true", help="print as JSON")
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
    run.add_argument("--report", metavar="FILE", help="write the run report as JSON")
    run.add_argument("--trace", metavar="FILE",
                     help="write a Chrome trace-event file (open it in Perfetto)")
    run.add_argument("--log-format", choices=["console", "json"], default="console",
                     help="console for people (default), json for one event per line")
    run.add_argument("--heartbeat", type=_seconds, default=DEFAULT_INTERVAL_S,
                     metavar="SECONDS", help="log step_still_running every SECONDS while a "
                     f"step runs (default {DEFAULT_INTERVAL_S:g}; 0 turns it off)")
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                     default="info", help="the least severe events shown (default info); "
                     "console colours follow the terminal and NO_COLOR")
    return parser


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
    from initorch.reporting.logs import json_event

    fields = {"text": message, "exit_code": exit_code}
    if len(problems) > 1:
        fields["problems"] = problems
    sys.stderr.write(json_event(logging.ERROR, "error", fields) + "\n")


def _registry(args: argparse.Namespace) -> Registry:
    """The installed plugins and the ``--plugin`` ones; commands that need no step
    (``schema``) leave a broken plugin out with a warning instead of failing."""

    def leave_out(error: PluginError) -> None:
        sys.stderr.write(f"initorch: warning: {error} -- left out\n")

    return Registry.with_plugins(
        [*args.early_plugins, *getattr(args, "plugin", [])],
        on_error=leave_out if getattr(args, "tolerate_broken_plugins", False) else None)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    args = build_parser().parse_args(argv)
    in_json = getattr(args, "log_format", None) == "json"
    try:
        registry = _registry(args)
        code: int = args.handler(args, registry)
        return code
    except InitorchError as error:
        if args.debug:
            raise
        if in_json:
            _report_json(error.args[0], error.exit_code, [str(p) for p in error.problems])
        else:
            _report(error)
        return error.exit_code
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
