"""initorch inside an inference engine: the engine-neutral kit its integrations share.
An integration observes (verify mode), runs part of (drive mode) and checks before and
without running (pre-flight, drift, audit) one engine's start-up.  What it needs of the
engine itself is data: an :class:`Engine` (its package and names) and one call map per
code layout (:class:`EngineCall`, :class:`Hop`, :class:`Marker`); everything else is
here, engine-neutral:

- **the vendor boundary**: the vendor calls that need a device context
  (:data:`MOONCAKE_CALLS`), wrapped when their modules load (:func:`install_vendor_hooks`,
  :func:`after_import`), each recorded on the thread that makes it, with its call site;
- **the rank's session**: hooks on the engine's functions, applied when their modules
  load and checked once applied (:func:`apply_hooks`); the :class:`Recorder` that checks
  each call against the plan as it happens; the session that frames a rank's start-up
  (:func:`run_framed`, or the :func:`begin`/:func:`end` pair for a start-up made of
  several calls; :class:`RankSession`) and writes its report and trace; initorch's
  own time in the process (:data:`COST`); where the rank is while it starts, for people
  and probes (:class:`Progress`);
- **pre-flight**: the result, its lines and exit codes (:class:`Preflight`,
  :func:`show_preflight`), and the checks that are no engine's (:func:`cpu_list_problem`);
- **drift and audit over call maps**: a release read as text (:class:`SourceTree`),
  calls followed through its helpers (:func:`call_sites`), chains ordered
  (:func:`order`), a profile's claims judged (:func:`check_drift`) and releases x hazards
  tabled (:class:`ReleaseAudit`, :func:`render_table`);
- **drive mode's registry**: the installed steps with the engine performing some
  (:func:`engine_performed`).

Nothing here imports an engine, torch or a vendor package at module level, and every
name is imported on first use: an integration's plugin, loaded in every process of the
engine, pays only for what it reads.  See ``docs/kit.md``.
"""

from typing import TYPE_CHECKING

from initorch.exports import on_first_use

if TYPE_CHECKING:
    from initorch.kit.callmap import (
        DEVICE_MODULE,
        CallMap,
        EngineCall,
        Hop,
        Marker,
        layout_named,
        recognise,
    )
    from initorch.kit.chains import Order, Site, locate, locate_chain, order
    from initorch.kit.cost import COST, Cost, process_age
    from initorch.kit.drift import DriftReport, EdgeCheck, check_drift
    from initorch.kit.drive import Action, engine_performed
    from initorch.kit.engine import Engine
    from initorch.kit.follow import (
        CallLine,
        MissingCall,
        call_sites,
        find_function,
        module_file,
        resolve_call,
        resolve_target,
    )
    from initorch.kit.hooks import Hook, HookError, HookKind, apply_hooks
    from initorch.kit.imports import after_import, go_first, module_of
    from initorch.kit.mooncake import MOONCAKE_CALLS
    from initorch.kit.outputs import (
        Idle,
        build_report,
        did_nothing,
        now_iso,
        rank_path,
        write_outputs,
    )
    from initorch.kit.preflight import (
        EXIT_FOUND,
        EXIT_REFUSED,
        Check,
        Preflight,
        UsageError,
        auto_map,
        cpu_list_problem,
        is_mla,
        one_line,
        run_checks,
        show_preflight,
    )
    from initorch.kit.process_recording import ProcessRecording
    from initorch.kit.progress import PROGRESS_EVERY_S, Progress, progress_seconds
    from initorch.kit.recorder import Call, OrderViolation, Recorder, VendorRecord
    from initorch.kit.session import (
        Outputs,
        RankSession,
        active,
        begin,
        begin_hook,
        end,
        observe_vendor,
        observer,
        plan_or_off,
        run_framed,
        set_device_observer,
    )
    from initorch.kit.source import MAX_FILE_BYTES, SourceError, SourceTree
    from initorch.kit.timeline import (
        FirstAnswer,
        ProcessRecorder,
        caller_outside,
        code_source,
        compare_launch,
        read_launch,
        recorded_calls,
        render_launch,
        unrecorded_processes,
        watch_first_answer,
        written_ready,
    )
    from initorch.kit.timeline_command import add_timeline_command
    from initorch.kit.vendor import (
        CallSite,
        Observe,
        VendorCall,
        call_site,
        install_vendor_hooks,
        wrap_vendor_function,
    )
    from initorch.kit.verdicts import (
        Finding,
        ReleaseAudit,
        State,
        audit_path,
        exit_code,
        render_table,
        support,
        version_key,
    )
    from initorch.records import record
    from initorch.reporting.timeline import Timeline

