"""``initorch sglang drift`` on the published SGLang 0.5.23 wheel and on mutated copies."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from initorch_sglang.drift import SourceError, SourceTree, check_drift
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
    report = check_drift(SourceTree.open(sglang_wheel), plan)
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
    report = check_drift(SourceTree.open(tmp_path), plan)
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
    report = check_drift(SourceTree.open(tree), sglang_plan())
    assert report.drifted
    assert report.missing == (
        "bind_cpu_threads: srt/distributed/bootstrap.py init_parallel_runtime no longer calls "
        "_bind_threads_if_cpu (call chain: srt/managers/scheduler.py Scheduler.__init__ -> "
        "init_parallel_runtime / srt/distributed/bootstrap.py init_parallel_runtime -> "
        "_bind_threads_if_cpu)",)


def test_a_path_without_sglang_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no sglang package here"):
        SourceTree.open(tmp_path)


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
