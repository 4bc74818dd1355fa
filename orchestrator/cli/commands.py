"""The commands that read and show (``plan``, ``graph``, ``explain``, ``validate``,
``profiles``, ``steps``, ``settings``, ``detect``, ``trace merge``, ``timeline``,
``status``, ``schema``): each a
:data:`~initorch.cli.parser.Command` that writes its output and returns the exit code.

What a command needs beyond the selection (the resolver, the renderers, the saved plan
reader) it imports when it runs, so that each command loads only its own part.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings

from initorch.cli.output import emit, report_error
from initorch.cli.tables import profile_lines, setting_lines, step_lines
from initorch.errors import EXIT_INVALID_INPUT, EXIT_OK, UnplannedStepWarning
from initorch.files import OutputFile, check_outputs, write_atomically
from initorch.loading.catalog import AUTO_PROFILE
from initorch.loading.detection import DEEP_PROBE_TIMEOUT_S
from initorch.location import display_path
from initorch.plugins import Registry
from initorch.reporting.graph_formats import GRAPH_FORMATS
from initorch.resolution.plan import Plan


def selected_plan(args: argparse.Namespace, registry: Registry) -> Plan:
    """The plan of the selection (``--profile``, ``--device``, ``--set``); an
    unplanned step's warning and ``auto``'s choice are said on stderr."""
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


def cmd_plan(args: argparse.Namespace, registry: Registry) -> int:
    plan = selected_plan(args, registry)
    if args.out:
        from initorch.resolution.saved import save_plan

        check_outputs([OutputFile("--out", args.out)], registry.profiles.read_files())
        save_plan(plan, args.out)
    if args.json:
        from initorch.resolution.saved import plan_json

        emit(json.dumps(plan_json(plan), indent=2))
    else:
        from initorch.reporting.render import plan_text

        emit(plan_text(plan))
    if args.out:  # on stderr, so that --json output stays one JSON document
        shown = display_path(args.out)
        sys.stderr.write(f"initorch: saved the plan to {shown}; run exactly this plan with: "
                         f"initorch run --plan {shown}\n")
    return EXIT_OK


def cmd_graph(args: argparse.Namespace, registry: Registry) -> int:
    emit(GRAPH_FORMATS[args.format](selected_plan(args, registry)))
    return EXIT_OK


def cmd_explain(args: argparse.Namespace, registry: Registry) -> int:
    plan = selected_plan(args, registry)
    from initorch.reporting.render import explain_step_text, explain_text

    if args.second is None:
        emit(explain_step_text(plan, args.first))
    else:
        emit(explain_text(args.first, args.second, plan.explain(args.first, args.second)))
    return EXIT_OK


def cmd_validate(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.cli.validate import validate_all, validate_selection

    if args.profile or args.device is not None or args.settings:
        problems = validate_selection(registry, args.profile, args.device, args.settings)
    else:
        problems = validate_all(registry)
    for label, error in problems:
        # Problems that carry a file location already say where they are.
        report_error(error, prefix="" if error.location else f"{label}: ")
    if problems:
        return EXIT_INVALID_INPUT
    emit("ok: no problems found")
    return EXIT_OK


def cmd_profiles(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.cli.listing import profile_rows

    rows = profile_rows(registry)
    for line in [json.dumps(rows, indent=2)] if args.json else profile_lines(rows):
        emit(line)
    return EXIT_OK


def cmd_steps(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.cli.listing import step_rows

    rows = step_rows(registry)
    for line in [json.dumps(rows, indent=2)] if args.json else step_lines(rows):
        emit(line)
    return EXIT_OK


def cmd_settings(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.api import load_settings
    from initorch.cli.listing import setting_rows

    selected = args.profile or args.device is not None or args.settings
    settled = load_settings(args.profile, device=args.device, settings=args.settings,
                            registry=registry) if selected else None
    rows = setting_rows(registry, settled)
    emit(json.dumps(rows, indent=2) if args.json else "\n".join(setting_lines(rows)))
    return EXIT_OK


def cmd_detect(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.api import detect_device

    def announce(device: str) -> None:  # a deep probe's import may take long: say so
        sys.stderr.write(f"initorch: detect: importing the packages of {device} "
                         f"(at most {DEEP_PROBE_TIMEOUT_S:g}s)\n")

    detection = detect_device(registry, deep=args.deep, root=args.root, announce=announce)
    emit(json.dumps(detection.to_dict(), indent=2) if args.json else detection.table())
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


def cmd_timeline(args: argparse.Namespace, registry: Registry) -> int:
    """The start-up timeline of one or more runs (their ``--report`` files, or timeline
    files): blame and critical chain as text, and on request the merged trace and the
    picture; with ``--compare A B``, what got slower from A to B."""
    from initorch.errors import InitorchError
    from initorch.reporting.redaction import redact
    from initorch.reporting.timeline import merge, read_timeline, timeline_from_dict
    from initorch.reporting.timeline_text import compare_text, timeline_text

    if args.compare:
        if len(args.files) != 2 or args.trace or args.plot:
            raise InitorchError("--compare takes exactly two files (A B) and no --trace or "
                                "--plot", hint="initorch timeline --compare A.json B.json")
        emit(compare_text(*(read_timeline(path) for path in args.files)))
        return EXIT_OK
    outputs = [OutputFile("--trace", args.trace), OutputFile("--plot", args.plot)]
    check_outputs(outputs, args.files)
    merged = merge(read_timeline(path) for path in args.files)
    # Redacted as data, before any rendering escapes it for its format.
    timeline = timeline_from_dict(redact(merged.to_dict()), "the merged timeline")
    emit(timeline_text(timeline))
    if args.trace:
        from initorch.reporting.timeline_trace import timeline_trace

        write_atomically(args.trace, json.dumps(timeline_trace(timeline), indent=1))
    if args.plot:
        from initorch.reporting.timeline_plot import timeline_html, timeline_svg

        write_atomically(args.plot, timeline_svg(timeline) if args.plot.endswith(".svg")
                         else timeline_html(timeline))
    return EXIT_OK


def cmd_status(args: argparse.Namespace, registry: Registry) -> int:
    """Where each rank's start-up is, from the files ``run --status`` writes; with
    ``--ready``, a probe's exit code (:data:`~initorch.reporting.status.PROBE_EXIT_CODES`:
    the worst of the files)."""
    from initorch.reporting.status import read_status, verdict

    verdicts = [verdict(read_status(path), max_age=args.max_age) for path in args.files]
    for said in verdicts:
        emit(said.line)
    if not args.ready:
        return EXIT_OK
    return max(said.exit_code for said in verdicts)


def cmd_schema(args: argparse.Namespace, registry: Registry) -> int:
    from initorch.loading.schema import profile_schema

    emit(json.dumps(profile_schema(registry.settings, registry.steps), indent=2))
    return EXIT_OK
