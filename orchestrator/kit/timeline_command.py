"""``initorch <engine> timeline DIR``: one command for every integration's timeline.

An integration declares it under its own command group (:func:`add_timeline_command`),
naming its engine and the variable its launch records with; what the command does is
engine-neutral (:func:`cmd_timeline`): join the process files of the launch
(:func:`~initorch.kit.timeline.read_launch`), print the critical chain and the blame, and
write the merged trace and the picture (:func:`~initorch.kit.timeline.render_launch`), or
with ``--compare BEFORE`` print what got slower since another launch.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["add_timeline_command", "cmd_timeline"]


def add_timeline_command(commands: Any, *, engine: str, variable: str, mode: str) -> None:
    """Declare ``timeline`` in ``commands`` (an integration's sub-parsers) for ``engine``
    (its name as shown), whose launch records with ``variable`` beside ``mode`` (the
    integration's mode variable and values, as shown in the help)."""
    timeline = commands.add_parser(
        "timeline", help="where a launch's start-up time went, every process (blame, "
                         "critical chain, trace, picture)",
        description=f"Join the start-up timelines that the processes of one {engine} launch "
                    f"wrote ({variable}=DIR beside {mode}), print the critical chain and "
                    "the phases longest first, and write the merged Chrome/Perfetto trace "
                    "and the picture (HTML and SVG).")
    timeline.add_argument("directory", type=Path, metavar="DIR",
                          help="the directory the launch wrote (process-<pid>.json files)")
    timeline.add_argument("--trace", type=Path, metavar="FILE",
                          help="the merged trace (default DIR/timeline-trace.json)")
    timeline.add_argument("--plot", type=Path, metavar="FILE",
                          help="the picture, an HTML page, with FILE's .svg beside it "
                               "(default DIR/timeline.html)")
    timeline.add_argument("--compare", type=Path, metavar="BEFORE",
                          help="print what got slower since the launch in BEFORE (another "
                               "such directory), phase by phase, instead")
    timeline.set_defaults(handler=cmd_timeline, timeline_engine=engine)


def cmd_timeline(args: argparse.Namespace, registry: Registry) -> int:
    """The ``timeline`` command's work (exit 0; an unreadable directory is the
    :class:`~initorch.errors.InitorchError` of :func:`read_launch`, exit 2)."""
    from initorch.errors import EXIT_OK
    from initorch.kit.timeline import compare_launch, read_launch, render_launch

    launch = read_launch(args.directory)
    if args.compare is not None:
        print(compare_launch(read_launch(args.compare), launch))
        return EXIT_OK
    trace = args.trace or args.directory / "timeline-trace.json"
    plot = args.plot or args.directory / "timeline.html"
    engine = launch.labels.get("engine", args.timeline_engine)
    print(render_launch(launch, trace=trace, plot=plot, title=f"{engine} start-up timeline"))
    print(f"\ntrace: {trace} (open it in ui.perfetto.dev)\npicture: {plot} "
          f"(and {plot.with_suffix('.svg')})")
    return EXIT_OK
