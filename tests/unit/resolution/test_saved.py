"""initorch.resolution.saved: a saved plan runs exactly as it was resolved, or not at all."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from initorch import Registry, load_plan, load_saved_plan
from initorch.errors import SavedPlanError
from initorch.execution.run import Run
from initorch.reporting.render import plan_text
from initorch.resolution.plan import Plan
from initorch.resolution.saved import FORMAT_VERSION, plan_json, save_plan, saved_form
from tests.support.commands import initorch_command, run_python
from tests.support.profiles import assert_single_error_line, write
from tests.support.runs import DIAGNOSES, EXECUTORS, Recorder, restored_initorch_logger
from tests.support.synthetic import FLAG, FLAGS_ENABLED, define

ENGINE = "init_shared_mooncake_transfer_engine"
SYNTHETIC = """
device: {type: cpu}
config:
  flags: {enabled: false}
steps:
  a: {}
  b: {timeout: 30}
  c: {after: [a]}
  gated: {}
"""


def synthetic_registry(recorder: Recorder | None = None, **changed: object) -> Registry:
    """Steps a <- b <- c (requires) plus a gated step; ``changed`` alters b's declaration."""
    recorder = recorder or Recorder()
    registry = Registry()
    registry.steps.add(define("a", recorder.action("a")))
    registry.steps.add(define("b", recorder.action("b"), **{"requires": ["a"], **changed}))
    registry.steps.add(define("c", recorder.action("c"), requires=["b"]))
    registry.steps.add(define("gated", recorder.action("gated"), when="flags.enabled",
                              settings=[FLAGS_ENABLED]))
    return registry


def saved_synthetic(tmp_path: Path, registry: Registry) -> tuple[Plan, Path]:
    profile = write(tmp_path, "synthetic.yaml", SYNTHETIC)
    plan = load_plan([str(profile)], registry=registry)
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    return plan, path


def edit(path: Path, change) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def refusal(path: Path, registry: Registry, *fragments: str) -> SavedPlanError:
    with pytest.raises(SavedPlanError) as caught:
        load_saved_plan(path, registry)
    error = caught.value
    assert error.exit_code == 2
    text = "\n".join([str(error), *(str(p) for p in error.problems)])
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in {text}"
    return error


# --- what a saved plan holds --------------------------------------------------------------

def test_a_saved_plan_comes_back_as_the_same_plan(tmp_path):
    registry = Registry.with_plugins()
    plan = load_plan(["cuda", "mooncake-ep"], device="cuda:3",
                     settings={"hicache.host_pool_mb": 96}, registry=registry)
    save_plan(plan, tmp_path / "plan.json")
    loaded = load_saved_plan(tmp_path / "plan.json", registry)

    assert loaded.fingerprint == plan.fingerprint
    assert (loaded.order, loaded.waves, loaded.profiles, loaded.device) == (
        plan.order, plan.waves, plan.profiles, plan.device)
    for before, after in zip(plan.steps, loaded.steps, strict=True):
        assert after.step == before.step  # effective fields, action, teardown, retry_on
        assert after.step.action is before.step.action
        assert after.declared is registry.steps.get(after.name)
        assert after.wave == before.wave
        assert len(after.reasons) == len(before.reasons)
    assert [(s.name, s.reason.split(" (")[0]) for s in loaded.skipped] == [
        (s.name, s.reason.split(" (")[0]) for s in plan.skipped]
    assert {k: s.value for k, s in loaded.settings.items()} == plan.config()
    assert {k: (s.source, s.location.line) for k, s in loaded.settings.items()} == {
        k: (s.source, s.location.line) for k, s in plan.settings.items()}
    assert [(e.source, e.target, e.kind, e.declared_by, e.declared_at.line)
            for e in loaded.graph.edges()] == [
        (e.source, e.target, e.kind, e.declared_by, e.declared_at.line)
        for e in plan.graph.edges()]
    # explain works from the saved edges, with where each was declared
    [edge] = loaded.explain("set_mooncake_pg_engine", "init_torch_distributed")
    assert edge.kind == "requires" and edge.declared_at.path.endswith("mooncake-ep.yaml")


