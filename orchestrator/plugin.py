"""The plugin author's kit: everything a step module, a diagnosis or a probe needs.

A plugin is a ``register(registry)`` function named by an ``initorch.plugins`` entry
point (see :class:`Registry`); its steps are plain functions decorated with
:func:`step`, declaring their :func:`setting` s, and receive a :class:`StepContext`.
This module is the only part of initorch they import, besides :mod:`initorch.errors`
(the built-in steps in ``initorch.steps`` are held to that by a test): the layers
behind it may change without breaking a plugin.

>>> from initorch.plugin import StepContext, StepError, setting, step
>>> @step("warm_cache", requires=["set_device"],
...       settings=[setting("cache.size_mb", int, default=64)])
... def warm_cache(ctx: StepContext) -> None: ...

The job's store (:class:`JobStore`, :class:`PeerBounds`) and the executors
(:class:`Executor`, :class:`RunDriver`) are imported on first use, so that a step
module that names them costs a dry run nothing.  A step's result types are
:func:`record` s: frozen dataclasses that cost less to define.
"""

from typing import TYPE_CHECKING

from initorch.addresses import host_port, is_ipv6, split_host_port
from initorch.errors import LaunchError, PeerError, StepDefinitionError, StepError
from initorch.execution.context import DeviceBinding
from initorch.execution.liveness import MIN_PEER_TIMEOUT_S, WAIT_LOG_S
from initorch.execution.native_output import NativeLog, capture_native_stderr
from initorch.exports import on_first_use
from initorch.loading.detection import Detection, DeviceProbe, Machine, Verdict
from initorch.model.contexts import PreviewContext, RankView, StepContext
from initorch.model.devices import DeviceRef, parse_device
from initorch.model.names import non_ascii_problem
from initorch.model.registry import StepCatalog
from initorch.model.settings import SettingCatalog, SettingSpec, setting
from initorch.model.step import MAX_TIMEOUT_S, Step, StepDefinition, step
from initorch.numbers import MAX_WORLD_SIZE, NumberError, parse_count
from initorch.plugins import Registry
from initorch.records import record
from initorch.reporting.diagnosis import Diagnosis, DiagnosisCatalog, Finding

if TYPE_CHECKING:
    from initorch.execution.executors import Executor, RunDriver
    from initorch.execution.peers import JobStore, PeerBounds

__getattr__, __dir__ = on_first_use(globals(), {
    "Executor": "initorch.execution.executors",
    "RunDriver": "initorch.execution.executors",
    "JobStore": "initorch.execution.peers",
    "PeerBounds": "initorch.execution.peers",
})

__all__ = [
    "MAX_TIMEOUT_S",
    "MAX_WORLD_SIZE",
    "MIN_PEER_TIMEOUT_S",
    "WAIT_LOG_S",
    "Detection",
    "DeviceBinding",
    "DeviceProbe",
    "DeviceRef",
    "Diagnosis",
    "DiagnosisCatalog",
    "Executor",
    "Finding",
    "JobStore",
    "LaunchError",
    "Machine",
    "NativeLog",
    "NumberError",
    "PeerBounds",
    "PeerError",
    "PreviewContext",
    "RankView",
    "Registry",
    "RunDriver",
    "SettingCatalog",
    "SettingSpec",
    "Step",
    "StepCatalog",
    "StepContext",
    "StepDefinition",
    "StepDefinitionError",
    "StepError",
    "Verdict",
    "capture_native_stderr",
    "host_port",
    "is_ipv6",
    "non_ascii_problem",
    "parse_count",
    "parse_device",
    "record",
    "setting",
    "split_host_port",
    "step",
]
