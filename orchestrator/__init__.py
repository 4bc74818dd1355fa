"""initorch: declarative start-up orchestration for LLM inference servers.

The public face of the package; everything else is private to its module.
Two groups of names are imported on first use: the resolver's (``load_plan``,
``start``, ``resolve``, ``StepGraph``), so that running a saved plan never loads
it (and ``load_saved_plan``, which a dry run does not need), and the run-time ones
(``Run``, ``RunReport``, ``StepOutcome``, ``configure_logging``, the peers'
``JobStore`` and ``PeerBounds``) and the renderers, so that a dry run never pays
for the executors, the ranks' agreement and structlog's stdlib integration.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from initorch._version import __version__
from initorch.errors import (
    ConditionError,
    ConflictError,
    CycleError,
    DeviceError,
    InitorchError,
    InterruptedBySigint,
    PeerError,
    ProfileError,
    ResolveError,
    RunInterrupted,
    SavedPlanError,
    StepDefinitionError,
    StepError,
    StepFailedError,
    UnknownStepError,
    UnplannedStepWarning,
)
from initorch.execution.context import DeviceBinding, RankInfo, StepContext
from initorch.execution.launchers import LaunchError
from initorch.loading.compose import ComposedProfile, compose
from initorch.loading.detection import Detection, DeviceProbe, Machine, Verdict
from initorch.model.devices import DeviceRef, parse_device
from initorch.model.registry import StepRegistry
from initorch.model.settings import SettingCatalog, SettingSpec, setting
from initorch.model.step import Step, StepDefinition, step
from initorch.plugins import PluginError, Registry
from initorch.reporting.diagnosis import Diagnosis, DiagnosisBook, Finding
from initorch.resolution.plan import Plan, PlannedStep, SkippedStep
from initorch.resolution.plangraph import Edge, PlanGraph
from initorch.resolution.preview import PreviewContext

if TYPE_CHECKING:
    from initorch.api import detect_device, load_plan, load_saved_plan, start
    from initorch.execution.executors import Executor, RunDriver
    from initorch.execution.peers import JobStore, PeerBounds
    from initorch.execution.run import Run
    from initorch.reporting.logs import configure_logging
    from initorch.reporting.render import (
        explain_text,
        graph_dot,
        graph_json,
        graph_mermaid,
        plan_text,
        run_summary_text,
    )
    from initorch.reporting.report import RunReport, StepOutcome
    from initorch.resolution.graph import StepGraph
    from initorch.resolution.resolve import resolve
    from initorch.resolution.saved import plan_json, save_plan

_ON_FIRST_USE = {
    "detect_device": "initorch.api",
    "load_plan": "initorch.api",
    "start": "initorch.api",
    "resolve": "initorch.resolution.resolve",
    "load_saved_plan": "initorch.api",
    "StepGraph": "initorch.resolution.graph",
    "Executor": "initorch.execution.executors",
    "RunDriver": "initorch.execution.executors",
    "JobStore": "initorch.execution.peers",
    "PeerBounds": "initorch.execution.peers",
    "Run": "initorch.execution.run",
    "RunReport": "initorch.reporting.report",
    "StepOutcome": "initorch.reporting.report",
    "configure_logging": "initorch.reporting.logs",
    "explain_text": "initorch.reporting.render",
    "graph_dot": "initorch.reporting.render",
    "graph_json": "initorch.reporting.render",
    "graph_mermaid": "initorch.reporting.render",
    "plan_text": "initorch.reporting.render",
    "run_summary_text": "initorch.reporting.render",
    "plan_json": "initorch.resolution.saved",
    "save_plan": "initorch.resolution.saved",
}


def __getattr__(name: str) -> Any:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module 'initorch' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ComposedProfile",
    "ConditionError",
    "ConflictError",
    "CycleError",
    "Detection",
    "DeviceBinding",
    "DeviceError",
    "DeviceProbe",
    "DeviceRef",
    "Diagnosis",
    "DiagnosisBook",
    "Edge",
    "Executor",
    "Finding",
    "InitorchError",
    "InterruptedBySigint",
    "JobStore",
    "LaunchError",
    "Machine",
    "PeerBounds",
    "PeerError",
    "Plan",
    "PlanGraph",
    "PlannedStep",
    "PluginError",
    "PreviewContext",
    "ProfileError",
    "RankInfo",
    "Registry",
    "ResolveError",
    "Run",
    "RunDriver",
    "RunInterrupted",
    "RunReport",
    "SavedPlanError",
    "SettingCatalog",
    "SettingSpec",
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
    "UnplannedStepWarning",
    "Verdict",
    "__version__",
    "compose",
    "configure_logging",
    "detect_device",
    "explain_text",
    "graph_dot",
    "graph_json",
    "graph_mermaid",
    "load_plan",
    "load_saved_plan",
    "parse_device",
    "plan_json",
    "plan_text",
    "resolve",
    "run_summary_text",
    "save_plan",
    "setting",
    "start",
    "step",
]