def test_the_file_holds_the_plan_json_plus_origins_edges_and_a_header(tmp_path):
    plan = load_plan(["cpu"])
    save_plan(plan, tmp_path / "plan.json")
    data = json.loads((tmp_path / "plan.json").read_text(encoding="utf-8"))
    assert (data["format"], data["format_version"]) == ("initorch-plan", FORMAT_VERSION)
    assert data["initorch_version"]
    assert data["checksum"].startswith("sha256:")
    shown = plan_json(plan)
    assert set(shown) < set(data)
    assert {key: data[key] for key in ("order", "waves", "settings", "fingerprint")} == {
        key: shown[key] for key in ("order", "waves", "settings", "fingerprint")}
    step = data["steps"][0]
    assert {"name", "wave", "why", "requires", "timeout", "declared"} <= set(step)
    assert step["declared"]["action"] == "initorch.steps.mooncake_master:launch_mooncake_master"
    assert {"from", "to", "kind", "declared_at", "declared_by", "reason"} == set(
        data["edges"][0])
    assert data["env"] == {"MC_FORCE_TCP": "1"}
    assert data["env_sources"]["MC_FORCE_TCP"]["source"] == "cpu"
    assert set(data["setting_sources"]["hicache.layout"]) == {
        "source", "location", "key_location", "is_default"}
    origin = data["setting_origins"]["checks.verify_transfer"]  # a default, from a step
    assert origin.startswith("default (declared by step verify_transfer at /")


def test_a_saved_plan_keeps_edge_reasons_and_the_environment(tmp_path):
    # What a profile says about its edges and environment survives save and load:
    # explain quotes the same reason, a run sets the same variables.
    plan = load_plan(["npu", "npu-hccl"], device="npu:1")
    save_plan(plan, tmp_path / "plan.json")
    loaded = load_saved_plan(tmp_path / "plan.json")
    assert loaded.fingerprint == plan.fingerprint
    assert [(e.source, e.target, e.kind, e.reason) for e in loaded.graph.edges()] == [
        (e.source, e.target, e.kind, e.reason) for e in plan.graph.edges()]
    [edge] = loaded.explain(ENGINE, "init_torch_distributed")
    assert edge.reason and "SGLang 0.5" in edge.reason
    assert edge.reason in edge.describe()
    assert {name: (entry.value, entry.source, entry.location.line)
            for name, entry in loaded.env.items()} == {
        name: (entry.value, entry.source, entry.location.line)
        for name, entry in plan.env.items()}
    assert loaded.env["ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE"].value == "1"
    assert os.path.isabs(loaded.env["ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE"].location.path)
    shown = plan_text(loaded).split("environment")[1]
    assert shown.count("ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE=1") == 1


def test_an_edited_environment_in_a_saved_plan_fails_the_fingerprint(tmp_path):
    save_plan(load_plan(["cpu"]), tmp_path / "plan.json")

    def forge(data):
        data["env"]["MC_FORCE_TCP"] = "0"
        data["checksum"] = saved_form.__globals__["_checksum"](data)

    edit(tmp_path / "plan.json", forge)
    refusal(tmp_path / "plan.json", Registry.with_plugins(), "fingerprint", "does not match")


