"""SIMULATED accelerator runtimes for initorch tests (test-only, never installed).

Huawei Ascend (torch_npu + CANN) and Moore Threads MUSA (torch_musa) cannot be reached
from CI machines.  This package holds the torch-free core of their *simulations*: a
per-thread current-device context (``acl``, ``musa``), a record of host memory "pinned"
by the simulation (``pinned``), the glue that registers simulated device modules with
torch (``torch_backend``, imported lazily) and a simulated Ascend transport for the
Mooncake transfer engine (``mooncake_ascend``).

Nothing here talks to real hardware.  See ``tests/support/simulated/README.md`` for what is
faithful and what is not.
"""

from __future__ import annotations

SIMULATED = True
"""Marker other code can check: everything importable from this site is a simulation."""
