"""What happened in a run: per-step outcomes, critical chain, blame, trace.

``RunReport.to_dict`` is the ``--report`` JSON; ``trace_events`` is the
``--trace`` file in Chrome trace-event format (opens in Perfetto and
chrome://tracing, like torch profiler traces), one track per thread so that
overlap in the parallel executor is visible.
"""

from __future__ import annotations

import traceback
from dataclasses import field
from typing import Any, Literal

from initorch.errors import exception_message
from initorch.records import record
from initorch.reporting.diagnosis import Finding, failure_text, vendor_code_of
from initorch.resolution.plan import Plan

Status = Literal["pending", "succeeded", "failed", "skipped", "would_run", "interrupted"]


@record(frozen=False)
class StepOutcome:
    """One step's fate; times are seconds since the run started."""

    name: str
    status: Status = "pending"
    attempts: int = 0
    started: float | None = None
    finished: float | None = None
    thread: str | None = None
    thread_id: int | None = None
    error: BaseException | None = None
    finding: Finding | None = None
    reason: str | None = None
    root_cause: str | None = None  # the failed step that made this one skip

    @property
    def vendor_code(self) -> str | None:
        """The vendor's error code: what the diagnosis extracted, else what the error carries."""
        if self.finding is not None and self.finding.vendor_code is not None:
            return self.finding.vendor_code
        return vendor_code_of(self.error) if self.error is not None else None

    @property
    def traceback(self) -> str | None:
        """The failure's Python traceback, with its chained causes, as text."""
        if self.error is None:
            return None
        return "".join(traceback.format_exception(self.error))

    @property
    def duration(self) -> float:
        if self.started is None or self.finished is None:
            return 0.0
        return self.finished - self.started

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "step": self.name,
            "status": self.status,
            "attempts": self.attempts,
            "start_offset_s": _round(self.started),
            "duration_s": _round(self.duration) if self.started is not None else None,
            "thread": self.thread,
        }
        if self.reason:
            data["reason"] = self.reason
        if self.root_cause:
            data["root_cause"] = self.root_cause
        if self.error is not None:
            data["error"] = {
                "type": type(self.error).__name__,
                "message": exception_message(self.error),
                "vendor_code": self.vendor_code,
                "text": failure_text(self.error),
                "traceback": self.traceback,
            }
            data["diagnosis"] = self.finding.as_dict() if self.finding else None
        return data


@record(frozen=False)
class TeardownOutcome:
    """One teardown: how it ended, when (seconds since the run started) and where."""

    step: str
    status: Literal["succeeded", "failed"] = "succeeded"
    started: float = 0.0
    finished: float | None = None
    thread: str | None = None
    thread_id: int | None = None
    error: str | None = None

    @property
    def duration(self) -> float:
        return 0.0 if self.finished is None else self.finished - self.started

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"step": self.step, "status": self.status,
                                "start_offset_s": _round(self.started),
                                "duration_s": _round(self.duration), "thread": self.thread}
        if self.error is not None:
            data["error"] = self.error
        return data


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 6)