__getattr__, __dir__ = on_first_use(globals(), {
    "Engine": "initorch.kit.engine",
    "after_import": "initorch.kit.imports",
    "go_first": "initorch.kit.imports",
    "module_of": "initorch.kit.imports",
    "COST": "initorch.kit.cost",
    "Cost": "initorch.kit.cost",
    "process_age": "initorch.kit.cost",
    "Hook": "initorch.kit.hooks",
    "HookError": "initorch.kit.hooks",
    "HookKind": "initorch.kit.hooks",
    "apply_hooks": "initorch.kit.hooks",
    "CallSite": "initorch.kit.vendor",
    "Observe": "initorch.kit.vendor",
    "VendorCall": "initorch.kit.vendor",
    "call_site": "initorch.kit.vendor",
    "install_vendor_hooks": "initorch.kit.vendor",
    "wrap_vendor_function": "initorch.kit.vendor",
    "MOONCAKE_CALLS": "initorch.kit.mooncake",
    "Call": "initorch.kit.recorder",
    "OrderViolation": "initorch.kit.recorder",
    "Recorder": "initorch.kit.recorder",
    "VendorRecord": "initorch.kit.recorder",
    "Idle": "initorch.kit.outputs",
    "build_report": "initorch.kit.outputs",
    "did_nothing": "initorch.kit.outputs",
    "now_iso": "initorch.kit.outputs",
    "rank_path": "initorch.kit.outputs",
    "write_outputs": "initorch.kit.outputs",
    "PROGRESS_EVERY_S": "initorch.kit.progress",
    "Progress": "initorch.kit.progress",
    "progress_seconds": "initorch.kit.progress",
    "Outputs": "initorch.kit.session",
    "RankSession": "initorch.kit.session",
    "active": "initorch.kit.session",
    "begin": "initorch.kit.session",
    "begin_hook": "initorch.kit.session",
    "end": "initorch.kit.session",
    "observe_vendor": "initorch.kit.session",
    "observer": "initorch.kit.session",
    "plan_or_off": "initorch.kit.session",
    "run_framed": "initorch.kit.session",
    "set_device_observer": "initorch.kit.session",
    "EXIT_FOUND": "initorch.kit.preflight",
    "EXIT_REFUSED": "initorch.kit.preflight",
    "Check": "initorch.kit.preflight",
    "Preflight": "initorch.kit.preflight",
    "UsageError": "initorch.kit.preflight",
    "auto_map": "initorch.kit.preflight",
    "cpu_list_problem": "initorch.kit.preflight",
    "is_mla": "initorch.kit.preflight",
    "one_line": "initorch.kit.preflight",
    "run_checks": "initorch.kit.preflight",
    "show_preflight": "initorch.kit.preflight",
    "MAX_FILE_BYTES": "initorch.kit.source",
    "SourceError": "initorch.kit.source",
    "SourceTree": "initorch.kit.source",
    "CallLine": "initorch.kit.follow",
    "MissingCall": "initorch.kit.follow",
    "call_sites": "initorch.kit.follow",
    "find_function": "initorch.kit.follow",
    "module_file": "initorch.kit.follow",
    "resolve_call": "initorch.kit.follow",
    "resolve_target": "initorch.kit.follow",
    "DEVICE_MODULE": "initorch.kit.callmap",
    "CallMap": "initorch.kit.callmap",
    "EngineCall": "initorch.kit.callmap",
    "Hop": "initorch.kit.callmap",
    "Marker": "initorch.kit.callmap",
    "layout_named": "initorch.kit.callmap",
    "recognise": "initorch.kit.callmap",
    "record": "initorch.records",
    "Order": "initorch.kit.chains",
    "Site": "initorch.kit.chains",
    "locate": "initorch.kit.chains",
    "locate_chain": "initorch.kit.chains",
    "order": "initorch.kit.chains",
    "DriftReport": "initorch.kit.drift",
    "EdgeCheck": "initorch.kit.drift",
    "check_drift": "initorch.kit.drift",
    "Finding": "initorch.kit.verdicts",
    "ReleaseAudit": "initorch.kit.verdicts",
    "State": "initorch.kit.verdicts",
    "audit_path": "initorch.kit.verdicts",
    "exit_code": "initorch.kit.verdicts",
    "render_table": "initorch.kit.verdicts",
    "support": "initorch.kit.verdicts",
    "version_key": "initorch.kit.verdicts",
    "Action": "initorch.kit.drive",
    "engine_performed": "initorch.kit.drive",
    "FirstAnswer": "initorch.kit.timeline",
    "ProcessRecorder": "initorch.kit.timeline",
    "caller_outside": "initorch.kit.timeline",
    "code_source": "initorch.kit.timeline",
    "compare_launch": "initorch.kit.timeline",
    "read_launch": "initorch.kit.timeline",
    "recorded_calls": "initorch.kit.timeline",
    "render_launch": "initorch.kit.timeline",
    "unrecorded_processes": "initorch.kit.timeline",
    "watch_first_answer": "initorch.kit.timeline",
    "written_ready": "initorch.kit.timeline",
    "add_timeline_command": "initorch.kit.timeline_command",
    "ProcessRecording": "initorch.kit.process_recording",
    "Timeline": "initorch.reporting.timeline",
})

