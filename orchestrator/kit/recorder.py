"""What an engine did, as initorch step events, checked against the plan as it happens.

Each hooked engine call becomes a :class:`Call`: step, start, end, thread, device.  The
first call of a step is checked when it starts, against the calls already seen:

- **order**: no step that the plan puts after this one has started yet, and every step
  the plan puts before it has finished (``Plan.explain`` gives the chain of edges, each
  with the reason its profile gives);
- **thread**: on a device whose context is per host thread (the profile's
  ``device.context_per_thread``), a device-bound step runs on a thread where
  ``set_device`` ran.

Below the engine's functions, the vendor calls that need the device context
(:mod:`initorch.kit.vendor`) are recorded as :class:`VendorRecord` on the thread that
makes them, and the thread rule is checked there: that is where the work happens.  The
device of a thread is what ``set_device`` was seen to bind on it; the recorder never asks
a runtime, since asking can create a context.

A check that fails is an :class:`OrderViolation`; the recorder raises it into the engine
(stopping start-up) or only keeps it, as the launch asked.  Later calls of a step (an
engine may set the device a second time) are recorded and count as binding their thread,
but are not ordered again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import field
from typing import TYPE_CHECKING, Any

from initorch import InitorchError
from initorch.records import record

if TYPE_CHECKING:
    from initorch import Edge, Plan
    from initorch.kit.engine import Engine
    from initorch.kit.vendor import CallSite, VendorCall

__all__ = ["Call", "OrderViolation", "Recorder", "VendorRecord"]


@record(frozen=False)
class Call:
    """One call of an engine function that performs ``step``; times in seconds since
    the recorder started."""

    step: str
    index: int
    started: float
    thread_id: int
    thread: str
    device: str | None
    finished: float | None = None
    error: BaseException | None = None
    result: Any = None

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


@record(frozen=False)
class VendorRecord:
    """One vendor call (a :class:`~initorch.kit.vendor.VendorCall`): on which thread,
    with which device bound there (``None``: ``set_device`` never ran on it), from where."""

    call: VendorCall
    step: str
    """The step the engine was performing when the call was made (the innermost of its calls
    still running, on any thread: the deadline thread's caller waits on another), else
    the call's own step."""
    started: float
    thread_id: int
    thread: str
    daemon: bool
    device: str | None
    site: CallSite
    finished: float | None = None
    result: Any = None
    error: BaseException | None = None

    def returned(self, result: Any) -> None:
        self.result = result

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "call": self.call.label, "step": self.step,
            "start_offset_s": round(self.started, 6),
            "duration_s": None if self.finished is None
            else round(self.finished - self.started, 6),
            "thread": self.thread, "thread_id": self.thread_id, "daemon": self.daemon,
            "device": self.device, "called_from": self.site.where(),
            "thread_entry": self.site.thread_entry,
            "returned": self.result if isinstance(self.result, (int, str, bool)) else None,
        }
        if self.error is not None:
            data["error"] = f"{type(self.error).__name__}: {self.error}"
        return data


class OrderViolation(InitorchError):
    """The engine's start-up broke a constraint of the plan: ``first`` should have come
    before ``second`` (``edges``: the chain that says so), or ``step`` ran on a thread
    without the device context."""

    def __init__(self, message: str, *, step: str, edges: tuple[Edge, ...] = (),
                 hint: str | None = None) -> None:
        self.step = step
        self.edges = edges
        super().__init__(message, hint=hint)


