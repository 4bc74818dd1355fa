"""The Mooncake Store step against SGLang 0.5.23's own ``MooncakeStore.__init__``.

SGLang's ``MooncakeStore`` runs in its venv with only Mooncake's native classes
replaced by recorders (``mooncake.engine.TransferEngine``, the store class it
imports): what it passes to ``setup`` and how it warms up are SGLang's decisions,
taken by SGLang's code on the environment of each case.  initorch's decision on the
same inputs is computed here and must be the same.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from initorch.errors import StepError
from initorch.steps.store import (
    WARMUP_ATTEMPTS,
    WARMUP_DELAY_S,
    store_reuses_engine,
    warm_up,
)
from initorch.steps.transfer_engine import ib_device_for
from tests.sglang.oracle import ask

pytestmark = pytest.mark.sglang

# SGLang's shared engine (ib device from --disaggregation-ib-device / --mooncake-ib-device),
# then its store, on each case's environment; Mooncake's native classes are recorders.
STORE_SCRIPT = r'''
import json, os, sys, time, types

class Engine:
    def get_engine(self): return "shared-engine-handle"
    def get_rpc_port(self): return 12345

sys.modules["mooncake.engine"] = types.SimpleNamespace(TransferEngine=Engine)
from sglang.srt.distributed.device_communicators import mooncake_transfer_engine as mte
from sglang.srt.mem_cache.storage.mooncake_store import mooncake_store as ms
import sglang.srt.distributed.parallel_state as ps

mte.MooncakeTransferEngine.initialize = (
    lambda self, hostname, device_name: setattr(self, "session_id", f"{hostname}:12345"))
sleeps = []
time.sleep = sleeps.append

class Store:
    setup_args = None
    put_failures = 0
    puts = 0
    def setup(self, *args, **kwargs):
        Store.setup_args = args
        return 0
    def put(self, key, value):
        Store.puts += 1
        self.value = value
        return -1 if Store.puts <= Store.put_failures else 0
    def is_exist(self, key): return 1
    def get(self, key): return self.value

ms.MooncakeStore._import_mooncake_store = lambda self: Store
answers = []
for case in json.loads(sys.argv[1]):
    for name in [n for n in os.environ if n.startswith(("MOONCAKE_", "MC_"))]:
        del os.environ[name]
    os.environ.update(case["env"])
    engine = mte.MooncakeTransferEngine("10.0.0.1", 0, case["ib_device"])
    ps.get_mooncake_transfer_engine = lambda: engine
    Store.setup_args, Store.puts, Store.put_failures = None, 0, case.get("put_failures", 0)
    del sleeps[:]
    error = None
    try:
        ms.MooncakeStore(None, None)
    except Exception as exc:  # after setup and warm-up: storage_config None is not served
        error = str(exc)
    args = Store.setup_args
    answers.append({
        "engine_ib_device": engine.get_ib_device(),
        "reused": args is not None and args[7] is not None,
        "hostname": args and args[0], "metadata": args and args[1],
        "protocol": args and args[4], "device": args and args[5],
        "puts": Store.puts, "sleeps": list(sleeps), "error": error,
    })
print(json.dumps(answers))
'''

IB_FLAGS = (None, "", "mlx5_0")
ENVS: tuple[dict[str, str], ...] = tuple(
    {k: v for k, v in (("MC_FORCE_TCP", force), ("MOONCAKE_DEVICE", device),
                       ("MOONCAKE_PROTOCOL", protocol),
                       ("MOONCAKE_TE_META_DATA_SERVER", metadata)) if v is not None}
    for force, device, protocol, metadata in itertools.product(
        (None, "1"), (None, "mlx5_0"), (None, "tcp"), (None, "http://10.0.0.9:8080/metadata")))
MASTER = {"MOONCAKE_MASTER": "10.0.0.9:50051"}


@pytest.fixture(scope="module")
def reuse_cases() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    cases = [{"ib_device": flag, "env": {**MASTER, **env}}
             for flag in IB_FLAGS for env in ENVS]
    return list(zip(cases, ask(STORE_SCRIPT, cases), strict=True))


def initorch_decision(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """initorch's values for the case: the engine's device as the engine step keeps it,
    and the store step's rule on SGLang's defaults (rdma, P2PHANDSHAKE, device "")."""
    env = case["env"]
    if "MC_FORCE_TCP" in env:
        monkeypatch.setenv("MC_FORCE_TCP", env["MC_FORCE_TCP"])
    else:
        monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    engine = ib_device_for(case["ib_device"] or "")
    store_device = env.get("MOONCAKE_DEVICE", "")
    metadata = env.get("MOONCAKE_TE_META_DATA_SERVER", "P2PHANDSHAKE")
    protocol = env.get("MOONCAKE_PROTOCOL", "rdma")
    return {"engine_ib_device": engine,
            "reused": store_reuses_engine(engine, store_device, metadata, protocol)}


def test_the_store_reuses_the_shared_engine_exactly_where_sglang_does(
        reuse_cases: list[tuple[dict[str, Any], dict[str, Any]]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert len(reuse_cases) == len(IB_FLAGS) * len(ENVS)
    for case, sglang in reuse_cases:
        ours = initorch_decision(case, monkeypatch)
        assert ours == {k: sglang[k] for k in ours}, case
        assert sglang["error"] is None or sglang["puts"] >= 1, sglang  # setup and warm-up ran


def test_on_cuda_without_a_configured_device_sglang_builds_a_second_engine(
        reuse_cases: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    [(_, sglang)] = [(c, s) for c, s in reuse_cases
                     if c["ib_device"] is None and c["env"] == MASTER]
    assert sglang["engine_ib_device"] is None and sglang["reused"] is False
    assert sglang["protocol"] == "rdma" and sglang["device"] == ""


class FailingStore:
    """A store whose first ``failures`` puts fail, for initorch's warm-up."""

    def __init__(self, failures: int) -> None:
        self.failures, self.puts, self.value = failures, 0, b""

    def put(self, key: str, value: bytes) -> int:
        self.puts += 1
        self.value = value
        return -1 if self.puts <= self.failures else 0

    def get(self, key: str) -> bytes:
        return self.value

    def remove(self, key: str) -> int:
        return 0


def initorch_warm_up(failures: int) -> dict[str, Any]:
    store, sleeps = FailingStore(failures), list[float]()
    try:
        warm_up(store, sleeps.append)
        error = None
    except StepError as exc:
        error = str(exc)
    return {"puts": store.puts, "sleeps": sleeps, "error": error}


def test_the_store_warm_up_retries_as_sglang_does() -> None:
    cases = [{"ib_device": None, "env": MASTER, "put_failures": failures}
             for failures in (0, 3, 9, WARMUP_ATTEMPTS)]
    answers = ask(STORE_SCRIPT, cases)
    for case, sglang in zip(cases[:-1], answers, strict=False):
        ours = initorch_warm_up(case["put_failures"])
        assert (ours["puts"], ours["sleeps"]) == (sglang["puts"], sglang["sleeps"]), case
    # Ten failures: both give up after ten puts; SGLang sleeps once more after the last.
    ours, sglang = initorch_warm_up(WARMUP_ATTEMPTS), answers[-1]
    assert ours["puts"] == sglang["puts"] == WARMUP_ATTEMPTS
    assert sglang["sleeps"] == [WARMUP_DELAY_S] * WARMUP_ATTEMPTS
    assert ours["sleeps"] == [WARMUP_DELAY_S] * (WARMUP_ATTEMPTS - 1)
    assert "Warmup put failed after 10 attempts" in str(sglang["error"])
    assert "Warmup put failed after 10 attempts" in str(ours["error"])
