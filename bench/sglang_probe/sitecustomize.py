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
cProfile of those spans, of the rank's session (``Session.begin``) and of drive mode's
run (``drive._run``) to ``<folder>/<pid>.<span>.prof``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

_FOLDER = os.environ.get("INITORCH_BENCH_PROBE", "")
_PROFILE = os.environ.get("INITORCH_BENCH_PROFILE") == "1"
_SPANS: dict[str, float] = {}
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
              "rank": _RANK[0] if _RANK else None}
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


def _after_plugin_load() -> None:
    """Time the rank's session and drive mode's run, once the plugin imported them."""
    import sys

    session = sys.modules.get("initorch_sglang.session")
    if session is not None:
        begin = session.Session.__dict__["begin"].__func__

        def begin_measured(cls: type, server_args: Any, options: Any, rank: int) -> Any:
            _RANK.append(rank)
            return _measured("session begin", begin, cls, server_args, options, rank)

        session.Session.begin = classmethod(begin_measured)
    drive = sys.modules.get("initorch_sglang.drive")
    if drive is not None:
        run = vars(drive)["_run"]
        setattr(drive, "_run",  # noqa: B010 (a private function of the plugin's)
                lambda *args, **kwargs: _measured("drive run", run, *args, **kwargs))


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
