"""``initorch sglang drift`` on the published SGLang 0.5.23 wheel and on mutated copies."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from initorch.kit import SourceError
from initorch_sglang.drift import check_drift, open_tree
from tests.sglang.helpers import sglang_plan
from tests.sglang.server import initorch_in_sglang, run_in_sglang

BOOTSTRAP = "srt/distributed/bootstrap.py"
ENGINE_CALL = "    maybe_init_shared_mooncake_transfer_engine(gpu_id=get_device().gpu_id)\n"


@pytest.fixture(scope="module")
def unpacked(sglang_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's ``sglang`` package as a source tree."""
    root = tmp_path_factory.mktemp("sglang-src")
    with zipfile.ZipFile(sglang_wheel) as wheel:
        wheel.extractall(root, [name for name in wheel.namelist()
                                if name.startswith("sglang/") and name.endswith(".py")])
    return root / "sglang"


def edit(tree: Path, file: str, old: str, new: str) -> None:
    path = tree / file
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not once in {file}"
    path.write_text(text.replace(old, new))


def test_the_real_wheel_has_no_drift(sglang_wheel: Path) -> None:
    plan = sglang_plan()
    report = check_drift(open_tree(sglang_wheel), plan)
    assert not report.drifted and report.missing == ()
    verdicts = {(c.edge.source, c.edge.target): c.verdict for c in report.checks}
    assert verdicts[("init_shared_mooncake_transfer_engine", "init_torch_distributed")] == "ok"
    assert verdicts[("memory_baseline", "sglang_load_model")] == "ok"
    assert verdicts[("sglang_alloc_kv_pool", "alloc_host_mem_pool")] == "ok"
    text = report.text(plan)
    assert "srt/distributed/bootstrap.py init_parallel_runtime: " \
           "maybe_init_shared_mooncake_transfer_engine at :143, _init_parallel_groups at :152" \
           in text
    assert report.version == "0.5.23" and text.endswith("no drift")


def test_an_engine_moved_after_the_process_group_is_drift(unpacked: Path,
                                                          tmp_path: Path) -> None:
    import shutil

    tree = tmp_path / "sglang"
    shutil.copytree(unpacked, tree)
    edit(tree, BOOTSTRAP, ENGINE_CALL, "")
    text = (tree / BOOTSTRAP).read_text()
    groups = re.search(r"\n    _init_parallel_groups\(\n(?:        .*\n)+    \)\n", text)
    assert groups is not None
    (tree / BOOTSTRAP).write_text(text[:groups.end()] + ENGINE_CALL + text[groups.end():])
    plan = sglang_plan()
    report = check_drift(open_tree(tmp_path), plan)
    assert report.drifted
    drifted = [c for c in report.checks if c.verdict == "drift"]
    assert [(c.edge.source, c.edge.target) for c in drifted] == [
        ("init_shared_mooncake_transfer_engine", "init_torch_distributed")]
    line = drifted[0].line()
    assert line.startswith("  DRIFT    init_shared_mooncake_transfer_engine before "
                           "init_torch_distributed: srt/distributed/bootstrap.py "
                           "init_parallel_runtime: maybe_init_shared_mooncake_transfer_engine at")
    assert "profile: SGLang 0.5.23 srt/distributed/bootstrap.py init_parallel_runtime" in line


def test_a_call_that_moved_away_is_reported_missing(unpacked: Path, tmp_path: Path) -> None:
    import shutil

    tree = tmp_path / "sglang"
    shutil.copytree(unpacked, tree)
    edit(tree, BOOTSTRAP, "local_omp_cpuid = _bind_threads_if_cpu(device=device)",
         "local_omp_cpuid = None")
    report = check_drift(open_tree(tree), sglang_plan())
    assert report.drifted
    assert report.missing == (
        "bind_cpu_threads: srt/distributed/bootstrap.py init_parallel_runtime no longer calls "
        "_bind_threads_if_cpu (call chain: srt/managers/scheduler.py Scheduler.__init__ -> "
        "init_parallel_runtime / srt/distributed/bootstrap.py init_parallel_runtime -> "
        "_bind_threads_if_cpu)",)


