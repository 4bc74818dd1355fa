"""The start-up status file: where each rank is in its start-up, for a probe that
cannot ask the engine's HTTP server (the ``/startupz`` answer, as a file).

A run given a :class:`StatusFile` (``initorch run --status FILE``) keeps one JSON
document up to date, replaced atomically (written beside it, then renamed) at
every change of phase and every ``interval`` seconds in between, so a reader never
sees half a file and a live writer's ``updated_at`` never lags more than
``interval``.  The document (schema :data:`SCHEMA`)::

    {"schema": "initorch-status/1",
     "pid": 4242, "host": "node-3", "rank": 0,
     "state": "starting",          # starting | ready | failed | stopping | stopped
     "phase": "import_backend",    # the step (or phase) it is in; null when none
     "running": ["import_backend"],# every step running now (the parallel executor)
     "phase_started_at": 1764900000.12, "in_phase_s": 1.84,
     "steps_done": 3, "steps_total": 12,
     "started_at": 1764899998.50,  # when the status began (wall clock, seconds)
     "updated_at": 1764900001.96}  # when this document was written

A reader knows a file is stale when its ``pid`` is not alive on this host, or when
``updated_at`` is older than it should be (:func:`read_status`, :func:`verdict`);
``initorch status --ready FILE`` turns that into a probe's exit code
(:data:`PROBE_EXIT_CODES`).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import Any

from initorch.errors import InitorchError
from initorch.files import write_atomically
from initorch.records import record

SCHEMA = "initorch-status/1"
STATES = ("starting", "ready", "failed", "stopping", "stopped")
DEFAULT_INTERVAL_S = 1.0
STALE_AFTER_S = 10.0
"""``initorch status`` calls a file stale when it was not rewritten for this long
(ten of the writer's default intervals), whatever its pid says."""

PROBE_EXIT_CODES = {"ready": 0, "not ready": 1, "bad file": 2, "stale": 3}
"""``initorch status --ready``: 0 the rank is ready; 1 it is not (yet): starting,
failed, stopping or stopped; 2 no readable status file; 3 the file is stale (its
writer is gone, or it was not rewritten within ``--max-age``)."""


class StatusFile:
    """Writes one rank's status to ``path``; thread-safe.  The run calls
    :meth:`phase`, :meth:`step_started`, :meth:`step_finished` and :meth:`state`;
    :meth:`close` stops the rewriting thread (the last document stays)."""

    def __init__(self, path: str, *, rank: int, steps_total: int,
                 interval: float = DEFAULT_INTERVAL_S) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._doc: dict[str, Any] = {
            "schema": SCHEMA, "pid": os.getpid(), "host": socket.gethostname(), "rank": rank,
            "state": "starting", "phase": None, "running": [], "phase_started_at": None,
            "in_phase_s": None, "steps_done": 0, "steps_total": steps_total,
            "started_at": time.time(), "updated_at": None}
        self._running: dict[str, float] = {}  # step -> when it started
        self._done: set[str] = set()  # an engine may call a step twice (set_device)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep_fresh, args=(interval,),
                                        daemon=True, name="initorch-status")
        self._write()
        self._thread.start()

    def phase(self, name: str) -> None:
        """A phase that is not a step (``plan``, ``teardown``) begins now."""
        with self._lock:
            self._doc["phase"], self._doc["phase_started_at"] = name, time.time()
        self._write()

    def step_started(self, step: str) -> None:
        with self._lock:
            self._running[step] = time.time()
            self._current()
        self._write()

    def step_finished(self, step: str, succeeded: bool) -> None:
        with self._lock:
            self._running.pop(step, None)
            if succeeded:
                self._done.add(step)
                self._doc["steps_done"] = len(self._done)
            self._current()
        self._write()

    def state(self, state: str) -> None:
        """The run is now ``state`` (one of :data:`STATES`)."""
        if state not in STATES:
            raise ValueError(f"unknown state {state!r}; one of {', '.join(STATES)}")
        with self._lock:
            self._doc["state"] = state
            if state in ("ready", "failed", "stopped"):
                self._running.clear()
                self._doc["phase"] = self._doc["phase_started_at"] = None
                self._doc["running"] = []
        self._write()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()

    def _current(self) -> None:
        """The phase is the running step that started first (under the lock)."""
        running = sorted(self._running.items(), key=lambda item: item[1])
        self._doc["running"] = [name for name, _ in running]
        if running:
            self._doc["phase"], self._doc["phase_started_at"] = running[0]

    def _keep_fresh(self, interval: float) -> None:
        while not self._stop.wait(interval):
            self._write()

    def _write(self) -> None:
        with self._lock:
            now = time.time()
            began = self._doc["phase_started_at"]
            self._doc["in_phase_s"] = None if began is None else round(now - began, 3)
            self._doc["updated_at"] = now
            text = json.dumps(self._doc, indent=1) + "\n"
            # A full disk must not fail the start-up: the file goes stale instead.
            with contextlib.suppress(OSError):
                write_atomically(self.path, text)


@record
class Verdict:
    """What a probe concludes from a status file: one of :data:`PROBE_EXIT_CODES`'s
    keys, and a line for people."""

    outcome: str
    line: str

    @property
    def exit_code(self) -> int:
        return PROBE_EXIT_CODES[self.outcome]


def read_status(path: str) -> dict[str, Any]:
    """The status document in ``path``; :class:`InitorchError` (exit 2) when there is
    none or it is not one."""
    from initorch.reporting.trace_merge import read_json_file

    data = read_json_file(path, "an initorch status file", "pass a file 'run --status' writes")
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InitorchError(f"{path}: not an initorch status file (schema is not {SCHEMA})",
                            hint="pass a file 'run --status' writes")
    return data


def verdict(data: dict[str, Any], *, max_age: float = STALE_AFTER_S,
            now: float | None = None) -> Verdict:
    """Ready, not ready or stale, from a status document (:func:`read_status`)."""
    now = time.time() if now is None else now
    rank = data.get("rank")
    updated = data.get("updated_at")
    if not isinstance(updated, int | float) or now - updated > max_age:
        return Verdict("stale", f"rank {rank}: stale: not rewritten for more than "
                                f"{max_age:g}s")
    pid = data.get("pid")
    if data.get("host") == socket.gethostname() and isinstance(pid, int) and pid > 0 \
            and not _alive(pid) and data.get("state") != "stopped":
        return Verdict("stale", f"rank {rank}: stale: its process {pid} is gone")
    state = data.get("state")
    if state == "ready":
        return Verdict("ready", f"rank {rank}: ready")
    phase = data.get("phase")
    where = f" in {phase} for {data.get('in_phase_s')}s" if phase else ""
    return Verdict("not ready", f"rank {rank}: {state}{where} ({data.get('steps_done')}/"
                                f"{data.get('steps_total')} steps done)")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: it exists
    return True
