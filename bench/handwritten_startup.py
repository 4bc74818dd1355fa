"""The baseline of the start-up row: what ``initorch run --profile cpu --set
checks.verify_transfer=true`` does, written by hand without initorch.

    python bench/handwritten_startup.py

The same library calls, written as carefully as initorch's plan runs them (``initorch
plan --profile cpu``): the mooncake_master on loopback is started first, found without
importing Mooncake, so that it comes up while torch imports (as the plan's first wave
does); then import torch, a 64 MiB host pool, a Mooncake TransferEngine over TCP, a
gloo process group of one rank, the master waited for on its /health, a
MooncakeDistributedStore reusing the engine (with SGLang's 4 KiB warm-up), the pool
registered with the store, 4 KV pages of the page_first layout put and read back byte
for byte; then everything released in reverse, one call at a time, as a script does.
No checks, diagnoses, logging or retries beyond what the calls need to be right.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

PAGE_PART = 16 * 4 * 2 * 2 * 64  # tokens x layers x bf16 x heads x head_dim: one K or V
PAGES = 4


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def ready(metrics_port: int, rpc_port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health",
                                    timeout=1) as reply:
            if not json.loads(reply.read()).get("service_ready"):
                return False
        socket.create_connection(("127.0.0.1", rpc_port), timeout=1).close()
    except (OSError, ValueError):
        return False
    return True


def start_master() -> tuple[subprocess.Popen[bytes], int, int, int]:
    """The mooncake_master binary of the installed wheel, started at once (the package is
    located, not imported: importing it would wait for what the master does meanwhile)."""
    spec = importlib.util.find_spec("mooncake")
    assert spec is not None and spec.origin is not None, "mooncake is not installed"
    binary = Path(spec.origin).parent / "mooncake_master"
    rpc, metadata, metrics = free_port(), free_port(), free_port()
    master = subprocess.Popen(
        [str(binary), "--rpc_address=127.0.0.1", f"--rpc_port={rpc}",
         "--enable_http_metadata_server=true", "--http_metadata_server_host=127.0.0.1",
         f"--http_metadata_server_port={metadata}", "--metrics_host=127.0.0.1",
         f"--metrics_port={metrics}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return master, rpc, metadata, metrics


def main() -> None:
    os.environ.setdefault("MC_FORCE_TCP", "1")
    master, rpc, metadata, metrics = start_master()
    import torch
    import torch.distributed as dist
    from mooncake.engine import TransferEngine
    from mooncake.store import MooncakeDistributedStore

    pool = torch.empty(64 * 2**20, dtype=torch.uint8)
    ptr, nbytes = pool.data_ptr(), pool.numel()

    engine = TransferEngine()
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    session = f"127.0.0.1:{engine.get_rpc_port()}"

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                            rank=0, world_size=1)

    while not ready(metrics, rpc):
        assert master.poll() is None, "mooncake_master exited"
        time.sleep(0.1)

    store = MooncakeDistributedStore()
    assert store.setup(session, f"http://127.0.0.1:{metadata}/metadata", 64 * 2**20,
                       16 * 2**20, "tcp", "", f"127.0.0.1:{rpc}", engine.get_engine()) == 0
    warm = f"warmup_{uuid.uuid4().hex}"
    value = bytes(range(256)) * 16
    assert store.put(warm, value) == 0 and bytes(store.get(warm)) == value
    store.remove(warm)

    assert store.register_buffer(ptr, nbytes) == 0

    prefix = f"verify-{uuid.uuid4().hex[:12]}"
    half = nbytes // 2  # page_first: all K parts, then all V parts

    def parts(page: int) -> list[tuple[int, int]]:
        return [(ptr + page * PAGE_PART, PAGE_PART), (ptr + half + page * PAGE_PART, PAGE_PART)]

    keys = [f"{prefix}_{page}_{part}" for page in range(PAGES) for part in ("k", "v")]
    index = torch.arange(PAGE_PART, dtype=torch.int64)
    expected = []
    for page in range(PAGES):
        for part, (at, size) in enumerate(parts(page)):
            data = ((index * 31 + page * 13 + part * 7 + 5) % 251).to(torch.uint8)
            pool[at - ptr:at - ptr + size].copy_(data)
            expected.append(data)
    sources = [buffer for page in range(PAGES) for buffer in parts(page)]
    assert all(code == 0 for code in store.batch_put_from(
        keys, [p for p, _ in sources], [n for _, n in sources]))
    targets = [buffer for page in range(PAGES, 2 * PAGES) for buffer in parts(page)]
    assert all(code > 0 for code in store.batch_get_into(
        keys, [p for p, _ in targets], [n for _, n in targets]))
    for (at, size), data in zip(targets, expected, strict=True):
        assert bool((pool[at - ptr:at - ptr + size] == data).all())
    store.batch_remove(keys)

    store.unregister_buffer(ptr)
    store.close()
    master.terminate()
    master.wait()
    dist.destroy_process_group()
    del engine


if __name__ == "__main__":
    main()
