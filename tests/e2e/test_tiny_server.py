"""The tiny server, for real: started by initorch under torchrun on 2 CPU ranks,
one request answered by both ranks in agreement (and equal to a single-process
reference decode of the same weights), then a clean shutdown that leaves no
process and no listening port behind."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

EXAMPLES = REPO / "examples"
sys.path.insert(0, str(EXAMPLES))

from tiny_server.client import get, leftovers, post, wait_ready  # noqa: E402
from tiny_server.kv_cache import KVPool  # noqa: E402
from tiny_server.model import TensorParallel, TinyDecoder, generate_weights  # noqa: E402

START_TIMEOUT = 90.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def reference_tokens(weights: Path, prompt: str, count: int) -> list[int]:
    """The same decode in this process, without tensor parallelism."""
    model = TinyDecoder.load(weights, TensorParallel(0, 1, None))
    config = model.config
    pool = KVPool(config.num_layers, 256, model.local_heads, config.head_dim)
    return model.generate(list(prompt.encode()), count, pool)


@contextlib.contextmanager
def two_ranks(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """The tiny server under torchrun, two ranks, JSON logs; and its ready file.  In its
    own session, which goes whole when the block leaves it running (torchrun's ranks
    hold the pipes, so killing torchrun alone would leave communicate() waiting)."""
    proc, ready = _launch(tmp_path)
    try:
        yield proc, ready
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()


def _launch(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    weights = generate_weights(tmp_path / "model.safetensors")
    ready = tmp_path / "ready.json"
    command = [str(Path(sys.executable).parent / "torchrun"), "--nproc-per-node=2",
               f"--master-port={free_port()}", "-m", "tiny_server.launch",
               "--set", f"model.path={weights}", "--ready-file", str(ready),
               "--log-format", "json"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen(command, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True), ready


def test_tiny_server_starts_answers_and_shuts_down_cleanly(tmp_path: Path) -> None:
    with two_ranks(tmp_path) as (proc, ready):
        info = wait_ready(proc, ready, START_TIMEOUT)
        url = info["url"]
        assert url.startswith("http://127.0.0.1:")

        status, answer = post(f"{url}/generate", {"prompt": "hello", "max_new_tokens": 8})
        assert status == 200, answer
        assert answer["ranks"] == 2 and answer["ranks_agree"] is True
        assert answer["tokens_by_rank"][0] == answer["tokens_by_rank"][1] == answer["tokens"]
        assert answer["tokens"] == reference_tokens(tmp_path / "model.safetensors", "hello", 8)

        status, refused = post(f"{url}/generate", {"prompt": "", "max_new_tokens": 8})
        assert status == 400 and "prompt" in refused["error"]

        startup = get(f"{url}/startup")
        chain = [link["step"] for link in startup["critical_chain"]]
        assert chain[0] == "warmup"
        # Which branch is longest is timing: the model's (load_model, memory_baseline) or
        # the store's (init_mooncake_store, now that collectives are not pre-warmed).
        assert {"load_model", "init_mooncake_store"} & set(chain)
        assert chain[-1] in ("import_backend", "launch_mooncake_master")
        assert "critical chain:" in startup["summary"]

        status, stopping = post(f"{url}/shutdown", {})
        assert status == 200 and stopping == {"stopping": True, "ranks": 2}
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-6000:]
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    served = [e for e in events if e["event"] == "request_served"]
    assert len(served) == 2 and all(e["ranks_agree"] for e in served)
    torn_down = {(e["rank"], e["step"]) for e in events if e["event"] == "teardown_succeeded"}
    for rank in (0, 1):
        assert {(rank, "init_model_parallel"), (rank, "register_mem_pool_host"),
                (rank, "init_mooncake_store"),
                (rank, "init_shared_mooncake_transfer_engine")} <= torn_down
    assert not [e for e in events if e["event"] == "teardown_failed"]
    # The HiCache host pool went to the Mooncake Store, through one managed master.
    assert {e["rank"] for e in events if e["event"] == "mooncake_store_ready"} == {0, 1}
    assert {e["rank"] for e in events if e["event"] == "host_pool_registered"} == {0, 1}
    assert len([e for e in events if e["event"] == "mooncake_master_stopped"]) == 1
    assert sum(1 for rank in info["ranks"] if rank["master"]) == 1
    kv = {e["rank"]: e["nbytes"] for e in events if e["event"] == "kv_pool_allocated"}
    host = {e["rank"]: e["nbytes"] for e in events if e["event"] == "host_pool_allocated"}
    assert host == {rank: 2 * nbytes for rank, nbytes in kv.items()}  # hicache.host_pool_ratio
    assert leftovers(info) == []


@pytest.mark.parametrize(("body", "message"), [
    (b"not json", "body is not JSON"),
    (b"[1]", "body must be a JSON object"),
    (b'{"prompt": 3}', "'prompt' must be a non-empty string"),
    (b'{"prompt": "x", "max_new_tokens": 0}', "'max_new_tokens' must be a whole number in 1..64"),
    (b'{"prompt": "x", "max_new_tokens": true}', "'max_new_tokens'"),
    (b'{"prompt": "xxxxxxxx", "max_new_tokens": 64}', "need 72 KV slots; the pool has 70"),
])
def test_bad_requests_are_refused_before_any_rank_decodes(body: bytes, message: str) -> None:
    from tiny_server.serve import BadRequest, parse_generate

    with pytest.raises(BadRequest, match=message):
        parse_generate(body, max_new_tokens=64, pool_tokens=70)


def test_sigterm_to_torchrun_stops_every_rank_with_its_teardown_and_143(tmp_path: Path
                                                                        ) -> None:
    # Issue 27 (and 19 before it): torchrun forwards a SIGTERM to every rank and SIGKILLs
    # them 30 s on. Rank 1 used to wait inside gloo's broadcast for rank 0's next command,
    # on its main thread, where its handler could not run: the watchdog SIGKILLed it 3 s
    # on, without a teardown, and rank 0's master waited for its store client. Now the
    # serving loop stops on every rank at a command boundary, and each rank tears down.
    with two_ranks(tmp_path) as (proc, ready):
        info = wait_ready(proc, ready, START_TIMEOUT)
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)  # as a user or Kubernetes stops torchrun
        _out, err = proc.communicate(timeout=60)  # torchrun and its ranks let go of it
        took = time.monotonic() - sent
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    # torchrun's agent re-raises its SignalException after closing the workers
    # (torch/distributed/elastic/agent/server/api.py, LocalElasticAgent.run): exit 1.
    assert proc.returncode == 1 and "SignalException" in err, err[-6000:]
    assert "forcefully exiting via SIGKILL" not in err  # torchrun's 30 s SIGKILL
    assert not [e for e in events if e["event"].startswith("watchdog_")]
    assert "the watchdog ends the process" not in err  # its text form
    # Each rank handled the signal, tore down and concluded itself with 143 (the line
    # comes just before its sys.exit(143); a SIGKILL leaves none).
    assert {e["rank"] for e in events if e["event"] == "signal_received"} == {0, 1}
    for rank in (0, 1):
        assert (f"tiny-server: rank {rank} interrupted by SIGTERM; the start-up was torn "
                "down (exit 143)") in err, err[-6000:]
    torn_down = {(e["rank"], e["step"]) for e in events if e["event"] == "teardown_succeeded"}
    for rank in (0, 1):
        assert {(rank, "register_mem_pool_host"), (rank, "init_mooncake_store"),
                (rank, "init_model_parallel"), (rank, "init_torch_distributed"),
                (rank, "init_shared_mooncake_transfer_engine"),
                (rank, "rendezvous")} <= torn_down
    assert (0, "mooncake_master") in torn_down
    assert [e["rank"] for e in events if e["event"] == "mooncake_master_stopped"] == [0]
    assert not [e for e in events if e["event"] == "teardown_failed"]
    assert took < 15.0, f"torchrun took {took:.1f}s after SIGTERM"  # was ~12-15 s
    assert leftovers(info) == []


def test_sigterm_to_rank_1_alone_stops_the_job_with_every_teardown(tmp_path: Path) -> None:
    # A SIGTERM to one rank other than 0 (not torchrun's): it asks rank 0, through the
    # job's store, for the stop it waits for; rank 0 leaves the loop as on /shutdown.
    with two_ranks(tmp_path) as (proc, ready):
        info = wait_ready(proc, ready, START_TIMEOUT)
        os.kill(info["ranks"][1]["pid"], signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    events = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert ("tiny-server: rank 1 interrupted by SIGTERM; the start-up was torn down "
            "(exit 143)") in err, err[-6000:]
    assert "tiny-server: rank 0 interrupted" not in err  # rank 0 stopped as on /shutdown
    # torchrun reports the rank's exit status (torch/distributed/elastic/multiprocessing/
    # api.py, SubprocessContext._poll) and exits 1, as for any failed worker.
    assert "failed (exitcode: 143) local_rank: 1" in err
    assert proc.returncode == 1
    assert not [e for e in events if e["event"].startswith("watchdog_")]
    assert "the watchdog ends the process" not in err
    torn_down = {(e["rank"], e["step"]) for e in events if e["event"] == "teardown_succeeded"}
    for rank in (0, 1):
        assert {(rank, "init_mooncake_store"), (rank, "init_torch_distributed"),
                (rank, "init_shared_mooncake_transfer_engine")} <= torn_down
    assert [e["rank"] for e in events if e["event"] == "mooncake_master_stopped"] == [0]
    assert not [e for e in events if e["event"] == "teardown_failed"]
    assert leftovers(info) == []
