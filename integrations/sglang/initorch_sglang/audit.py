"""``initorch sglang audit``: which SGLang releases would fail on a device, and why.

Each release is read as text (a wheel or a tree; never imported), its code layout
recognised from its own files, and three hazards judged from that layout's call map
(:mod:`initorch_sglang.layouts`).  A hazard is something that would *fail* on the device:

``ascend-order``
    The shared Mooncake engine is initialised before the rank's ``set_device``.  Its
    ``TransferEngine.initialize`` then runs on a thread with no device selected: on
    ``npu`` the ascend transport's ``aclrtGetDevice`` fails (107002, context null); on
    ``cuda``/``hip``/``musa``/``xpu``, whose device is per host thread too, every rank's
    engine works against device 0.  Not a hazard on ``cpu``/``mps`` (no per-thread device).
``host-allocator``
    The HiCache host pool's ``ALLOC_MEMORY_FUNCS`` has no entry for the device and its
    default is the CUDA ``cudaHostRegister`` path: fails on every device but ``cuda`` and
    ``hip`` (ROCm's ``torch.cuda.cudart()`` keeps the name); the MUSA seed bug.
``unbound-thread``
    ``TransferEngine.initialize`` is handed to a helper that runs it on a new
    ``threading.Thread`` which never sets the device (``run_with_deadline``), or to a
    thread directly: a hazard on the per-thread devices, as ``ascend-order``.

An order that differs from the ``sglang`` profile's but breaks no device constraint (the
process group before the engine: SGLang PR 20016's fix) is listed as a difference, not a
hazard.  The last column says whether the integration supports the release: its layout is
known, SGLang's plugin registry is there, and every hook target resolves.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from initorch_sglang.chains import MissingCall, Site, locate_chain, order
from initorch_sglang.follow import call_sites, find_function, resolve_call, resolve_target
from initorch_sglang.layouts import Layout, recognise
from initorch_sglang.source import SourceError, SourceTree

__all__ = ["DEVICES", "HAZARDS", "Finding", "ReleaseAudit", "audit_path", "audit_tree",
           "exit_code", "render_table", "support", "version_key"]

HAZARDS = ("ascend-order", "host-allocator", "unbound-thread")
DEVICES = ("cuda", "hip", "npu", "musa", "xpu", "mps", "cpu")
PER_THREAD = frozenset({"cuda", "hip", "npu", "musa", "xpu"})
"""Devices whose current device is per host thread (``cudaSetDevice``, ``aclrtSetDevice``)."""
CUDART_PINNED = frozenset({"cuda", "hip"})
"""Devices for which ``torch.cuda.cudart().cudaHostRegister`` is the right path."""

State = Literal["hazard", "clear", "n/a"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One hazard of one release: ``hazard`` (fails on the device), ``clear`` (the code
    is there and does not fail), or ``n/a`` (the code it is about is not in the release);
    ``where`` holds the upstream ``file:line`` it was judged from."""

    hazard: str
    state: State
    detail: str
    where: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"hazard": self.hazard, "state": self.state, "detail": self.detail,
                "where": list(self.where)}


@dataclass(frozen=True, slots=True)
class ReleaseAudit:
    """What the audit read in one release (``error``: it could not read it)."""

    origin: Path
    version: str | None
    device: str
    layout: str | None = None
    findings: tuple[Finding, ...] = ()
    supported: bool = False
    support_detail: str = ""
    differences: tuple[str, ...] = ()
    error: str | None = None

    @property
    def hazards(self) -> tuple[Finding, ...]:
        return tuple(finding for finding in self.findings if finding.state == "hazard")

    @property
    def unreadable(self) -> bool:
        """Never clean: the input could not be read or no call map knows its layout."""
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {"origin": str(self.origin), "version": self.version, "device": self.device,
                "layout": self.layout, "error": self.error,
                "findings": [finding.to_dict() for finding in self.findings],
                "supported": self.supported, "support_detail": self.support_detail,
                "differences": list(self.differences)}