def test_a_path_without_sglang_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no sglang package here"):
        open_tree(tmp_path)


def test_the_cli_passes_on_the_wheel_and_never_imports_sglang(sglang_wheel: Path) -> None:
    code = ("import json, sys\n"
            "from initorch.cli import main\n"
            f"rc = main(['sglang', 'drift', {str(sglang_wheel)!r}])\n"
            "print(json.dumps({'rc': rc, 'imported': sorted(m for m in sys.modules\n"
            "                  if m == 'sglang' or m.startswith('sglang.'))}))\n")
    result = run_in_sglang(code)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcome == {"rc": 0, "imported": []}
    assert " ok, 0 drift, " in result.stdout and "\nno drift\n" in result.stdout


def test_the_cli_exits_1_on_drift(unpacked: Path, tmp_path: Path) -> None:
    import shutil

    tree = tmp_path / "sglang"
    shutil.copytree(unpacked, tree)
    edit(tree, BOOTSTRAP, "local_omp_cpuid = _bind_threads_if_cpu(device=device)",
         "local_omp_cpuid = None")
    result = initorch_in_sglang("sglang", "drift", str(tree))
    assert result.returncode == 1
    assert "MISSING  bind_cpu_threads" in result.stdout
    assert result.stdout.rstrip().endswith("drift: SGLang's code no longer matches the profile")


def mutated(unpacked: Path, tmp_path: Path) -> Path:
    import shutil

    tree = tmp_path / "sglang"
    shutil.copytree(unpacked, tree)
    return tree


def after_groups(tree: Path, call: str) -> None:
    """Put ``call`` right after ``init_parallel_runtime``'s ``_init_parallel_groups(...)``."""
    path = tree / BOOTSTRAP
    text = path.read_text()
    groups = re.search(r"\n    _init_parallel_groups\(\n(?:        .*\n)+    \)\n", text)
    assert groups is not None
    path.write_text(text[:groups.end()] + call + text[groups.end():])


def engine_verdict(tree: Path) -> tuple[str, str]:
    report = check_drift(open_tree(tree), sglang_plan())
    (check,) = [c for c in report.checks if (c.edge.source, c.edge.target) ==
                ("init_shared_mooncake_transfer_engine", "init_torch_distributed")]
    return check.verdict, check.evidence


def test_a_guarded_early_call_cannot_hide_the_real_one_moved_after_the_groups(
        unpacked: Path, tmp_path: Path) -> None:
    tree = mutated(unpacked, tmp_path)
    edit(tree, BOOTSTRAP, ENGINE_CALL, "    if os.environ.get('EARLY_ENGINE'):\n    " +
         ENGINE_CALL)
    after_groups(tree, ENGINE_CALL)
    verdict, evidence = engine_verdict(tree)
    assert verdict == "drift"
    assert "maybe_init_shared_mooncake_transfer_engine at :144?, :" in evidence


def test_a_nested_def_that_is_never_called_is_not_read(unpacked: Path, tmp_path: Path) -> None:
    """A helper defined (not called) before the engine, calling the groups early."""
    tree = mutated(unpacked, tmp_path)
    edit(tree, BOOTSTRAP, ENGINE_CALL, "    def _unused():\n        _init_parallel_groups("
         "backend=None, dist_init_method=None, server_args=None, gpu_id=0)\n\n" + ENGINE_CALL)
    assert engine_verdict(tree)[0] == "ok"
    # Called before the engine, the same nested def puts the groups first: drift.
    edit(tree, BOOTSTRAP, ENGINE_CALL, "    _unused()\n" + ENGINE_CALL)
    assert engine_verdict(tree)[0] == "drift"


def test_a_helper_refactor_is_followed_not_reported(unpacked: Path, tmp_path: Path) -> None:
    """The engine call moved into a new helper of bootstrap.py, called where it was."""
    tree = mutated(unpacked, tmp_path)
    edit(tree, BOOTSTRAP, ENGINE_CALL, "    _start_engine()\n")
    path = tree / BOOTSTRAP
    path.write_text(path.read_text() + "\n\ndef _start_engine():\n" + ENGINE_CALL)
    report = check_drift(open_tree(tree), sglang_plan())
    assert not report.drifted, report.missing
    verdict, evidence = engine_verdict(tree)
    assert verdict == "ok" and "maybe_init_shared_mooncake_transfer_engine at :143," in evidence


