"""initorch: declarative start-up orchestration for LLM inference servers.

The public face of the package; everything else is private to its module.
"""

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
from orchestrator.report import RunReport, StepOutcome
from orchestrator.resolve import resolve
from orchestrator.run import Run
from orchestrator.signals import RunInterrupted
from orchestrator.step import Step, StepDefinition, step

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
