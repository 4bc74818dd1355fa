"""The embedding entry points: ``load_plan`` (requested steps, the unplanned-step warning,
the ``auto`` profile) and ``start``, the context manager for a server start."""

from __future__ import annotations

import json
import signal
import warnings
from pathlib import Path

import pytest

from initorch import (
    InitorchError,
    LaunchArguments,
    RankInfo,
    Registry,
    StepFailedError,
    detect_device,
    load_plan,
    start,
)
from initorch.errors import EXIT_INVALID_INPUT, UnplannedStepWarning
from tests.support.commands import run_python
from tests.support.profiles import write
from tests.support.runs import TeardownLog, with_teardown
from tests.support.synthetic import define


def quietly_planned(*args, **kwargs):
    """load_plan, failing the test if it warns about anything."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return load_plan(*args, **kwargs)


# --- the unplanned-step warning -------------------------------------------------------------

def test_a_step_registered_in_code_and_pulled_in_by_nothing_is_warned_about(registry):
    """The issue: registry.steps.add(load_model) then load_plan(["cpu"]) left it out
    in silence, and run.output("load_model") later said it had not completed."""
    registry.steps.add(define("load_model", requires=["set_device"]))
    with pytest.warns(UnplannedStepWarning) as caught:
        plan = load_plan(["cpu"], registry=registry)
    assert "load_model" not in plan.order
    [warning] = caught.list
    assert warning.filename == __file__  # points at the caller
    message = warning.message
    assert isinstance(message, UnplannedStepWarning)
    assert (message.step, message.plugin) == ("load_model", None)
    assert str(message).startswith("step 'load_model' (registered by code) is not in the plan")
    assert "load_plan(steps=[...])" in str(message) and "wanted_by" in str(message)


def test_no_warning_for_the_builtins_or_for_steps_something_pulls_in(registry, tmp_path):
    quietly_planned(["npu"], registry=registry)
    quietly_planned(["mps"], registry=registry)  # skipped steps are considered
    registry.steps.add(define("warm", wanted_by=["absent_target"]))
    registry.steps.add(define("needed"))
    registry.steps.add(define("needer", requires=["needed"]))
    write(tmp_path / "more", "listing.yaml", "extends: cpu\nsteps:\n  needer: {}\n")
    registry.profiles.add_directory(tmp_path / "more", plugin="test")
    quietly_planned(["cpu"], registry=registry)  # listed by a profile, or wanted_by
    plan = quietly_planned(["cpu"], steps=["needer"], registry=registry)
    assert {"needer", "needed"} <= set(plan.order)


def test_a_plugin_step_nothing_pulls_in_is_named_with_its_plugin(registry):
    registry.load_plugin("vendor", lambda reg: reg.steps.add(define("orphan")))
    with pytest.warns(UnplannedStepWarning, match=r"step 'orphan' \(registered by plugin "
                                                  r"'vendor'\)"):
        load_plan(["cpu"], registry=registry)


def test_the_cli_prints_the_warning_as_one_line(run_cli, tmp_path, monkeypatch):
    write(tmp_path, "orphan_steps.py", """
        from initorch.plugin import step

        @step("orphan", description="a step nothing pulls in")
        def orphan(ctx):
            return None

        def register(registry):
            registry.steps.add(orphan)
        """)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = run_cli("plan", "-p", "cpu", "--plugin", "orphan_steps")
    assert code == 0 and out.startswith("profiles: base -> cpu")
    assert err == ("initorch: warning: step 'orphan' (registered by plugin 'orphan_steps') is "
                   "not in the plan: no profile lists it, no step requires or wants it, and it "
                   "declares no wanted_by (list it in a profile, pass load_plan(steps=[...]), "
                   "or declare @step(wanted_by=...))\n")


# --- the profile 'auto': this machine's device profile ------------------------------------------

def test_auto_and_no_profile_at_all_are_this_machines_device_profile(monkeypatch):
    monkeypatch.delenv("INITORCH_PROFILE", raising=False)
    chosen = detect_device().chosen
    for plan in (load_plan(["auto"]), load_plan()):
        assert plan.device.type == chosen
        assert plan.profiles[-1] == chosen
    monkeypatch.setenv("INITORCH_PROFILE", "npu, npu-hccl")
    assert load_plan().profiles == ("base", "npu", "npu-hccl")


def test_auto_without_any_fitting_probe_is_a_clear_error(tmp_path):
    registry, _ = synthetic(tmp_path, define("engine"))  # no plugin: no probes at all
    for call in (lambda: load_plan(["auto"], registry=registry),
                 lambda: start(profile="auto", registry=registry).__enter__()):
        with pytest.raises(InitorchError) as caught:
            call()
        assert str(caught.value) == ("profile 'auto': no device probe fits this machine "
                                     "(see 'initorch detect', or name a profile)")
        assert caught.value.exit_code == EXIT_INVALID_INPUT


# --- start(): resolve, run, yield, tear down ---------------------------------------------------

def synthetic(tmp_path: Path, *definitions) -> tuple[Registry, str]:
    registry = Registry()
    for definition in definitions:
        registry.steps.add(definition)
    listed = "\n".join(f"  {d.fields['name']}: {{}}" for d in definitions)
    profile = write(tmp_path, "server.yaml", f"device: {{type: cpu}}\nsteps:\n{listed}\n")
    return registry, str(profile)


def test_start_yields_the_outputs_and_tears_down_on_exit(tmp_path):
    teardowns = TeardownLog()
    registry, profile = synthetic(
        tmp_path,
        with_teardown(define("engine", lambda ctx: "engine-handle"), teardowns),
        with_teardown(define("pool", lambda ctx: ctx.output("engine") + "+pool",
                             requires=["engine"]), teardowns))
    registry.steps.add(define("model", lambda ctx: f"model on {ctx.output('pool')}",
                              wanted_by=["pool"], requires=["pool"]))
    with start(profile=profile, registry=registry) as started:
        assert dict(started.outputs) == {"engine": "engine-handle", "pool": "engine-handle+pool",
                                         "model": "model on engine-handle+pool"}
        with pytest.raises(TypeError):
            started.outputs["engine"] = "replaced"  # type: ignore[index]
        assert teardowns.order == []
    assert teardowns.order == ["pool", "engine"]
    assert dict(started.outputs) == {}


def test_start_takes_the_job_from_its_launch_arguments(tmp_path):
    registry, profile = synthetic(tmp_path, define("engine", lambda ctx: ctx.rank))
    with start(profile=profile, registry=registry,
               launch=LaunchArguments("127.0.0.1:5000")) as started:
        assert started.outputs["engine"] == RankInfo(local_world_size=1,
                                                     rendezvous="127.0.0.1:5000",
                                                     launcher="args")


def test_start_tears_down_when_the_body_raises(tmp_path):
    teardowns = TeardownLog()
    registry, profile = synthetic(tmp_path, with_teardown(define("engine"), teardowns))
    with pytest.raises(KeyError, match="serving failed"), \
            start(profile=[profile], registry=registry):
        raise KeyError("serving failed")
    assert teardowns.order == ["engine"]


def test_start_raises_step_failed_with_the_cause_after_teardown(tmp_path):
    teardowns = TeardownLog()

    def load(ctx):
        raise FileNotFoundError("weights.safetensors")

    registry, profile = synthetic(tmp_path, with_teardown(define("engine"), teardowns),
                                  define("load", load, requires=["engine"]))
    with pytest.raises(StepFailedError) as caught, start(profile=profile, registry=registry):
        pytest.fail("the body must not run when start-up failed")
    assert caught.value.step == "load"
    assert isinstance(caught.value.__cause__, FileNotFoundError)
    assert teardowns.order == ["engine"]


@pytest.mark.e2e
def test_start_brings_the_real_cpu_stack_up_and_down():
    """The real stack in a fresh interpreter: engine, process group and registered pool are
    yielded, then torn down (the process group is destroyed, the engine closed)."""
    result = run_python("""
        import json
        import torch.distributed as dist
        import initorch
        from initorch.plugin import StepContext, step

        @step("load_model", description="stands for loading weights",
              wanted_by=["register_mem_pool_host"],
              requires=["register_mem_pool_host", "init_torch_distributed"])
        def load_model(ctx: StepContext) -> int:
            return ctx.output("register_mem_pool_host").pool.nbytes

        registry = initorch.Registry.with_plugins()
        registry.steps.add(load_model)
        with initorch.start(profile="cpu", settings={"hicache.host_pool_mb": 16},
                            registry=registry) as started:
            outputs = started.outputs
            up = {"group": dist.is_initialized(), "steps": list(outputs),
                  "engine": type(outputs["init_shared_mooncake_transfer_engine"]).__name__,
                  "model": outputs["load_model"]}
        up["group_after"] = dist.is_initialized()
        up["torn_down"] = [t.step for t in started.report.teardown]
        print(json.dumps(up))
        """, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    up = json.loads(result.stdout.splitlines()[-1])
    assert up["group"] is True and up["group_after"] is False
    assert up["model"] == 16 << 20
    assert up["engine"] == "SharedTransferEngine"
    assert up["steps"][-1] == "load_model"
    assert {"init_torch_distributed", "register_mem_pool_host",
            "init_shared_mooncake_transfer_engine"} <= set(up["torn_down"])


SERVING = """
import time
from initorch import Registry, RunInterrupted, start