def test_paths_in_a_saved_plan_are_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "mine.yaml", """
        extends: cpu
        config:
          hicache:
            host_pool_mb: 8
        steps:
          verify_transfer: {enabled: false, reason: not here}
        """)
    plan = load_plan(["mine.yaml"])
    mine = os.path.join(".", "mine.yaml")
    assert plan.settings["hicache.host_pool_mb"].location.path == mine
    assert f"disabled by profile mine ({mine}:6:30)" in plan.skipped[0].reason
    save_plan(plan, "plan.json")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = load_saved_plan(tmp_path / "plan.json")
    origin = loaded.settings["hicache.host_pool_mb"].location
    assert (origin.path, origin.line) == (str(tmp_path / "mine.yaml"), 4)
    assert f"disabled by profile mine ({tmp_path / 'mine.yaml'}:6:30)" in loaded.skipped[0].reason
    texts = [why for p in loaded.steps for why in p.reasons] + [s.reason for s in loaded.skipped]
    assert not [text for text in texts if f"{os.curdir}{os.sep}" in text]


def test_saving_replaces_the_file_whole(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("old", encoding="utf-8")
    save_plan(load_plan(["cpu"]), path)
    assert json.loads(path.read_text(encoding="utf-8"))["format"] == "initorch-plan"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # no temporary left


# --- running it ------------------------------------------------------------------------------

@pytest.mark.parametrize("executor", EXECUTORS)
def test_a_saved_plan_runs_in_its_order(tmp_path, executor):
    recorder = Recorder()
    registry = synthetic_registry(recorder)
    plan, path = saved_synthetic(tmp_path, registry)
    report = Run(load_saved_plan(path, registry), executor=executor, diagnoses=DIAGNOSES).start()
    assert report.ok
    assert report.plan.fingerprint == plan.fingerprint
    assert recorder.order.index("a") < recorder.order.index("b") < recorder.order.index("c")
    assert "gated" not in recorder.order
    assert report.outcomes["gated"].status == "skipped"


def test_a_failure_in_a_saved_plan_skips_what_requires_it(tmp_path):
    def broken(ctx):
        raise RuntimeError("b is broken")

    registry = Registry()
    registry.steps.add(define("a"))
    registry.steps.add(define("b", broken, requires=["a"]))
    registry.steps.add(define("c", requires=["b"]))
    registry.steps.add(define("gated", when="flags.enabled", settings=[FLAGS_ENABLED]))
    _, path = saved_synthetic(tmp_path, registry)
    report = Run(load_saved_plan(path, registry), diagnoses=DIAGNOSES).start()
    assert report.outcomes["b"].status == "failed"
    assert report.outcomes["c"].reason == "upstream failed: b"


# --- refusals --------------------------------------------------------------------------------

def test_a_missing_file_is_refused(tmp_path):
    refusal(tmp_path / "nope.json", Registry(), "cannot read the saved plan")


@pytest.mark.parametrize("cut", [0, 1, 2])
def test_a_truncated_file_is_refused(tmp_path, cut):
    _, path = saved_synthetic(tmp_path, synthetic_registry())
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) * cut // 3], encoding="utf-8")
    refusal(path, synthetic_registry(), "truncated or corrupt")


@pytest.mark.parametrize(("content", "fragment"), [
    ("[1, 2]", "not a JSON object"),
    ('{"order": []}', "no \"format\": \"initorch-plan\""),
    ("\udcff", "not UTF-8"),
])
def test_something_else_is_refused(tmp_path, content, fragment):
    path = tmp_path / "plan.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    refusal(path, Registry(), fragment)


def test_another_format_version_is_refused_naming_both_versions(tmp_path):
    _, path = saved_synthetic(tmp_path, synthetic_registry())
    edit(path, lambda data: data.update(format_version=FORMAT_VERSION + 1,
                                        initorch_version="9.0.0"))
    error = refusal(path, synthetic_registry(), f"plan format {FORMAT_VERSION + 1}",
                    "initorch 9.0.0", f"reads plan format {FORMAT_VERSION}")
    assert "--out" in str(error)


def test_an_edited_file_is_refused(tmp_path):
    _, path = saved_synthetic(tmp_path, synthetic_registry())
    edit(path, lambda data: data["steps"][1].update(timeout=3000))
    refusal(path, synthetic_registry(), "changed after it was saved")


