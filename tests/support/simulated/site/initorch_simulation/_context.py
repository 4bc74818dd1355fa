"""Per-thread device context shared by the simulated ACL and MUSA runtimes.

Real accelerator runtimes (CUDA, ACL, MUSA) keep the *current device* per host thread:
``set_device`` on the main thread does nothing for a helper thread.  That is the root
of the Ascend/Mooncake ordering bug, so the simulation keeps exactly that state in a
``threading.local`` and nothing else.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_SIMULATED_DEVICE_COUNT = 8
SIM_DEVICE_COUNT_ENV = "INITORCH_SIM_DEVICE_COUNT"


@dataclass(frozen=True)
class DeviceSetRecord:
    """One successful simulated ``set_device`` call: which thread bound which device.

    Tests read these to prove *where* a step ran ``set_device`` (main thread versus a
    helper thread), which a plain "current device" value cannot show.
    """

    thread_id: int
    thread_name: str
    device: int
    physical_id: int


class _ThreadState(threading.local):
    """The per-thread slot; ``device`` is None until set_device runs on that thread."""

    device: int | None = None


def parse_visible_devices(value: str, env_name: str) -> tuple[int, ...]:
    """Parse a ``*_VISIBLE_DEVICES`` list into physical ids.

    An empty value hides every device, as ``CUDA_VISIBLE_DEVICES=""`` does.
    """
    ids: list[int] = []
    for raw in value.split(","):
        item = raw.strip()
        if not item:
            continue
        if not item.isdigit():
            raise ValueError(
                f"simulated runtime: {env_name}={value!r} must be a comma list of "
                f"non-negative integers"
            )
        ids.append(int(item))
    return tuple(ids)


class SimulatedDeviceRuntime:
    """A simulated device runtime with a per-thread current device.

    The visible-device list is read from the environment on first use and then frozen,
    as a real runtime reads it once at initialisation (``aclInit`` / first MUSA call).
    Pass ``environ`` to build an isolated runtime in tests.
    """

    vendor = "simulated"
    visible_env = "SIMULATED_VISIBLE_DEVICES"

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._state = _ThreadState()
        self._lock = threading.Lock()
        self._visible: tuple[int, ...] | None = None
        self._log: list[DeviceSetRecord] = []

    # -- device enumeration -------------------------------------------------------------
    def visible_devices(self) -> tuple[int, ...]:
        """Physical ids of the devices this process may use, in logical order."""
        with self._lock:
            if self._visible is None:
                self._visible = self._read_visible()
            return self._visible

    def _read_visible(self) -> tuple[int, ...]:
        env = os.environ if self._environ is None else self._environ
        listed = env.get(self.visible_env)
        if listed is not None:
            return parse_visible_devices(listed, self.visible_env)
        count_text = env.get(SIM_DEVICE_COUNT_ENV)
        count = DEFAULT_SIMULATED_DEVICE_COUNT if count_text is None else int(count_text)
        if count < 0:
            raise ValueError(f"simulated runtime: {SIM_DEVICE_COUNT_ENV} must be >= 0")
        return tuple(range(count))

    def device_count(self) -> int:
        """Number of visible (logical) devices."""
        return len(self.visible_devices())

    def physical_id(self, index: int) -> int:
        """Map a logical index to its physical id (``ASCEND_RT_VISIBLE_DEVICES=4,5``: 0 -> 4)."""
        return self.visible_devices()[index]

    # -- per-thread context -------------------------------------------------------------
    def _invalid_device(self, index: int, count: int) -> Exception:
        """The error the real runtime raises for an out-of-range index."""
        return RuntimeError(f"simulated runtime: invalid device id {index} (count {count})")

    def set_device(self, index: int) -> None:
        """Bind ``index`` as the current device of the *calling thread only*."""
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"simulated runtime: device index must be int, got {index!r}")
        count = self.device_count()
        if not 0 <= index < count:
            raise self._invalid_device(index, count)
        self._state.device = index
        thread = threading.current_thread()
        record = DeviceSetRecord(
            thread_id=threading.get_ident(),
            thread_name=thread.name,
            device=index,
            physical_id=self.physical_id(index),
        )
        with self._lock:
            self._log.append(record)

    def thread_device(self) -> int | None:
        """The calling thread's device, or None when set_device never ran on it."""
        return self._state.device

    def reset_thread(self) -> None:
        """Drop the calling thread's context (like ``aclrtResetDevice``)."""
        self._state.device = None

    # -- observation for tests ----------------------------------------------------------
    def set_device_log(self) -> list[DeviceSetRecord]:
        """Every successful set_device, in call order, across all threads."""
        with self._lock:
            return list(self._log)

    def devices_by_thread(self) -> dict[int, int]:
        """Last device bound per thread id (``threading.get_ident()``)."""
        with self._lock:
            return {record.thread_id: record.device for record in self._log}
