"""SIMULATED torch_npu -- NOT the Huawei Ascend plugin.  Test-only, never installed.

This package exists only on the PYTHONPATH of initorch's tests (``tests/support/simulated/site``)
so that code written for Ascend can run on a CPU machine.  Importing it:

* registers a simulated ``npu`` device module with torch through PrivateUse1
  (``torch.npu`` / ``torch_npu.npu``), backed by the per-thread simulated ACL runtime
  ``initorch_simulation.acl.ACL`` (``ASCEND_RT_VISIBLE_DEVICES`` honoured);
* serves ``pin_memory=True`` from the simulated pinned host allocator record;
* registers a simulated ``hccl`` collective backend that runs real gloo;
* installs the simulated Ascend transport for Mooncake (applied when
  ``mooncake.engine`` is imported; importing this package does not import Mooncake).

With ``INITORCH_SIM_CANN_MISSING=1`` the import fails the way the real torch_npu fails
on a machine without the CANN toolkit.
"""

from __future__ import annotations

import os

if os.environ.get("INITORCH_SIM_CANN_MISSING") == "1":
    raise ImportError("libhccl.so: cannot open shared object file: No such file or directory")


import torch  # noqa: F401 - the real plugin also imports torch first
from initorch_simulation.acl import ACL
from initorch_simulation.mooncake_ascend import install_simulated_ascend_transport
from initorch_simulation.torch_backend import LOG, register_simulated_plugin

SIMULATED = True
__version__ = "0.0.0+simulated"


def _current_device() -> int:
    """``torch.npu.current_device()``: 0 on a thread without context, and that thread stays unbound.

    torch_npu 2.14.0 (wheel ``torch_npu-2.14.0-cp311-cp311-manylinux_2_28_aarch64``,
    ``git_version`` 54e365d3) answers through ``torch_npu/npu/utils.py:97-99``
    ``current_device() -> _lazy_init(); torch_npu._C._npu_getDevice()``, and
    ``THNPModule_getDevice_wrap`` (Ascend/pytorch master 9e73e708,
    ``torch_npu/csrc/npu/Module.cpp:839-846``) calls ``c10_npu::GetDevice``.  There
    (``torch_npu/csrc/core/npu/NPUFunctions.cpp:196-221``) an ``aclrtGetDevice`` that
    returns ``ACL_ERROR_RT_CONTEXT_NULL`` yields ``*device = 0`` and ``ACL_ERROR_NONE``
    with no ``aclrtSetDevice``: the ``aclrtSetDevice(0)`` fallback older builds had
    (v7.1.0.2-pytorch2.6.0, line 63) was removed by Ascend/pytorch 4d2bd5e93
    ("getdevice without setdevice", 2025-07-15).  The 2.14.0 ``libtorch_npu.so`` agrees:
    ``_ZN7c10_npu9GetDeviceEPi`` calls ``aclrtGetDevice@plt`` and never
    ``aclrtSetDevice``; on 107002 it stores 0 and returns 0.  The one-time
    ``_lazy_init`` (``NpuSysCtrl::Initialize(-1)``) binds nothing either on CANN >= 8.3.RC1
    (``is_lazy_set_device``, ``torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp:238-252``),
    the CANN every release since the 7.2.0 line pairs with (``COMPATIBILITY.en.md``).
    So asking never creates a context, here as there: code that reads the answer as
    "this thread is bound to 0" is wrong on the real plugin too.
    """
    device = ACL.thread_device()
    return 0 if device is None else device


npu = register_simulated_plugin("torch_npu", "npu", ACL, _current_device,
                                "Simulated Ascend NPU", collective="hccl")
install_simulated_ascend_transport()
LOG.info("simulated torch_npu loaded: %d simulated NPU(s)", ACL.device_count())
