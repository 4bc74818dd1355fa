"""SIMULATED Ascend runtime (ACL): per-thread device context and ACL error codes.

The real ``aclrtGetDevice`` returns ``ACL_ERROR_RT_CONTEXT_NULL`` (107002) on any host
thread where ``aclrtSetDevice`` never ran, even if another thread of the same process
did set a device.  Mooncake's Ascend transport calls it during engine initialisation,
which is why the engine must start after ``set_device`` *on the same thread*.  This
module reproduces that contract without any Ascend hardware.
"""

from __future__ import annotations

from collections.abc import Mapping

from initorch_simulation._context import SimulatedDeviceRuntime

ACL_SUCCESS = 0
ACL_ERROR_RT_INVALID_DEVICEID = 107001
ACL_ERROR_RT_CONTEXT_NULL = 107002
"""``aclrtGetDevice`` on a thread with no current context ("current context null")."""

ASCEND_VISIBLE_ENV = "ASCEND_RT_VISIBLE_DEVICES"


class SimulatedAclError(RuntimeError):
    """A failed simulated ACL call, carrying the ACL error code.

    ``str()`` is the exact text the Ascend stack logs, e.g.
    ``Call aclrtGetDevice failed, ret: 107002``, so tests can compare it verbatim.
    """

    def __init__(self, api: str, code: int, detail: str = "") -> None:
        self.api = api
        self.code = code
        self.detail = detail
        message = f"Call {api} failed, ret: {code}"
        if detail:
            message = f"{message} ({detail})"
        super().__init__(message)


class SimulatedAclRuntime(SimulatedDeviceRuntime):
    """Simulated ACL: ``ASCEND_RT_VISIBLE_DEVICES`` plus a per-thread current device."""

    vendor = "npu"
    visible_env = ASCEND_VISIBLE_ENV

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        super().__init__(environ)

    def _invalid_device(self, index: int, count: int) -> Exception:
        return SimulatedAclError(
            "aclrtSetDevice",
            ACL_ERROR_RT_INVALID_DEVICEID,
            f"simulated ACL: invalid device id {index}, valid device range is [0, {count})",
        )

    def get_device(self) -> int:
        """Mirror ``aclrtGetDevice``: the thread's device, or raise 107002 if none."""
        device = self.thread_device()
        if device is None:
            raise SimulatedAclError("aclrtGetDevice", ACL_ERROR_RT_CONTEXT_NULL)
        return device


ACL = SimulatedAclRuntime()
"""Process-wide simulated ACL runtime used by the simulated torch_npu and Mooncake."""