def test_an_edit_that_forges_the_checksum_still_fails_the_fingerprint(tmp_path):
    _, path = saved_synthetic(tmp_path, synthetic_registry())

    def forge(data):
        data["steps"][1]["timeout"] = 3000
        data["checksum"] = saved_form.__globals__["_checksum"](data)

    edit(path, forge)
    refusal(path, synthetic_registry(), "fingerprint", "does not match")


@pytest.mark.parametrize(("changed", "fragment"), [
    ({"timeout": 60}, "timeout was None, is 60"),
    ({"requires": ["a", "gated"]}, "requires was ['a'], is ['a', 'gated']"),
    ({"device_bound": True}, "device_bound was False, is True"),
    ({"retries": 1, "retry_on": (ConnectionError,)}, "builtins:ConnectionError"),
    ({"wanted_by": ["a"]}, "wanted_by was [], is ['a']"),
    ({"settings": [FLAG]}, "settings was [], is [{'key': 'flag', 'kind': 'bool'"),
])
def test_a_step_declared_differently_now_is_refused(tmp_path, changed, fragment):
    _, path = saved_synthetic(tmp_path, synthetic_registry())
    error = refusal(path, synthetic_registry(**changed), "step 'b' changed since the plan "
                    "was saved", fragment)
    assert len(error.problems) == 1


def test_a_step_with_other_code_now_is_refused(tmp_path):
    _, path = saved_synthetic(tmp_path, synthetic_registry())
    registry = Registry()
    for definition in (define("a"), define("b", requires=["a"]),
                       define("c", requires=["b"]),
                       define("gated", when="flags.enabled", settings=[FLAGS_ENABLED])):
        registry.steps.add(definition)
    error = refusal(path, registry, "action was 'tests.support.runs:Recorder.action.<locals>.act'"
                    ", is 'tests.support.synthetic:noop'")
    assert len(error.problems) == 3  # every planned step changed; each is named


def test_a_step_no_longer_registered_is_refused(tmp_path):
    _, path = saved_synthetic(tmp_path, synthetic_registry())
    registry = Registry()
    registry.steps.add(define("a"))
    refusal(path, registry, "step 'b' is not registered")


# --- the command line --------------------------------------------------------------------------

@pytest.fixture
def run_cli(run_cli):
    """``run_cli`` that leaves the ``initorch`` logger as it found it (``run`` configures
    logging on a stream that pytest closes after the test)."""

    def run(*argv, **kwargs):
        with restored_initorch_logger():
            return run_cli(*argv, **kwargs)

    return run


def test_plan_out_then_run_plan(run_cli, tmp_path):
    path = tmp_path / "plan.json"
    code, out, err = run_cli("plan", "-p", "npu", "--json", "--out", str(path))
    assert code == 0
    printed = json.loads(out)  # stdout stays one JSON document
    assert "saved the plan to" in err and "initorch run --plan" in err
    code, out, err = run_cli("run", "--plan", str(path), "--executor", "dry-run")
    assert code == 0, err
    assert f"fingerprint {printed['fingerprint'][:12]}" in out
    assert "would_run" in out


@pytest.mark.parametrize("extra", [["-p", "cpu"], ["--device", "cpu"], ["--set", "a.b=1"]])
def test_run_plan_cannot_be_changed_on_the_command_line(run_cli, tmp_path, extra):
    save_plan(load_plan(["cpu"]), tmp_path / "plan.json")
    code, _, err = run_cli("run", "--plan", str(tmp_path / "plan.json"), *extra)
    assert code == 2
    assert_single_error_line(err, "--plan runs a saved plan exactly as it is", located=False)


