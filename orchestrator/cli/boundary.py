"""The one boundary of the command line: it turns errors into exit codes.

Exit codes: 0 ok; 1 a step failed at run time; 2 invalid input or usage, or a
plugin that fails to load; 70 an internal error (a bug); 128+N interrupted by
signal N.
Invalid input prints one line per problem (``file:line:col: what (how to fix)``)
and no traceback unless ``--debug`` is given.
"""

from __future__ import annotations

import argparse
import gc
import logging
import signal
import sys
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from typing import Any, NoReturn

from initorch.cli.output import report_error
from initorch.cli.parser import build_parser, names_extension_command
from initorch.cli.run import cmd_run, job_rank
from initorch.console import exit_process
from initorch.console import install as install_console
from initorch.errors import (
    EXIT_INTERNAL_ERROR,
    EXIT_INTERRUPTED,
    InitorchError,
    PluginError,
    RunInterrupted,
)
from initorch.execution.signals import interrupt_on_signals
from initorch.gc_pause import keep_what_pauses_build
from initorch.plugins import Registry
from initorch.reporting.process_marks import mark


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
        fields["rank"] = job_rank(args).rank
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


CLI_GC_THRESHOLD = 100_000
"""Allocations between two passes of the cyclic collector over young objects in the
console script (Python's default: 700).  A command builds one large graph that lives
until the process exits (the registry, the profiles, the plan), and frequent passes
rescan it again and again: 10% of ``initorch plan`` on 20,000 steps.  Only the
console script sets it (as mypy's does): a process that embeds initorch keeps its own
settings."""


def console_main() -> NoReturn:
    """The ``initorch`` console script: :func:`main` with the process's streams made
    safe (:mod:`initorch.console`), the collector paced for one large graph, and an exit
    that no left-over thread can delay nor the collector slow down.

    Before it exits, every object still alive is frozen (:func:`gc.freeze`): the
    interpreter's shutdown then skips its full collections over them.  After a real run
    they are torch's and the vendor stacks' module graphs, and those collections were
    most of shutdown: a process that imported torch took 0.30-0.32 s to exit, 0.09 s
    frozen; ``run --profile cpu`` took 0.41-0.46 s from its last teardown to its end,
    0.11-0.16 s frozen (2026-12-05, 2 shared cores).  Shutdown still runs
    the ``atexit`` handlers and clears every module; only garbage cycles left at exit
    are not collected, whose finalizers Python never promises to run there."""
    console = install_console()
    gc.set_threshold(CLI_GC_THRESHOLD, *gc.get_threshold()[1:])
    keep_what_pauses_build()
    code = main()
    warning = console.output_lost_warning()
    if warning is not None:
        sys.stderr.write(warning + "\n")
    gc.freeze()
    exit_process(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code (the console script exits with it)."""
    mark("main_entered")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(names_extension_command(argv)).parse_args(argv)
    mark("arguments_parsed")
    in_json = getattr(args, "log_format", None) == "json"
    # A signal while plugins load ends every command like one during a run: it is the
    # user's (or a launcher's), never the plugin's failure, which is what a plugin that
    # raises KeyboardInterrupt itself is.  `run` keeps the guard while the plan is made (a
    # launcher's SIGTERM can come that early); its run takes over.
    try:
        with ExitStack() as signals:
            signals.enter_context(interrupt_on_signals())
            registry = _registry(args)
            mark("plugins_loaded")
            if args.handler is not cmd_run:
                signals.close()  # then Ctrl-C is KeyboardInterrupt again, handled below
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
            report_error(error)
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
