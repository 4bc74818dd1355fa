"""Drift and the plugin's gate, against vLLM 0.32.0's own tree and a mutated copy of it.

``initorch vllm drift`` reads the tree as text (never importing it) and checks each
ordering claim of the ``vllm`` overlay against the calls in vLLM's code; the plugin's
gate (:func:`initorch_vllm.release.refusal`) refuses a vLLM whose hook targets do not
resolve, and keeps its answer per tree until a target's module changes.  The copy takes
two regressions a release could make: the worker allocates the KV cache before it builds
the KV connector, and the connector's entry point is renamed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from initorch_vllm.release import refusal
from tests.vllm.server import initorch_in_vllm

_GPU_WORKER = "v1/worker/gpu_worker.py"
_CONNECTOR_CALL = "        ensure_kv_transfer_initialized(self.vllm_config, kv_cache_config)\n"
_KV_STATE = "distributed/kv_transfer/kv_transfer_state.py"


@pytest.fixture(scope="module")
def vllm_tree(vllm_python: Path) -> Path:
    """The installed ``vllm`` package of the vLLM venv."""
    found = sorted(vllm_python.parent.parent.glob("lib/python3*/site-packages/vllm"))
    assert found, f"no vllm package in {vllm_python.parent.parent}"
    return found[0]


@pytest.fixture(scope="module")
def mutated_tree(vllm_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tree's Python files with the two regressions."""
    copy = tmp_path_factory.mktemp("vllm-mutated") / "vllm"
    shutil.copytree(vllm_tree, copy, ignore=_not_python)
    worker = copy / _GPU_WORKER
    text = worker.read_text()
    assert text.count(_CONNECTOR_CALL) == 1
    worker.write_text(text.replace(_CONNECTOR_CALL, "        self.model_runner."
                                   "initialize_kv_cache(kv_cache_config)\n" + _CONNECTOR_CALL))
    state = copy / _KV_STATE
    state.write_text(state.read_text().replace("def ensure_kv_transfer_initialized(",
                                               "def ensure_kv_transfer_ready("))
    return copy


def _not_python(folder: str, names: list[str]) -> list[str]:
    return [name for name in names
            if not name.endswith(".py") and not (Path(folder) / name).is_dir()]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_no_drift_on_vllm_0_32(vllm_tree: Path, device: str) -> None:
    result = initorch_in_vllm("vllm", "drift", str(vllm_tree), "--device", device)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "no drift"
    assert " 0 drift, 0 not decidable" in result.stdout
    assert ("ok       init_torch_distributed before vllm_kv_connector: v1/engine/core.py "
            "EngineCore.__init__: executor_class at :144, _initialize_kv_caches at :157"
            in result.stdout)


def test_drift_on_a_mutated_copy(mutated_tree: Path) -> None:
    result = initorch_in_vllm("vllm", "drift", str(mutated_tree))
    assert result.returncode == 1, result.stdout + result.stderr
    assert ("DRIFT    vllm_kv_connector before vllm_init_kv_cache: v1/worker/gpu_worker.py "
            "Worker.initialize_from_config: ensure_kv_transfer_initialized at :875, "
            "initialize_kv_cache at :874" in result.stdout)
    assert ("MISSING  hook target vllm.distributed.kv_transfer.kv_transfer_state."
            "ensure_kv_transfer_initialized is not defined in this tree" in result.stdout)
    assert result.stdout.splitlines()[-1].startswith("drift: vLLM's code no longer matches")


def test_the_gate_takes_0_32_and_refuses_the_copy(vllm_tree: Path,
                                                  mutated_tree: Path) -> None:
    assert refusal(vllm_tree) is None
    refused = refusal(mutated_tree)
    assert refused is not None and "\n" not in refused
    assert refused.startswith("initorch-vllm: vLLM ")
    assert ("does not define vllm.distributed.kv_transfer.kv_transfer_state."
            "ensure_kv_transfer_initialized, which verify mode hooks (known: vLLM 0.32.0)"
            in refused)
    assert f"'initorch vllm drift {mutated_tree}' shows what moved" in refused


def test_the_gate_keeps_its_answer_until_a_target_module_changes(mutated_tree: Path,
                                                                 tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    refused = refusal(mutated_tree, cache_dir=cache)
    kept = list(cache.glob("vllm-release-*.json"))
    assert refused is not None and len(kept) == 1
    kept[0].write_text('{"refusal": "initorch-vllm: kept"}')
    assert refusal(mutated_tree, cache_dir=cache) == "initorch-vllm: kept"  # not re-read
    state = mutated_tree / _KV_STATE
    stat = state.stat()
    os.utime(state, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert refusal(mutated_tree, cache_dir=cache) == refused  # a target's module changed
    assert len(list(cache.glob("vllm-release-*.json"))) == 2
    kept[0].write_text("not json")
    assert refusal(mutated_tree, cache_dir=cache) == refused  # a broken entry is re-read
