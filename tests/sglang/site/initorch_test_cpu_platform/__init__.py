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
SIMULATED_MUSA_ENV = "INITORCH_TEST_SIMULATED_MUSA"
"""Path of ``tests/support/simulated/site``; ``simulated_musa`` is on when it is set."""


def _load_simulation(env: str) -> bool:
    """Load the ``initorch_simulation`` package from the folder ``env`` names; whether it
    is set.  Only that package is loaded, the folder is never put on ``sys.path``: the
    simulated ``torch_npu``/``torch_musa`` beside it would make transformers take vendor
    code paths (``transformers/integrations/npu_flash_attention.py``), and SGLang's own
    detection looks for them too (``srt/utils/common.py:228-235``)."""
    import importlib.util
    import os
    import sys

    site = os.environ.get(env)
    if not site:
        return False
    other = SIMULATED_MUSA_ENV if env == SIMULATED_ASCEND_ENV else SIMULATED_ASCEND_ENV
    if os.environ.get(other):
        raise RuntimeError(f"TEST VEHICLE: {env} and {other} are both set; a process "
                           "simulates one device")
    if "initorch_simulation" in sys.modules:
        return True
    package = os.path.join(site, "initorch_simulation")
    spec = importlib.util.spec_from_file_location(
        "initorch_simulation", os.path.join(package, "__init__.py"),
        submodule_search_locations=[package])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["initorch_simulation"] = module
    spec.loader.exec_module(module)
    return True


def _bind_calling_thread(runtime) -> None:  # type: ignore[no-untyped-def]
    """``torch.cpu.set_device(i)``, which SGLang calls as
    ``torch.get_device_module(device).set_device(gpu_id)``
    (``distributed/bootstrap.py:133``, ``model_executor/model_runner.py:455``), also binds
    device ``i`` to the calling thread in the simulated ``runtime``, as ``aclrtSetDevice``
    and ``musaSetDevice`` bind the calling host thread; one line on stderr says so."""
    import sys
    import threading

    import torch

    original = torch.cpu.set_device
    if getattr(original, "__initorch_simulated__", False):
        return

    def set_device(device):  # type: ignore[no-untyped-def]
        """SIMULATED: torch.cpu.set_device, binding the calling thread in the runtime."""
        original(device)
        index = device if isinstance(device, int) else (torch.device(device).index or 0)
        runtime.set_device(index)
        print(f"SIMULATED {runtime.vendor} runtime: set_device({index}) bound thread "
              f"{threading.current_thread().name!r}", file=sys.stderr, flush=True)

    set_device.__initorch_simulated__ = True  # type: ignore[attr-defined]
    torch.cpu.set_device = set_device


def simulated_ascend() -> None:
    """TEST VEHICLE with SIMULATED Ascend semantics (``sglang.srt.plugins`` entry point),
    only when ``INITORCH_TEST_SIMULATED_ASCEND`` names ``tests/support/simulated/site``:
    SGLang keeps ``--device cpu`` and every code path it has for it, but the device
    context its own code meets is the simulated Ascend runtime's.

    - ``set_device`` binds the calling thread in the simulated ACL runtime
      (``initorch_simulation.acl.ACL``, :func:`_bind_calling_thread`);
    - Mooncake's engine and store become the simulated ascend-direct build
      (``initorch_simulation.mooncake_ascend``): unless ``MC_FORCE_TCP`` is set, their
      ``initialize``/``setup``/``register_*`` call ``aclrtGetDevice`` on the calling
      thread and fail as the real build does where no device was set there.

    Nothing of SGLang's NPU code paths is faked: SGLang never learns it is "on an NPU".
    """
    if not _load_simulation(SIMULATED_ASCEND_ENV):
        return
    from initorch_simulation.acl import ACL
    from initorch_simulation.mooncake_ascend import install_simulated_ascend_transport

    _bind_calling_thread(ACL)
    install_simulated_ascend_transport()


