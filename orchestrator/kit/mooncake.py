"""Mooncake's vendor calls that need the calling thread's device context, as one table.

They are the same whichever engine makes them (Mooncake 0.3.13's Python bindings: the
transfer engine's ``initialize``, the store's ``setup`` and ``register_buffer``), so the
table lives here, beside the recorder that reads it, and every integration installs it
(:func:`initorch.kit.vendor.install_vendor_hooks`).  It is not in ``initorch.steps``:
the built-in steps *make* these calls; this table is what an observer wraps, and the
steps must not depend on the observing tier.  Each ``step`` is the built-in step the
call performs; each reason cites Mooncake's source.
"""

from __future__ import annotations

from initorch.kit.vendor import VendorCall

__all__ = ["MOONCAKE_CALLS"]

_ENGINE_WHY = ("Mooncake's Ascend transports read the calling thread's device at install "
               "(ascend_direct_transport.cpp:244 allocateLocalSegmentID, hccl_transport.cpp:323 "
               "rankInfoParse: aclrtGetDevice, 107002 without a context)")
_STORE_WHY = ("the Mooncake Store's own engine installs the same transport at setup "
              "(client_service.cpp:940), and ascend-direct stamps each buffer with the calling "
              "thread's device (ascend_direct_transport.cpp:80 StampBufferDeviceId)")
_ASCEND = frozenset({"ascend"})
"""The transports that read the calling thread's device.  The others do not: with
``MC_FORCE_TCP`` the engine installs TCP only (transfer_engine_impl.cpp:209-223); the
MUSA build's musa transport only writes its segment descriptor at install
(nvlink_transport.cpp:701-731); topology discovery counts devices by index
(topology.cpp:539-544).  Mooncake main@3b5a594, matching the 0.3.13.post1 wheels."""

MOONCAKE_CALLS: tuple[VendorCall, ...] = (
    VendorCall("mooncake.engine", "TransferEngine", "initialize",
               "init_shared_mooncake_transfer_engine", _ENGINE_WHY, protocols=_ASCEND),
    VendorCall("mooncake.engine", "TransferEngine", "initialize_ext",
               "init_shared_mooncake_transfer_engine", _ENGINE_WHY, protocols=_ASCEND),
    VendorCall("mooncake.store", "MooncakeDistributedStore", "setup", "init_mooncake_store",
               _STORE_WHY, protocols=_ASCEND),
    VendorCall("mooncake.store", "MooncakeDistributedStore", "register_buffer",
               "register_mem_pool_host", _STORE_WHY, protocols=_ASCEND),
)
"""Every Mooncake call verify mode records (Mooncake 0.3.13's Python bindings)."""