@record(frozen=False)
class Recorder:
    """The calls of one rank's start-up of ``engine``, checked against ``plan``.

    ``label`` names the server in messages (default: the engine's name; a session gives
    its release: ``<name> <version>``); ``thread_fix`` is what the engine's integration
    offers against a vendor call on a thread without the device (its drive mode), said
    in the violation's hint."""

    plan: Plan
    engine: Engine
    stop_on_violation: bool = True
    clock: Callable[[], float] = time.perf_counter
    label: str | None = None
    thread_fix: str | None = None
    calls: list[Call] = field(default_factory=list)
    vendor_calls: list[VendorRecord] = field(default_factory=list)
    violations: list[OrderViolation] = field(default_factory=list)
    bound: dict[int, tuple[str, str]] = field(default_factory=dict)
    """thread id -> (thread name, device) for each thread ``set_device`` was seen on."""
    overhead: float = 0.0
    """Seconds of the recorder's own bookkeeping, around the calls it recorded."""
    _origin: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._origin = self.clock()
        if self.label is None:
            self.label = self.engine.name

    @property
    def per_thread(self) -> bool:
        """Whether the plan's device keeps its context per host thread."""
        return bool(self.plan.config().get("device.context_per_thread", True))

    def elapsed(self) -> float:
        return self.clock() - self._origin

    @contextmanager
    def observe(self, step: str, *, binds: str | None = None) -> Iterator[Call]:
        """Record the call that runs inside the block as one call of ``step``;
        ``binds``: the device the call sets on this thread (``set_device``)."""
        entered = time.perf_counter()
        thread = threading.current_thread()
        ident = thread.ident or 0
        with self._lock:
            index = sum(1 for call in self.calls if call.step == step)
            known = self.bound.get(ident)
            call = Call(step, index, self.elapsed(), ident, thread.name,
                        binds if binds is not None else None if known is None else known[1])
            violation = self._check(call) if index == 0 else None
            self.calls.append(call)
        if violation is not None:
            self._violate(violation)
            if self.stop_on_violation:
                call.finished, call.error = call.started, violation
                raise violation
        self._account(entered)
        try:
            yield call
        except BaseException as error:
            call.error = error
            raise
        else:
            if binds is not None:
                with self._lock:
                    self.bound[ident] = (thread.name, binds)
        finally:
            resumed = time.perf_counter()
            call.finished = self.elapsed()
            self._account(resumed)

    @contextmanager
    def observe_vendor(self, vendor: VendorCall, site: CallSite) -> Iterator[VendorRecord]:
        """Record one vendor call made inside the block, on this thread, and check that
        the thread has the device context the call needs."""
        entered = time.perf_counter()
        thread = threading.current_thread()
        ident = thread.ident or 0
        with self._lock:
            known = self.bound.get(ident)
            running = [call for call in self.calls if call.finished is None]
            record = VendorRecord(vendor, running[-1].step if running else vendor.step,
                                  self.elapsed(), ident, thread.name, thread.daemon,
                                  None if known is None else known[1], site)
            self.vendor_calls.append(record)
        violation = self._unbound_vendor_call(record)
        if violation is not None:
            self._violate(violation)
            if self.stop_on_violation:
                record.finished, record.error = record.started, violation
                raise violation
        self._account(entered)
        try:
            yield record
        except BaseException as error:
            record.error = error
            raise
        finally:
            resumed = time.perf_counter()
            record.finished = self.elapsed()
            self._account(resumed)

    def _account(self, since: float) -> None:
        spent = time.perf_counter() - since
        with self._lock:
            self.overhead += spent

    def first_calls(self) -> dict[str, Call]:
        """Each observed step's first call."""
        first: dict[str, Call] = {}
        for call in self.calls:
            first.setdefault(call.step, call)
        return first

    def _violate(self, violation: OrderViolation) -> None:
        with self._lock:
            self.violations.append(violation)

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
            f"{self.label} called {late} but {early} {how}: the plan orders {first} before "
            f"{second} ({reasons})",
            step=late, edges=chain,
            hint=f"{self.label}'s start-up no longer matches the profile: see 'initorch "
                 f"explain {first} {second}' and 'initorch {self.engine.command} drift'")

    def _bound_elsewhere(self) -> str:
        return ", ".join(f"{name} ({device})" for name, device in self.bound.values()) \
            or "no thread"

    def _thread_violation(self, call: Call) -> OrderViolation | None:
        if not self.per_thread or not self.plan.step(call.step).step.device_bound:
            return None
        if not self.bound or call.thread_id in self.bound:
            return None
        return OrderViolation(
            f"{self.label} called {call.step} on thread {call.thread!r}, where set_device "
            f"never ran (it ran on {self._bound_elsewhere()}): device context is per host "
            "thread",
            step=call.step,
            hint="call set_device on the thread that runs device-bound work, before it")

    def _unbound_vendor_call(self, record: VendorRecord) -> OrderViolation | None:
        if not self.per_thread or record.device is not None:
            return None
        protocols = record.call.protocols
        if protocols is not None and \
                self.plan.config().get("device.mooncake_protocol") not in protocols:
            return None  # this transport never asks the thread for its device
        kind = "daemon thread" if record.daemon else "thread"
        started = f", started in {record.site.thread_entry}" if record.site.thread_entry else ""
        fix = f" ({self.thread_fix})" if self.thread_fix else ""
        return OrderViolation(
            f"{self.label} called {record.call.label} on {kind} {record.thread!r}{started}, "
            f"where set_device never ran (it ran on {self._bound_elsewhere()}); the call is "
            f"made at {record.site.where()}. Device context is per host thread, so the "
            f"vendor call fails there: {record.call.why}",
            step=record.step,
            hint=f"set the device on that thread before {record.call.label}{fix}, and report it "
                 "upstream with this line")
