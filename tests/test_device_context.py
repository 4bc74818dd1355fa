"""Device context is per thread: no device_bound step may ever run without it.

The simulated Ascend runtime keeps the current device in a ``threading.local``
and fails ``get_device()`` with ``Call aclrtGetDevice failed, ret: 107002`` on a
thread where ``set_device`` never ran, exactly like the ACL call that Mooncake's
ascend transport makes during engine initialisation.  Each test uses its own
runtime instance, so no state leaks between tests or threads of other tests.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch import RankInfo
from initorch.execution.run import Run
from initorch.plugin import StepContext
from tests.conftest import define
from tests.helpers_run import DIAGNOSES, EXECUTORS, WAIT, Dag, dags, load_acl, plan_of

acl = load_acl()

VISIBLE = {"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}
RANK = RankInfo(rank=2, local_rank=2, world_size=4)


class Npu:
    """One simulated Ascend runtime plus the steps a start-up needs around it."""

    def __init__(self, local_index: int = RANK.local_rank) -> None:
        self.runtime = acl.SimulatedAclRuntime(environ=VISIBLE)
        self.index = local_index
        self.seen: dict[str, tuple[int, int]] = {}  # step -> (thread id, device)
        self._lock = threading.Lock()

    def set_device(self, ctx: StepContext) -> Any:
        """The binder: sets the device here and returns a binding for other threads."""
        index = ctx.rank.local_rank

        def bind() -> None:
            self.runtime.set_device(index)

        bind()
        return bind

    def engine_init(self, ctx: StepContext) -> str:
        """Like Mooncake's ascend transport: needs the device context on this thread."""
        device = self.runtime.get_device()
        with self._lock:
            self.seen[ctx.step] = (threading.get_ident(), device)
        return f"engine on npu_{self.runtime.physical_id(device)}"

    def binder(self) -> Any:
        return define("set_device", self.set_device, binds_device=True)

    def bound_by_thread(self) -> dict[int, int]:
        return self.runtime.devices_by_thread()


def engine_plan(npu: Npu, **engine_fields: Any):
    return plan_of([npu.binder(),
                    define("engine_init", npu.engine_init, device_bound=True, **engine_fields)])


RUNS = [
    pytest.param("sequential", {}, id="sequential"),
    pytest.param("parallel", {}, id="parallel"),
    pytest.param("sequential", {"timeout": WAIT}, id="sequential-timeout"),
    pytest.param("parallel", {"timeout": WAIT}, id="parallel-timeout"),
]


@pytest.mark.parametrize(("executor", "fields"), RUNS)
def test_engine_init_sees_the_device_context_on_whatever_thread_runs_it(executor, fields):
    npu = Npu()
    run = Run(engine_plan(npu, **fields), executor=executor, workers=3, rank=RANK,
              diagnoses=DIAGNOSES)
    report = run.start()
    assert report.ok, [o.error for o in report.failed]
    thread, device = npu.seen["engine_init"]
    assert device == RANK.local_rank
    assert npu.bound_by_thread()[thread] == RANK.local_rank  # bound on the thread that ran it
    assert run.output("engine_init") == "engine on npu_6"


def test_a_timeout_runs_the_step_on_a_helper_thread_that_is_bound_too():
    npu = Npu()
    Run(engine_plan(npu, timeout=WAIT), rank=RANK, diagnoses=DIAGNOSES).start()
    thread, _ = npu.seen["engine_init"]
    assert thread != threading.get_ident()
    assert [r.thread_name for r in npu.runtime.set_device_log()
            if r.thread_id == thread] == ["initorch-engine_init"]


def test_parallel_engine_init_runs_on_a_worker_thread_and_is_bound_there():
    npu = Npu()
    Run(engine_plan(npu), executor="parallel", workers=2, rank=RANK, diagnoses=DIAGNOSES).start()
    thread, _ = npu.seen["engine_init"]
    assert thread != threading.get_ident()
    worker_names = {r.thread_name for r in npu.runtime.set_device_log() if r.thread_id == thread}
    assert worker_names and all(n.startswith("initorch-worker") for n in worker_names)


def test_the_same_action_on_a_fresh_thread_fails_with_107002():
    # The old bug: engine init on a thread where set_device never ran.
    npu = Npu()
    npu.runtime.set_device(RANK.local_rank)  # bound here, on the test's thread only
    errors: list[BaseException] = []

    def engine_on_helper() -> None:
        try:
            npu.runtime.get_device()
        except Exception as exc:
            errors.append(exc)

    helper = threading.Thread(target=engine_on_helper)
    helper.start()
    helper.join(WAIT)
    [error] = errors
    assert isinstance(error, acl.SimulatedAclError)
    assert error.code == acl.ACL_ERROR_RT_CONTEXT_NULL == 107002
    assert str(error) == "Call aclrtGetDevice failed, ret: 107002"


