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
from pathlib import Path

from initorch.kit import (
    Finding,
    MissingCall,
    ReleaseAudit,
    Site,
    SourceTree,
    State,
    call_sites,
    find_function,
    locate_chain,
    order,
    render_table,
    resolve_call,
    support,
)
from initorch.kit import audit_path as audit_engine_path
from initorch_sglang.engine import SGLANG
from initorch_sglang.layouts import Layout, recognise

__all__ = ["DEVICES", "HAZARDS", "audit_path", "audit_tree", "sglang_support", "table"]

HAZARDS = ("ascend-order", "host-allocator", "unbound-thread")
DEVICES = ("cuda", "hip", "npu", "musa", "xpu", "mps", "cpu")
PER_THREAD = frozenset({"cuda", "hip", "npu", "musa", "xpu"})
"""Devices whose current device is per host thread (``cudaSetDevice``, ``aclrtSetDevice``)."""
CUDART_PINNED = frozenset({"cuda", "hip"})
"""Devices for which ``torch.cuda.cudart().cudaHostRegister`` is the right path."""

def audit_path(path: Path, device: str) -> ReleaseAudit:
    """Audit the wheel or tree at ``path``; an unreadable one comes back with ``error``
    (one line naming the file), so that no input ends the command as an internal error."""
    return audit_engine_path(path, device, SGLANG, audit_tree)


def table(audits: list[ReleaseAudit], device: str) -> str:
    """The releases (rows, in the order given) against :data:`HAZARDS`."""
    return render_table(audits, device, HAZARDS, SGLANG.name)


def sglang_support(tree: SourceTree, layout: Layout) -> tuple[bool, str]:
    """Whether the integration can hook ``tree``: SGLang's plugin registry is there and
    every hook target of ``layout`` resolves; and, in one line, why not."""
    return support(tree, layout, layout.plugin_registry)


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
        supported, detail = sglang_support(tree, layout)
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