registry = Registry()
engine = define("engine", lambda ctx: "engine-handle")
engine.teardown(lambda ctx, output: print(f"teardown {{output}}", flush=True))
registry.steps.add(engine)
try:
    with start(profile={profile!r}, registry=registry, handle_signals=True) as started:
        print("SERVING", flush=True)
        while True:
            time.sleep(0.05)
except KeyboardInterrupt as stop:  # Ctrl-C, as a server catches it anywhere else
    print(f"KeyboardInterrupt {{type(stop).__name__}} {{isinstance(stop, RunInterrupted)}}",
          flush=True)
    sys.exit(stop.exit_code)
except RunInterrupted as stop:
    print(f"RunInterrupted {{stop}}", flush=True)
    sys.exit(stop.exit_code)
"""


@pytest.mark.parametrize(("signum", "caught"), [
    (signal.SIGINT, "KeyboardInterrupt InterruptedBySigint True"),
    (signal.SIGTERM, "RunInterrupted interrupted by SIGTERM"),
], ids=["SIGINT", "SIGTERM"])
def test_a_signal_while_serving_tears_down_then_sigint_is_a_keyboard_interrupt(
        tmp_path, signum, caught):
    from tests.support.runs import finish, spawn_python

    _, profile = synthetic(tmp_path, define("engine"))
    proc = spawn_python(SERVING.format(profile=profile))
    assert proc.stdout is not None
    assert proc.stdout.readline() == "SERVING\n"
    proc.send_signal(signum)
    done = finish(proc)
    assert done.stdout.splitlines() == ["teardown engine-handle", caught], done.stderr
    assert done.returncode == 128 + signum
    assert "Traceback" not in done.stderr