__all__ = [
    "COST",
    "DEVICE_MODULE",
    "EXIT_FOUND",
    "EXIT_REFUSED",
    "MAX_FILE_BYTES",
    "MOONCAKE_CALLS",
    "PROGRESS_EVERY_S",
    "Action",
    "Call",
    "CallLine",
    "CallMap",
    "CallSite",
    "Check",
    "Cost",
    "DriftReport",
    "EdgeCheck",
    "Engine",
    "EngineCall",
    "Finding",
    "FirstAnswer",
    "Hook",
    "HookError",
    "HookKind",
    "Hop",
    "Idle",
    "Marker",
    "MissingCall",
    "Observe",
    "Order",
    "OrderViolation",
    "Outputs",
    "Preflight",
    "ProcessRecorder",
    "ProcessRecording",
    "Progress",
    "RankSession",
    "Recorder",
    "ReleaseAudit",
    "Site",
    "SourceError",
    "SourceTree",
    "State",
    "Timeline",
    "UsageError",
    "VendorCall",
    "VendorRecord",
    "active",
    "add_timeline_command",
    "after_import",
    "apply_hooks",
    "audit_path",
    "auto_map",
    "begin",
    "begin_hook",
    "build_report",
    "call_site",
    "call_sites",
    "caller_outside",
    "check_drift",
    "code_source",
    "compare_launch",
    "cpu_list_problem",
    "did_nothing",
    "end",
    "engine_performed",
    "exit_code",
    "find_function",
    "go_first",
    "install_vendor_hooks",
    "is_mla",
    "layout_named",
    "locate",
    "locate_chain",
    "module_file",
    "module_of",
    "now_iso",
    "observe_vendor",
    "observer",
    "one_line",
    "order",
    "plan_or_off",
    "process_age",
    "progress_seconds",
    "rank_path",
    "read_launch",
    "recognise",
    "record",
    "recorded_calls",
    "render_launch",
    "render_table",
    "resolve_call",
    "resolve_target",
    "run_checks",
    "run_framed",
    "set_device_observer",
    "show_preflight",
    "support",
    "unrecorded_processes",
    "version_key",
    "watch_first_answer",
    "wrap_vendor_function",
    "write_outputs",
    "written_ready",
]
