"""One worker's start-up under verify mode: from its construction to its warm-up.

vLLM builds each worker in its own process after loading the plugins (``v1/worker/
worker_base.py:274-276``, :334-335); every worker class's constructor reaches
``WorkerBase.__init__`` with the rank and the whole ``VllmConfig``.  The session (the
kit's :class:`~initorch.kit.RankSession`: the plan for the worker's device, a recorder,
the report and trace) begins there.  Each hooked call of :mod:`initorch_vllm.layout` is
then one call of its step, checked against the plan by the kit's recorder as it starts.

An SGLang rank starts inside one constructor, which the kit frames (``run_framed``); a
vLLM worker starts in several calls that the engine core makes one after another (the
worker's ``init_device``, ``load_model``, then the KV cache's sizing, building and
warm-up, ``v1/engine/core.py:144-157``, :315-379).  So the session is held here from the
constructor on, and ends when the last returns (the warm-up) or when a recorded call
raises, writing the rank's report and trace.

The report also says where the worker's process group met (``process_group``): the init
method the executor gave the worker, and the store torch's world group was built on
once the process group is up.  They differ across nodes: vLLM replaces the executor's
init method with the ``--master-addr``/``--master-port`` one there
(``distributed/parallel_state.py:1852-1855``), so only the store says which address
the ranks used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from initorch_vllm.layout import ENGINE, LAYOUTS, LOGGER, SESSION_END, SESSION_START

if TYPE_CHECKING:
    from initorch import Plan
    from initorch.kit import Hook, RankSession
    from initorch_vllm.options import Options

__all__ = ["begin", "hooks", "plan_for"]

_SET_DEVICE = "set_device"
_PROCESS_GROUP = "init_torch_distributed"


def begin(vllm_config: Any, options: Options, rank: int,
          init_method: str | None = None) -> RankSession | None:
    """The session of the worker ``vllm_config`` builds (``init_method``: the process
    group's, as the executor gave it to the worker); ``None`` when no plan can be
    made for it (verify only observes: the problem is logged in one line and vLLM starts
    as it would without initorch)."""
    from initorch.kit import COST, Outputs, RankSession, Recorder, plan_or_off

    device = str(vllm_config.device_config.device_type)
    profiles = options.profiles or (device, "vllm")
    with COST.timed("plan"):
        plan = plan_or_off(lambda: plan_for(vllm_config, profiles), mode=options.mode,
                           integration=ENGINE.integration, log=LOGGER,
                           describe=f"initorch plan --device {device} "
                                    + " ".join(f"--profile {p}" for p in profiles))
    if plan is None:
        return None
    recorder = Recorder(plan, ENGINE, stop_on_violation=options.stop_on_violation,
                        label=ENGINE.label())
    return RankSession(plan, recorder, rank, options.mode,
                       Outputs("vllm", options.report, options.trace, log=LOGGER,
                               status=options.status, progress_s=options.progress_s),
                       extra={"profiles": list(profiles), "device": device,
                              "process_group": {"init_method": init_method}})


def process_group() -> dict[str, Any]:
    """Where this process's world group met, read back from torch once it is up: its
    backend and size, and its store (a ``tcp`` store's ``address``, the ``path`` of a
    ``file`` store), under the prefixes torch and vLLM wrap it in.  The store is torch's
    own record of the rendezvous, whatever rewrote the init method on the way."""
    import torch.distributed as dist
    from torch._C._distributed_c10d import FileStore, PrefixStore, TCPStore

    if not dist.is_initialized():  # an engine whose call built no world group
        return {}
    store = dist.distributed_c10d._get_default_store()
    while isinstance(store, PrefixStore):
        store = store.underlying_store
    found: dict[str, Any] = {"backend": str(dist.get_backend()),
                             "world_size": dist.get_world_size()}
    if isinstance(store, TCPStore):
        host = str(store.host)
        found |= {"store": "tcp", "address": f"[{host}]:{store.port}" if ":" in host
                  else f"{host}:{store.port}"}
    elif isinstance(store, FileStore):
        found |= {"store": "file", "path": store.path}  # type: ignore[attr-defined]
    else:
        found["store"] = type(store).__name__
    return found


def _recording_process_group(observe: Callable[..., Any]) -> Callable[..., Any]:
    """``observe`` (the step's observer), then, when the process group is up, where it
    met (:func:`process_group`) into the session's report."""
    from initorch.kit import active

    def record(original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        result = observe(original, *args, **kwargs)
        session = active()
        if session is not None:
            session.extra["process_group"] |= process_group()
        return result

    record.__qualname__ = observe.__qualname__
    return record


def plan_for(vllm_config: Any, profiles: tuple[str, ...] = ()) -> Plan:
    """The plan a worker of ``vllm_config`` is checked against: ``profiles`` (default: its
    device type, then ``vllm``), with the job's shape as vLLM resolved it."""
    from initorch import Registry, load_plan

    device = str(vllm_config.device_config.device_type)
    parallel = vllm_config.parallel_config
    return load_plan(list(profiles or (device, "vllm")), device=device,
                     settings={"parallel.tp_size": int(parallel.tensor_parallel_size),
                               "parallel.pp_size": int(parallel.pipeline_parallel_size)},
                     registry=Registry.with_plugins())


def _bound_device(session: RankSession, device: Any, *_args: Any, **_kwargs: Any) -> str:
    """What ``torch.accelerator.set_device_index(device)`` (the GPU worker's,
    ``gpu_worker.py:501``) binds, from its argument: no device query (asking can create
    a context)."""
    return f"{session.plan.device.type}:{getattr(device, 'index', device)}"


def hooks(options: Options) -> dict[str, Hook]:
    """Every hook of verify mode, by target: the session's begin on the worker's
    constructor (from its ``vllm_config`` and ``rank``), and each call of every worker's
    call map, the warm-up ending it (a worker imports only its own class's module, so
    only its hooks take effect)."""
    from initorch.kit import begin_hook, observer

    found: dict[str, Hook] = {SESSION_START: (begin_hook(
        lambda given: begin(given["vllm_config"], options, int(given["rank"]),
                            given.get("distributed_init_method"))), "around")}
    for layout in LAYOUTS:
        for call in layout.calls:
            observe = observer(call.step,
                               binds=_bound_device if call.step == _SET_DEVICE else None,
                               last=call.step == SESSION_END)
            found[call.target] = (_recording_process_group(observe)
                                  if call.step == _PROCESS_GROUP else observe, "around")
    return found