def test_without_device_bound_a_timeout_reproduces_the_ascend_failure(registry):
    # Negative control: the same engine step, not declared device_bound, on the
    # timeout helper thread fails exactly like the field report, and is diagnosed.
    npu = Npu()
    plan = plan_of([npu.binder(),
                    define("engine_init", npu.engine_init, after=["set_device"], timeout=WAIT)])
    report = Run(plan, rank=RANK, diagnoses=registry.diagnoses).start()
    [failed] = report.failed
    assert failed.name == "engine_init"
    assert str(failed.error) == "Call aclrtGetDevice failed, ret: 107002"
    assert failed.finding is not None
    assert failed.finding.diagnosis.id == "ascend-context-null"
    assert failed.finding.vendor_code == "107002"


@pytest.mark.parametrize("executor", EXECUTORS)
def test_the_calling_thread_is_left_on_the_ranks_device(executor):
    npu = Npu()
    assert npu.runtime.thread_device() is None
    Run(engine_plan(npu), executor=executor, workers=2, rank=RANK, diagnoses=DIAGNOSES).start()
    assert npu.runtime.get_device() == RANK.local_rank


def test_teardown_of_a_device_bound_step_runs_with_the_context_on_any_thread():
    npu = Npu()
    released: list[int] = []
    engine = define("engine_init", npu.engine_init, device_bound=True)
    engine.teardown(lambda ctx, output: released.append(npu.runtime.get_device()))
    run = Run(plan_of([npu.binder(), engine]), rank=RANK, diagnoses=DIAGNOSES)
    run.start()
    closer = threading.Thread(target=run.teardown)  # e.g. a server's shutdown thread
    closer.start()
    closer.join(WAIT)
    assert released == [RANK.local_rank]
    assert [(t.step, t.status, t.thread) for t in run.report.teardown] == [
        ("engine_init", "succeeded", closer.name)]


@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_failed_binder_skips_every_device_bound_step(executor):
    npu = Npu()

    def broken(ctx):
        npu.runtime.set_device(99)  # out of range: ACL 107001

    plan = plan_of([define("set_device", broken, binds_device=True),
                    define("engine_init", npu.engine_init, device_bound=True)])
    report = Run(plan, executor=executor, rank=RANK, diagnoses=DIAGNOSES).start()
    assert report.outcomes["set_device"].status == "failed"
    assert report.outcomes["engine_init"].status == "skipped"
    assert report.outcomes["engine_init"].reason == "upstream failed: set_device"
    assert npu.seen == {}


def test_a_binder_that_returns_no_binding_fails_clearly():
    npu = Npu()
    plan = plan_of([define("set_device", lambda ctx: None, binds_device=True),
                    define("engine_init", npu.engine_init, device_bound=True)])
    report = Run(plan, rank=RANK, diagnoses=DIAGNOSES).start()
    error = report.outcomes["set_device"].error
    assert isinstance(error, TypeError)
    assert "binds the device but returned None" in str(error)
    assert report.outcomes["engine_init"].status == "skipped"


def context_dropping(npu: Npu):
    """An unbound step that drops the thread's context (like aclrtResetDevice in a
    library), so a later device_bound step on a reused worker thread would fail."""

    def act(ctx: StepContext) -> None:
        npu.runtime.reset_thread()

    return act


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag=dags(max_steps=6), data=st.data())
def test_no_device_bound_step_ever_sees_a_missing_context(dag: Dag, data):
    local_index = data.draw(st.integers(0, 3), label="local_rank")
    bound = data.draw(st.lists(st.booleans(), min_size=dag.n, max_size=dag.n), label="bound")
    timed = data.draw(st.lists(st.booleans(), min_size=dag.n, max_size=dag.n), label="timed")
    executor = data.draw(st.sampled_from(EXECUTORS), label="executor")
    workers = data.draw(st.integers(1, 4), label="workers")
    npu = Npu(local_index)
    index = dict(zip(dag.names, range(dag.n), strict=True))

    def action_for(name: str):
        return npu.engine_init if bound[index[name]] else context_dropping(npu)

    steps = dag.definitions(action_for,
                            device_bound=lambda name: bound[index[name]],
                            timeout=lambda name: WAIT if timed[index[name]] else None)
    rank = RankInfo(rank=local_index, local_rank=local_index, world_size=4)
    run = Run(plan_of([npu.binder(), *steps]), executor=executor, workers=workers,
              rank=rank, diagnoses=DIAGNOSES)
    report = run.start()
    run.teardown()  # a worker still returning would hold the run for the next example
    assert report.ok, [(o.name, o.error) for o in report.failed]
    expected = {name for name in dag.names if bound[index[name]]}
    assert set(npu.seen) == expected
    assert {device for _, device in npu.seen.values()} <= {local_index}
