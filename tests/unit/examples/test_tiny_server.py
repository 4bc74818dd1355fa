"""The tiny server example without starting it: its plan on every accelerator,
its weights file and sharded loading, its KV pool."""

from __future__ import annotations

import queue
import sys
from pathlib import Path

import pytest
import torch

from initorch import Registry, load_plan
from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "examples"))

from tiny_server.kv_cache import KVPool, KVPoolExhausted
from tiny_server.model import (
    TensorParallel,
    TinyConfig,
    TinyDecoder,
    generate_weights,
    read_config,
)

# SGLang 0.5.23 order, then the launcher's own steps (model_runner.py).
SERVER_ORDER = ("bind_cpu_threads", "set_device", "init_torch_distributed",
                "init_model_parallel", "memory_baseline", "load_model",
                "alloc_kv_pool", "alloc_host_mem_pool", "register_mem_pool_host", "warmup")


@pytest.fixture(scope="module")
def registry() -> Registry:
    return Registry.with_plugins(["tiny_server.steps"])


@pytest.mark.parametrize("device", ["cpu", "cuda", "npu", "musa", "rocm", "xpu"])
def test_the_same_server_plans_on_every_accelerator(registry: Registry, device: str) -> None:
    plan = load_plan(["tiny-server"], device=device, registry=registry)
    assert plan.profiles == ("base", device, "server", "tiny-server")
    assert [s for s in plan.order if s in SERVER_ORDER] == list(SERVER_ORDER)
    assert plan.order.index("set_device") < plan.order.index(
        "init_shared_mooncake_transfer_engine") < plan.order.index("register_mem_pool_host")
    assert "alloc_kv_pool" in plan.step("alloc_host_mem_pool").step.requires


def test_the_npu_plan_binds_the_device_before_the_engine(registry: Registry) -> None:
    plan = load_plan(["tiny-server"], device="npu", registry=registry)
    chain = plan.explain("set_device", "init_shared_mooncake_transfer_engine")
    assert chain[0].kind == "device"


def test_weights_round_trip_and_shard_by_rows_and_columns(tmp_path: Path) -> None:
    path = generate_weights(tmp_path / "w.safetensors", seed=3)
    config = read_config(path)
    assert config == TinyConfig()
    full = TinyDecoder.load(path, TensorParallel(0, 1, None)).weights
    halves = [TinyDecoder.load(path, TensorParallel(r, 2, None)).weights for r in (0, 1)]
    q, o = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"
    assert torch.equal(torch.cat([h[q] for h in halves], dim=0), full[q])  # column-parallel
    assert torch.equal(torch.cat([h[o] for h in halves], dim=1), full[o])  # row-parallel
    embed = "model.embed_tokens.weight"
    assert all(torch.equal(h[embed], full[embed]) for h in halves)  # replicated
    again = generate_weights(tmp_path / "again.safetensors", seed=3)
    assert TinyDecoder.load(again, TensorParallel(0, 1, None)).weights[q].equal(full[q])


def test_heads_must_split_over_the_ranks(tmp_path: Path) -> None:
    path = generate_weights(tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="does not split over 3"):
        TinyDecoder.load(path, TensorParallel(0, 3, None))


def test_kv_pool_hands_out_and_takes_back_slots() -> None:
    pool = KVPool(layers=2, tokens=8, heads=2, head_dim=4)
    assert pool.device_pool_bytes == 8 * KVPool.bytes_per_token(2, 2, 4)
    first = pool.allocate(5)
    assert pool.free_slots == 3
    with pytest.raises(KVPoolExhausted, match="6 KV slots needed, 3 free of 8"):
        pool.allocate(6)
    pool.free(first)
    assert pool.free_slots == 8


def test_decode_with_the_kv_pool_equals_recomputing_everything(tmp_path: Path) -> None:
    model = TinyDecoder.load(generate_weights(tmp_path / "w.safetensors"),
                             TensorParallel(0, 1, None))
    pool = KVPool(model.config.num_layers, 64, model.local_heads, model.config.head_dim)
    cached = model.generate(list(b"initorch"), 6, pool)
    tokens = list(b"initorch")
    for _ in range(6):
        slots = pool.allocate(len(tokens))
        logits = model.forward(torch.tensor(tokens), torch.arange(len(tokens)), slots, slots,
                               pool)
        pool.free(slots)
        tokens.append(int(logits[-1].argmax()))
    assert cached == tokens[len(b"initorch"):]
    assert pool.free_slots == 64


def test_the_launchers_dry_run_imports_no_torch() -> None:
    from tests.support.commands import run_python

    result = run_python(f"""
        import sys
        sys.path.insert(0, {str(REPO / "examples")!r})
        from tiny_server.launch import main
        assert main(["--device", "musa", "--plan", "--set", "cpu_binding.policy=split"]) == 0
        print("TORCH", sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "mooncake")))
        """, env={"LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"})
    assert result.returncode == 0, result.stderr
    assert "profiles: base -> musa -> server -> tiny-server" in result.stdout
    assert "local rank 1: cpus" in result.stdout
    assert result.stdout.splitlines()[-1] == "TORCH []"


