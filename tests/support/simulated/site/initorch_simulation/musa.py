"""SIMULATED Moore Threads MUSA runtime: per-thread current device.

Like CUDA, MUSA keeps the current device per host thread and a thread that never called
``set_device`` silently works on device 0; there is no error-code API to observe that.
The simulation keeps the same state so tests can see which thread bound which device.
"""

from __future__ import annotations

from collections.abc import Mapping

from initorch_simulation._context import SimulatedDeviceRuntime

MUSA_VISIBLE_ENV = "MUSA_VISIBLE_DEVICES"


class SimulatedMusaRuntime(SimulatedDeviceRuntime):
    """Simulated MUSA runtime: ``MUSA_VISIBLE_DEVICES`` plus a per-thread device."""

    vendor = "musa"
    visible_env = MUSA_VISIBLE_ENV

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(environ)

    def _invalid_device(self, index: int, count: int) -> Exception:
        # torch_musa mirrors torch.cuda's wording ("CUDA error: invalid device ordinal").
        return RuntimeError(
            f"MUSA error: invalid device ordinal (simulated MUSA: device {index}, {count} visible)"
        )

    def current_device(self) -> int:
        """The thread's device; 0 where set_device never ran, as on CUDA/MUSA."""
        device = self.thread_device()
        return 0 if device is None else device


MUSA = SimulatedMusaRuntime()
"""Process-wide simulated MUSA runtime used by the simulated torch_musa."""