@pytest.mark.parametrize(("damage", "fragment"), [
    (lambda path: path.write_text(path.read_text(encoding="utf-8")[:100], encoding="utf-8"),
     "truncated or corrupt"),
    (lambda path: edit(path, lambda data: data.update(format_version=99)), "plan format 99"),
    (lambda path: edit(path, lambda data: data["settings"].update({"hicache.host_pool_mb": 1})),
     "changed after it was saved"),
])
def test_run_refuses_a_damaged_plan_in_one_line(run_cli, tmp_path, damage, fragment):
    path = tmp_path / "plan.json"
    save_plan(load_plan(["cpu"]), path)
    damage(path)
    code, out, err = run_cli("run", "--plan", str(path))
    assert (code, out) == (2, "")
    assert_single_error_line(err, fragment, "plan.json", located=False)


def test_plan_out_into_a_missing_folder_is_refused(run_cli, tmp_path):
    code, out, err = run_cli("plan", "-p", "cpu", "--out", str(tmp_path / "no" / "plan.json"))
    assert (code, out) == (2, "")
    assert_single_error_line(err, "--out", "the folder does not exist", located=False)


@pytest.mark.e2e
def test_running_a_saved_plan_imports_no_networkx_and_torch_only_when_steps_run(tmp_path):
    # The real cpu start-up without Mooncake and the host pool: torch and a gloo group.
    pytest.importorskip("torch")  # the core-only sessions (noxfile.py) have no torch
    path = tmp_path / "plan.json"
    saved = initorch_command("plan", "-p", "cpu", "--set", "mooncake.enabled=false",
                             "--set", "hicache.enabled=false", "--out", str(path))
    assert saved.returncode == 0, saved.stderr
    code = f"""
        import logging, sys
        from initorch.cli import main

        torch_at_start = {{}}

        class Probe(logging.Handler):
            def emit(self, record):
                step = getattr(record, "step", None)
                started = record.getMessage().split()[0] == "step_started"
                if started and step not in torch_at_start:
                    torch_at_start[step] = "torch" in sys.modules

        logging.getLogger("initorch").addHandler(Probe())
        code = main(["run", "--plan", {str(path)!r}])
        print("RESULT", code, torch_at_start,
              sorted(m for m in sys.modules if m.split(".")[0] == "networkx"),
              "torch" in sys.modules)
        """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == (
        "RESULT 0 {'import_backend': False, 'rendezvous': True, 'set_device': True, "
        "'init_torch_distributed': True} [] True")


def test_loading_and_walking_a_saved_plan_never_imports_networkx(tmp_path):
    path = tmp_path / "plan.json"
    save_plan(load_plan(["npu", "npu-hccl"]), path)
    code = f"""
        import sys
        import initorch
        from initorch.execution.run import Run
        plan = initorch.load_saved_plan({str(path)!r})
        diagnoses = initorch.Registry.with_plugins().diagnoses
        assert Run(plan, executor="dry-run", diagnoses=diagnoses).start().ok
        print(sorted(m for m in sys.modules if m.split(".")[0] in ("networkx", "torch")))
        """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# --- a re-signed plan can do nothing a profile cannot (issue 19) --------------------------

def resign(path: Path, registry: Registry, change) -> None:
    """Edit the file as an attacker would, then recompute its fingerprint and checksum
    (both are plain sha256 values: anyone can)."""
    from initorch.resolution import saved

    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    steps, _ = saved._planned_steps(data, registry.steps, str(path), "")
    data["fingerprint"] = saved._plan(data, steps, registry.settings).fingerprint
    data["checksum"] = saved._checksum(data)
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.fixture(scope="module")
def builtin_registry() -> Registry:
    return Registry.with_plugins()


def saved_cpu(tmp_path: Path, registry: Registry) -> Path:
    path = tmp_path / "cpu-plan.json"
    save_plan(load_plan(["cpu"], registry=registry), path)
    return path


def setting_to(key: str, value: object):
    def change(data):
        data["settings"][key] = value
    return change


def env_to(name: str, value: str):
    def change(data):
        data["env"][name] = value
        data["env_sources"][name] = {"source": "cpu", "location": {
            "path": "/p.yaml", "line": 1, "column": 1}}
    return change


