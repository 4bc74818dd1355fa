"""SGLang as the kit names it, and SGLang's facts that the kit's report reads.

:data:`SGLANG` is the :class:`initorch.kit.Engine` every part of the integration passes
to the kit: the ``sglang`` package (recognised in a wheel or a tree by
``srt/managers/scheduler.py``, which every 0.5.x release has), the ``sglang``
distribution, the ``initorch sglang`` command, and ``initorch-sglang`` as the name its
log lines start with.
"""

from __future__ import annotations

from initorch.kit import MOONCAKE_CALLS, Engine, Idle

__all__ = ["IDLE", "MODE_FIX", "SGLANG"]

SGLANG = Engine(name="SGLang", package="sglang", distributions=("sglang",),
                marker="srt/managers/scheduler.py", command="sglang",
                integration="initorch-sglang")

IDLE = Idle(
    vendor_calls=MOONCAKE_CALLS,
    off_cpu={
        "bind_cpu_threads": "SGLang binds threads on device cpu only (distributed/bootstrap.py "
                            "_bind_threads_if_cpu, :75-87 in 0.5.23; model_runner.py "
                            "init_threads_binding, :342-343 in 0.5.17)",
    },
)
"""How the report tells an SGLang call that did nothing: the shared engine when it made no
Mooncake call (``mooncake_transfer_engine.py:315-340`` builds it only when something in
the launch needs it), and the calls SGLang makes that do nothing off the CPU."""

MODE_FIX = "INITORCH_SGLANG=drive does"
"""What the integration offers against a vendor call on a thread without the device:
drive mode sets the device on the deadline helper's thread (:mod:`initorch_sglang.drive`)."""
