"""Where a worker's process group met, as its report records it (``process_group``).

Read back from torch's own world group, here built by torch itself (gloo, one rank) on
each store a vLLM worker meets on: the file store of one host's executor and the TCP
store of ``--master-addr``/``--master-port`` across nodes.  The real workers' reports
carry it too (``assert_verified``, ``test_server.py`` and ``test_two_nodes.py``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from initorch_vllm.session import process_group
from tests.sglang.server import free_port


@pytest.fixture
def world() -> Iterator[None]:
    """A world group set up by the test, always taken down."""
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_none_before_the_process_group() -> None:
    assert not dist.is_initialized()
    assert process_group() == {}


@pytest.mark.usefixtures("world")
def test_a_tcp_store_gives_its_address() -> None:
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    assert process_group() == {"backend": "gloo", "world_size": 1, "store": "tcp",
                               "address": f"127.0.0.1:{port}"}


@pytest.mark.usefixtures("world")
def test_a_file_store_gives_its_path(tmp_path: Path) -> None:
    path = tmp_path / "vllm_dist_store"
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=0, world_size=1)
    assert process_group() == {"backend": "gloo", "world_size": 1, "store": "file",
                               "path": str(path)}