@pytest.mark.parametrize("device", ["npu", "musa", "cuda"])
def test_initorch_plans_the_server_with_its_plugin(device: str) -> None:
    import json
    import os

    from tests.support.commands import initorch_command

    path = os.pathsep.join(filter(None, [str(REPO / "examples"), os.environ.get("PYTHONPATH")]))
    result = initorch_command("--plugin", "tiny_server.steps", "plan", "-d", device,
                              "-p", "tiny-server", "--json", env={"PYTHONPATH": path})
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["profiles"] == ["base", device, "server", "tiny-server"]
    assert [s for s in plan["order"] if s in SERVER_ORDER] == list(SERVER_ORDER)


# -- the HTTP front end is one a server could deploy (issue 19) ------------------------------

@pytest.fixture
def front_end():
    """Rank 0's HTTP front end on loopback, with a serving loop that answers at once."""
    import queue
    import threading

    from tiny_server.serve import HTTPFrontEnd, make_handler

    jobs: queue.Queue = queue.Queue()
    server = HTTPFrontEnd(("127.0.0.1", 0), make_handler(jobs, {"ok": True}, 8, 64))
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def answer() -> None:
        while True:
            job = jobs.get()
            if job is None:
                return
            job.answer = {"tokens": [1], "command": job.command["op"]}
            job.done.set()

    threading.Thread(target=answer, daemon=True).start()
    yield server.server_address[1]
    jobs.put(None)
    server.shutdown()
    server.server_close()


def raw_request(port: int, data: bytes) -> tuple[int, dict]:
    """Send ``data`` as it is; the status and JSON body of the answer."""
    import json
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def post(body: bytes, length: str | None = None) -> bytes:
    shown = str(len(body)) if length is None else length
    return (b"POST /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "
            + shown.encode() + b"\r\n\r\n" + body)


@pytest.mark.parametrize(("data", "status", "said"), [
    (post(b"{}", "abc"), 400, "Content-Length 'abc' is not a whole number"),
    (post(b"{}", "-1"), 400, "Content-Length '-1' is not a whole number"),
    (post(b"\xff\xfe"), 400, "body is not UTF-8 text"),
    (post(b'{"prompt": "\\ud800", "max_new_tokens": 2}'), 400,
     "'prompt' is not valid Unicode (a lone surrogate)"),
    (post(b"{}", str(2 << 20)), 413, "the body may have at most 1048576 bytes"),
    (post(b'{"prompt": "hi", "max_new_tokens": 2}'), 200, None),
], ids=["length-abc", "length-negative", "not-utf8", "lone-surrogate", "too-large", "ok"])
def test_malformed_requests_get_a_4xx_answer(front_end, data, status, said):
    code, answer = raw_request(front_end, data)
    assert code == status, answer
    if said is not None:
        assert answer["error"] == said


def test_a_client_sending_half_a_body_stops_no_other_client(front_end):
    import socket
    import time
    import urllib.request

    with socket.create_connection(("127.0.0.1", front_end)) as stalled:
        stalled.sendall(post(b'{"prompt": "hi"}', "100")[:-4])  # and then nothing
        began = time.monotonic()
        with urllib.request.urlopen(f"http://127.0.0.1:{front_end}/health", timeout=5) as ok:
            assert ok.status == 200
        assert time.monotonic() - began < 2


def test_fifty_concurrent_clients_are_all_answered(front_end):
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor

    def health(_: int) -> int:
        with urllib.request.urlopen(f"http://127.0.0.1:{front_end}/health", timeout=10) as ok:
            return int(ok.status)

    with ThreadPoolExecutor(50) as pool:
        assert list(pool.map(health, range(50))) == [200] * 50


def test_a_client_that_hung_up_is_one_line_not_a_traceback(capsys):
    from tiny_server.serve import HTTPFrontEnd, make_handler

    server = HTTPFrontEnd(("127.0.0.1", 0), make_handler(queue.Queue(), {"ok": True}, 8, 64))
    try:
        for error in (BrokenPipeError(32, "Broken pipe"), ValueError("a bug")):
            try:
                raise error
            except (BrokenPipeError, ValueError):
                server.handle_error(None, ("127.0.0.1", 5))
    finally:
        server.server_close()
    said = capsys.readouterr().err
    first, _, rest = said.partition("\n")
    assert first == "tiny-server: the client at 127.0.0.1 hung up before its answer " \
                    "(BrokenPipeError)"
    assert "Traceback" in rest and "ValueError: a bug" in rest  # a real error keeps it
