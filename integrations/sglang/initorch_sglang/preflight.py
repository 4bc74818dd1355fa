"""``initorch sglang check -- <launch arguments>``: what would fail minutes into a launch.

SGLang's own parser and resolver read the command line (``prepare_server_args``,
``ServerArgs.resolve_once``), so the check sees exactly what the server would.  The
result is mapped to initorch's selection (:mod:`initorch_sglang.selection`) and planned;
then each check below asks the question that, on this machine, was answered by a crash
after the weights loaded.  Each refusal is one line; any refusal is exit 2.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from initorch_sglang.options import Options
from initorch_sglang.selection import selection_for

__all__ = ["CHECKS", "Preflight", "preflight"]

SEGMENT_ENV = "MOONCAKE_GLOBAL_SEGMENT_SIZE"
OMP_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"
MASTER_CONNECT_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Launch:
    """What a check reads: SGLang's resolved arguments, the environment, the options."""

    args: Any
    environ: Mapping[str, str]
    options: Options

    @property
    def world(self) -> int:
        """SGLang's ranks: dp x tp x pp (``init_threads_binding``, bootstrap.py:79-86)."""
        return int((self.args.dp_size or 1) * self.args.tp_size * (self.args.pp_size or 1))

    @property
    def uses_mooncake_store(self) -> bool:
        return bool(self.args.enable_hierarchical_cache) and \
            self.args.hicache_storage_backend == "mooncake"


Check = Callable[[Launch], "str | None"]


def segment_size(launch: Launch) -> str | None:
    """SGLang reads ``MOONCAKE_GLOBAL_SEGMENT_SIZE`` only when its store starts, after the
    weights (``mooncake_store.py:80-93``); its own parser decides here."""
    raw = launch.environ.get(SEGMENT_ENV)
    if raw is None or not launch.uses_mooncake_store:
        return None
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import (
        _parse_global_segment_size,
    )

    try:
        _parse_global_segment_size(raw)
    except ValueError as error:
        return (f"{SEGMENT_ENV}={raw!r}: SGLang cannot parse it ({error}); give plain bytes "
                "or <N>gb, e.g. 4gb")
    return None


def cpu_threads_bind(launch: Launch) -> str | None:
    """On ``--device cpu`` SGLang asserts one rank per NUMA node unless
    ``SGLANG_CPU_OMP_THREADS_BIND`` names each rank's cores (``numa_utils.py:454-497``);
    drive mode fills it in from initorch's core split."""
    if launch.args.device != "cpu" or launch.options.mode == "drive":
        return None
    from sglang.srt.utils.numa_utils import get_cpu_ids_by_node

    from initorch_sglang.drive import core_split  # the split drive mode would fill in

    nodes = len(get_cpu_ids_by_node())
    bind = launch.environ.get(OMP_BIND_ENV)
    if bind is None:
        if launch.world > nodes:
            return (f"{launch.world} CPU ranks on {nodes} NUMA node(s) and no {OMP_BIND_ENV}: "
                    f"SGLang would assert at start-up; set it (e.g. "
                    f"{OMP_BIND_ENV}='{core_split(launch.world)}') or use "
                    "INITORCH_SGLANG=drive, which fills it in")
        return None
    groups = bind.split("|")
    if len(groups) < launch.world:
        return (f"{OMP_BIND_ENV}={bind!r} names {len(groups)} core group(s) for "
                f"{launch.world} ranks: SGLang would assert at start-up; give one "
                "'|'-separated group per rank")
    return None


def host_allocator(launch: Launch) -> str | None:
    """The HiCache host pool of a device SGLang's table leaves out falls through to
    ``cudaHostRegister`` (``pool_host/common.py:453-459``), after the weights load;
    the integration installs the profile's allocator, but only when it is on."""
    if not launch.args.enable_hierarchical_cache or launch.options.active:
        return None
    from sglang.srt.mem_cache.pool_host.common import ALLOC_MEMORY_FUNCS

    device = str(launch.args.device)
    if device in ALLOC_MEMORY_FUNCS or device in ("cuda", "hip", "rocm"):
        return None
    return (f"the HiCache host pool on {device} would fall through to cudaHostRegister "
            f"(SGLang's ALLOC_MEMORY_FUNCS has no {device} entry) and fail at start-up; "
            "set INITORCH_SGLANG=verify (or drive) so that initorch installs the profile's "
            "allocator")


