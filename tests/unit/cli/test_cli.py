"""initorch.cli: every command and option, exit codes, and one clear error line."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from initorch import InitorchError, StepFailedError, load_plan
from initorch.errors import EXIT_INVALID_INPUT, EXIT_OK, EXIT_STEP_FAILED, ProfileError
from tests.support.commands import initorch_command
from tests.support.profiles import (
    BUILTIN_PROFILES,
    assert_single_error_line,
    run_initorch_in,
    write,
)

ENGINE = "init_shared_mooncake_transfer_engine"


def plan_json(run_cli, *args: str) -> dict:
    code, out, err = run_cli("plan", *args, "--json")
    assert (code, err) == (0, "")
    return json.loads(out)


# --- plan ----------------------------------------------------------------------------------

def test_plan_text_shows_order_waves_reasons_skips_and_fingerprint(run_cli):
    code, out, err = run_cli("plan", "--profile", "npu")
    assert (code, err) == (0, "")
    plan = load_plan(["npu"])
    lines = out.splitlines()
    assert lines[0] == "profiles: base -> npu"
    assert lines[1] == "device:   npu"
    assert lines[2] == f"plan:     {len(plan.order)} steps in {len(plan.waves)} waves, 1 skipped"
    assert lines[3] == ("hardware: backend_package=torch_npu collective_backend=hccl "
                        "context_per_thread=True host_allocator=pin_memory "
                        "mooncake_protocol=ascend torch_module=torch.npu "
                        "visible_devices_env=ASCEND_RT_VISIBLE_DEVICES")
    table = lines[6:6 + len(plan.order)]
    rows = [re.match(r"^\s+(\d+)\s+(\d+)\s+(\w+)\s+(.+)$", line) for line in table]
    assert all(rows), table
    assert [r.group(3) for r in rows if r] == list(plan.order)
    assert [int(r.group(2)) for r in rows if r] == [plan.step(n).wave for n in plan.order]
    assert "listed by profile base" in lines[6]
    assert "[device-bound]" in out and "[device-bound, barrier]" in out
    assert "skipped:" in lines
    # the table's reason is short; explain (and --json) give it whole
    assert re.search(r"^  verify_transfer\s+condition false: checks.verify_transfer=false$",
                     out, re.M)
    assert lines[-1] == f"fingerprint: {plan.fingerprint}"


def test_plan_json_has_the_documented_keys(run_cli):
    data = plan_json(run_cli, "-p", "cuda", "-p", "mooncake-ep")
    assert data["profiles"] == ["base", "cuda", "mooncake-ep"]
    assert data["device"] == "cuda"
    order = data["order"]
    assert order.index("set_device") < order.index(ENGINE) < order.index(
        "set_mooncake_pg_engine") < order.index("init_torch_distributed")
    assert sorted(s for wave in data["waves"] for s in wave) == sorted(order)
    assert data["waves"][:2] == [["launch_mooncake_master"], ["import_backend"]]
    assert data["waves"][2] == ["import_mooncake_pg", "set_device"]  # built before any wait
    assert data["waves"][3] == ["alloc_host_mem_pool", ENGINE, "rendezvous"]
    assert data["env"] == {}
    reasons = {(e["from"], e["to"]): e["reason"] for e in data["edges"]}
    assert "set_transfer_engine(engine)" in reasons[("set_mooncake_pg_engine",
                                                     "init_torch_distributed")]
    [skipped] = data["skipped"]
    assert skipped["name"] == "verify_transfer"
    assert skipped["reason"].startswith("condition 'checks.verify_transfer")
    assert re.fullmatch(r"[0-9a-f]{64}", data["fingerprint"])


@pytest.mark.parametrize(("args", "profiles", "device", "index"), [
    (["--device", "musa:0"], ["base", "musa"], "musa", 0),
    (["-d", "NPU:3"], ["base", "npu"], "npu", 3),
    (["-d", "hip"], ["base", "rocm"], "rocm", None),
    (["-p", "mooncake-ep", "-d", "cuda:1"], ["base", "cuda", "mooncake-ep"], "cuda", 1),
    (["-p", "npu-hccl", "-d", "npu:1"], ["base", "npu", "npu-hccl"], "npu", 1),
    (["-p", "npu", "-d", "npu:2"], ["base", "npu"], "npu", 2),
])
def test_device_option_selects_the_profile(run_cli, args, profiles, device, index):
    data = plan_json(run_cli, *args)
    assert (data["profiles"], data["device"], data["device_index"]) == (profiles, device, index)


@pytest.mark.parametrize(("assignment", "key", "value"), [
    ("hicache.host_pool_mb=128", "hicache.host_pool_mb", 128),
    ("mooncake.enabled=false", "mooncake.enabled", False),
    ("mooncake.hostname=10.0.0.2", "mooncake.hostname", "10.0.0.2"),
    ("mooncake.device_name='mlx5_0'", "mooncake.device_name", "mlx5_0"),
    ("distributed.timeout_s=2.5", "distributed.timeout_s", 2.5),
])
def test_set_values_are_typed(run_cli, assignment, key, value):
    data = plan_json(run_cli, "-p", "npu", "--set", assignment)
    assert data["settings"][key] == value
    assert type(data["settings"][key]) is type(value)


def test_set_false_switches_mooncake_off_in_the_output(run_cli):
    data = plan_json(run_cli, "-p", "cuda", "-s", "mooncake.enabled=false")
    skipped = {s["name"]: s["reason"] for s in data["skipped"]}
    assert ENGINE in skipped and "register_mem_pool_host" in skipped
    assert ENGINE not in data["order"]


# --- the other commands ------------------------------------------------------------------------

def test_graph_dot_has_every_step_and_edge(run_cli):
    code, out, _ = run_cli("graph", "-p", "npu")  # dot is the default
    plan = load_plan(["npu"])
    assert code == 0
    assert out.startswith("digraph initorch {") and out.rstrip().endswith("}")
    nodes = re.findall(r'^  "(\w+)" \[label=', out, re.M)
    assert nodes == list(plan.order)
    edges = set(re.findall(r'^  "(\w+)" -> "(\w+)"', out, re.M))
    assert edges == {(e.source, e.target) for e in plan.graph.edges()}
    assert '"set_device" -> "init_shared_mooncake_transfer_engine" [label="device"' in out


def test_graph_mermaid(run_cli):
    code, out, _ = run_cli("graph", "-p", "npu", "--format", "mermaid")
    assert code == 0
    assert out.splitlines()[0] == "flowchart LR"
    assert f"  set_device -->|device| {ENGINE}" in out.splitlines()


def test_graph_json_locates_every_edge(run_cli):
    code, out, _ = run_cli("graph", "-d", "cuda:0", "-p", "mooncake-ep", "--format", "json")
    data = json.loads(out)
    assert code == 0
    assert [n["name"] for n in data["nodes"]] == list(load_plan(["cuda", "mooncake-ep"]).order)
    pg = "set_mooncake_pg_engine"
    edge = next(e for e in data["edges"] if e["from"] == pg and e["to"] == "init_torch_distributed")
    assert {"kind": "requires", "declared_by": "profile mooncake-ep"}.items() <= edge.items()
    assert "none for this device" in edge["reason"]
    assert all(re.search(r":\d+", e["declared_at"]) for e in data["edges"])


def test_graph_rejects_unknown_formats(run_cli):
    with pytest.raises(SystemExit) as caught:
        run_cli("graph", "-p", "npu", "--format", "svg")
    assert caught.value.code == EXIT_INVALID_INPUT


def test_explain_prints_the_chain_with_the_reason(run_cli):
    code, out, _ = run_cli("explain", "-p", "npu", ENGINE, "init_torch_distributed")
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == f"{ENGINE} runs before init_torch_distributed because:"
    assert lines[1].startswith(f"  1. init_torch_distributed is ordered after {ENGINE} "
                               "[profile base, ")
    assert re.search(r"base\.yaml:\d+:\d+\]: SGLang 0\.5\.23 srt/distributed/bootstrap\.py "
                     r"init_parallel_runtime: set_device, then the shared Mooncake engine",
                     lines[1])


def test_explain_unordered_steps_is_an_error(run_cli):
    code, out, err = run_cli("explain", "-p", "npu", "alloc_host_mem_pool", ENGINE)
    assert (code, out) == (2, "")
    assert_single_error_line(err, "they may run concurrently", located=False)


def test_explain_a_step_with_itself_is_an_error(run_cli):
    # BUG (plan.py Plan.explain): exits 0 printing "set_device runs before set_device because:".
    code, _, _ = run_cli("explain", "-p", "npu", "set_device", "set_device")
    assert code == EXIT_INVALID_INPUT


def test_profiles_lists_every_builtin(run_cli):
    code, out, _ = run_cli("profiles")
    assert code == 0
    names = [line.split()[0] for line in out.splitlines()]
    assert names == list(BUILTIN_PROFILES)
    assert re.search(r"^npu\s+npu\s+builtin\s+Huawei Ascend", out, re.M)
    assert re.search(r"^mooncake-ep\s+-\s+builtin\s+Mooncake as the torch.distributed backend",
                     out, re.M)


def test_profiles_json(run_cli):
    code, out, _ = run_cli("profiles", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert code == 0
    assert set(rows) == set(BUILTIN_PROFILES)
    assert rows["npu"]["device"] == "npu" and rows["npu"]["extends"] == ["base"]
    assert rows["mooncake-ep"]["device"] is None
    assert all(row["plugin"] == "builtin" and row["path"].endswith(f"{name}.yaml")
               and row["replaces"] is None for name, row in rows.items())


def test_profiles_works_from_another_folder(tmp_path):
    result = run_initorch_in(tmp_path, "profiles")
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(BUILTIN_PROFILES)
    plan = run_initorch_in(tmp_path, "plan", "-p", "npu", "--json")
    assert json.loads(plan.stdout)["profiles"] == ["base", "npu"]


def test_steps_text_and_json(run_cli):
    code, out, _ = run_cli("steps")
    assert code == 0
    assert re.search(r"^set_device\s+builtin\s+Set this rank's device", out, re.M)
    assert re.search(r"^\s+requires alloc_host_mem_pool,init_mooncake_store"
                     r"\s+when hicache.enabled and mooncake.enabled and "
                     r"hicache.storage_backend == 'mooncake'$", out, re.M)
    code, out, _ = run_cli("steps", "--json")
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["set_device"]["binds_device"] is True
    assert rows["init_torch_distributed"]["barrier"] is True
    assert rows["rendezvous"]["job_store"] is True
    assert {row["plugin"] for row in rows.values()} == {"builtin"}
    assert rows["set_device"]["wanted_by"] == []
    assert list(rows) == sorted(rows)


def test_schema_command_prints_json(run_cli):
    code, out, _ = run_cli("schema")
    assert code == 0
    assert json.loads(out)["title"] == "initorch profile"


def test_python_dash_m_is_the_same_command():
    result = subprocess.run([sys.executable, "-m", "initorch", "profiles", "--json"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert {row["name"] for row in json.loads(result.stdout)} == set(BUILTIN_PROFILES)


Finished = subprocess.CompletedProcess[str]


def _console_and_embedded(folder, plugin: str, source: str, *arguments: str
                          ) -> tuple[Finished, Finished]:
    """``initorch --plugin PLUGIN ARGUMENTS`` (``profiles`` by default) run by the console
    script, then by a process that calls main() itself, with ``source`` as the plugin
    module in ``folder``."""
    (folder / f"{plugin}.py").write_text(source)
    command = ["--plugin", plugin, *(arguments or ["profiles"])]
    console = subprocess.run([sys.executable, "-m", "initorch", *command], cwd=folder,
                             capture_output=True, text=True, timeout=60, check=True)
    embedded = subprocess.run(
        [sys.executable, "-c", f"from initorch.cli import main; main({command!r})"],
        cwd=folder, capture_output=True, text=True, timeout=60, check=True)
    return console, embedded


def test_the_console_script_paces_the_collector_and_an_embedding_keeps_its_own(tmp_path):
    # A plugin that says the collector's thresholds while the command registers it: the
    # console script's, then those of a process that calls main() itself.
    console, embedded = _console_and_embedded(tmp_path, "gc_plugin", (
        "import gc, sys\n"
        "def register(registry):\n"
        "    sys.stderr.write(f'thresholds {gc.get_threshold()}\\n')\n"))
    from initorch.cli.boundary import CLI_GC_THRESHOLD

    assert f"thresholds ({CLI_GC_THRESHOLD}, 10, 10)" in console.stderr
    assert "thresholds (700, 10, 10)" in embedded.stderr


def test_the_console_script_exits_with_what_is_alive_frozen_and_runs_atexit(tmp_path):
    # A plugin's atexit handler still runs, and sees every object frozen: the shutdown's
    # collections skip them (boundary.console_main).  main() called by a host freezes nothing.
    console, embedded = _console_and_embedded(tmp_path, "exit_plugin", (
        "import atexit, gc, sys\n"
        "def register(registry):\n"
        "    atexit.register(lambda: sys.stderr.write(f'frozen {gc.get_freeze_count()}\\n'))\n"))
    frozen = int(console.stderr.split("frozen ")[1].split()[0])
    assert frozen > 1000
    assert "frozen 0" in embedded.stderr


def test_the_console_script_freezes_what_registering_built_and_an_embedding_does_not(tmp_path):
    # A step's preview, which runs as the plan is resolved, says how many objects are
    # frozen: the plugins' pause ended by freezing them (gc_pause.keep_what_pauses_build),
    # so that the collector never scans the registry again; main() called by a host
    # leaves its collector as it was.
    console, embedded = _console_and_embedded(tmp_path, "freeze_plugin", (
        "import gc, sys\n"
        "from initorch.plugin import step\n"
        "@step('freeze_probe', description='says what is frozen', wanted_by='set_device')\n"
        "def probe(ctx):\n"
        "    return None\n"
        "@probe.preview\n"
        "def said(ctx):\n"
        "    sys.stderr.write(f'frozen {gc.get_freeze_count()}\\n')\n"
        "    return []\n"
        "def register(registry):\n"
        "    registry.steps.add(probe)\n"), "plan", "--profile", "cpu")
    frozen = int(console.stderr.split("frozen ")[1].split()[0])
    assert frozen > 1000
    assert "frozen 0" in embedded.stderr


# --- settings -----------------------------------------------------------------------------------

def test_settings_lists_every_declaration(run_cli, builtin_registry):
    code, out, err = run_cli("settings")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["setting", "default", "description"]
    keys = [line.split()[0] for line in lines[1::2]]
    assert keys == sorted(spec.key for spec in builtin_registry.settings)
    assert re.search(r"^hicache\.layout\s+'page_first'\s+SGLang's --hicache-mem-layout", out,
                     re.M)
    assert re.search(r"^device\.host_allocator\s+\(required\)\s+host KV pool allocator", out,
                     re.M)
    assert re.search(r"^\s+text, one of: cuda_host_register, pin_memory, pin_memory_xpu, plain; "
                     r"declared by step "
                     r"alloc_host_mem_pool$", out, re.M)


def test_settings_of_a_selection_say_where_each_value_came_from(run_cli):
    code, out, _ = run_cli("settings", "-p", "npu", "-s", "hicache.host_pool_mb=128", "--json")
    rows = {row["key"]: row for row in json.loads(out)}
    assert code == 0
    assert (rows["hicache.host_pool_mb"]["value"], rows["hicache.host_pool_mb"]["origin"]) == (
        128, "<command line>")
    assert rows["hicache.layout"]["origin"].endswith("npu.yaml:34:13")
    assert rows["distributed.timeout_s"]["origin"].startswith(
        "default (declared by step rendezvous at ")
    assert rows["distributed.timeout_s"]["exclusive_minimum"] == 0
    assert rows["device.host_allocator"]["choices"] == ["cuda_host_register", "pin_memory",
                                                        "pin_memory_xpu", "plain"]


def test_settings_of_an_overlay_work_without_a_device(run_cli):
    code, out, _ = run_cli("settings", "-p", "mooncake-ep")
    assert code == 0
    assert re.search(r"^mooncake\.elastic_ep\s+true", out, re.M)
    assert re.search(r"^device\.backend_package\s+\(required\)", out, re.M)
    assert "not set (required)" in out


def test_settings_of_a_broken_selection_is_an_error(run_cli):
    code, out, err = run_cli("settings", "-p", "npu", "-s", "hicache.host_pol_mb=1")
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert_single_error_line(err, "did you mean 'hicache.host_pool_mb'?", located=False)


def test_a_schema_key_lets_an_editor_find_the_schema(run_cli, tmp_path):
    path = write(tmp_path, "mine.yaml",
                 "$schema: ./profile.schema.json\nextends: cpu\nconfig:\n  hicache:\n"
                 "    host_pool_mb: 8\n")
    assert run_cli("validate", "-p", str(path)) == (0, "ok: no problems found\n", "")


def test_validate_all_reports_a_shared_parents_problem_once(run_cli, tmp_path, registry):
    from initorch.cli.validate import validate_all

    write(tmp_path, "parent.yaml", "config:\n  hicache:\n    host_pol_mb: 8\n")
    for name in ("one", "two"):
        write(tmp_path, f"{name}.yaml", "extends: [cpu, parent]\n")
    registry.profiles.add_directory(tmp_path, "test")
    findings = validate_all(registry)
    reported = [str(p) for _, error in findings for p in error.problems]
    assert len([p for p in reported if "host_pol_mb" in p]) == 1


# --- validate -----------------------------------------------------------------------------------

def test_validate_all_builtins_is_clean(run_cli):
    assert run_cli("validate") == (0, "ok: no problems found\n", "")


def test_validate_a_good_selection(run_cli, tmp_path):
    good = write(tmp_path, "good.yaml", "extends: npu\nconfig:\n  hicache:\n    host_pool_mb: 8\n")
    assert run_cli("validate", "-p", str(good))[0] == EXIT_OK
    assert run_cli("validate", "-p", "cuda", "-p", "mooncake-ep", "-s", "mooncake.enabled=true"
                   )[0] == EXIT_OK
    assert run_cli("validate", "-p", "npu", "-p", "mooncake-ep")[0] == EXIT_INVALID_INPUT


def test_validate_a_broken_file(run_cli, tmp_path):
    broken = write(tmp_path, "broken.yaml", "extends: npu\nsteps:\n  set_devce: {}\n")
    code, out, err = run_cli("validate", "-p", str(broken))
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert "unknown step 'set_devce'" in err and "did you mean 'set_device'?" in err
    assert len(err.splitlines()) == 1


def test_validate_error_line_starts_with_the_location(run_cli, tmp_path):
    # Oddity: validate prefixes a label ("<path>: ") before file:line:col, so the same
    # problem prints as "initorch: error: /tmp/x/broken.yaml: broken.yaml:3:3: ..." -- an
    # editor's problem matcher for 'initorch: error: FILE:LINE:COL:' misses it.
    broken = write(tmp_path, "broken.yaml", "extends: npu\nsteps:\n  set_devce: {}\n")
    _, _, err = run_cli("validate", "-p", str(broken))
    match = assert_single_error_line(err, "unknown step")
    assert match is not None and match.group("file").endswith("broken.yaml")


def test_validate_with_a_bad_device(run_cli):
    code, _, err = run_cli("validate", "-d", "foo")
    assert code == EXIT_INVALID_INPUT
    assert "unknown device type 'foo'" in err


# --- errors: exit codes and one clear line ------------------------------------------------------

@pytest.mark.parametrize(("text", "args", "file_line_col", "fragments"), [
    ("device:\n  type: cpu\n  type: cuda\n", (), "3:3", ("duplicate key 'type'",)),
    ("extends: cpu\nsteps:\n  set_devce: {}\n", (), "3:3",
     ("unknown step 'set_devce'", "did you mean 'set_device'?")),
    ("device:\n  type: [cpu\n", (), "3:1", ("invalid YAML",)),
    ("extends: cpu\nsteps:\n  set_device: {retries: 2}\n", (), "3:25",
     ("cannot be retried",)),
    ("extends: cpu\nsteps:\n  set_device:\n    remove: {after: [import_backend]}\n", (),
     "4:22", ("cannot remove after 'import_backend'",)),
    ("extends: cpu\nsteps:\n  set_device: {when: 'nope'}\n", (), "3:22",
     ("reads unknown setting 'nope'",)),
    ("extends: cpu\nsteps:\n  set_device: {after: [set_device]}\n", (), "3:24",
     ("ordering cycle set_device -> set_device",)),
])
def test_single_problem_is_one_located_line(run_cli, tmp_path, text, args, file_line_col,
                                            fragments):
    path = write(tmp_path, "bad.yaml", text)
    code, out, err = run_cli("plan", "-p", str(path), *args)
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    match = assert_single_error_line(err, *fragments)
    assert match is not None
    assert match.group("file").endswith("bad.yaml")
    assert f"{match.group('line')}:{match.group('col')}" == file_line_col


@pytest.mark.parametrize(("args", "fragments"), [
    (("-p", "nonexist"), ("<command line>: unknown profile 'nonexist'", "available: base,")),
    (("-p", "np"), ("did you mean 'npu'?",)),
    (("-p", "base"), ("no device type", "set no device.type")),
    (("-p", "./missing.yaml"), ("profile file not found: ./missing.yaml",)),
    (("-d", "foo"), ("unknown device type 'foo'; known types: cpu, cuda, mps, musa, npu, "
                     "rocm, xpu",)),
    (("-d", "musa:x"), ("malformed device string 'musa:x'",)),
    # cuda.yaml's device.suggested_for: the closest spelling of gpu is xpu, which no one means.
    (("-d", "gpu"), ("unknown device type 'gpu'", "did you mean 'cuda'?")),
    (("-d", "NVIDIA:1"), ("unknown device type 'NVIDIA'", "did you mean 'cuda'?")),
    (("-p", "npu", "-s", "nope=1"), ("--set nope: no such setting",)),
    (("-p", "npu", "-s", "hicache.host_pool=1"), ("did you mean 'hicache.host_pool_mb'?",)),
    (("-p", "npu", "-s", "hicache.host_pool_mb=abc"),
     ("<command line>: hicache.host_pool_mb must be a whole number, got the text 'abc'",)),
    (("-p", "npu", "-s", "device.type=cuda"), ("--set cannot change device.type",)),
    (("-p", "npu", "-s", "novalue"), ("expected KEY=VALUE",)),
    (("-p", "npu", "-s", "hicache.layout=[a"), ("cannot read value '[a'",)),
])
def test_command_line_problems_are_one_line(run_cli, tmp_path, args, fragments):
    # The '--set hicache.layout=[a' case fails today: PyYAML's multi-line message.
    code, out, err = run_cli("plan", *args, cwd=tmp_path)
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert_single_error_line(err, *fragments, located=False)


@pytest.mark.parametrize(("args", "culprit", "other"), [
    (("-p", "npu", "-p", "musa"), "musa.yaml:4:9", "npu.yaml:4:9"),
    (("-p", "npu", "-d", "musa"), "npu.yaml:4:9", "--device musa"),
])
def test_conflicts_name_both_sides(run_cli, args, culprit, other):
    code, _, err = run_cli("plan", *args)
    assert code == EXIT_INVALID_INPUT
    match = assert_single_error_line(err, other)
    assert match is not None
    assert f"{match.group('file')}:{match.group('line')}:{match.group('col')}".endswith(culprit)


def test_layered_conflict_names_both_files(run_cli, tmp_path):
    mine = write(tmp_path, "mine.yaml", "extends: base\ndevice:\n  type: cuda\n")
    code, _, err = run_cli("plan", "-p", "npu", "-p", str(mine))
    assert code == EXIT_INVALID_INPUT
    match = assert_single_error_line(err, "profile 'mine' sets device.type 'cuda'",
                                     "'npu' already set 'npu' at ", "npu.yaml:4:9")
    assert match is not None and match.group("file").endswith("mine.yaml")


def test_several_problems_print_one_line_each(run_cli, tmp_path):
    path = write(tmp_path, "many.yaml", """
        confg: {}
        device:
          type: cpu
          colective_backend: gloo
        steps:
          set_device:
            timeout: -1
            aftr: [a]
        """)
    code, _, err = run_cli("plan", "-p", str(path))
    lines = err.splitlines()
    assert code == EXIT_INVALID_INPUT
    # Four format and settings problems, and the two required settings of the one
    # planned step this cpu profile leaves out (it extends nothing).
    assert lines[0].startswith("initorch: error: 6 problem(s) in ")
    assert len(lines) == 7
    assert all(re.match(r"^  \S*many\.yaml:\d+:\d+: ", line) for line in lines[1:])
    assert "Traceback" not in err


def test_every_cycle_gets_its_own_line(run_cli, tmp_path):
    path = write(tmp_path, "cycles.yaml", """
        extends: cpu
        steps:
          import_backend: {after: [set_device]}
          alloc_host_mem_pool: {after: [register_mem_pool_host]}
        """)
    code, _, err = run_cli("plan", "-p", str(path))
    lines = err.splitlines()
    assert code == EXIT_INVALID_INPUT
    assert lines[0] == "initorch: error: 2 ordering cycles among steps"
    assert len(lines) == 3
    assert all("ordering cycle" in line and "cycles.yaml:" in line for line in lines[1:])


def test_a_cycle_error_leads_with_the_users_own_edge(run_cli, tmp_path):
    # Issue 19: each line used to start at a site-packages location (a step's
    # declaration, a built-in profile), the user's cycle2.yaml:4:28 buried mid-line.
    path = write(tmp_path, "cycle2.yaml", """
        extends: cpu
        steps:
          set_device: {after: [init_torch_distributed]}
          import_backend: {after: [rendezvous]}
        """)
    code, _, err = run_cli("plan", "-p", str(path))
    assert code == EXIT_INVALID_INPUT
    lines = err.splitlines()[1:]
    assert lines and all(re.match(r"  \S*cycle2\.yaml:\d+:\d+: ordering cycle ", line)
                         for line in lines), lines
    for line in lines:  # the user's edge is the first one described
        detail = line.split(": ", 2)[2]  # after "FILE:LINE:COL: ordering cycle A -> B"
        assert "[profile cycle2, " in detail.split("; ")[0], line


HOSTILE = {
    "unknown-tag": "extends: cpu\nconfig:\n  x: !custom value\n",
    "python-tag": "extends: cpu\nconfig:\n  x: !!python/name:os.system\n",
    "recursive-alias": "extends: cpu\nconfig:\n  x: &a [*a]\n",
    "deep-condition": "extends: cpu\nsteps:\n  set_device:\n    when: '" + "not " * 3000 + "x'\n",
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_profiles_are_errors_not_crashes(run_cli, tmp_path, text):
    # BUGs today: ConstructorError (yamlsource._build), RecursionError (_build on a
    # recursive alias; conditions._validate on a deep expression) escape as tracebacks.
    path = write(tmp_path, "hostile.yaml", text)
    code, _, err = run_cli("plan", "-p", str(path))
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "hostile.yaml")


def test_yaml_dates_and_bytes_do_not_crash_json_output(tmp_path):
    # BUG: 'started: 2024-01-01' is a datetime.date after YAML; 'plan --json' then dies
    # in json.dumps with a traceback and exit 1 (the "step failed" code).  Reject such
    # values in the parser (with their location) or render them as text.
    path = write(tmp_path, "dated.yaml", "extends: cpu\nconfig:\n  started: 2024-01-01\n"
                                         "  blob: !!binary aGVsbG8=\n")
    result = initorch_command("plan", "-p", str(path), "--json")
    assert "Traceback" not in result.stderr
    assert result.returncode in (EXIT_OK, EXIT_INVALID_INPUT)


# --- --debug, usage, exit codes -----------------------------------------------------------------

def test_debug_reraises_in_process(run_cli, tmp_path):
    path = write(tmp_path, "dup.yaml", "a: 1\na: 2\n")
    with pytest.raises(ProfileError, match="duplicate key 'a'"):
        run_cli("--debug", "plan", "-p", str(path))


def test_traceback_only_with_debug(tmp_path):
    path = write(tmp_path, "dup.yaml", "a: 1\na: 2\n")
    quiet = initorch_command("plan", "-p", str(path))
    assert quiet.returncode == EXIT_INVALID_INPUT
    assert "Traceback" not in quiet.stderr
    assert_single_error_line(quiet.stderr, "duplicate key 'a'")
    loud = initorch_command("--debug", "plan", "-p", str(path))
    assert loud.returncode != EXIT_OK
    assert "Traceback (most recent call last)" in loud.stderr
    assert "ProfileError" in loud.stderr


def test_debug_is_accepted_after_the_command(run_cli, tmp_path):
    # Oddity: '--debug' is an option of the top-level parser only, so the natural
    # 'initorch plan -p x --debug' is a usage error ("unrecognized arguments: --debug").
    path = write(tmp_path, "dup.yaml", "a: 1\na: 2\n")
    with pytest.raises(ProfileError):
        run_cli("plan", "-p", str(path), "--debug")


@pytest.mark.parametrize("argv", [[], ["plan", "--bogus"], ["explain", "-p", "npu"],
                                  ["nocommand"]])
def test_usage_errors_exit_2(run_cli, argv):
    with pytest.raises(SystemExit) as caught:
        run_cli(*argv)
    assert caught.value.code == EXIT_INVALID_INPUT


def test_help_mentions_the_exit_codes(run_cli, capsys):
    with pytest.raises(SystemExit) as caught:
        run_cli("--help")
    assert caught.value.code == 0
    out = capsys.readouterr().out
    assert "exit codes: 0 ok, 1 a step failed at run time, 2 invalid input or usage," in out
    assert "or a plugin that fails to load, 70 internal error" in out
    assert "INITORCH_PLUGINS=MODULE[:FUNCTION],no:NAME" in out
    for command in ("plan", "validate", "graph", "explain", "profiles", "steps", "schema"):
        assert re.search(rf"^\s+{command}\s", out, re.M)


@pytest.mark.parametrize("command", ["plan", "validate", "graph", "explain"])
def test_profile_reading_commands_take_the_selection_options(run_cli, capsys, command):
    with pytest.raises(SystemExit):
        run_cli(command, "--help")
    out = capsys.readouterr().out
    for option in ("--profile", "--device", "--set"):
        assert option in out


def test_error_classes_carry_their_exit_codes():
    assert InitorchError("x").exit_code == EXIT_INVALID_INPUT == 2
    assert StepFailedError("s", "boom").exit_code == EXIT_STEP_FAILED == 1


# --- versions -----------------------------------------------------------------------------------

def test_version_option_and_attribute_agree_with_the_installed_metadata(run_cli, capsys):
    import importlib.metadata

    import initorch

    with pytest.raises(SystemExit) as caught:
        run_cli("--version")
    assert caught.value.code == 0
    assert capsys.readouterr().out == f"initorch {initorch.__version__}\n"
    assert importlib.metadata.version("initorch") == initorch.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:\S*)", initorch.__version__)


def test_the_builtin_command_names_are_the_parsers() -> None:
    from initorch.cli.parser import BUILTIN_COMMANDS, build_parser

    parser = build_parser(with_extensions=False)
    actions = [action for action in parser._actions if action.dest == "command"]
    assert set(actions[0].choices) == BUILTIN_COMMANDS  # type: ignore[arg-type]


def test_extension_commands_are_looked_up_only_when_a_command_is_not_builtin() -> None:
    from initorch.cli.parser import names_extension_command

    assert not names_extension_command(["plan", "-p", "cpu"])
    assert not names_extension_command(["--debug", "run"])
    assert names_extension_command(["sglang", "check"])
    assert names_extension_command(["--help"])


def test_device_plans_with_the_same_steps_differ_in_their_hardware_line(run_cli):
    shown = {}
    for device in ("npu", "cuda"):
        code, out, _ = run_cli("plan", "--profile", device)
        assert code == 0
        shown[device] = next(line for line in out.splitlines() if line.startswith("hardware:"))
    assert "collective_backend=nccl" in shown["cuda"] and "host_allocator=cuda_host_register" \
        in shown["cuda"] and "mooncake_protocol=rdma" in shown["cuda"]
    assert shown["npu"] != shown["cuda"]


def test_explain_one_step_gives_the_whole_skip_reason_or_why_it_is_planned(run_cli):
    code, out, err = run_cli("explain", "--profile", "cpu", "verify_transfer")
    assert (code, err) == (0, "")
    assert out.startswith("verify_transfer is skipped: condition 'checks.verify_transfer and")
    assert "checks.verify_transfer=false from default (declared by step verify_transfer" in out
    code, out, _ = run_cli("explain", "--profile", "cpu", "init_mooncake_store")
    assert code == 0
    assert out.splitlines()[:2] == ["init_mooncake_store is planned, in wave 6, because it is:",
                                    "  - listed by profile base (./profiles/base.yaml:30:3)"]
    assert "  - init_mooncake_store requires mooncake_master [step init_mooncake_store" in out
    code, _, err = run_cli("explain", "--profile", "cpu", "init_mooncake_stor")
    assert code == 2 and "did you mean 'init_mooncake_store'?" in err


def test_run_has_an_option_per_launch_argument_and_gives_them_back() -> None:
    from dataclasses import fields

    from initorch import LaunchArguments
    from initorch.cli.parser import build_parser
    from initorch.cli.run import launch_arguments

    args = build_parser(with_extensions=False).parse_args(
        ["run", "--dist-init-addr", "[fe80::1]:5000", "--nnodes", "2", "--node-rank", "1",
         "--nproc-per-node", "4", "--local-rank", "3"])
    assert launch_arguments(args) == LaunchArguments("[fe80::1]:5000", 2, 1, 4, 3)
    run = next(action.choices["run"] for action in build_parser(with_extensions=False)._actions
               if action.dest == "command")  # type: ignore[index]
    group = next(g for g in run._action_groups if g.title and g.title.startswith("plain"))
    assert [a.dest for a in group._group_actions] == [f.name for f in fields(LaunchArguments)]


@pytest.mark.parametrize(("option", "value", "said"), [
    ("--nnodes", "0", "must be at least 1, got 0"),
    ("--node-rank", "-1", "must be at least 0, got -1"),
    ("--local-rank", "x", "'x' is not a whole number"),
])
def test_launch_options_take_the_fields_minimum(run_cli, capsys, option, value, said) -> None:
    with pytest.raises(SystemExit) as caught:
        run_cli("run", "-p", "cpu", option, value)
    assert caught.value.code == 2
    assert f"argument {option}: {said}" in capsys.readouterr().err
