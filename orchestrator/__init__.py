"""initorch: declarative start-up orchestration for LLM inference servers.

The embedding face: resolve a plan (:func:`load_plan`; :func:`save_plan` and
:func:`load_saved_plan` keep one to run later), run
it (:func:`start`, :class:`Run`) and read what happened (:class:`RunReport`).  The
other public tiers are :mod:`initorch.plugin` (writing steps, diagnoses and probes),
:mod:`initorch.errors` and :mod:`initorch.renderers`; everything else is private to
its module.

Most names are imported on first use: running a saved plan never loads the resolver,
and a dry run never pays for the executors, the ranks' agreement and structlog's
stdlib integration.  A name that moved to another tier still works from here, with
a :class:`DeprecationWarning` that says where it lives now.
"""

from typing import TYPE_CHECKING

# First: the moment initorch began importing (the timeline's "imports" phase).
import initorch.reporting.process_marks  # noqa: F401
from initorch._version import __version__
from initorch.errors import InitorchError, RunInterrupted, StepFailedError
from initorch.execution.context import RankInfo
from initorch.execution.launchers import LaunchArguments
from initorch.exports import on_first_use
from initorch.plugins import Registry
from initorch.resolution.plan import Plan, PlannedStep, SkippedStep
from initorch.resolution.plangraph import Edge

if TYPE_CHECKING:
    from initorch.api import detect_device, load_plan, load_saved_plan, start
    from initorch.execution.run import Run
    from initorch.reporting.logs import configure_logging
    from initorch.reporting.report import RunReport, StepOutcome
    from initorch.resolution.saved import save_plan

_ERRORS = ("ConditionError", "ConflictError", "CycleError", "DeviceError",
           "InterruptedBySigint", "LaunchError", "PeerError", "PluginError", "ProfileError",
           "ResolveError", "SavedPlanError", "StepDefinitionError", "StepError",
           "UnknownStepError", "UnplannedStepWarning")
_PLUGIN_KIT = ("Detection", "DeviceBinding", "DeviceProbe", "DeviceRef", "Diagnosis",
               "Executor", "Finding", "JobStore", "Machine", "PeerBounds", "PreviewContext",
               "RunDriver", "SettingCatalog", "SettingSpec", "Step", "StepContext",
               "StepDefinition", "Verdict", "parse_device", "setting", "step")
_RENDERERS = ("explain_text", "graph_dot", "graph_json", "graph_mermaid", "run_summary_text")
# The resolver's parts: load_plan composes and resolves; these are internal now.
_RESOLVER = {"ComposedProfile": "initorch.loading.compose", "compose": "initorch.loading.compose",
             "PlanGraph": "initorch.resolution.plangraph", "StepGraph": "initorch.resolution.graph",
             "resolve": "initorch.resolution.resolve"}

__getattr__, __dir__ = on_first_use(
    globals(),
    lazy={
        "detect_device": "initorch.api",
        "load_plan": "initorch.api",
        "load_saved_plan": "initorch.api",
        "start": "initorch.api",
        "Run": "initorch.execution.run",
        "RunReport": "initorch.reporting.report",
        "StepOutcome": "initorch.reporting.report",
        "configure_logging": "initorch.reporting.logs",
        "save_plan": "initorch.resolution.saved",
    },
    moved={**dict.fromkeys(_ERRORS, "initorch.errors"),
           **dict.fromkeys(_PLUGIN_KIT, "initorch.plugin"),
           **dict.fromkeys(_RENDERERS, "initorch.renderers"), **_RESOLVER},
)

__all__ = [
    "Edge",
    "InitorchError",
    "LaunchArguments",
    "Plan",
    "PlannedStep",
    "RankInfo",
    "Registry",
    "Run",
    "RunInterrupted",
    "RunReport",
    "SkippedStep",
    "StepFailedError",
    "StepOutcome",
    "__version__",
    "configure_logging",
    "detect_device",
    "load_plan",
    "load_saved_plan",
    "save_plan",
    "start",
]