def engine_before_set_device(data):
    steps, order = data["steps"], data["order"]
    first, second = order.index("set_device"), order.index(ENGINE)
    steps[first], steps[second] = steps[second], steps[first]
    order[first], order[second] = order[second], order[first]


@pytest.mark.parametrize(("change", "fragment"), [
    (setting_to("device.backend_package", "this"), "device.backend_package must be one of"),
    (setting_to("hicache.host_pool_mb", float("nan")), "hicache.host_pool_mb"),
    (setting_to("distributed.timeout_s", -5), "distributed.timeout_s must be > 0"),
    (env_to("LD_PRELOAD", "/tmp/evil.so"), "env.LD_PRELOAD would make programs load code"),
    (env_to("NCCL_NET_PLUGIN", "evil"), "env.NCCL_NET_PLUGIN would make programs load code"),
    (env_to("A=B", "1"), "'A=B' is not a valid environment variable name"),
    (env_to("MC_LOG", "1\nfingerprint: forged"), "env.MC_LOG contains a line break"),
    (engine_before_set_device, f"step '{ENGINE}' is ordered before 'set_device', which it "
                               "must follow"),
], ids=["module", "nan", "negative-timeout", "ld-preload", "nccl-plugin", "env-name",
        "env-newline", "order"])
def test_a_re_signed_plan_is_refused_what_a_profile_is_refused(tmp_path, builtin_registry,
                                                               change, fragment):
    path = saved_cpu(tmp_path, builtin_registry)
    resign(path, builtin_registry, change)
    refusal(path, builtin_registry, fragment)


def test_a_re_signed_plan_whose_edges_contradict_its_order_is_refused(tmp_path,
                                                                     builtin_registry):
    # The executors walk the edges, not the order: with the profile's engine-before-process
    # -group edge turned round, the run formed the process group first while the file
    # still showed the engine first (issue 27).
    path = saved_cpu(tmp_path, builtin_registry)

    def turn_round(data):
        (edge,) = [e for e in data["edges"] if (e["from"], e["to"]) ==
                   (ENGINE, "init_torch_distributed")]
        edge["from"], edge["to"] = edge["to"], edge["from"]

    resign(path, builtin_registry, turn_round)
    error = refusal(path, builtin_registry, f"the plan's edge init_torch_distributed -> "
                    f"{ENGINE} (after, declared by profile base at ", f"contradicts its order, "
                    f"which lists '{ENGINE}' before 'init_torch_distributed'")
    assert len(error.problems) == 1


def test_plan_run_refuses_a_plan_whose_edges_contradict_its_order_in_one_line(
        run_cli, tmp_path, builtin_registry):
    path = saved_cpu(tmp_path, builtin_registry)

    def turn_round(data):
        (edge,) = [e for e in data["edges"] if (e["from"], e["to"]) ==
                   ("launch_mooncake_master", "import_backend")]
        edge["from"], edge["to"] = edge["to"], edge["from"]

    resign(path, builtin_registry, turn_round)
    code, out, err = run_cli("run", "--plan", str(path), "--executor", "dry-run")
    assert (code, out) == (2, ""), err
    assert_single_error_line(err, "the plan's edge import_backend -> launch_mooncake_master "
                             "(before, declared by profile base at ", "cpu-plan.json",
                             located=False)


@pytest.mark.parametrize(("text", "fragment"), [
    ('{"format": "initorch-plan", "format": "initorch-plan"}',
     "the key 'format' appears twice in one object"),
    ("[" * 100_000 + "]" * 100_000, "its JSON nests deeper than Python can read"),
])
def test_duplicate_keys_and_runaway_nesting_are_refused_in_one_line(tmp_path, text, fragment):
    path = tmp_path / "plan.json"
    path.write_text(text, encoding="utf-8")
    refusal(path, Registry(), fragment)