@record(frozen=False)
class RunReport:
    """The outcome of a run, in plan order."""

    plan: Plan
    executor: str
    rank: int
    outcomes: dict[str, StepOutcome]
    started_at: str
    # started_at as wall-clock seconds (time.time): the zero of every offset below.
    started_epoch: float | None = None
    wall_time: float = 0.0  # the start-up: from the first step until the run returned
    # Seconds spent tearing down (every call of Run.teardown together); None until then.
    teardown_time: float | None = None
    teardown: list[TeardownOutcome] = field(default_factory=list)
    teardown_mode: str = "side-by-side"  # how the teardowns were scheduled
    interrupted: str | None = None  # what stopped the run ("interrupted by SIGINT"), if anything
    # The plan's env: variables as the run found or set them (see execution.environment).
    environment: list[dict[str, Any]] = field(default_factory=list)
    # Peers whose heartbeat stopped during the run (rank -> what this rank saw): the
    # job is incomplete even when every step here succeeded.
    peers_lost: dict[int, str] = field(default_factory=dict)

    @property
    def failed(self) -> list[StepOutcome]:
        return [o for o in self.outcomes.values() if o.status == "failed"]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def teardown_failed(self) -> list[TeardownOutcome]:
        """The teardowns that failed (a managed master that died during the run, say)."""
        return [entry for entry in self.teardown if entry.status == "failed"]

    @property
    def total_time(self) -> float:
        """Start-up plus teardown: what the run cost, without the time a server served
        between the two."""
        return self.wall_time + (self.teardown_time or 0.0)

    def critical_chain(self) -> list[StepOutcome]:
        """Like ``systemd-analyze critical-chain``: from the step that finished last,
        walk back through the predecessor that finished last."""
        ran = {n: o for n, o in self.outcomes.items() if o.finished is not None}
        if not ran:
            return []
        current = max(ran.values(), key=lambda o: o.finished or 0.0)
        chain = [current]
        while True:
            before = [ran[p] for p in self.plan.graph.predecessors(current.name) if p in ran]
            if not before:
                return chain
            current = max(before, key=lambda o: o.finished or 0.0)
            chain.append(current)

    def blame(self) -> list[StepOutcome]:
        """Steps that ran, longest first (``systemd-analyze blame``)."""
        ran = [o for o in self.outcomes.values() if o.started is not None]
        return sorted(ran, key=lambda o: o.duration, reverse=True)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fingerprint": self.plan.fingerprint,
            "profiles": list(self.plan.profiles),
            "device": str(self.plan.device),
            "rank": self.rank,
            "executor": self.executor,
            "started_at": self.started_at,
            "wall_time_s": _round(self.wall_time),
            "teardown_time_s": _round(self.teardown_time),
            "total_time_s": _round(self.total_time),
            "ok": self.ok,
            "interrupted": self.interrupted,
            "steps": [self.outcomes[name].to_dict() for name in self.step_order()],
            "critical_chain": [o.name for o in self.critical_chain()],
            "blame": [{"step": o.name, "duration_s": _round(o.duration)} for o in self.blame()],
            "teardown_mode": self.teardown_mode,
            "teardown": [entry.to_dict() for entry in self.teardown],
            "environment": self.environment,
            "peers_lost": [{"rank": rank, "problem": text}
                           for rank, text in sorted(self.peers_lost.items())],
        }

    def step_order(self) -> list[str]:
        """Planned steps in plan order, then plan-time skipped steps by name."""
        planned = list(self.plan.order)
        return planned + sorted(n for n in self.outcomes if n not in planned)

    def trace_events(self) -> dict[str, Any]:
        """Chrome trace-event JSON: complete ("X") events in microseconds, one per step
        that ran and one per teardown, on the track of the thread that ran it."""
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": self.rank, "tid": 0,
             "args": {"name": f"initorch rank {self.rank} ({' + '.join(self.plan.profiles)})"}},
        ]
        threads: dict[int, str] = {}
        for outcome in self.outcomes.values():
            if outcome.started is None or outcome.thread_id is None:
                continue
            threads.setdefault(outcome.thread_id, outcome.thread or str(outcome.thread_id))
            events.append(self._span(outcome.name, "initorch.step", outcome.started,
                                     outcome.duration, outcome.thread_id,
                                     {"status": outcome.status, "attempts": outcome.attempts,
                                      "wave": self.plan.step(outcome.name).wave}))
        for entry in self.teardown:
            if entry.thread_id is None:
                continue
            threads.setdefault(entry.thread_id, entry.thread or str(entry.thread_id))
            details = {"status": entry.status, **({"error": entry.error} if entry.error else {})}
            events.append(self._span(f"teardown {entry.step}", "initorch.teardown",
                                     entry.started, entry.duration, entry.thread_id, details))
        events += [{"name": "thread_name", "ph": "M", "pid": self.rank, "tid": tid,
                    "args": {"name": name}} for tid, name in sorted(threads.items())]
        # rank and started_at let 'initorch trace merge' put the ranks on one time line.
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"fingerprint": self.plan.fingerprint, "rank": self.rank,
                              "started_at": self.started_at}}

    def _span(self, name: str, category: str, started: float, duration: float, tid: int,
              details: dict[str, Any]) -> dict[str, Any]:
        return {"name": name, "cat": category, "ph": "X", "ts": round(started * 1e6, 3),
                "dur": round(duration * 1e6, 3), "pid": self.rank, "tid": tid,
                "args": details}
