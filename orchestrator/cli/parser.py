"""The parser of ``initorch``: its commands, their options, and the option types.

Installed packages add commands through the entry points of :data:`COMMANDS_GROUP`;
the documentation's CLI reference is generated from :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, NoReturn

from initorch._version import __version__
from initorch.cli.commands import (
    cmd_detect,
    cmd_explain,
    cmd_graph,
    cmd_plan,
    cmd_profiles,
    cmd_schema,
    cmd_settings,
    cmd_status,
    cmd_steps,
    cmd_timeline,
    cmd_trace_merge,
    cmd_validate,
)
from initorch.cli.run import cmd_run
from initorch.errors import describe_exception
from initorch.execution.executor_names import DEFAULT_MAX_WORKERS, EXECUTORS
from initorch.execution.heartbeat import DEFAULT_INTERVAL_S
from initorch.execution.launchers import LaunchArguments, option_name
from initorch.plugins import Registry
from initorch.printable import shown
from initorch.reporting.graph_formats import GRAPH_FORMATS
from initorch.reporting.status import STALE_AFTER_S

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
                              "settings", "detect", "trace", "schema", "run", "timeline",
                              "status"})
"""The commands :func:`build_parser` always declares (a test keeps it true)."""

PLUGIN_HELP = ("load the plugin function MODULE:FUNCTION (default MODULE:register), or "
               "skip the installed plugin NAME with no:NAME; repeatable, after "
               "INITORCH_PLUGINS")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors quote what was typed the way every other
    message does (:func:`~initorch.printable.shown`): ``unrecognized arguments: x\\ny``
    stays one line, and a 100 KB argument does not fill the terminal.  Its sub-commands'
    parsers are of this class too (``add_subparsers`` makes them with the parent's)."""

    def error(self, message: str) -> NoReturn:
        super().error(shown(message, MAX_USAGE_ERROR))


TEARDOWN_MODES = ("side-by-side", "sequential")
"""``run --teardown``'s choices: those of
:data:`initorch.execution.executors.TEARDOWN_MODES` (a test keeps them equal), named
here so that declaring the options imports no executor."""

MAX_USAGE_ERROR = 400  # characters of a usage error; it quotes the arguments it refuses


def _selection_options() -> _Parser:
    parent = _Parser(add_help=False)
    group = parent.add_argument_group("profile selection")
    group.add_argument("-p", "--profile", action="append", default=[], metavar="NAME|FILE",
                       help="profile to apply; repeat to layer later over earlier")
    group.add_argument("-d", "--device", metavar="TYPE[:INDEX]",
                       help="device, e.g. npu:0; selects its profile if none sets a device")
    group.add_argument("-s", "--set", action="append", default=[], metavar="KEY=VALUE",
                       dest="settings", help="override a setting (value typed as YAML)")
    return parent


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
    parser = _Parser(
        prog="initorch", epilog=EPILOG,
        description="Declarative start-up orchestration for LLM inference servers.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    debug = _Parser(add_help=False)
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

    def add(name: str, handler: Command, help_text: str, *parents: _Parser
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
    _add_timeline_commands(add)
    schema = add("schema", cmd_schema,
                 "print the JSON Schema of profile files (for editors and CI)")
    schema.set_defaults(tolerate_broken_plugins=True)
    run = add("run", cmd_run, "run the plan for real (then tear it down)", selection)
    run.add_argument("--plan", metavar="FILE",
                     help="run exactly the plan saved by 'initorch plan --out FILE' "
                          "(no profiles are read, nothing is resolved)")
    run.add_argument("--executor", choices=EXECUTORS,
                     default="sequential", help="how steps are scheduled (default sequential)")
    run.add_argument("--workers", type=_positive_int, default=None,
                     help="the most threads the parallel executor runs steps on (default: "
                          f"one per ready step, up to {DEFAULT_MAX_WORKERS})")
    run.add_argument("--teardown", choices=TEARDOWN_MODES, default=TEARDOWN_MODES[0],
                     help="how completed steps are undone: side-by-side (default: a step "
                          "once every step ordered after it is undone, independent ones "
                          "at once) or sequential (one at a time, in reverse completion "
                          "order)")
    run.add_argument("--keep-going", action="store_true",
                     help="after a step fails, still run every step that does not require "
                          "it (default: fail fast, start no new step)")
    run.add_argument("--report", metavar="FILE",
                     help="write the run report as JSON ({rank} and {local_rank} are "
                          "filled in)")
    run.add_argument("--status", metavar="FILE",
                     help="keep this rank's start-up status in FILE (JSON, replaced "
                          "atomically; 'initorch status --ready FILE' reads it; {rank} and "
                          "{local_rank} are filled in)")
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
    from initorch.entry_points import installed_entry_points

    for entry in installed_entry_points(COMMANDS_GROUP):
        try:
            entry.load()(add)
        except Exception as exc:
            sys.stderr.write(f"initorch: warning: command {entry.name!r} ({entry.value}) "
                             f"failed to load: {describe_exception(exc)} -- left out\n")


def names_extension_command(argv: Sequence[str]) -> bool:
    """Whether ``argv`` may name a command of an installed package (or asks for help,
    which lists them): its first word is not a built-in command."""
    words = [word for word in argv if not word.startswith("-")]
    return not words or words[0] not in BUILTIN_COMMANDS


def _add_timeline_commands(add: AddCommand) -> None:
    """``timeline`` (where start-up time went) and ``status`` (where it is now)."""
    timeline = add("timeline", cmd_timeline,
                   "where start-up time went: the critical chain and the phases longest "
                   "first, from run reports (run --report) or timeline files")
    timeline.add_argument("files", nargs="+", metavar="FILE",
                          help="run reports or timeline files; several are merged")
    timeline.add_argument("--compare", action="store_true",
                          help="compare two start-ups (A B): every phase before and "
                               "after, what got slower first")
    timeline.add_argument("--trace", metavar="FILE",
                          help="also write the merged Chrome/Perfetto trace (a process "
                               "per server process, a track per thread)")
    timeline.add_argument("--plot", metavar="FILE",
                          help="also write the picture: a self-contained HTML page, or an "
                               "SVG when FILE ends in .svg")
    status = add("status", cmd_status,
                 "where each rank's start-up is, from the files 'run --status' writes "
                 "(the /startupz answer); --ready for a probe's exit code")
    status.add_argument("files", nargs="+", metavar="FILE", help="status files, one per rank")
    status.add_argument("--ready", action="store_true",
                        help="exit 0 when every rank is ready, 1 when one is not (yet), 3 "
                             "when a file is stale (2: no status file)")
    status.add_argument("--max-age", type=_seconds, default=STALE_AFTER_S, metavar="SECONDS",
                        help="a file not rewritten for this long is stale (default "
                             f"{STALE_AFTER_S:g})")


def _add_launch_options(run: argparse.ArgumentParser) -> None:
    """An option per field of :class:`LaunchArguments`, which declares them."""
    launch = run.add_argument_group(
        "plain processes (SGLang style; torchrun and srun need none of these)")
    for spec in fields(LaunchArguments):
        minimum = spec.metadata["minimum"]
        launch.add_argument(option_name(spec), metavar=spec.metadata["metavar"],
                            help=spec.metadata["help"],
                            type=str if minimum is None else _integer_at_least(minimum))


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