def test_the_definition_python_keeps_is_the_one_judged(unpacked: Path, tmp_path: Path) -> None:
    """A second ``init_parallel_runtime`` later in the file replaces the first."""
    tree = mutated(unpacked, tmp_path)
    path = tree / BOOTSTRAP
    text = path.read_text()
    start = text.index("def init_parallel_runtime(")
    end = text.index("\ndef ", start + 1)
    second = text[start:end].replace(ENGINE_CALL, "")
    groups = re.search(r"\n    _init_parallel_groups\(\n(?:        .*\n)+    \)\n", second)
    assert groups is not None
    second = second[:groups.end()] + ENGINE_CALL + second[groups.end():]
    path.write_text(text + "\n\n" + second)
    assert engine_verdict(tree)[0] == "drift"


def test_a_hook_target_gone_from_the_tree_is_drift(unpacked: Path, tmp_path: Path) -> None:
    """The definition renamed, its call left: the chain still finds the call, the hook
    (and SGLang, with a NameError) would not find the function."""
    tree = mutated(unpacked, tmp_path)
    edit(tree, BOOTSTRAP, "def _bind_threads_if_cpu(", "def _bind_threads(")
    report = check_drift(open_tree(tree), sglang_plan())
    assert report.drifted
    assert report.missing == ("hook target sglang.srt.distributed.bootstrap."
                              "_bind_threads_if_cpu is not defined in this tree",)


def test_a_tree_of_no_known_layout_is_all_drift(unpacked: Path, tmp_path: Path) -> None:
    tree = mutated(unpacked, tmp_path)
    edit(tree, BOOTSTRAP, "def init_parallel_runtime(", "def start_parallel_runtime(")
    report = check_drift(open_tree(tree), sglang_plan())
    assert report.drifted and report.checks == ()
    assert report.missing == (
        "layout: no known call map fits this tree (see initorch_sglang/layouts)",)


@pytest.mark.parametrize(("version", "layout"), [("0.5.17", "runner_bootstrap"),
                                                 ("0.5.20", "runner_bootstrap")])
def test_older_layouts_the_audit_proves_have_no_drift(version: str, layout: str) -> None:
    from tests.support.wheels import wheel

    report = check_drift(open_tree(wheel("sglang", version).path), sglang_plan())
    assert report.layout == layout and not report.drifted, report.missing


def test_the_process_group_first_order_of_0_5_11_is_drift_against_the_profile() -> None:
    from tests.support.wheels import wheel

    report = check_drift(open_tree(wheel("sglang", "0.5.11").path), sglang_plan())
    drifted = [(c.edge.source, c.edge.target) for c in report.checks if c.verdict == "drift"]
    assert report.layout == "model_runner" and drifted == [
        ("init_shared_mooncake_transfer_engine", "init_torch_distributed")]


def test_the_store_is_ordered_from_scheduler_init(sglang_wheel: Path) -> None:
    """The store chain starts where SGLang's start-up does, so what Scheduler.__init__
    runs before build_kv_cache orders against it; the host pool, built inside
    build_kv_cache behind a registry of cache classes, stays run-time."""
    report = check_drift(open_tree(sglang_wheel), sglang_plan())
    verdicts = {(c.edge.source, c.edge.target): (c.verdict, c.evidence) for c in report.checks}
    assert verdicts[("set_device", "init_mooncake_store")] == (
        "ok", "srt/managers/scheduler.py Scheduler.__init__: init_parallel_runtime at :536, "
              "build_kv_cache at :575")
    assert verdicts[("init_shared_mooncake_transfer_engine", "init_mooncake_store")][0] == "ok"
    assert verdicts[("alloc_host_mem_pool", "init_mooncake_store")][0] == "undecidable"
