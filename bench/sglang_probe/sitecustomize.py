"""The benchmark's probe inside every process of a real SGLang launch (bench only).

``bench/sglang_startup.py`` puts this folder on the server's ``PYTHONPATH`` with
``INITORCH_BENCH_PROBE`` naming a folder; without that variable this module does nothing.
It times, in each process, what the plugin's own account (the rank report's ``cost``)
cannot see: importing the plugin module (SGLang's ``ep.load()``,
``srt/plugins/__init__.py:79``) and the call of its ``load`` (``:128``), in the launcher,
the detokenizer and every rank alike.  It writes them, with the process's start time by
the kernel's clock, its role (SGLang's target function) and a rank's world rank, to
``<folder>/<pid>.json`` as soon as they are known (the ranks are killed at shutdown:
nothing is left for ``atexit``).  With ``INITORCH_BENCH_PROFILE=1`` it also writes a
cProfile of those spans, of the rank's session (``verify.begin``) and of drive mode's
plan (``drive._run``) to ``<folder>/<pid>.<span>.prof``.

In a rank it also marks, on ``time.monotonic`` (``CLOCK_MONOTONIC``: one clock for every
process of the host), when SGLang's parallel runtime begins (its ``_set_all_reduce_flags``,
the first call stock SGLang and drive mode's preamble both make, ``bootstrap.py:127``)
and when its process groups are entered and built (``_init_parallel_groups``, :303, both
modes), and in drive mode when the ``rendezvous`` step and the ranks' plan agreement inside
it are entered and left: the bench compares, across the ranks of one launch, what a rank
waited for the last rank to arrive with what it spent after that (``marks_s``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

_FOLDER = os.environ.get("INITORCH_BENCH_PROBE", "")
_PROFILE = os.environ.get("INITORCH_BENCH_PROFILE") == "1"
_SPANS: dict[str, float] = {}
_MARKS: dict[str, float] = {}  # time.monotonic() at each point of the parallel runtime
_RANK: list[int] = []  # the world rank, once the rank's session began


def _role() -> str:
    import multiprocessing

    if multiprocessing.parent_process() is None:
        return "launcher"
    target = getattr(multiprocessing.current_process(), "_target", None)
    return str(getattr(target, "__name__", "child"))


def _save() -> None:
    import json

    with open("/proc/self/stat") as stat:
        started = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime
    record = {"pid": os.getpid(), "role": _role(), "started_ticks": started,
              "ticks_per_s": os.sysconf("SC_CLK_TCK"), "spans_s": _SPANS,
              "marks_s": _MARKS, "rank": _RANK[0] if _RANK else None}
    path = os.path.join(_FOLDER, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as out:
        json.dump(record, out)
    os.replace(path + ".tmp", path)


def _measured(span: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    profile = None
    if _PROFILE:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    began = time.perf_counter()
    try:
        return function(*args, **kwargs)
    finally:
        _SPANS[span] = _SPANS.get(span, 0.0) + time.perf_counter() - began
        if profile is not None:
            profile.disable()
            profile.dump_stats(os.path.join(_FOLDER, f"{os.getpid()}.{span}.prof"))
        _save()


def _marked(before: str, after: str | None, function: Callable[..., Any]
            ) -> Callable[..., Any]:
    """``function``, marking the first entry as ``before`` and the first return as
    ``after`` (saved at once: a rank may be killed at any point after)."""

    def marking(*args: Any, **kwargs: Any) -> Any:
        _MARKS.setdefault(before, time.monotonic())
        try:
            return function(*args, **kwargs)
        finally:
            if after is not None:
                _MARKS.setdefault(after, time.monotonic())
            _save()

    return marking


def _mark_the_run() -> None:
    """Mark the ``rendezvous`` step and the plan agreement inside it (the run's modules
    are imported once drive mode made its run)."""
    import sys

    invoke = sys.modules.get("initorch.execution.invoke")
    if invoke is not None:
        step = invoke.StepInvoker.invoke

        def invoke_marked(self: Any, planned: Any, **kwargs: Any) -> Any:
            if planned.name != "rendezvous":
                return step(self, planned, **kwargs)
            return _marked("rendezvous in", "rendezvous out", step)(self, planned, **kwargs)

        invoke.StepInvoker.invoke = invoke_marked
    peers = sys.modules.get("initorch.execution.peers")
    if peers is not None:
        peers.JobPeers.agree = _marked("agree in", "agree out", peers.JobPeers.agree)


def _after_plugin_load() -> None:
    """Time the rank's session and drive mode's plan, once the plugin imported them, and
    mark the parallel runtime's points."""
    import sys

    bootstrap = sys.modules.get("sglang.srt.distributed.bootstrap")
    if bootstrap is None:
        return  # not a rank (SGLang's scheduler module imports it)
    bootstrap._set_all_reduce_flags = _marked("runtime in", None,
                                              bootstrap._set_all_reduce_flags)
    bootstrap._init_parallel_groups = _marked("groups in", "groups out",
                                              bootstrap._init_parallel_groups)
    verify = sys.modules.get("initorch_sglang.verify")
    if verify is not None:
        begin = verify.begin

        def begin_measured(server_args: Any, options: Any, rank: int, *args: Any) -> Any:
            _RANK.append(rank)
            return _measured("session begin", begin, server_args, options, rank, *args)

        verify.begin = begin_measured
    drive = sys.modules.get("initorch_sglang.drive")
    if drive is not None:
        plan = vars(drive)["_run"]

        def plan_measured(*args: Any, **kwargs: Any) -> Any:
            run = _measured("drive plan", plan, *args, **kwargs)
            _mark_the_run()
            return run

        setattr(drive, "_run", plan_measured)  # noqa: B010 (a private function of the plugin's)


def _install() -> None:
    """Wrap ``EntryPoint.load`` for SGLang's ``initorch`` general plugin."""
    import functools
    from importlib import metadata

    original = metadata.EntryPoint.load

    def load(self: metadata.EntryPoint) -> Any:
        if self.group != "sglang.srt.plugins" or self.name != "initorch":
            return original(self)
        plugin = _measured("plugin import", original, self)

        @functools.wraps(plugin)
        def call() -> Any:
            try:
                return _measured("plugin call", plugin)
            finally:
                _after_plugin_load()

        return call

    metadata.EntryPoint.load = load  # type: ignore[method-assign]


if _FOLDER:
    _install()
