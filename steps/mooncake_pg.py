"""``set_mooncake_pg_engine``: Mooncake as the torch.distributed backend (elastic EP).

As Mooncake provides it (``mooncake-pg/torch/src/pg_py.cpp``, Mooncake 0.3.x):
importing ``mooncake.pg`` registers the backend ``mooncake-cpu`` for cpu and
``mooncake`` for cuda (for musa in MUSA builds); there is none for npu.
``mooncake.pg.set_transfer_engine(engine)`` takes the Python ``TransferEngine``
and must run before ``init_process_group``; the backend then reuses that engine.
SGLang 0.5.23 does exactly this in ``maybe_init_shared_mooncake_transfer_engine``
and passes ``MooncakeBackendOptions(active_ranks, is_extension)`` as
``pg_options`` (``distributed/parallel_state.py init_distributed_environment``).

Which backend a device has is a profile fact (``mooncake.pg_backend``); the step
only runs where it is not ``none``, so the ``mooncake-ep`` overlay, which
requires it, is refused at plan time on npu.

The import is a step of its own, ``import_mooncake_pg``, ordered before the
rendezvous: from Mooncake 0.3.14 (the ``-cuda13`` wheel) ``mooncake.pg`` builds its
torch adapter on first import (``mooncake/pg.py``: ninja and nvcc, minutes).  Inside
``set_mooncake_pg_engine``, after the rendezvous, that build would run while the
other ranks already wait in the process group, against ``distributed.timeout_s``;
before it, it counts only against ``distributed.join_timeout_s``, the wait for ranks
that start slowly, and every rank builds at the same time.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from initorch.plugin import StepContext, StepError, record, setting, step
from initorch.steps.distributed import ELASTIC_EP
from initorch.steps.transfer_engine import SharedTransferEngine

# The names pg_py.cpp MooncakeBackendConstructor registers.
BACKENDS = ("mooncake", "mooncake-cpu")

PG_BACKEND = setting(
    "mooncake.pg_backend", str, default="none", choices=("none", *BACKENDS),
    description="Mooncake's process-group backend on this device: mooncake (cuda, musa "
                "builds), mooncake-cpu (cpu) or none (npu, rocm, xpu)")


@record(frozen=False)
class MooncakeProcessGroupBackend:
    """The backend name, the module that registered it, and the engine it was given."""

    name: str
    module: ModuleType
    engine: SharedTransferEngine

    def options(self, world_size: int, device_type: str) -> Any:
        """``MooncakeBackendOptions`` as SGLang builds them: every rank active, not an
        extension of an existing group; the tensor lives where the backend works
        (cpu for ``mooncake-cpu``, the accelerator for ``mooncake``)."""
        import torch

        device = "cpu" if self.name == "mooncake-cpu" else device_type
        active_ranks = torch.ones(world_size, dtype=torch.int32, device=device)
        return self.module.MooncakeBackendOptions(active_ranks, False)


def import_mooncake_pg() -> ModuleType:
    """``mooncake.pg``; its ImportError names the torch version it was not built for."""
    try:
        return importlib.import_module("mooncake.pg")
    except ImportError as exc:
        raise StepError(f"backend needs mooncake.pg: {exc}",
                        hint="install a Mooncake wheel whose mooncake.pg is built for the "
                             "installed torch (mooncake/pg.py loads mooncake.pg_<torch "
                             "version>), or drop the mooncake-ep profile") from exc


RUNS_WITH_A_PG_BACKEND = "mooncake.elastic_ep and mooncake.pg_backend != 'none'"


@step(
    "import_mooncake_pg",
    description="Import mooncake.pg (Mooncake 0.3.14 builds it on first import) before "
                "the ranks wait for each other",
    requires=["import_backend"],
    before=["rendezvous"],
    when=RUNS_WITH_A_PG_BACKEND,
    settings=(ELASTIC_EP, PG_BACKEND),
)
def import_mooncake_pg_step(ctx: StepContext) -> ModuleType:
    return import_mooncake_pg()


@step(
    "set_mooncake_pg_engine",
    description="Hand mooncake.pg the shared transfer engine (set_transfer_engine) "
                "before the process group",
    requires=["init_shared_mooncake_transfer_engine", "import_mooncake_pg"],
    reads=["init_shared_mooncake_transfer_engine", "import_mooncake_pg"],
    device_bound=True,
    when=RUNS_WITH_A_PG_BACKEND,
    settings=(ELASTIC_EP, PG_BACKEND),
)
def set_mooncake_pg_engine(ctx: StepContext) -> MooncakeProcessGroupBackend:
    name = str(ctx.setting("mooncake.pg_backend"))  # one of BACKENDS: 'none' never runs
    module: ModuleType = ctx.output("import_mooncake_pg")
    shared: SharedTransferEngine = ctx.output("init_shared_mooncake_transfer_engine")
    module.set_transfer_engine(shared.engine)
    ctx.log.info("mooncake_pg_engine_set", backend=name, session_id=shared.session_id)
    return MooncakeProcessGroupBackend(name, module, shared)


@set_mooncake_pg_engine.teardown
def reset_mooncake_pg_engine(ctx: StepContext, backend: MooncakeProcessGroupBackend) -> None:
    backend.module.set_transfer_engine(None)  # pg_py.cpp: None resets to the default


STEPS = (import_mooncake_pg_step, set_mooncake_pg_engine)
