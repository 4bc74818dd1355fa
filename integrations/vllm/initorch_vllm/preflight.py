"""``initorch vllm check``: a vLLM server launch judged before it starts.

The arguments are those of ``python -m vllm.entrypoints.openai.api_server``.  They are
parsed, validated and resolved by vLLM's own code, as the server does it
(``entrypoints/launchers/api_server/entry.py:224-230``, then ``AsyncEngineArgs.
from_cli_args`` and ``create_engine_config``, :53, :83), with remote code off and the
Hugging Face hub offline: pre-flight never runs a model's code and never downloads.  Then
each check asks what, on this machine, failed only after the workers started, and
refuses it in one line citing the vLLM ``file:line`` that would fail (vLLM 0.32.0; see
:mod:`initorch_vllm.layout`).  What vLLM itself refuses at once (a bad argument, a
config it cannot build) is refused with its own message.  What may fail on something
pre-flight cannot see (whether a worker's AMX kernel finds the tile state granted) is a
"not checked" note, not a refusal.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import os
import socket
from collections.abc import Callable
from typing import Any

from initorch.kit import Preflight, one_line, record, run_checks
from initorch_vllm.layout import (
    AMX_ATTENTION,
    CONNECTOR_ACCELERATOR,
    ENGINE,
    GLOO_ACROSS_NODES,
    HEAD_SIZES,
    KV_CONNECTORS,
    NUMA_BIND,
    RELEASE,
    STORE_CONFIG,
)

__all__ = ["CHECKS", "NOTES", "Launch", "preflight"]

_MASTER_TIMEOUT_S = 2.0


@record
class Launch:
    """A launch as vLLM resolved it (its ``VllmConfig``), in this process's environment,
    which vLLM reads as the server would (``envs.py``)."""

    config: Any

    @property
    def on_cpu(self) -> bool:
        return str(self.config.device_config.device_type) == "cpu"


def numa_binding(launch: Launch) -> str | None:
    """tp (x pp) CPU workers on one host need a CPU set each: vLLM's executor binds their
    OpenMP threads before it starts them, and asserts (``utils/ompmultiprocessing.py``)."""
    if not launch.on_cpu:
        return None
    from importlib import import_module

    module, _, name = NUMA_BIND.manager.rpartition(".")
    manager = getattr(import_module(module), name)
    value = os.environ.get(NUMA_BIND.env, "auto")
    try:
        manager(launch.config)  # vLLM's own check, as its executor makes it
    except (AssertionError, ValueError, RuntimeError) as error:
        where = NUMA_BIND.auto_where if value == "auto" else NUMA_BIND.lists_where
        workers = launch.config.parallel_config.local_world_size
        return (f"{workers} CPU worker(s) on this host with {NUMA_BIND.env}={value!r}: "
                f"vLLM's executor would stop before starting them ({where}: "
                f"{one_line(error)}); give each worker its CPUs, e.g. "
                f"{NUMA_BIND.env}='{'|'.join(str(i) for i in range(workers))}'")
    return None


def head_size(launch: Launch) -> str | None:
    """The CPU attention declares its head sizes but checks them only in its kernel, on
    the worker's first forward pass, after the weights loaded."""
    model = launch.config.model_config
    if not launch.on_cpu or model.use_mla:
        return None
    from importlib import import_module

    module, _, name = HEAD_SIZES.backend.rpartition(".")
    supported = getattr(import_module(module), name).get_supported_head_sizes()
    size = model.get_head_size()
    if size in supported:
        return None
    return (f"the model's head size {size} is not one vLLM's CPU attention supports "
            f"({', '.join(map(str, supported))}; {HEAD_SIZES.where}): each worker would fail "
            f"in its first forward pass (\"Unsupported CPU attention configuration: "
            f"head_dim={size}\")")


def amx_attention(launch: Launch) -> str | None:
    """Whether a worker's first request can run the CPU attention's AMX kernel depends on
    whether anything in that worker asked Linux for the AMX tile state first, which
    only oneDNN does, and only for some models' layers: not a refusal, a note."""
    model, cache = launch.config.model_config, launch.config.cache_config
    if not launch.on_cpu or model.use_mla:
        return None
    from importlib import import_module

    module, _, name = AMX_ATTENTION.chooser.rpartition(".")
    isa = getattr(import_module(module), name)(model.dtype, cache.block_size,
                                               model.get_head_size(), cache.cache_dtype)
    if isa != "amx":
        return None
    return (f"whether each worker may run AMX: {model.dtype} attention on this CPU takes "
            f"vLLM's AMX kernel ({AMX_ATTENTION.where}), and vLLM's own code never asks "
            f"Linux for the AMX tile state; a worker where its oneDNN does not ask first "
            f"(a model whose linear layers all take vLLM's small-GEMM kernel, "
            f"{AMX_ATTENTION.gemms}) dies with SIGILL at its first request; "
            f"--dtype float32 takes the AVX-512 kernel")


