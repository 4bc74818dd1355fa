"""What a running step sees: its rank, the plan's settings, earlier outputs.

Steps share results through the run context, not globals: the transfer engine
created by one step is ``ctx.output("init_shared_mooncake_transfer_engine")``
for the step that registers memory with it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from initorch.errors import StepDefinitionError, StepError
from initorch.execution.launchers import RankInfo
from initorch.model.devices import DeviceRef
from initorch.model.settings import CORE_KEYS
from initorch.model.step import Step
from initorch.records import record
from initorch.resolution.plan import Plan

__all__ = ["DeviceBinding", "Job", "RankInfo", "RunState", "RunStepContext"]

DeviceBinding = Callable[[], None]
"""What a ``binds_device`` step returns: applies this rank's device context on
the calling thread.  Executors call it before every ``device_bound`` step."""


class Job(Protocol):
    """This rank's membership of its job, as the run's state meets it (a run's is a
    :class:`~initorch.execution.membership.JobMembership`).

    The state tells it every step's output as the step returns, before recording it
    (the output of the step that joins the job's store joins the job; what this raises
    fails that step), asks it to hold barrier steps, and asks it which peers are gone
    for a step's context.
    """

    def recorded(self, step: str, output: Any) -> None: ...

    def barrier(self, step: str) -> bool:
        """Return once every rank reached ``step``; ``False`` when in no job."""

    def gone(self, ranks: Iterable[int]) -> dict[int, str]: ...


class RunState:
    """State shared by all steps of one run; thread-safe.

    ``job``, if given, is this rank's membership of the job (:class:`Job`): told every
    step's output, and asked at barriers and for the peers that are gone.  A state
    without one is a rank in no job.
    """

    def __init__(self, plan: Plan, rank: RankInfo, job: Job | None = None) -> None:
        self.plan = plan
        self.rank = rank
        self.job = job
        self._outputs: dict[str, Any] = {}
        self._binding: DeviceBinding | None = None
        self._ordered: dict[tuple[str, str], bool] = {}
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def record_output(self, step: str, value: Any, *, binds_device: bool) -> None:
        if binds_device:
            if not callable(value):
                raise TypeError(f"step '{step}' binds the device but returned {value!r}, "
                                "not a callable that binds it on the calling thread")
            self._binding = value
        if self.job is not None:
            self.job.recorded(step, value)
        with self._lock:
            self._outputs[step] = value

    def wait_for_peers(self, step: str) -> None:
        """Hold ``step`` (declared with ``barrier``) until every rank reached it."""
        held = self.job is not None and self.job.barrier(step)
        if not held and self.rank.world_size > 1:
            raise StepError(f"step '{step}' waits for every rank (barrier), but this rank has "
                            "not joined the job's store yet",
                            hint="order the step after the step that joins the job "
                                 "(rendezvous)")

    def output(self, step: str) -> Any:
        with self._lock:
            if step not in self._outputs:
                raise LookupError(f"step '{step}' has no output: it has not completed in this run")
            return self._outputs[step]

    def has_output(self, step: str) -> bool:
        with self._lock:
            return step in self._outputs

    def first_time(self, key: str) -> bool:
        """True the first time ``key`` is asked about in this run, then False."""
        with self._lock:
            if key in self._said:
                return False
            self._said.add(key)
            return True

    def ordered_before(self, first: str, second: str) -> bool:
        """Whether the plan runs ``first`` before ``second`` by a chain of edges (the
        only order both executors keep), remembered per pair."""
        key = (first, second)
        found = self._ordered.get(key)
        if found is None:
            found = self._ordered[key] = self.plan.graph.path(first, second) is not None
        return found

    def outputs(self) -> dict[str, Any]:
        """A copy of every output recorded so far, by step name."""
        with self._lock:
            return dict(self._outputs)

    def forget(self, step: str) -> Any:
        """Drop and return a step's output, so teardown releases the last reference."""
        with self._lock:
            return self._outputs.pop(step, None)

    def bind_device(self) -> None:
        """Apply the device context on the calling thread (before a device_bound step)."""
        binding = self._binding
        if binding is None:
            # Resolution orders every device_bound step after the binder, so this is
            # reachable only by running steps outside an executor.
            raise RuntimeError("no device binding yet: the binds_device step has not run")
        binding()

    @property
    def has_binding(self) -> bool:
        return self._binding is not None


