"""``initorch vllm check``, ``drift`` and ``timeline`` (entry point ``initorch.commands``).

Exit codes follow initorch's: 0 ok, 1 drift found, 2 the launch would fail (or bad usage,
or a tree that cannot be read), 70 an internal error.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initorch.kit import EXIT_FOUND, EXIT_REFUSED, UsageError

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["add_command"]


def add_command(add: Any) -> None:
    """Declare ``initorch vllm`` with its sub-commands."""
    group = add("vllm", _no_subcommand, "vLLM: pre-flight check of a server launch, drift "
                "of its start-up against the vllm profile")
    commands = group.add_subparsers(dest="vllm_command", metavar="COMMAND")
    check = commands.add_parser(
        "check", help="check a vLLM server launch before it starts (vLLM's own parser)",
        description="Parse and resolve the server arguments with vLLM's own code (remote "
                    "code off, nothing downloaded), print initorch's plan for a worker, "
                    "and refuse (exit 2, one line each) what would fail once the workers "
                    "started.  Put the arguments of python -m vllm.entrypoints.openai."
                    "api_server after --.")
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.add_argument("launch", nargs=argparse.REMAINDER, metavar="-- ARGS",
                       help="the arguments of python -m vllm.entrypoints.openai.api_server")
    check.set_defaults(handler=cmd_check)
    drift = commands.add_parser(
        "drift", help="check the vllm profile's order against a vLLM tree or wheel",
        description="Read a vLLM source tree or wheel without importing it, and check each "
                    "ordering claim of the vllm profile against the calls in its code, for "
                    "the worker of the device (exit 1 on drift).")
    drift.add_argument("source", type=Path, help="a vLLM wheel, site-packages/vllm, or a "
                                                 "source checkout")
    drift.add_argument("--device", default="cpu",
                       help="the device whose worker and plan are checked (default cpu; "
                            "cuda checks the GPU worker)")
    drift.set_defaults(handler=cmd_drift)
    from initorch.kit import add_timeline_command

    add_timeline_command(commands, engine="vLLM", variable="INITORCH_VLLM_TIMELINE",
                         mode="INITORCH_VLLM=verify")


def _no_subcommand(args: argparse.Namespace, registry: Registry) -> int:
    raise UsageError("initorch vllm: name a command", hint="check -- ARGS, or drift PATH")


def cmd_check(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.kit import show_preflight
    from initorch_vllm.preflight import preflight

    launch = args.launch[1:] if args.launch[:1] == ["--"] else args.launch
    if not launch:
        raise UsageError("initorch vllm check: no server arguments",
                         hint="initorch vllm check -- --model DIR --dtype float32 ...")
    try:
        result = preflight(launch)
    except SystemExit as exit_:  # vLLM's argparse already printed its message
        return EXIT_REFUSED if exit_.code else 0
    return show_preflight(result, command="initorch vllm check", as_json=args.json)


def cmd_drift(args: argparse.Namespace, registry: Registry) -> int:
    from initorch import load_plan
    from initorch.kit import SourceError, SourceTree, check_drift
    from initorch_vllm.layout import ENGINE, layout_for

    try:
        layout = layout_for(args.device)
    except KeyError:
        raise UsageError(f"initorch vllm drift: no vLLM worker call map for device "
                         f"{args.device!r}", hint="--device cpu, cuda or rocm") from None
    try:
        tree = SourceTree.open(args.source, ENGINE)
    except (SourceError, OSError) as error:
        raise UsageError(f"initorch vllm drift: {error}") from None
    plan = load_plan([args.device, "vllm"], device=args.device, registry=registry)
    try:
        report = check_drift(tree, plan, layout)
    except SourceError as error:  # a file of the tree that cannot be read as Python
        raise UsageError(f"initorch vllm drift: {error}") from None
    print(report.text(plan))
    return EXIT_FOUND if report.drifted else 0
