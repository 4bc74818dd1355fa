"""What SGLang did, as initorch step events, checked against the plan as it happens.

Each hooked SGLang call becomes a :class:`Call`: step, start, end, thread, device.  The
first call of a step is checked when it starts, against the calls already seen:

- **order**: no step that the plan puts after this one has started yet, and every step
  the plan puts before it has finished (``Plan.explain`` gives the chain of edges, each
  with the reason its profile gives);
- **thread**: a device-bound step runs on a thread where ``set_device`` ran, because
  device context is per host thread (CUDA, Ascend ACL).

A check that fails is an :class:`OrderViolation`; the recorder raises it into SGLang
(stopping start-up) or only keeps it, as the launch asked.  Later calls of a step
(SGLang sets the device a second time in ``ModelRunner.__init__``) are recorded and
count as binding their thread, but are not ordered again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from initorch import InitorchError

if TYPE_CHECKING:
    from initorch import Edge, Plan

__all__ = ["Call", "OrderViolation", "Recorder"]


@dataclass(slots=True)
class Call:
    """One call of an SGLang function that performs ``step``; times in seconds since
    the recorder started."""

    step: str
    index: int
    started: float
    thread_id: int
    thread: str
    device: str | None
    finished: float | None = None
    error: BaseException | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "step": self.step, "call": self.index + 1, "start_offset_s": round(self.started, 6),
            "duration_s": None if self.finished is None
            else round(self.finished - self.started, 6),
            "thread": self.thread, "thread_id": self.thread_id, "device": self.device,
        }
        if self.error is not None:
            data["error"] = f"{type(self.error).__name__}: {self.error}"
        return data


class OrderViolation(InitorchError):
    """SGLang's start-up broke a constraint of the plan: ``first`` should have come
    before ``second`` (``edges``: the chain that says so), or ``step`` ran on a thread
    without the device context."""

    def __init__(self, message: str, *, step: str, edges: tuple[Edge, ...] = (),
                 hint: str | None = None) -> None:
        self.step = step
        self.edges = edges
        super().__init__(message, hint=hint)


@dataclass(slots=True)
class Recorder:
    """The calls of one rank's start-up, checked against ``plan``."""

    plan: Plan
    stop_on_violation: bool = True
    clock: Callable[[], float] = time.perf_counter
    device: Callable[[], str | None] = lambda: None
    calls: list[Call] = field(default_factory=list)
    violations: list[OrderViolation] = field(default_factory=list)
    _origin: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._origin = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self._origin

    @contextmanager
    def observe(self, step: str) -> Iterator[Call]:
        """Record the call that runs inside the block as one call of ``step``."""
        thread = threading.current_thread()
        with self._lock:
            index = sum(1 for call in self.calls if call.step == step)
            call = Call(step, index, self.elapsed(), thread.ident or 0, thread.name,
                        self.device())
            violation = self._check(call) if index == 0 else None
            self.calls.append(call)
        if violation is not None:
            self.violations.append(violation)
            if self.stop_on_violation:
                call.finished, call.error = call.started, violation
                raise violation
        try:
            yield call
        except BaseException as error:
            call.error = error
            raise
        finally:
            call.finished = self.elapsed()

    def first_calls(self) -> dict[str, Call]:
        """Each observed step's first call."""
        first: dict[str, Call] = {}
        for call in self.calls:
            first.setdefault(call.step, call)
        return first

    def _check(self, call: Call) -> OrderViolation | None:
        if call.step not in self.plan:
            return None
        for seen in self.first_calls().values():
            if seen.step not in self.plan or seen.step == call.step:
                continue
            chain = self._chain(call.step, seen.step)
            if chain is not None:
                return self._order_violation(call.step, seen.step, chain, "had already run")
            chain = self._chain(seen.step, call.step)
            if chain is not None and seen.finished is None:
                return self._order_violation(seen.step, call.step, chain,
                                             "was still running when it started")
        return self._thread_violation(call)

    def _chain(self, first: str, second: str) -> tuple[Edge, ...] | None:
        path = self.plan.graph.path(first, second)
        return None if path is None else tuple(path)

    def _order_violation(self, first: str, second: str, chain: tuple[Edge, ...],
                         how: str) -> OrderViolation:
        reasons = "; ".join(edge.describe() for edge in chain)
        late, early = (first, second) if how == "had already run" else (second, first)
        return OrderViolation(
            f"SGLang called {late} but {early} {how}: the plan orders {first} before "
            f"{second} ({reasons})",
            step=late, edges=chain,
            hint=f"SGLang's start-up no longer matches the profile: see 'initorch explain "
                 f"{first} {second}' and 'initorch sglang drift'")

    def _thread_violation(self, call: Call) -> OrderViolation | None:
        if not self.plan.step(call.step).step.device_bound:
            return None
        bound = {seen.thread_id for seen in self.calls if seen.step == "set_device"}
        if not bound or call.thread_id in bound:
            return None
        names = sorted({seen.thread for seen in self.calls if seen.step == "set_device"})
        return OrderViolation(
            f"SGLang called {call.step} on thread {call.thread!r}, where set_device never ran "
            f"(it ran on {', '.join(names)}): device context is per host thread",
            step=call.step,
            hint="call set_device on the thread that runs device-bound work, before it")
