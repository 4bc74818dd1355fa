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


SIMULATED_ASCEND_ENV = "INITORCH_TEST_SIMULATED_ASCEND"
"""Path of ``tests/support/simulated/site``; ``simulated_ascend`` is on when it is set."""


def simulated_ascend() -> None:
    """TEST VEHICLE with SIMULATED Ascend semantics (``sglang.srt.plugins`` entry point),
    only when ``INITORCH_TEST_SIMULATED_ASCEND`` names ``tests/support/simulated/site``:
    SGLang keeps ``--device cpu`` and every code path it has for it, but the device
    context its own code meets is the simulated Ascend runtime's.

    - ``torch.cpu.set_device(i)``, which SGLang calls as
      ``torch.get_device_module(device).set_device(gpu_id)`` (``distributed/bootstrap.py:133``,
      ``model_executor/model_runner.py:455``), also binds device ``i`` to the calling
      thread in the simulated ACL runtime (``initorch_simulation.acl.ACL``), as
      ``aclrtSetDevice`` binds the calling host thread;
    - Mooncake's engine and store become the simulated ascend-direct build
      (``initorch_simulation.mooncake_ascend``): unless ``MC_FORCE_TCP`` is set, their
      ``initialize``/``setup``/``register_*`` call ``aclrtGetDevice`` on the calling
      thread and fail as the real build does where no device was set there.

    Nothing of SGLang's NPU code paths is faked: SGLang never learns it is "on an NPU".
    Only the ``initorch_simulation`` package is loaded from that folder, never put on
    ``sys.path``: its simulated ``torch_npu`` beside it would make transformers take NPU
    code paths (``transformers/integrations/npu_flash_attention.py``).
    """
    import importlib.util
    import os
    import sys

    site = os.environ.get(SIMULATED_ASCEND_ENV)
    if not site:
        return
    package = os.path.join(site, "initorch_simulation")
    spec = importlib.util.spec_from_file_location(
        "initorch_simulation", os.path.join(package, "__init__.py"),
        submodule_search_locations=[package])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["initorch_simulation"] = module
    spec.loader.exec_module(module)

    import torch
    from initorch_simulation.acl import ACL
    from initorch_simulation.mooncake_ascend import install_simulated_ascend_transport

    original = torch.cpu.set_device

    def set_device(device):  # type: ignore[no-untyped-def]
        """SIMULATED: torch.cpu.set_device, binding the calling thread in the simulated ACL."""
        original(device)
        index = device if isinstance(device, int) else (torch.device(device).index or 0)
        ACL.set_device(index)

    set_device.__initorch_simulated__ = True  # type: ignore[attr-defined]
    torch.cpu.set_device = set_device
    install_simulated_ascend_transport()
