"""``initorch vllm check``: vLLM's own parser and config, refusals in one line each,
citing the vLLM ``file:line`` that would fail, before anything is launched.

The accepted launches (tp=1, and tp=2 with a CPU list per worker) are the ones
``test_server.py`` checks and then starts: each acceptance is a launch vLLM serves.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.sglang.tiny_model import make_tiny_model as make_head16_model
from tests.vllm.server import environment, initorch_in_vllm, running, server_arguments

CASES = """
import json, os, sys
from initorch_vllm.preflight import preflight
found = {}
for name, arguments, env in json.loads(sys.argv[1]):
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update({key: value for key, value in env.items() if value is not None})
    for key in [key for key, value in env.items() if value is None]:
        os.environ.pop(key, None)
    result = preflight(arguments)
    found[name] = {"refusals": list(result.refusals), "notes": list(result.notes)}
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
print("CASES " + json.dumps(found))
"""


def test_tp2_on_one_numa_node_is_refused_in_one_line(vllm_python: Path,
                                                     tiny_model: Path) -> None:
    result = initorch_in_vllm("vllm", "check", "--", *server_arguments(tiny_model, tp=2))
    assert result.returncode == 2, result.stderr[-3000:]
    refusals = [line for line in result.stderr.splitlines()
                if line.startswith("initorch vllm check: refused: ")]
    assert len(refusals) == 1
    assert ("2 CPU worker(s) on this host with VLLM_CPU_OMP_THREADS_BIND='auto': vLLM's "
            "executor would stop before starting them (utils/ompmultiprocessing.py:216: Not "
            "enough allowed NUMA nodes to bind threads of 2 local CPUWorkers." in refusals[0])
    assert refusals[0].endswith("VLLM_CPU_OMP_THREADS_BIND='0|1'")
    assert "pre-flight: 1 problem(s); the launch would fail" in result.stdout
    assert "vllm_kv_connector" in result.stdout  # the plan a worker is checked against


def test_a_bad_argument_is_vllms_own_usage_error(vllm_python: Path, tiny_model: Path) -> None:
    result = initorch_in_vllm("vllm", "check", "--", "--model", str(tiny_model),
                              "--tensor-parallel-size", "two")
    assert result.returncode == 2
    assert "argument --tensor-parallel-size/-tp: invalid int value: 'two'" in result.stderr


@pytest.fixture(scope="module")
def preflights(vllm_python: Path, tiny_model: Path,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[str]]]:
    """The refusals and the notes of each launch below, from one process of the vLLM
    venv."""
    folder = tmp_path_factory.mktemp("preflight")
    head16 = make_head16_model(folder / "head16")
    no_master = folder / "no-master.json"
    no_master.write_text(json.dumps({"metadata_server": "P2PHANDSHAKE", "protocol": "tcp"}))
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    silent = folder / "silent-master.json"
    silent.write_text(json.dumps({"metadata_server": "P2PHANDSHAKE", "protocol": "tcp",
                                  "master_server_address": f"127.0.0.1:{closed}"}))
    base = server_arguments(tiny_model)
    mooncake = ["--kv-transfer-config",
                json.dumps({"kv_connector": "MooncakeConnector", "kv_role": "kv_both"})]
    store = ["--kv-transfer-config",
             json.dumps({"kv_connector": "MooncakeStoreConnector", "kv_role": "kv_both"})]
    unbound = {"VLLM_CPU_OMP_THREADS_BIND": None}
    cases = [
        ("tp1", base, unbound),
        ("tp1 bf16", [*base, "--dtype", "bfloat16"], unbound),
        ("tp2 bound", server_arguments(tiny_model, tp=2), {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}),
        ("tp2 one list", server_arguments(tiny_model, tp=2),
         {"VLLM_CPU_OMP_THREADS_BIND": "0"}),
        ("head 16", server_arguments(head16), unbound),
        ("mooncake p2p", base + mooncake, unbound),
        ("store without config", base + store, {"MOONCAKE_CONFIG_PATH": None}),
        ("store without master", base + store, {"MOONCAKE_CONFIG_PATH": str(no_master)}),
        ("store, silent master", base + store, {"MOONCAKE_CONFIG_PATH": str(silent)}),
        *((name, server_arguments(tiny_model, tp=2) + two_nodes(master),
           {"VLLM_CPU_OMP_THREADS_BIND": "0", "GLOO_SOCKET_IFNAME": interface})
          for name, master, interface in (("two nodes", NODE_0, None),
                                          ("two nodes, interface named", NODE_0, "eth0"),
                                          ("two nodes on this host", "127.0.0.1", None))),
    ]
    result = subprocess.run([str(vllm_python), "-c", CASES, json.dumps(cases)],
                            capture_output=True, text=True, env=environment({}),
                            timeout=600, check=False)
    line = next((line for line in result.stdout.splitlines() if line.startswith("CASES ")),
                None)
    assert line is not None, result.stderr[-4000:]
    found: dict[str, dict[str, list[str]]] = json.loads(line.removeprefix("CASES "))
    return found


@pytest.fixture(scope="module")
def refusals(preflights: dict[str, dict[str, list[str]]]) -> dict[str, list[str]]:
    return {name: found["refusals"] for name, found in preflights.items()}


NODE_0 = "10.231.7.1"  # test_two_nodes.py's first host; pre-flight connects to nothing


def two_nodes(master: str) -> list[str]:
    """Node 0 of a two-node launch, one worker per node (``test_two_nodes.py``)."""
    return ["--nnodes", "2", "--node-rank", "0", "--master-addr", master,
            "--master-port", "29501"]


def test_two_nodes_need_gloos_interface_where_the_host_name_is_loopback(
        refusals: dict[str, list[str]]) -> None:
    """Refused exactly where gloo would advertise loopback: this host's name resolves to
    127.0.0.1 here (and in the namespaces, where test_two_nodes.py saw the failure)."""
    name = socket.gethostname()
    try:
        loopback = ipaddress.ip_address(socket.gethostbyname(name)).is_loopback
    except OSError:  # no address at all: gloo falls back to loopback too
        loopback = True
    assert refusals["two nodes, interface named"] == []
    assert refusals["two nodes on this host"] == []
    if not loopback:
        assert refusals["two nodes"] == []
        return
    [refused] = refusals["two nodes"]
    assert refused.startswith(f"--nnodes 2 on the CPU: this host's name {name!r} ")
    assert f"tcp://{NODE_0}:29501; distributed/parallel_state.py:1852-1855, " \
           "platforms/cpu.py:108" in refused
    assert refused.endswith(f"set GLOO_SOCKET_IFNAME to the interface that reaches {NODE_0} "
                            f"on every node (`ip route get {NODE_0}` names it)")


def test_accepted_launches(preflights: dict[str, dict[str, list[str]]]) -> None:
    for name in ("tp1", "tp2 bound", "tp1 bf16"):
        assert preflights[name]["refusals"] == [], name
    assert preflights["tp1"]["notes"] == preflights["tp2 bound"]["notes"] == []


AMX = "amx_tile" in next((line for line in Path("/proc/cpuinfo").read_text().splitlines()
                          if line.startswith("flags")), "").split()
"""Whether this CPU has AMX tiles (CPUID, as torch's cpuinfo reads it)."""


def test_bf16_on_a_cpu_with_amx_is_a_note(preflights: dict[str, dict[str, list[str]]]) -> None:
    """Accepted, with a note exactly where vLLM would take its AMX kernel."""
    notes = preflights["tp1 bf16"]["notes"]
    if not AMX:
        assert notes == []
        return
    assert notes == [
        "whether each worker may run AMX: torch.bfloat16 attention on this CPU takes vLLM's "
        "AMX kernel (v1/attention/backends/cpu_attn.py:544-545), and vLLM's own code never "
        "asks Linux for the AMX tile state; a worker where its oneDNN does not ask first (a "
        "model whose linear layers all take vLLM's small-GEMM kernel, model_executor/layers/"
        "utils.py:560, :587) dies with SIGILL at its first request; --dtype float32 takes "
        "the AVX-512 kernel"]


@pytest.mark.skipif(not AMX, reason="this CPU has no AMX tiles: vLLM takes no AMX kernel")
def test_bf16_on_a_cpu_with_amx_dies_as_the_note_says(vllm_python: Path, tiny_model: Path,
                                                      tmp_path: Path) -> None:
    """The note's launch started: vLLM says it is ready; the first request kills the
    worker with SIGILL in the CPU attention (Python's fault handler names the call; vLLM
    logs the exit code as -4, or as None when it looks before the worker is reaped), and
    the engine answers 500."""
    with running(tiny_model, {"PYTHONFAULTHANDLER": "1"}, tmp_path / "vllm.log",
                 more=("--dtype", "bfloat16")) as server:
        server.wait_ready()
        with pytest.raises(OSError):  # urllib's HTTPError (a 500) or a closed connection
            server.generate()
    log = server.text()
    assert "Fatal Python error: Illegal instruction" in log
    assert "in cpu_attention_with_kv_cache" in log
    assert re.search(r"Worker proc VllmWorker-0 died unexpectedly \(exit code: (-4|None)\)",
                     log), log[-3000:]
    assert server.leftovers == []


def test_one_cpu_list_for_two_workers(refusals: dict[str, list[str]]) -> None:
    [refused] = refusals["tp2 one list"]
    assert "VLLM_CPU_OMP_THREADS_BIND='0'" in refused
    assert "(utils/ompmultiprocessing.py:163: Given number of CPU id list ['0'] doesn't " \
           "match local world size 2.)" in refused


def test_head_size_the_cpu_attention_refuses(refusals: dict[str, list[str]]) -> None:
    assert refusals["head 16"] == [
        "the model's head size 16 is not one vLLM's CPU attention supports (32, 64, 80, 96, "
        "112, 128, 160, 192, 224, 256, 512; v1/attention/backends/cpu_attn.py:69): each "
        "worker would fail in its first forward pass (\"Unsupported CPU attention "
        "configuration: head_dim=16\")"]


def test_mooncake_connector_on_cpu(refusals: dict[str, list[str]],
                                   vllm_has_mooncake: bool) -> None:
    """Refused on this CPU with or without Mooncake (``test_connector.py``); without it,
    for the module first, which vLLM fails on first."""
    module = ("MooncakeConnector needs mooncake.engine (Mooncake), which is not installed: "
              "each worker would fail building its KV connector (distributed/kv_transfer/"
              "kv_connector/v1/mooncake/mooncake_connector.py:1178)")
    *first, accelerator = refusals["mooncake p2p"]
    assert first == ([] if vllm_has_mooncake else [module])
    assert accelerator.startswith("MooncakeConnector on the CPU: ")
    assert "mooncake_connector.py:1186" in accelerator


def test_store_connector_needs_its_master(refusals: dict[str, list[str]],
                                          vllm_has_mooncake: bool) -> None:
    module = ("MooncakeStoreConnector needs mooncake.store (Mooncake), which is not "
              "installed: each worker would fail building its KV connector "
              "(distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py:1362)")
    assert refusals["store without config"] == [
        *([] if vllm_has_mooncake else [module]),
        "MooncakeStoreConnector reads its store config from MOONCAKE_CONFIG_PATH "
        "(distributed/mooncake_store.py:72): The environment variable "
        "'MOONCAKE_CONFIG_PATH' is not set."]
    without, = (r for r in refusals["store without master"] if r != module)
    assert "names no master_server_address: the store cannot set up without its master " \
           "(distributed/mooncake_store.py:133-144)" in without
    silent, = (r for r in refusals["store, silent master"] if r != module)
    assert "does not answer" in silent and "distributed/mooncake_store.py:133-144" in silent


def test_tp2_refused_is_what_vllm_stops_on(vllm_python: Path, tiny_model: Path,
                                           tmp_path: Path) -> None:
    """The NUMA refusal launched anyway: vLLM's executor stops before any worker."""
    with running(tiny_model, {}, tmp_path / "vllm.log", tp=2) as server, \
            pytest.raises(RuntimeError, match="before it was ready"):
        server.wait_ready()
    assert "Not enough allowed NUMA nodes to bind threads of 2 local CPUWorkers" in \
        server.text()
    assert server.leftovers == []


def test_head_size_refused_is_what_vllm_fails_on(vllm_python: Path, tmp_path: Path) -> None:
    """The head-size refusal launched anyway: vLLM starts and says it is ready, then its
    worker fails the first request in the CPU attention kernel."""
    model = make_head16_model(tmp_path / "head16")
    with running(model, {}, tmp_path / "vllm.log") as server:
        server.wait_ready()
        with pytest.raises(OSError):  # urllib's HTTPError (a 500) or a closed connection
            server.generate()
    assert "Unsupported CPU attention configuration: head_dim=16" in server.text()
    assert server.leftovers == []