def simulated_musa() -> None:
    """TEST VEHICLE with SIMULATED Moore Threads MUSA semantics (``sglang.srt.plugins``
    entry point), only when ``INITORCH_TEST_SIMULATED_MUSA`` names
    ``tests/support/simulated/site``.  SGLang keeps ``--device cpu``; what its code meets
    is MUSA's:

    - ``set_device`` binds the calling thread in the simulated MUSA runtime
      (``initorch_simulation.musa.MUSA``): a thread that never set it works on device 0,
      as on CUDA (:func:`_bind_calling_thread`);
    - host memory: ``pin_memory=True`` is served by the simulated pinned host allocator
      of the MUSA plugin (``initorch_simulation.torch_backend``), and each pinned block
      is announced on stderr with its thread and that thread's MUSA device;
    - the host pool of the vehicle's device takes the entry SGLang's own
      ``ALLOC_MEMORY_FUNCS`` has for ``musa``, as SGLang looks up ``musa`` on a MUSA
      machine (``_transfer_device.type``, ``srt/mem_cache/pool_host/mha.py:343``): 0.5.23
      lists it (``pool_host/common.py:453-459``, SGLang PR 23361), so the pool is pinned
      with ``alloc_with_pin_memory`` (``:353-365``); a release without the entry gets the
      table's ``cudaHostRegister`` default, as it would on MUSA.

    Mooncake stays the CPU build.  The MUSA build's ``initialize`` reads no device: with
    ``MC_FORCE_TCP`` (the musa profile's) it installs TCP only, as the CPU build does
    (Mooncake main@3b5a594 ``transfer_engine_impl.cpp:209-223``); the musa transport it
    installs without an HCA (``:329-374``) only writes its segment descriptor
    (``nvlink_transport.cpp:701-731``), and topology discovery counts devices by index
    (``topology.cpp:539-544``).  Nothing of SGLang's MUSA code paths is faked either:
    SGLang needs ``torch.version.musa`` and ``torchada`` to take them
    (``srt/utils/common.py:228-235``).
    """
    if not _load_simulation(SIMULATED_MUSA_ENV):
        return
    from initorch_simulation.musa import MUSA
    from initorch_simulation.pinned import PINNED
    from initorch_simulation.torch_backend import install_simulated_pinned_allocator

    _bind_calling_thread(MUSA)
    PINNED.listen(_announce_pinned)
    install_simulated_pinned_allocator("musa")
    from sglang.srt.mem_cache.pool_host import common

    table = common.ALLOC_MEMORY_FUNCS
    if "cpu" not in table:  # membership does not call the defaultdict's factory
        table["cpu"] = table["musa"] if "musa" in table else table.default_factory()


def _announce_pinned(block) -> None:  # type: ignore[no-untyped-def]
    """One stderr line per simulated pinned block: size, thread, that thread's device."""
    import sys

    from initorch_simulation.musa import MUSA

    device = MUSA.thread_device()
    bound = "set_device never ran there" if device is None else f"device {device}"
    print(f"SIMULATED musa runtime: pinned {block.nbytes} bytes of host memory on thread "
          f"{block.thread_name!r} ({bound})", file=sys.stderr, flush=True)


def no_pynccl_before_capabilities() -> None:
    """TEST VEHICLE (``sglang.srt.plugins`` entry point) for SGLang releases older than
    ``PlatformCapabilities`` (0.5.17 here): give the out-of-tree platform no PyNccl, as
    0.5.23 does for every out-of-tree platform that does not declare ``supports_pynccl``
    (``srt/distributed/parallel_state.py:2180-2185``; the default,
    ``srt/platforms/interface.py:73``).

    0.5.17 gives every group a ``PyNcclCommunicator`` unless the device is NPU or XPU
    (``init_model_parallel_group``, ``srt/distributed/parallel_state.py:1851-1855``); with the
    CUDA torch its pin brings (torch 2.11.0, NCCL found), the communicator then enters
    ``torch.cuda.device(device)`` on ``cpu`` and fails
    (``srt/distributed/device_communicators/pynccl.py:113``: "Expected a cuda device, but
    got: cpu").  On a release with ``PlatformCapabilities`` this does nothing, and so it
    does without this platform selected.
    """
    import os

    if os.environ.get("SGLANG_PLATFORM") != "initorch_test_cpu":
        return
    from sglang.srt.platforms import interface

    if hasattr(interface, "PlatformCapabilities"):
        return
    import functools

    from sglang.srt.distributed import parallel_state

    original = parallel_state.init_model_parallel_group
    if getattr(original, "__initorch_test_vehicle__", False):
        return

    @functools.wraps(original)
    def init_model_parallel_group(*args, use_pynccl=None, **kwargs):  # type: ignore[no-untyped-def]
        return original(*args, use_pynccl=False if use_pynccl is None else use_pynccl,
                        **kwargs)

    init_model_parallel_group.__initorch_test_vehicle__ = True  # type: ignore[attr-defined]
    parallel_state.init_model_parallel_group = init_model_parallel_group