@record
class RunStepContext:
    """The view of a run that one step gets: implements
    :class:`initorch.model.contexts.StepContext`."""

    state: RunState
    step: str
    log: Any

    @property
    def plan(self) -> Plan:
        return self.state.plan

    @property
    def device(self) -> DeviceRef:
        return self.state.plan.device

    @property
    def rank(self) -> RankInfo:
        return self.state.rank

    @property
    def declared(self) -> Step:
        return self.state.plan.step(self.step).step

    def setting(self, key: str) -> Any:
        """A setting by dotted key (``hicache.layout``, ``device.collective_backend``).

        Only settings the step declares (``@step(settings=...)``) and the core
        ``device.type``/``device.aliases`` may be read: what a step reads is then
        exactly what validation, ``--set``, the schema and ``initorch settings``
        know about.  Anything else raises :class:`StepDefinitionError`.
        """
        planned = self.declared
        if key not in CORE_KEYS and all(spec.key != key for spec in planned.settings):
            declared = ", ".join(spec.key for spec in planned.settings) or "none"
            raise StepDefinitionError(
                f"step '{self.step}' reads setting '{key}' but does not declare it "
                f"(declared: {declared})", location=planned.defined_at,
                hint="add setting(...) for it to the step's @step(settings=...)")
        return self.state.plan.settings[key].value

    def implementation(self, key: str) -> Any:
        """What the value of ``key`` names, for a setting declared with a table of
        choices (``setting(key, str, choices={name: implementation})``): the host
        allocator ``device.host_allocator`` names, say.  The value was checked against
        the table at plan time, plugins' additions included, so a run never meets a
        name without an implementation.  The same declared-read rule as
        :meth:`setting` applies."""
        value = self.setting(key)
        try:
            return self.state.plan.implementations[key]
        except KeyError:
            raise StepDefinitionError(
                f"step '{self.step}' asks what setting '{key}' names, but '{key}' is not "
                f"declared with a table of choices (its value is {value!r})",
                location=self.state.plan.step(self.step).step.defined_at,
                hint="declare it with setting(..., choices={name: implementation})"
            ) from None

    def output(self, step: str) -> Any:
        """The output of a completed step this one depends on.

        A planned step that the plan does not order before this one is refused even
        when it happens to have completed: the sequential executor would run them in
        listing order by luck, and the parallel one would not."""
        plan = self.state.plan
        if step in plan and self.step in plan and not self.state.ordered_before(step, self.step):
            raise StepDefinitionError(
                f"step '{self.step}' reads the output of '{step}', which the plan does not "
                "order before it", location=plan.step(self.step).step.defined_at,
                hint=f"declare @step(requires=['{step}'], reads=['{step}']) so that the plan "
                     "orders and checks it")
        return self.state.output(step)

    def has_output(self, step: str) -> bool:
        return self.state.has_output(step)

    def first_time(self, key: str) -> bool:
        """True only the first time any step of this run asks about ``key``: for a
        warning that several steps could give, said once per run."""
        return self.state.first_time(key)

    def peers_gone(self, ranks: Iterable[int]) -> dict[int, str]:
        """Those of ``ranks`` known to be gone from the job (they left it, or their
        heartbeat stopped), each with what this rank saw; ``{}`` before the job is
        joined or after it is left.  A teardown that waits for other ranks stops
        waiting for these: they will never answer."""
        job = self.state.job
        return {} if job is None else job.gone(ranks)
