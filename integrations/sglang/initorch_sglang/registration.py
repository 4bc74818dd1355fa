"""The ``sglang`` initorch plugin: SGLang's own start-up steps and its two overlays.

``sglang_load_model`` and ``sglang_alloc_kv_pool`` are steps only SGLang performs (in
``ModelRunner``): they exist so that the ``sglang`` overlay can place them, so that
verify mode can check SGLang's calls against that order and drift can check it against
SGLang's source.
Outside a running SGLang server they refuse to run, with that reason.
"""

from __future__ import annotations

from importlib.resources import files
from typing import TYPE_CHECKING, NoReturn

from initorch.plugin import StepContext, StepError, step

if TYPE_CHECKING:
    from initorch import Registry

__all__ = ["register"]


def _performed_by_sglang(ctx: StepContext) -> NoReturn:
    raise StepError(f"{ctx.step} is performed by SGLang's ModelRunner; initorch observes it "
                    "inside an SGLang server and cannot run it on its own",
                    hint="start SGLang with INITORCH_SGLANG=verify or drive, or leave out "
                         "the sglang overlay")


LOAD_MODEL = step(
    "sglang_load_model",
    description="SGLang loads the weights (ModelRunner.load_model, model_runner.py:715)",
    requires=["memory_baseline"],
)(_performed_by_sglang)

ALLOC_KV_POOL = step(
    "sglang_alloc_kv_pool",
    description="SGLang allocates the device KV pool from what the weights left "
                "(ModelRunner.alloc_memory_pool, model_runner.py:971)",
    requires=["sglang_load_model"],
)(_performed_by_sglang)


def register(registry: Registry) -> None:
    """Entry point of the ``sglang`` plugin (``initorch.plugins`` group)."""
    registry.steps.add(LOAD_MODEL)
    registry.steps.add(ALLOC_KV_POOL)
    registry.profiles.add_directory(files("initorch_sglang.profiles"), plugin="sglang")