def _native_paged_allocator() -> type:
    """SGLang 0.5.17's paged KV allocator with its two Triton kernels in pure torch, for the
    releases before ``PlatformCapabilities``: 0.5.17 asks an out-of-tree platform for its
    allocator class (``srt/mem_cache/kv_cache_configurator.py:1468-1476``) and its own
    ``PagedTokenToKVPoolAllocator`` always launches ``alloc_extend_kernel`` and
    ``alloc_decode_kernel`` (``srt/mem_cache/allocator/paged.py:197, 238``), which cannot
    run on CPU tensors.  0.5.23 takes the same torch path itself when the platform does
    not declare ``supports_triton`` (``srt/mem_cache/allocator/paged.py:155, 232-250,
    303-320``); the extend path is 0.5.17's own ``alloc_extend_naive`` (paged.py:45), the
    decode path the one of 0.5.17's NPU allocator (``hardware_backend/npu/allocator_npu.py``).
    """
    import torch
    from sglang.srt.mem_cache.allocator import PagedTokenToKVPoolAllocator, alloc_extend_naive
    from sglang.srt.utils import get_num_new_pages

    class NativePagedTokenToKVPoolAllocator(PagedTokenToKVPoolAllocator):  # type: ignore[misc]
        def alloc_extend(self, prefix_lens, prefix_lens_cpu, seq_lens,  # type: ignore[no-untyped-def]
                         seq_lens_cpu, last_loc, extend_num_tokens, num_new_pages=None):
            if num_new_pages is None:
                num_new_pages = get_num_new_pages(seq_lens=seq_lens_cpu,
                                                  page_size=self.page_size,
                                                  prefix_lens=prefix_lens_cpu)
            if num_new_pages > len(self.free_pages):
                self.merge_and_sort_free()
            if num_new_pages > len(self.free_pages):
                return None
            out_indices = torch.empty((extend_num_tokens,), dtype=torch.int64,
                                      device=self.device)
            alloc_extend_naive(prefix_lens, seq_lens, last_loc, self.free_pages, out_indices,
                               self.page_size, self.device)
            self.free_pages = self.free_pages[num_new_pages:]
            return out_indices

        def alloc_decode(self, seq_lens, seq_lens_cpu, last_loc):  # type: ignore[no-untyped-def]
            num_new_pages = get_num_new_pages(seq_lens=seq_lens_cpu, page_size=self.page_size,
                                              decode=True)
            if num_new_pages > len(self.free_pages):
                self.merge_and_sort_free()
            if num_new_pages > len(self.free_pages):
                return None
            need = (seq_lens % self.page_size == 1).to(torch.int64)
            if num_new_pages == 0:
                out_indices = (last_loc + 1).to(torch.int64)
            else:
                start = (torch.cumsum(need, 0) - need).clamp(max=num_new_pages - 1)
                out_indices = torch.where(need.bool(), self.free_pages[start] * self.page_size,
                                          last_loc + 1).to(torch.int64)
            self.free_pages = self.free_pages[num_new_pages:]
            return out_indices

    return NativePagedTokenToKVPoolAllocator


def _before_capabilities() -> None:
    """TEST VEHICLE, for SGLang releases older than ``PlatformCapabilities`` (0.5.17 here),
    which ask an out-of-tree platform for its KV pool and paged allocator classes and have
    no default (``srt/platforms/interface.py:63-65`` and ``:75-77`` raise
    ``NotImplementedError``; called at ``srt/mem_cache/kv_cache_configurator.py:1080`` and
    ``:1469``): the in-tree ``MHATokenToKVPool``, which allocates on any torch device, as
    0.5.23's default does (``get_kv_pool_cls`` -> ``None``, interface.py:130-142), and the
    torch-only paged allocator above.  Nothing changes on a release that has
    ``PlatformCapabilities`` (0.5.23 would warn about the removed ``get_mha_kv_pool_cls``)."""
    from sglang.srt.platforms import interface

    if hasattr(interface, "PlatformCapabilities"):
        return

    def get_mha_kv_pool_cls(self: TestVehicleCpuPlatform) -> type:
        from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

        return MHATokenToKVPool  # type: ignore[no-any-return]

    def get_paged_allocator_cls(self: TestVehicleCpuPlatform) -> type:
        return _native_paged_allocator()

    TestVehicleCpuPlatform.get_mha_kv_pool_cls = get_mha_kv_pool_cls  # type: ignore[method-assign]
    TestVehicleCpuPlatform.get_paged_allocator_cls = (  # type: ignore[method-assign]
        get_paged_allocator_cls)


_before_capabilities()