def world_split(launch: Launch) -> str | None:
    """tp x pp ranks must split evenly over the nodes, and fit the devices a node has."""
    ranks = int(launch.args.tp_size * (launch.args.pp_size or 1))
    nodes = int(launch.args.nnodes or 1)
    if ranks % nodes:
        return (f"tp {launch.args.tp_size} x pp {launch.args.pp_size} = {ranks} rank(s) do "
                f"not split over --nnodes {nodes}; make tp x pp a multiple of the nodes")
    expected = launch.environ.get("WORLD_SIZE")
    if expected is not None and expected.isdigit() and int(expected) != ranks:
        return (f"tp {launch.args.tp_size} x pp {launch.args.pp_size} = {ranks} rank(s), but "
                f"the launcher's WORLD_SIZE is {expected}")
    return None


def store_layout(launch: Launch) -> str | None:
    """The Mooncake Store moves an MHA model's pages only in page-major layouts: with
    ``layer_first`` (which SGLang keeps for the ``kernel_ascend`` io backend,
    ``arg_groups/hicache_hook.py:197-226``) it fails on the first transfer
    (``mooncake_store.py:1318-1323``)."""
    if not launch.uses_mooncake_store or launch.args.hicache_mem_layout != "layer_first":
        return None
    if _is_mla(Path(str(launch.args.model_path))):
        return None
    return ("--hicache-mem-layout layer_first (as SGLang resolved it for io backend "
            f"{launch.args.hicache_io_backend}) with the mooncake backend and an MHA model: "
            "the store refuses it on the first transfer ('Mooncake layer_first multi-buffer "
            "is only supported for MLA host KV pool'); use page_first or page_first_direct")


def _is_mla(model: Path) -> bool:
    """Whether the checkpoint's config is an MLA model (DeepSeek's ``kv_lora_rank``)."""
    try:
        config = json.loads((model / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(config.get("kv_lora_rank"))


def master_reachable(launch: Launch) -> str | None:
    """The store connects to ``MOONCAKE_MASTER`` after the weights load
    (``mooncake_store.py:200-230``, setup :566-580)."""
    if not launch.uses_mooncake_store:
        return None
    address = launch.environ.get("MOONCAKE_MASTER")
    if not address:
        if launch.environ.get("MOONCAKE_CLIENT"):
            return None
        return ("MOONCAKE_MASTER is not set: SGLang's Mooncake Store needs a master "
                "(HOST:PORT of mooncake_master's RPC port)")
    from initorch.plugin import split_host_port

    try:
        host, port = split_host_port(address)
    except ValueError as error:
        return f"MOONCAKE_MASTER={address!r}: {error}"
    try:
        with socket.create_connection((host, port), timeout=MASTER_CONNECT_TIMEOUT_S):
            return None
    except OSError as error:
        return (f"MOONCAKE_MASTER={address}: the master does not answer "
                f"({error.strerror or error}); start mooncake_master there first")


CHECKS: tuple[Check, ...] = (segment_size, cpu_threads_bind, host_allocator, world_split,
                             store_layout, master_reachable)


@dataclass(frozen=True, slots=True)
class Preflight:
    """The plan for the launch (``None`` when it cannot be made) and every refusal."""

    selection: str
    plan: Any
    refusals: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.refusals


def preflight(argv: list[str], options: Options,
              environ: Mapping[str, str] | None = None) -> Preflight:
    """Parse and resolve ``argv`` as SGLang does, plan it, and run every check."""
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.server_args import prepare_server_args

    from initorch import InitorchError

    environ = os.environ if environ is None else environ
    raw = prepare_server_args(argv)
    refusals: list[str] = []
    try:
        raw.resolve_once()
    except Exception as error:  # SGLang's own refusal, in its own words
        refusals.append(f"SGLang refuses the arguments: {type(error).__name__}: {error}")
    args = resolved_view(raw)  # what resolution decided (the layout it rewrote, ...)
    launch = Launch(args, environ, options)
    selection = selection_for(args, options, environ)
    checked = [problem for check in CHECKS if (problem := check(launch)) is not None]
    plan = None
    try:
        plan = selection.plan()
    except InitorchError as error:
        # initorch reads SGLang's Mooncake variables too: one line per variable, SGLang's.
        named = {line.split("=", 1)[0] for line in checked if "=" in line.split(" ", 1)[0]}
        refusals.extend(f"initorch: {problem}" for problem in error.problems
                        if not any(f"{name}=" in str(problem) for name in named))
    refusals.extend(checked)
    return Preflight(selection.describe(), plan, tuple(refusals))