def gloo_across_nodes(launch: Launch) -> str | None:
    """CPU workers on several nodes meet in one gloo group, which each joins at the
    address this host's name resolves to unless ``GLOO_SOCKET_IFNAME`` names an
    interface: a name that resolves to loopback (the default of many images) sends the
    other nodes to 127.0.0.1, and the group fails once every node has loaded vLLM.  A
    master on loopback keeps every node on this host, where loopback does reach."""
    parallel = launch.config.parallel_config
    if not launch.on_cpu or parallel.nnodes <= 1 or os.environ.get(GLOO_ACROSS_NODES.env) \
            or _loopback(parallel.master_addr):
        return None
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        address = None
    if address is not None and not _loopback(address):
        return None
    resolved = "does not resolve" if address is None else f"resolves to {address}"
    return (f"--nnodes {parallel.nnodes} on the CPU: this host's name {name!r} {resolved}, "
            f"so the workers' gloo group (tcp://{parallel.master_addr}:"
            f"{parallel.master_port}; {GLOO_ACROSS_NODES.where}) would send the other "
            f"nodes to loopback (\"Gloo connectFullMesh failed ... Connection refused\"); "
            f"set {GLOO_ACROSS_NODES.env} to the interface that reaches "
            f"{parallel.master_addr} on every node (`ip route get {parallel.master_addr}` "
            f"names it)")


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def kv_connector_module(launch: Launch) -> str | None:
    """A Mooncake KV connector without the Mooncake module it imports."""
    connector = _connector(launch)
    if connector is None or _importable(connector.needs):
        return None
    return (f"{connector.name} needs {connector.needs} (Mooncake), which is not installed: "
            f"each worker would fail building its KV connector ({connector.where})")


def connector_accelerator(launch: Launch) -> str | None:
    """The Mooncake connector's worker asks torch for its accelerator, which a CPU-only
    torch does not have: asked here as the worker asks it, so a torch with one passes."""
    connector = _connector(launch)
    if not launch.on_cpu or connector is None or connector.name != \
            CONNECTOR_ACCELERATOR.connector:
        return None
    import torch

    try:
        torch.accelerator.current_device_index()  # the worker's own call
    except RuntimeError as error:
        return (f"{connector.name} on the CPU: each worker would fail building its KV "
                f"connector, after loading its weights ({CONNECTOR_ACCELERATOR.where}: "
                f"torch.accelerator.current_device_index(): {one_line(error)}); the "
                f"Mooncake store connector (MooncakeStoreConnector) runs on the CPU")
    return None


def _importable(module: str) -> bool:
    """Whether ``module`` can be found, without importing it (its parent is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:  # its parent package is missing
        return False


def store_master(launch: Launch) -> str | None:
    """The Mooncake store connector sets up a Mooncake Store against its master; the
    Mooncake (peer-to-peer) connector has no master and reads none of this."""
    connector = _connector(launch)
    if connector is None or connector.name != "MooncakeStoreConnector":
        return None
    from importlib import import_module

    module, _, name = STORE_CONFIG.config_class.rpartition(".")
    config_class = getattr(import_module(module), name)
    path = os.environ.get(STORE_CONFIG.env)
    try:
        config = config_class.load_from_config()  # vLLM's own reading of it
    except (OSError, ValueError, TypeError) as error:
        return (f"MooncakeStoreConnector reads its store config from {STORE_CONFIG.env} "
                f"({STORE_CONFIG.load_where}): {one_line(error)}")
    master = str(config.master_server_address or "")
    if not master:
        return (f"MooncakeStoreConnector's store config ({path}) names no "
                f"master_server_address: the store cannot set up without its master "
                f"({STORE_CONFIG.setup_where})")
    host, _, port = master.rpartition(":")
    if not host or not port.isdigit():
        return (f"MooncakeStoreConnector's master_server_address {master!r} is not "
                f"host:port ({STORE_CONFIG.setup_where})")
    try:
        with socket.create_connection((host, int(port)), timeout=_MASTER_TIMEOUT_S):
            return None
    except OSError as error:
        return (f"MooncakeStoreConnector's master {master} does not answer ({error}): each "
                f"worker's store setup would fail ({STORE_CONFIG.setup_where})")


def _connector(launch: Launch) -> Any:
    transfer = launch.config.kv_transfer_config
    name = None if transfer is None else transfer.kv_connector
    return next((known for known in KV_CONNECTORS if known.name == name), None)


CHECKS: tuple[Callable[[Launch], str | None], ...] = (numa_binding, head_size,
                                                      gloo_across_nodes, kv_connector_module,
                                                      connector_accelerator, store_master)
"""What would fail: each returns its refusal."""

NOTES: tuple[Callable[[Launch], str | None], ...] = (amx_attention,)
"""What may fail, on something pre-flight cannot see: each returns its note."""


def preflight(arguments: list[str]) -> Preflight:
    """Resolve ``arguments`` with vLLM's own parser and config, plan them, and run every
    check.  A ``SystemExit`` from vLLM's parser (it printed why) propagates."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # pre-flight never downloads
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.launchers.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser(prog="initorch vllm check --")).parse_args(
        arguments)
    try:
        validate_parsed_serve_args(args)
        engine_args = AsyncEngineArgs.from_cli_args(args)
        notes: list[str] = []
        if engine_args.trust_remote_code:
            engine_args.trust_remote_code = False
            notes.append("--trust-remote-code: pre-flight resolves the launch without the "
                         "model's remote code")
        config = engine_args.create_engine_config()
    except Exception as error:  # vLLM's own refusal, whatever its type
        return Preflight(" ".join(arguments), None, (f"{ENGINE.name} refuses the launch: "
                                           f"{type(error).__name__}: {one_line(error)}",))
    from initorch_vllm.session import plan_for

    parallel = config.parallel_config
    selection = (f"--device {config.device_config.device_type} --profile vllm --set "
                 f"parallel.tp_size={parallel.tensor_parallel_size} --set "
                 f"parallel.pp_size={parallel.pipeline_parallel_size} (vLLM {RELEASE}'s "
                 f"order; installed: {ENGINE.label()})")
    # The plan each worker is checked against in verify mode; an error making it is
    # initorch's, not the launch's: it propagates.
    launch = Launch(config)
    notes += run_checks(NOTES, launch)
    return Preflight(selection, plan_for(config), tuple(run_checks(CHECKS, launch)),
                     tuple(notes))
