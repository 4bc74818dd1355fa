"""The benchmark's probe inside every process of a real vLLM launch (bench only).

``bench/vllm_startup.py`` puts this folder on the server's ``PYTHONPATH`` with
``INITORCH_BENCH_PROBE`` naming a folder; without that variable this module does nothing.
vLLM loads its general plugins in every process it starts: the API server, the engine
core and each worker (``plugins/__init__.py:16-18``); ``load_plugins_by_group`` imports
each (``plugin.load()``, :69) and ``load_general_plugins`` calls it (:89-90).  In each
process this times what the plugin's own account (initorch's ``COST``) cannot see, the
import of the plugin module and the call of its ``load`` around that account, and reads
the account itself: whatever initorch adds later (a hook applied when vLLM imports its
module, a worker's plan, recording and report) is in ``COST``.  It writes them, with the
process's start time by the kernel's clock and its role, to ``<folder>/<pid>.json``: once
after the call, then again whenever the account grows (a thread looks every 0.5 s; the
processes are killed at shutdown, nothing is left for ``atexit``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

_FOLDER = os.environ.get("INITORCH_BENCH_PROBE", "")
_SPANS: dict[str, float] = {}
_LOOK_S = 0.5


def _role() -> tuple[str, int | None]:
    """The process's role and a worker's rank, from the names vLLM gives its processes
    (``EngineCore``, ``v1/engine/utils.py:284``; ``VllmWorker-{rank}``,
    ``v1/executor/multiproc_executor.py:747``)."""
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return "api server", None
    name = multiprocessing.current_process().name
    if name.startswith("VllmWorker-"):
        return "worker", int(name.rsplit("-", 1)[1])
    return ("engine core" if name.startswith("EngineCore") else name), None


def _account() -> dict[str, Any]:
    """initorch's own account in this process, if the plugin loaded it."""
    cost = sys.modules.get("initorch.kit.cost")
    if cost is None:
        return {"total_s": 0.0, "phases_s": {}}
    return {"total_s": cost.COST.total, "phases_s": dict(cost.COST.phases)}


def _save() -> None:
    import json

    with open("/proc/self/stat") as stat:
        started = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
    role, rank = _role()
    record = {"pid": os.getpid(), "role": role, "rank": rank, "started_ticks": started,
              "ticks_per_s": os.sysconf("SC_CLK_TCK"), "spans_s": _SPANS,
              "cost": _account()}
    path = os.path.join(_FOLDER, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as out:
        json.dump(record, out)
    os.replace(path + ".tmp", path)


def _keep_saving() -> None:
    """Save again whenever initorch's account grows (a hook applied later, a session)."""
    saved = -1.0
    while True:
        total = _account()["total_s"]
        if total != saved:
            saved = total
            _save()
        time.sleep(_LOOK_S)


def _timed(span: str, function: Any, *args: Any) -> Any:
    began = time.perf_counter()
    try:
        return function(*args)
    finally:
        _SPANS[span] = _SPANS.get(span, 0.0) + time.perf_counter() - began


def _install() -> None:
    """Wrap ``EntryPoint.load`` for vLLM's ``initorch`` general plugin."""
    import functools
    from importlib import metadata

    original = metadata.EntryPoint.load

    def load(self: metadata.EntryPoint) -> Any:
        if self.group != "vllm.general_plugins" or self.name != "initorch":
            return original(self)
        plugin = _timed("plugin import", original, self)

        @functools.wraps(plugin)
        def call() -> Any:
            before = _account()["total_s"]
            try:
                return _timed("plugin call", plugin)
            finally:
                # The account's share of the call is in the call's span already.
                _SPANS["account during call"] = _account()["total_s"] - before
                _save()
                threading.Thread(target=_keep_saving, name="initorch-bench-probe",
                                 daemon=True).start()

        return call

    metadata.EntryPoint.load = load  # type: ignore[method-assign]


if _FOLDER:
    _install()