def audit_path(path: Path, device: str) -> ReleaseAudit:
    """Audit the wheel or tree at ``path``; an unreadable one comes back with ``error``
    (one line naming the file), so that no input ends the command as an internal error."""
    try:
        return audit_tree(SourceTree.open(path), device)
    except (SourceError, OSError, RecursionError, MemoryError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
    except Exception as error:  # a release no reading foresaw: not audited, never exit 70
        message = f"cannot be audited ({type(error).__name__}: " \
                  f"{(str(error).splitlines() or [''])[0]})"
    if not message.startswith(str(path)):
        message = f"{path}: {message}"
    return ReleaseAudit(path, None, device, error=message)


def audit_tree(tree: SourceTree, device: str) -> ReleaseAudit:
    """Judge every hazard of ``tree`` for ``device`` (one of :data:`DEVICES`)."""
    version = tree.version()
    layout = recognise(tree)
    if layout is None:
        return ReleaseAudit(tree.origin, version, device, error=(
            f"{tree.origin}: no known call map fits this release's layout "
            "(initorch_sglang/layouts); it is not audited"))
    try:
        findings = (_ascend_order(tree, layout, device), _host_allocator(tree, layout, device),
                    _unbound_thread(tree, layout, device))
        supported, detail = support(tree, layout)
        differences = _differences(tree, layout)
    except MissingCall as missing:
        return ReleaseAudit(tree.origin, version, device, layout.name, error=(
            f"{tree.origin}: layout {layout.name}, but {missing}; it is not audited"))
    return ReleaseAudit(tree.origin, version, device, layout.name, findings, supported,
                        detail, differences)


def _ascend_order(tree: SourceTree, layout: Layout, device: str) -> Finding:
    name = "ascend-order"
    try:
        engine = locate_chain(tree, layout.engine)
    except MissingCall as missing:
        return Finding(name, "n/a", f"no shared Mooncake engine at start-up ({missing})")
    try:
        device_set = locate_chain(tree, layout.set_device)
    except MissingCall:
        return Finding(name, "hazard" if device in PER_THREAD else "clear",
                       "the shared Mooncake engine is initialised and set_device is never "
                       "called before it", _where(engine))
    found = order(device_set, engine)
    where = (*_where(device_set), *_where(engine))
    if found.verdict == "before":
        return Finding(name, "clear", f"set_device before the engine ({found.evidence})",
                       where)
    if found.verdict == "separate":
        raise MissingCall(f"set_device and the engine are separate call chains "
                          f"({found.evidence})")
    state: State = "hazard" if device in PER_THREAD else "clear"
    reason = "" if device in PER_THREAD else f" (harmless on {device}: no per-thread device)"
    return Finding(name, state, f"the engine can be initialised before set_device "
                                f"({found.evidence}){reason}", where)


def _where(chain: list[Site]) -> tuple[str, ...]:
    """The chain's last call, and the helper it goes through, if any."""
    last = chain[-1]
    first = min(last.sites, key=lambda site: site.line)
    return (str(last), *(f"via {helper}" for helper in first.via[:1]))


def _host_allocator(tree: SourceTree, layout: Layout, device: str) -> Finding:
    name = "host-allocator"
    table = layout.allocator
    for file in table.files:
        module = tree.module(file) if tree.has(file) else None
        assignment = None if module is None else _assignment(module, table.name)
        if module is None or assignment is None:
            continue
        where = f"{file}:{assignment.lineno}-{assignment.end_lineno}"
        call = assignment.value
        if not (isinstance(call, ast.Call) and _name(call.func) == "defaultdict"
                and call.args and isinstance(call.args[0], ast.Lambda)):
            return Finding(name, "clear", f"{table.name} is not a defaultdict with a "
                                          "default: nothing falls through", (where,))
        keys = {key.value for key in (call.args[1].keys if len(call.args) > 1 and
                                      isinstance(call.args[1], ast.Dict) else [])
                if isinstance(key, ast.Constant) and isinstance(key.value, str)}
        default = _name(call.args[0].body) or "?"
        falls = bool(call_sites(tree, file, default, table.register_call)) \
            if find_function(module, default) is not None else False
        lookup = "cuda" if device == "hip" else device  # ROCm torch's device type is cuda
        listed = ", ".join(sorted(keys)) or "none"
        if lookup in keys:
            return Finding(name, "clear", f"{table.name} has {lookup!r} (entries: {listed})",
                           (where,))
        if not falls:
            return Finding(name, "clear", f"no {lookup!r} entry, but the default "
                                          f"{default} does not call {table.register_call}",
                           (where,))
        if device in CUDART_PINNED:
            return Finding(name, "clear", f"{lookup!r} takes the default {default} "
                                          f"({table.register_call}), which is its own path",
                           (where,))
        return Finding(name, "hazard", f"{table.name} has no {lookup!r} entry (entries: "
                                       f"{listed}); it falls through to {default} "
                                       f"({table.register_call})", (where,))
    return Finding(name, "n/a", f"no {table.name} table (the host pool pins with torch; "
                                f"looked in {', '.join(table.files)})")


def _unbound_thread(tree: SourceTree, layout: Layout, device: str) -> Finding:
    name = "unbound-thread"
    spec = layout.engine_init
    module = tree.module(spec.file) if tree.has(spec.file) else None
    function = None if module is None else find_function(module, spec.function)
    if function is None:
        return Finding(name, "n/a", f"no {spec.function} in {spec.file}")
    vendor = [node for node in ast.walk(function) if isinstance(node, ast.Call)
              and isinstance(node.func, ast.Attribute) and node.func.attr == spec.vendor_call
              and not (isinstance(node.func.value, ast.Name) and node.func.value.id == "self")]
    if not vendor:
        raise MissingCall(f"{spec.file} {spec.function} no longer calls "
                          f"engine.{spec.vendor_call}")
    for call in vendor:
        thread = _threaded(tree, spec.file, spec.function, function, call)
        if thread is not None:
            state: State = "hazard" if device in PER_THREAD else "clear"
            reason = "" if device in PER_THREAD else \
                f" (harmless on {device}: no per-thread device)"
            return Finding(name, state, f"TransferEngine.{spec.vendor_call} runs on "
                                        f"{thread[0]}{reason}",
                           (f"{spec.file}:{thread[1]}", *thread[2:]))
    lines = ", ".join(f":{call.lineno}" for call in vendor)
    return Finding(name, "clear", f"TransferEngine.{spec.vendor_call} runs on the calling "
                                  f"thread ({spec.file}{lines})",
                   tuple(f"{spec.file}:{call.lineno}" for call in vendor))


def _threaded(tree: SourceTree, file: str, qualname: str, function: ast.AST,
              vendor: ast.Call) -> tuple[str, ...] | None:
    """How ``vendor`` reaches a new thread, if it does: (what, lines, helper file:lines)."""
    holder = _enclosing_callable(function, vendor)
    if holder is None:
        return None
    for node in ast.walk(function):
        if not isinstance(node, ast.Call) or not _hands(node, holder):
            continue
        span = f"{node.lineno}-{node.end_lineno}"
        if _name(node.func) == "Thread":
            return ("a threading.Thread of its own", span)
        helper = resolve_call(tree, file, qualname, node.func)
        if helper is None:
            continue
        helper_file, definition = helper
        starts = [inner.lineno for inner in ast.walk(definition)
                  if isinstance(inner, ast.Call) and _name(inner.func) == "Thread"]
        sets = call_sites(tree, helper_file, _qualname(tree, helper_file, definition),
                          "set_device")
        if starts and not sets:
            return (f"the thread {_name(node.func)} starts, which never sets the device",
                    span, f"{helper_file}:{definition.lineno}-{definition.end_lineno}",
                    f"{helper_file}:{starts[0]}")
    return None


def _qualname(tree: SourceTree, file: str, definition: ast.AST) -> str:
    module = tree.module(file)
    assert module is not None
    for node in ast.iter_child_nodes(module):
        if node is definition and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node.name
        if isinstance(node, ast.ClassDef):
            for inner in node.body:
                if inner is definition and isinstance(inner, (ast.FunctionDef,
                                                              ast.AsyncFunctionDef)):
                    return f"{node.name}.{inner.name}"
    return getattr(definition, "name", "")


def _enclosing_callable(function: ast.AST, target: ast.AST) -> ast.AST | None:
    """The lambda or nested ``def`` inside ``function`` that holds ``target``."""
    body = getattr(function, "body", [])
    for node in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and any(inner is target for inner in ast.walk(node)):
            return node
    return None


def _hands(call: ast.Call, holder: ast.AST) -> bool:
    """Whether ``call`` is handed ``holder`` (the lambda itself, or the nested def's name)."""
    values = [*call.args, *(keyword.value for keyword in call.keywords)]
    if isinstance(holder, ast.Lambda):
        return any(value is holder for value in values)
    named = getattr(holder, "name", None)
    return any(isinstance(value, ast.Name) and value.id == named for value in values)


def _assignment(module: ast.Module, name: str) -> ast.Assign | None:
    """The last module-level ``name = ...`` (the binding Python keeps)."""
    found = None
    for node in module.body:
        if isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and
                                                target.id == name for target in node.targets):
            found = node
    return found


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def support(tree: SourceTree, layout: Layout) -> tuple[bool, str]:
    """Whether the integration can hook ``tree``: SGLang's plugin registry is there and
    every hook target of ``layout`` resolves; and, in one line, why not."""
    if not tree.has(layout.plugin_registry):
        return False, f"no SGLang plugin system ({layout.plugin_registry} is missing)"
    missing = [target for target in layout.hook_targets()
               if resolve_target(tree, target) is None]
    if missing:
        return False, "hook targets missing: " + ", ".join(missing)
    return True, f"every hook target of layout {layout.name} resolves"


