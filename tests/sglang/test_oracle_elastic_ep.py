"""The elastic-EP world backend against SGLang 0.5.23's own ``_resolve_backend``.

SGLang switches the world group to ``mooncake`` only on cuda
(``distributed/bootstrap.py:226-230``) and keeps the device's default elsewhere.
initorch's ``mooncake-ep`` overlay takes what ``mooncake.pg`` registers on each device:
``mooncake`` on cuda (the same as SGLang), ``mooncake-cpu`` on cpu and ``mooncake`` on
musa (deliberate differences, stated in ``profiles/mooncake-ep.yaml``), and refuses the
devices Mooncake has no backend for, where SGLang would silently keep its default.
SGLang's model-parallel subgroups (``mooncake`` + ``mooncake-cpu`` with
``MooncakeBackendOptions``, ``parallel_state.py:337-386``) are not modelled: initorch
keeps ``parallel.*``'s backends, and the last test reads that from SGLang's source.
"""

from __future__ import annotations

import pytest

from initorch import InitorchError, load_plan
from tests.sglang.oracle import ask
from tests.sglang.server import sglang_venv

pytestmark = pytest.mark.sglang

DEVICES = ("cpu", "cuda", "musa", "npu", "xpu")

RESOLVE_SCRIPT = r'''
import json, sys, types
from sglang.srt.distributed import bootstrap
bag = types.SimpleNamespace(moe=types.SimpleNamespace(elastic_ep_backend="mooncake"))
bootstrap.get_exec = lambda: bag
print(json.dumps({device: bootstrap._resolve_backend(device=device)
                  for device in json.loads(sys.argv[1])}))
'''

# SGLang's choice where it keeps the device default; initorch's differs on purpose.
SGLANG_KEEPS_DEFAULT = {"cpu": "gloo", "musa": "mccl", "npu": "hccl", "xpu": "xccl"}
INITORCH_WORLD = {"cpu": "mooncake-cpu", "cuda": "mooncake", "musa": "mooncake"}


def initorch_world_backend(device: str) -> str | None:
    """The world backend of ``device`` + ``mooncake-ep``; ``None`` when refused."""
    try:
        plan = load_plan([device, "mooncake-ep"])
    except InitorchError:
        return None
    assert "set_mooncake_pg_engine" in plan
    return str(plan.settings["mooncake.pg_backend"].value)


def test_the_world_backend_is_sglangs_on_cuda_and_mooncakes_own_elsewhere() -> None:
    sglang = ask(RESOLVE_SCRIPT, list(DEVICES))
    assert sglang["cuda"] == "mooncake" == initorch_world_backend("cuda")
    for device, default in SGLANG_KEEPS_DEFAULT.items():
        assert sglang[device] == default, device
        assert initorch_world_backend(device) == INITORCH_WORLD.get(device), device


def test_sglangs_subgroups_are_mooncake_pairs_which_initorch_does_not_model() -> None:
    source = (sglang_venv() / "lib" / "python3.11" / "site-packages" / "sglang" / "srt" /
              "distributed" / "parallel_state.py").read_text(encoding="utf-8")
    assert 'backend="mooncake",' in source and 'backend="mooncake-cpu",' in source
    assert "MooncakeBackendOptions(pg_active_ranks, recovered_rank)" in source
    plan = load_plan(["cuda", "server", "mooncake-ep"])
    assert "init_model_parallel" in plan
    subgroups = (plan.settings["device.collective_backend"].value,
                 plan.settings["parallel.cpu_group_backend"].value)
    assert subgroups == ("nccl", "gloo")  # SGLang's would be mooncake, mooncake-cpu
