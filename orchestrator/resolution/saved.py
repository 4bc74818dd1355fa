"""Saved plans: resolve once, run exactly that plan later (``terraform apply planfile``).

``initorch plan --out plan.json`` (or :func:`save_plan`) writes the resolved
plan; ``initorch run --plan plan.json`` (or :func:`initorch.load_saved_plan` then
``Run(plan, diagnoses=...)``) runs it without reading a profile or resolving
anything, so a server start never imports networkx.

This module is the plan's JSON, written and read.  The file is one JSON object:
the keys of ``initorch plan --json`` (:func:`plan_json`: profiles, device, order,
waves, steps with their effective fields, why they are planned and their
declaration in code, skipped steps with reasons, settings and their origins,
fingerprint) plus ``setting_sources`` (each setting's origin as data), ``edges``
(kind, where each was declared and the reason a profile gave for it),
``env_sources`` (which profile set each environment variable, and where), a
format header and a checksum.  Paths in it are absolute, so the file means the
same from any working directory.

Loading refuses, each with one line and exit code 2: a file that cannot be
read or is not complete JSON (a key given twice, nesting Python cannot read
included); another format or format version; a file changed after it was saved
(checksum); a plan whose fingerprint no longer matches the registered steps (a
step missing, or declared differently in code now); and -- since anyone can
recompute both sha256 values -- whatever a profile could not say: settings their
declarations refuse, environment variables a profile may not set, an order
against the steps' edges, the device binding or the file's own edges (the executors
walk the edges, so the run would not follow the order the file shows), what a
step's preview refuses.
The file never names code to import: steps come from the registry, as for
profiles.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from typing import Any

from initorch._version import __version__
from initorch.errors import InitorchError, Problem, SavedPlanError
from initorch.files import describe_os_error, read_input, write_atomically
from initorch.loading.document import EnvEntry, Setting, env_name_problem, env_value_problem
from initorch.location import SourceLocation, display_path
from initorch.model.canonical import declaration, step_fields
from initorch.model.devices import DeviceRef
from initorch.model.registry import StepCatalog
from initorch.model.settings import SettingCatalog
from initorch.model.step import EDGE_KINDS, OVERRIDABLE_FIELDS
from initorch.resolution.fingerprint import fingerprint
from initorch.resolution.plan import (
    Plan,
    PlannedStep,
    SkippedStep,
    env_values,
)
from initorch.resolution.plangraph import EDGE_KINDS_IN_GRAPH, Edge, PlanGraph
from initorch.resolution.preview import preview_steps
from initorch.resolution.reads import unmet_reads

FORMAT = "initorch-plan"
FORMAT_VERSION = 2
"""Bumped whenever a reader of the previous version would misread the file (2: a
skipped step is ``{name, reason, summary}``, as planned steps and ``SkippedStep`` name
it)."""

# "./path:line" in a message: a location relative to the working directory
# (see initorch.location.display_path), which a saved plan spells out in full.
_RELATIVE_LOCATION = re.compile(r"(?<![\w./-])\./(?=[^\s'\"]*:\d)")


# -- writing --------------------------------------------------------------------------------

def plan_json(plan: Plan) -> dict[str, Any]:
    """The JSON shape of ``initorch plan --json`` (stable keys); what a saved plan adds
    to it, see :func:`saved_form`."""
    return {
        "profiles": list(plan.profiles),
        "device": plan.device.type,
        "device_index": plan.device.index,
        "order": list(plan.order),
        "waves": [list(w) for w in plan.waves],
        "steps": [
            {
                "name": p.name,
                "wave": p.wave,
                "description": p.step.description,
                "why": list(p.reasons),
                "preview": list(p.notes),
                **step_fields(p.step),
                "declared": declaration(p.declared),
            }
            for p in plan.steps
        ],
        "edges": [{"from": edge.source, "to": edge.target, "kind": edge.kind,
                   "declared_at": str(edge.declared_at), "declared_by": edge.declared_by,
                   "reason": edge.reason} for edge in plan.graph.edges()],
        "skipped": [{"name": s.name, "reason": s.reason, "summary": s.brief}
                    for s in plan.skipped],
        "settings": {key: s.value for key, s in sorted(plan.settings.items())},
        "setting_origins": {key: s.origin for key, s in sorted(plan.settings.items())},
        "env": env_values(plan.env),
        "fingerprint": plan.fingerprint,
    }


def saved_form(plan: Plan) -> dict[str, Any]:
    """The JSON object :func:`save_plan` writes (checksum included)."""
    body = plan_json(plan)
    for planned in body["steps"]:
        planned["why"] = [_absolute_text(text) for text in planned["why"]]
    for skipped in body["skipped"]:
        skipped["reason"] = _absolute_text(skipped["reason"])
    body["setting_origins"] = {key: _absolute_text(origin)
                               for key, origin in body["setting_origins"].items()}
    body["setting_sources"] = {
        key: {"source": setting.source, "location": _location_json(setting.location),
              "key_location": (_location_json(setting.key_location)
                               if setting.key_location else None),
              "is_default": setting.is_default}
        for key, setting in sorted(plan.settings.items())
    }
    body["edges"] = [
        {"from": edge.source, "to": edge.target, "kind": edge.kind,
         "declared_at": _location_json(edge.declared_at), "declared_by": edge.declared_by,
         "reason": edge.reason}
        for edge in plan.graph.edges()
    ]
    body["env_sources"] = {
        name: {"source": entry.source, "location": _location_json(entry.location)}
        for name, entry in plan.env.items()
    }
    saved = {"format": FORMAT, "format_version": FORMAT_VERSION,
             "initorch_version": __version__, **body}
    saved["checksum"] = _checksum(saved)
    return saved


def save_plan(plan: Plan, path: str | os.PathLike[str]) -> None:
    """Write ``plan`` to ``path``, replacing it atomically (a crash never leaves half
    a plan behind); :class:`InitorchError` when the folder cannot be written."""
    target = os.path.abspath(os.fspath(path))
    text = json.dumps(saved_form(plan), indent=2) + "\n"
    try:
        write_atomically(target, text)
    except OSError as exc:
        raise InitorchError(f"cannot write the plan to {display_path(target)}: "
                            f"{exc.strerror or exc}",
                            hint="check that the folder exists and is writable") from None


def _absolute_text(text: str) -> str:
    return _RELATIVE_LOCATION.sub(os.getcwd().rstrip(os.sep) + os.sep, text)


def _location_json(location: SourceLocation) -> dict[str, Any]:
    path = location.path
    if not path.startswith("<"):  # "<command line>", "<unknown>" are not files
        path = os.path.abspath(path)
    return {"path": path, "line": location.line, "column": location.column}


def _checksum(saved: dict[str, Any]) -> str:
    content = {key: value for key, value in saved.items() if key != "checksum"}
    blob = json.dumps(content, sort_keys=True, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()


# -- loading --------------------------------------------------------------------------------

def read_saved_plan(path: str | os.PathLike[str], steps: StepCatalog) -> Plan:
    """The plan saved at ``path``, with its steps taken from ``steps``;
    :class:`SavedPlanError` when it cannot be run exactly as it was saved.
    (:func:`initorch.load_saved_plan` takes a plugin registry, the installed plugins by
    default.)"""
    shown = display_path(path)
    redo = f"save it again: initorch plan ... --out {shown}"
    saved = _read(shown, os.fspath(path), redo)
    _check_header(saved, shown, redo)
    if saved.get("checksum") != _checksum(saved):
        raise SavedPlanError(shown, "the file was changed after it was saved (its checksum "
                             "does not match its content)", hint=redo)
    try:
        planned, problems = _planned_steps(saved, steps, shown, redo)
        if problems:
            raise SavedPlanError(shown, "the plan no longer matches the registered steps "
                                 f"({len(problems)} step(s) missing or declared differently)",
                                 hint=redo, problems=problems)
        plan = _plan(saved, planned, steps.settings)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SavedPlanError(shown, f"malformed saved plan ({type(exc).__name__}: {exc})",
                             hint=redo) from None
    refused = [dataclasses.replace(problem, hint=problem.hint or redo)
               for problem in _refusals(plan, steps, SourceLocation(shown))]
    if refused:
        raise SavedPlanError(shown, f"the plan says what no profile may ({len(refused)} "
                             "problem(s))", hint=redo, problems=refused)
    if plan.fingerprint != saved["fingerprint"]:
        raise SavedPlanError(shown, f"fingerprint {saved['fingerprint'][:12]} does not match "
                             f"the plan it describes ({plan.fingerprint[:12]})", hint=redo)
    return plan


def _read(shown: str, path: str, redo: str) -> dict[str, Any]:
    try:
        text = read_input(path).decode("utf-8")
    except OSError as exc:
        raise SavedPlanError(shown, f"cannot read the saved plan: {describe_os_error(exc)}",
                             hint="create it with: initorch plan ... --out FILE") from None
    except UnicodeDecodeError:
        raise SavedPlanError(shown, "not a saved initorch plan (not UTF-8 text)",
                             hint=redo) from None
    try:
        saved = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise SavedPlanError(shown, f"not a complete saved plan: invalid JSON at line "
                             f"{exc.lineno} column {exc.colno} ({exc.msg}); the file is "
                             "truncated or corrupt", hint=redo) from None
    except RecursionError:
        raise SavedPlanError(shown, "not a saved initorch plan: its JSON nests deeper than "
                             "Python can read", hint=redo) from None
    except ValueError as exc:  # a duplicate key
        raise SavedPlanError(shown, f"not a saved initorch plan: {exc}", hint=redo) from None
    if not isinstance(saved, dict):
        raise SavedPlanError(shown, "not a saved initorch plan (not a JSON object)", hint=redo)
    return saved


def _refusals(plan: Plan, steps: StepCatalog, where: SourceLocation) -> list[Problem]:
    """What the plan says that the profiles it claims to come from could not: a
    setting its declaration refuses (a module no plugin declares, NaN, a negative
    timeout), an environment variable a profile may not set, an order the steps'
    edges or the device binding forbid, an order that does not deliver an output a
    step reads, or what a step's preview refuses.  Its
    checksum and fingerprint are plain sha256 values that anyone can recompute, so
    the file is checked as the untrusted input it is, exactly as its profiles were."""
    problems: list[Problem] = []
    for key, setting in plan.settings.items():
        spec = steps.settings.get(key)
        said = (f"setting '{key}' is declared by no registered step" if spec is None
                else spec.check(setting.value))
        if said is not None:
            problems.append(Problem(said, where))
    for name, entry in plan.env.items():
        problem = env_name_problem(name) or (
            env_value_problem(name, entry.value) if entry.value is not None else None)
        if problem is not None:
            problems.append(Problem(problem[0], where, problem[1]))
    problems += [Problem(said, where) for said in _order_problems(plan)]
    skipped = {s.name: s.reason for s in plan.skipped}
    problems += [Problem(unmet.message(), where, unmet.hint(False)) for unmet in unmet_reads(
        (p.declared for p in plan.steps if p.declared.reads), plan.graph, skipped,
        plan.__contains__)]
    if not problems:  # previews read the settings: only once those are known to be valid
        try:
            preview_steps(plan.steps, plan.settings, plan.device, os.environ,
                          plan.implementations)
        except InitorchError as error:
            problems += [Problem(p.message, where, p.hint) for p in error.problems]
    return problems


def _order_problems(plan: Plan) -> list[str]:
    """Each pair of steps the plan orders against a declared edge, the device binding
    (which no profile can remove) or an edge the plan itself lists (an executor walks
    the edges, not the order: a re-signed file whose order they contradict would run
    in an order it does not show)."""
    position = {name: index for index, name in enumerate(plan.order)}
    binders = [p.name for p in plan.steps if p.step.binds_device]
    said: dict[tuple[str, str], str] = {}  # (first, then) -> what is wrong
    for planned in plan.steps:
        step = planned.step
        earlier = [*step.requires, *step.wants, *step.after,
                   *(binders if step.device_bound else ())]
        for first in earlier:
            if first in position and position[first] > position[planned.name]:
                said.setdefault((first, planned.name), f"step '{planned.name}' is ordered "
                                f"before '{first}', which it must follow")
        for then in step.before:
            if then in position and position[then] < position[planned.name]:
                said.setdefault((planned.name, then), f"step '{planned.name}' is ordered "
                                f"after '{then}', which it must precede")
    for edge in plan.graph.edges():
        if position[edge.source] > position[edge.target]:
            said.setdefault((edge.source, edge.target), (
                f"the plan's edge {edge.source} -> {edge.target} ({edge.kind}, declared by "
                f"{edge.declared_by} at {edge.declared_at}) contradicts its order, which "
                f"lists '{edge.target}' before '{edge.source}'"))
    return list(said.values())


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when a key repeats: which value would win is exactly what
    someone editing the file by hand could hide behind."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice in one object")
        result[key] = value
    return result


def _check_header(saved: dict[str, Any], shown: str, redo: str) -> None:
    if saved.get("format") != FORMAT:
        raise SavedPlanError(shown, f"not a saved initorch plan (no \"format\": \"{FORMAT}\")",
                             hint="create one with: initorch plan ... --out FILE")
    if saved.get("format_version") != FORMAT_VERSION:
        raise SavedPlanError(
            shown, f"plan format {saved.get('format_version')!r}, written by initorch "
            f"{saved.get('initorch_version', 'unknown')}; this initorch ({__version__}) "
            f"reads plan format {FORMAT_VERSION}", hint=redo)


def _planned_steps(saved: dict[str, Any], steps: StepCatalog, shown: str, redo: str
                   ) -> tuple[list[PlannedStep], list[Problem]]:
    """The saved steps with their code from ``steps``, and a problem for every step
    that is not registered or is declared differently now."""
    planned: list[PlannedStep] = []
    problems: list[Problem] = []
    where = SourceLocation(shown)
    for entry in saved["steps"]:
        name = entry["name"]
        if name not in steps:
            problems.append(Problem(f"step '{name}' is not registered (is the plugin that "
                                    "provides it installed?)", where, redo))
            continue
        registered = steps.get(name)
        changes = _changes(entry["declared"], declaration(registered))
        if changes:
            problems.append(Problem(
                f"step '{name}' changed since the plan was saved ({registered.defined_at}): "
                f"{'; '.join(changes)}", where, redo))
            continue
        effective = dataclasses.replace(registered, **_overridden(entry))
        planned.append(PlannedStep(effective, _whole(entry["wave"]), tuple(entry["why"]),
                                   registered, tuple(entry.get("preview", ()))))
    return planned, problems


def _plan(saved: dict[str, Any], steps: list[PlannedStep], catalog: SettingCatalog) -> Plan:
    order = [planned.name for planned in steps]
    if saved["order"] != order:
        raise ValueError("'order' does not list the steps in their order")
    sources = saved["setting_sources"]
    settings = {key: _setting(key, value, sources[key])
                for key, value in saved["settings"].items()}
    skipped = tuple(SkippedStep(s["name"], s["reason"], s["summary"]) for s in saved["skipped"])
    device = DeviceRef(saved["device"], saved["device_index"])
    env_sources = saved["env_sources"]
    env = {name: _env_entry(name, value, env_sources[name])
           for name, value in saved["env"].items()}
    profiles = tuple(saved["profiles"])
    planned = tuple(steps)
    return Plan(profiles=profiles, device=device, settings=settings, steps=planned,
                skipped=skipped, graph=PlanGraph(order, (_edge(e) for e in saved["edges"])),
                fingerprint=fingerprint(profiles, device, settings, planned, skipped, env),
                env=env, implementations=catalog.implementations(saved["settings"]))


def _changes(then: dict[str, Any], now: dict[str, Any]) -> list[str]:
    return [f"{key} was {then.get(key)!r}, is {now.get(key)!r}"
            for key in sorted(set(then) | set(now)) if then.get(key) != now.get(key)]


def _overridden(entry: dict[str, Any]) -> dict[str, Any]:
    """The fields a profile may have changed, as the saved plan has them."""
    fields = {key: entry[key] for key in OVERRIDABLE_FIELDS}
    fields.update({kind: tuple(entry[kind]) for kind in EDGE_KINDS})
    return fields


def _whole(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value


def _location(data: dict[str, Any]) -> SourceLocation:
    return SourceLocation(str(data["path"]), _whole(data["line"]), _whole(data["column"]))


def _setting(key: str, value: Any, source: dict[str, Any]) -> Setting:
    key_location = source["key_location"]
    return Setting(key, value, _location(source["location"]), source["source"],
                   key_location=_location(key_location) if key_location else None,
                   is_default=bool(source["is_default"]))


def _env_entry(name: str, value: Any, source: dict[str, Any]) -> EnvEntry:
    if not isinstance(value, str):
        raise TypeError(f"environment variable {name} has no text value ({value!r})")
    return EnvEntry(name, value, _location(source["location"]), str(source["source"]))


def _edge(data: dict[str, Any]) -> Edge:
    if data["kind"] not in EDGE_KINDS_IN_GRAPH:
        raise ValueError(f"unknown edge kind {data['kind']!r}")
    reason = data["reason"]
    if reason is not None and not isinstance(reason, str):
        raise TypeError(f"edge reason {reason!r} is not text")
    return Edge(data["from"], data["to"], data["kind"], _location(data["declared_at"]),
                data["declared_by"], reason)

