"""TEST VEHICLE, never installed: an out-of-tree SGLang platform that lets SGLang 0.5.23 run
its pure-torch code paths on a CPU-only machine.

Why it exists: ``SGLANG_USE_CPU_ENGINE=1`` needs sgl-kernel's CPU ops, which no PyPI wheel
ships (``sglang/kernels/ops/kvcache/cache_move.py:10`` fails on ``libcuda.so.1``); without a
platform, model construction reaches for ``vllm._custom_ops``
(``srt/layers/rotary_embedding/base.py:121-139``).  An out-of-tree platform
(``_enum = PlatformEnum.OOT``, ``srt/platforms/interface.py:76``) dispatches every fused op
to its ``forward_native`` (``get_dispatch_key_name`` -> ``"native"``,
``sglang/kernels/fused_op.py``), and SGLang's own ``CpuDeviceMixin``
(``srt/platforms/cpu.py:19``) supplies the CPU device behaviour.

The tests put ``tests/sglang/site`` on ``PYTHONPATH`` of the servers they start and select
it with ``SGLANG_PLATFORM=initorch_test_cpu``; nothing in initorch imports it.
"""

from sglang.srt.platforms.cpu import CpuDeviceMixin
from sglang.srt.platforms.device_mixin import PlatformEnum
from sglang.srt.platforms.interface import SRTPlatform


class TestVehicleCpuPlatform(CpuDeviceMixin, SRTPlatform):
    """SGLang's CPU device operations, with pure-torch kernels and attention."""

    _enum = PlatformEnum.OOT

    def get_default_attention_backend(self) -> str:
        return "torch_native"

    def get_dispatch_key_name(self) -> str:
        return "native"


def activate() -> str:
    """The ``sglang.srt.platforms`` entry point: the platform class, by qualified name."""
    return "initorch_test_cpu_platform:TestVehicleCpuPlatform"


STOCK_POOL_ENV = "INITORCH_TEST_STOCK_CPU_POOL"


def plain_host_pool() -> None:
    """TEST VEHICLE (``sglang.srt.plugins`` entry point), for the stock-SGLang baseline
    only: with ``INITORCH_TEST_STOCK_CPU_POOL=1``, give SGLang's host-pool table a ``cpu``
    entry, without which stock SGLang cannot start HiCache on a CPU at all (its default
    is ``cudaHostRegister``, ``srt/mem_cache/pool_host/common.py:453-459``).  The runs
    under initorch never set it: there initorch installs the profile's allocator."""
    import os

    if os.environ.get(STOCK_POOL_ENV) != "1":
        return
    from sglang.srt.mem_cache.pool_host import common

    def allocate(dims, dtype, device, pin_memory, allocator,  # type: ignore[no-untyped-def]
                 registration_granularity_bytes=None):
        return allocator.allocate(dims, dtype=dtype, device=device)

    common.ALLOC_MEMORY_FUNCS["cpu"] = allocate
