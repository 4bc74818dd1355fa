"""TEST VEHICLE, never installed: an injected regression of SGLang's start-up order.

Loaded through SGLang's own plugin entry point (``sglang.srt.plugins``) when the test
puts ``tests/sglang/site-regression`` on ``PYTHONPATH``.  It makes SGLang 0.5.23 build the
shared Mooncake engine *after* the process group, the order the Ascend fix had to undo:
``init_parallel_runtime`` calls ``maybe_init_shared_mooncake_transfer_engine``
(``srt/distributed/bootstrap.py:143``) before ``_init_parallel_groups`` (:152); here
the first call only remembers its device, and the engine is built once the groups
exist.  Verify mode must stop such a start-up.
"""

from typing import Any


def load() -> None:
    from sglang.srt.distributed import bootstrap
    from sglang.srt.distributed.device_communicators import mooncake_transfer_engine

    build_groups = bootstrap._init_parallel_groups
    remembered: dict[str, int] = {}

    def remember_device(*, gpu_id: int) -> None:
        remembered["gpu_id"] = gpu_id

    def groups_then_engine(**kwargs: Any) -> None:
        build_groups(**kwargs)
        mooncake_transfer_engine.maybe_init_shared_mooncake_transfer_engine(
            gpu_id=remembered["gpu_id"])

    bootstrap.maybe_init_shared_mooncake_transfer_engine = remember_device
    bootstrap._init_parallel_groups = groups_then_engine
