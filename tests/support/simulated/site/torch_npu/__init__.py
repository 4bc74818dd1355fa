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
    """torch_npu answers 0 on a thread without context, without binding it."""
    device = ACL.thread_device()
    return 0 if device is None else device


npu = register_simulated_plugin("torch_npu", "npu", ACL, _current_device,
                                "Simulated Ascend NPU", collective="hccl")
install_simulated_ascend_transport()
LOG.info("simulated torch_npu loaded: %d simulated NPU(s)", ACL.device_count())
