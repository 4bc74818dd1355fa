"""SIMULATED torch_musa -- NOT the Moore Threads plugin.  Test-only, never installed.

This package exists only on the PYTHONPATH of initorch's tests (``tests/support/simulated/site``).
Importing it:

* registers a simulated ``musa`` device module with torch through PrivateUse1
  (``torch.musa`` / ``torch_musa.musa``), backed by the per-thread simulated MUSA
  runtime ``initorch_simulation.musa.MUSA`` (``MUSA_VISIBLE_DEVICES`` honoured);
* serves ``pin_memory=True`` from the simulated pinned host allocator record;
* registers a simulated ``mccl`` collective backend that runs real gloo;
* reproduces the real plugin's CUDA-compat side effect: ``torch.cuda._lazy_init``
  becomes a no-op, so ``torch.cuda.cudart()`` returns ``None`` and the CUDA host-register
  path fails with ``AttributeError: 'NoneType' object has no attribute
  'cudaHostRegister'`` -- the start-up crash seen on real MUSA machines.
"""

from __future__ import annotations

import torch
from initorch_simulation.musa import MUSA
from initorch_simulation.torch_backend import LOG, register_simulated_plugin

SIMULATED = True
__version__ = "0.0.0+simulated"


def _simulated_cuda_lazy_init() -> None:
    """Stand-in for the CUDA-compat shim: CUDA "initialises" without loading cudart."""


musa = register_simulated_plugin("torch_musa", "musa", MUSA, MUSA.current_device,
                                 "Simulated Moore Threads GPU", collective="mccl")
torch.cuda._lazy_init = _simulated_cuda_lazy_init
LOG.info("simulated torch_musa loaded: %d simulated MUSA device(s)", MUSA.device_count())
