"""initorch: declarative start-up orchestration for LLM inference servers.

The public face of the package; everything else is private to its module.
The run-time names (``Run``, ``RunReport``, ``StepOutcome``, ``RunInterrupted``)
are imported on first use, so that a dry run never pays for the executors and
structlog's stdlib integration.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from orchestrator.api import load_plan
from orchestrator.compose import ComposedProfile, compose
from orchestrator.context import DeviceBinding, RankInfo, StepContext
from orchestrator.devices import DeviceRef, parse_device
from orchestrator.diagnosis import Diagnosis, DiagnosisBook, Finding
from orchestrator.errors import (
    ConditionError,
    ConflictError,
    CycleError,
    DeviceError,
    InitorchError,
    ProfileError,
    ResolveError,
    StepDefinitionError,
    StepError,
    StepFailedError,
    UnknownStepError,
)
from orchestrator.graph import Edge, StepGraph
from orchestrator.plan import Plan, PlannedStep, SkippedStep
from orchestrator.plugins import Registry
from orchestrator.registry import StepRegistry
from orchestrator.resolve import resolve
from orchestrator.step import Step, StepDefinition, step

if TYPE_CHECKING:
    from orchestrator.report import RunReport, StepOutcome
    from orchestrator.run import Run
    from orchestrator.signals import RunInterrupted

_RUN_TIME = {
    "Run": "orchestrator.run",
    "RunInterrupted": "orchestrator.signals",
    "RunReport": "orchestrator.report",
    "StepOutcome": "orchestrator.report",
}


def __getattr__(name: str) -> Any:
    module = _RUN_TIME.get(name)
    if module is None:
        raise AttributeError(f"module 'orchestrator' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value

__all__ = [
    "ComposedProfile",
    "ConditionError",
    "ConflictError",
    "CycleError",
    "DeviceBinding",
    "DeviceError",
    "DeviceRef",
    "Diagnosis",
    "DiagnosisBook",
    "Edge",
    "Finding",
    "InitorchError",
    "Plan",
    "PlannedStep",
    "ProfileError",
    "RankInfo",
    "Registry",
    "ResolveError",
    "Run",
    "RunInterrupted",
    "RunReport",
    "SkippedStep",
    "Step",
    "StepContext",
    "StepDefinition",
    "StepDefinitionError",
    "StepError",
    "StepFailedError",
    "StepGraph",
    "StepOutcome",
    "StepRegistry",
    "UnknownStepError",
    "compose",
    "load_plan",
    "parse_device",
    "resolve",
    "step",
]
