"""``initorch sglang check``, ``drift``, ``audit`` and ``timeline`` (entry point
``initorch.commands``).

Exit codes follow initorch's: 0 ok, 1 drift (or a hazard) found, 2 the launch would fail
(or bad usage, or a release that cannot be read or whose layout no call map knows), 70 an
internal error.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from initorch.errors import EXIT_OK
from initorch.kit import EXIT_FOUND, EXIT_REFUSED, UsageError

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["add_command"]


def add_command(add: Any) -> None:
    """Declare ``initorch sglang`` with its sub-commands."""
    group = add("sglang", _no_subcommand, "SGLang: pre-flight check of a launch, drift of its "
                "start-up against the sglang profile")
    commands = group.add_subparsers(dest="sglang_command", metavar="COMMAND")
    check = commands.add_parser(
        "check", help="check an SGLang launch before it starts (SGLang's own parser)",
        description="Parse and resolve the launch arguments with SGLang's own code, print "
                    "initorch's plan for them, and refuse (exit 2, one line each) what would "
                    "fail minutes into the launch.  Put the launch arguments after --.")
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.add_argument("launch", nargs=argparse.REMAINDER, metavar="-- ARGS",
                       help="the arguments of python -m sglang.launch_server")
    check.set_defaults(handler=cmd_check)
    drift = commands.add_parser(
        "drift", help="check the sglang profile's order against an SGLang tree or wheel",
        description="Read an SGLang source tree or wheel without importing it, and check "
                    "each ordering claim of the sglang profile against the calls in its "
                    "code (exit 1 on drift).")
    drift.add_argument("source", type=Path, help="an SGLang wheel, site-packages/sglang, or "
                                                 "a source checkout")
    drift.add_argument("--device", default="cpu",
                       help="the device whose plan is checked (default cpu)")
    drift.set_defaults(handler=cmd_drift)
    from initorch_sglang.audit import DEVICES, HAZARDS

    audit = commands.add_parser(
        "audit", help="which SGLang releases would fail on a device (wheels or trees)",
        description="Read SGLang releases (wheels or source trees) without importing them "
                    f"and judge, for the device, each hazard ({', '.join(HAZARDS)}) and "
                    "whether the integration supports the release.  Exit 1 if any release "
                    "has a hazard, 2 if any cannot be read or has a layout no call map "
                    "knows.")
    audit.add_argument("--device", required=True, choices=DEVICES,
                       help="the device the releases would run on")
    audit.add_argument("--json", action="store_true", help="print the result as JSON")
    audit.add_argument("sources", type=Path, nargs="+", metavar="WHEEL_OR_TREE")
    audit.set_defaults(handler=cmd_audit)
    from initorch.kit import add_timeline_command

    add_timeline_command(commands, engine="SGLang", variable="INITORCH_SGLANG_TIMELINE",
                         mode="INITORCH_SGLANG=verify or drive")


def _no_subcommand(args: argparse.Namespace, registry: Registry) -> int:
    raise UsageError("initorch sglang: name a command", hint="check -- ARGS, or drift PATH")


def cmd_check(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.kit import show_preflight
    from initorch_sglang.options import OptionsError, read_options
    from initorch_sglang.preflight import preflight
    from initorch_sglang.version import UnknownSGLangError, check_sglang_version

    launch = [word for word in args.launch if word != "--"][:len(args.launch)]
    if args.launch[:1] == ["--"]:
        launch = args.launch[1:]
    if not launch:
        raise UsageError("initorch sglang check: no launch arguments",
                         hint="initorch sglang check -- --model-path M --device cpu ...")
    try:
        options = read_options()
        check_sglang_version()
    except (OptionsError, UnknownSGLangError) as error:
        raise UsageError(str(error)) from None
    try:
        result = preflight(launch, options)
    except SystemExit as exit_:  # SGLang's argparse already printed its message
        return EXIT_REFUSED if exit_.code else EXIT_OK
    return show_preflight(result, command="initorch sglang check", as_json=args.json)


def cmd_drift(args: argparse.Namespace, registry: Registry) -> int:
    from initorch import load_plan
    from initorch.kit import SourceError
    from initorch_sglang.drift import check_drift, open_tree
    from initorch_sglang.selection import OVERLAYS

    try:
        tree = open_tree(args.source)
    except (SourceError, OSError) as error:
        raise UsageError(f"initorch sglang drift: {error}") from None
    plan = load_plan(list(OVERLAYS), device=args.device, registry=registry)
    try:
        report = check_drift(tree, plan)
    except SourceError as error:  # a file of the tree that cannot be read as Python
        raise UsageError(f"initorch sglang drift: {error}") from None
    print(report.text(plan))
    return EXIT_FOUND if report.drifted else EXIT_OK


def cmd_audit(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.kit import exit_code, version_key
    from initorch_sglang.audit import audit_path, table

    audits = sorted((audit_path(source, args.device) for source in args.sources),
                    key=lambda audit: (version_key(audit.version), str(audit.origin)))
    if args.json:
        print(json.dumps({"device": args.device, "releases": [a.to_dict() for a in audits],
                          "exit": exit_code(audits)}, indent=2))
    else:
        print(table(audits, args.device))
    return exit_code(audits)