def _differences(tree: SourceTree, layout: Layout) -> tuple[str, ...]:
    try:
        engine = locate_chain(tree, layout.engine)
        groups = locate_chain(tree, layout.process_group)
    except MissingCall:
        return ()
    found = order(engine, groups)
    if found.verdict == "not-before":
        return (f"the process group can come before the shared engine ({found.evidence}): "
                "PR 20016's order; the sglang profile puts the engine first (elastic EP "
                "hands it to the Mooncake process-group backend); no device constraint "
                "is broken",)
    return ()


def version_key(version: str | None) -> tuple[tuple[int, ...], int, str]:
    """Sort key of an SGLang release (``0.5.10`` < ``0.5.10.post1`` < ``0.5.11``); an
    unknown or unusual version sorts last, by its text."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*)(?:\.?post(\d+))?", version or "")
    if match is None:
        return ((10**9,), 0, version or "")
    return (tuple(int(part) for part in match.group(1).split(".")),
            int(match.group(2) or -1), "")


def render_table(audits: list[ReleaseAudit], device: str) -> str:
    """The releases (rows, by version) against the hazards, then one line per hazard."""
    cell = {"hazard": "HAZARD", "clear": "-", "n/a": "n/a"}
    head = ["version", "layout", *HAZARDS, "integration supports it"]
    rows = []
    for audit in audits:
        if audit.error is not None:
            rows.append([audit.version or "?", audit.layout or "unknown", *("?" for _ in
                                                                           HAZARDS), "?"])
            continue
        states = {finding.hazard: cell[finding.state] for finding in audit.findings}
        rows.append([audit.version or "?", audit.layout or "?",
                     *(states[name] for name in HAZARDS),
                     "yes" if audit.supported else "no"])
    widths = [max(len(row[column]) for row in [head, *rows]) for column in range(len(head))]
    lines = [f"SGLang releases on {device}: HAZARD fails on {device}, - does not, n/a: "
             "the code is not in the release"]
    lines += ["  ".join(text.ljust(width) for text, width in zip(row, widths,
                                                                 strict=True)).rstrip()
              for row in [head, *rows]]
    for audit in audits:
        name = audit.version or str(audit.origin)
        if audit.error is not None:  # the error names the file
            lines.append(f"UNREADABLE: {audit.error}")
        for finding in audit.hazards:
            lines.append(f"{name}: {finding.hazard}: {finding.detail} "
                         f"[{', '.join(finding.where)}]")
    hazardous = sum(1 for audit in audits if audit.hazards)
    unread = sum(1 for audit in audits if audit.unreadable)
    lines.append(f"{len(audits)} release(s): {hazardous} with a hazard on {device}, "
                 f"{unread} not audited")
    return "\n".join(lines)


def exit_code(audits: list[ReleaseAudit]) -> int:
    """2 if any release could not be audited (never reported clean), else 1 if any has a
    hazard, else 0."""
    if any(audit.unreadable for audit in audits):
        return 2
    return 1 if any(audit.hazards for audit in audits) else 0

