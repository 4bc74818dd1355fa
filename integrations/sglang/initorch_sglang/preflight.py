"""``initorch sglang check -- <launch arguments>``: what would fail minutes into a launch.

SGLang's own parser and resolver read the command line (``prepare_server_args``,
``ServerArgs.resolve_once``), so the check sees exactly what the server would.  The
result is mapped to initorch's selection (:mod:`initorch_sglang.selection`) and planned;
then each check below asks the question that, on this machine, was answered by a crash
after the weights loaded.  Each refusal is one line; any refusal is exit 2 (the kit's
pre-flight framework, :class:`initorch.kit.Preflight`, holds the result and prints it).

Pre-flight, like ``initorch plan``, never runs model code and never downloads:
SGLang's resolver runs with ``trust_remote_code`` off (the model's ``config.json`` is
read as data), and only for a model folder on this machine.  What could not be judged
so is said in one line each (:attr:`Preflight.notes`), not refused.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from initorch.kit import (
    Check,
    Preflight,
    auto_map,
    cpu_list_problem,
    is_mla,
    one_line,
    record,
    run_checks,
)
from initorch.plugin import MAX_WORLD_SIZE, NumberError, non_ascii_problem, parse_count
from initorch_sglang.options import Options
from initorch_sglang.selection import selection_for
from initorch_sglang.store_config import store_source

__all__ = ["CHECKS", "preflight"]

SEGMENT_ENV = "MOONCAKE_GLOBAL_SEGMENT_SIZE"
OMP_BIND_ENV = "SGLANG_CPU_OMP_THREADS_BIND"
MASTER_CONNECT_TIMEOUT_S = 2.0


@record
class Launch:
    """What a check reads: SGLang's resolved arguments, the environment, the options."""

    args: Any
    environ: Mapping[str, str]
    options: Options
    model_config: Path | None = None
    """The model's ``config.json`` when it is on this machine (else nothing is judged
    from the model)."""

    @property
    def world(self) -> int:
        """SGLang's ranks: dp x tp x pp (``_bind_threads_if_cpu``, bootstrap.py:75-87)."""
        return int((self.args.dp_size or 1) * self.args.tp_size * (self.args.pp_size or 1))

    @property
    def uses_mooncake_store(self) -> bool:
        return bool(self.args.enable_hierarchical_cache) and \
            self.args.hicache_storage_backend == "mooncake"



def segment_size(launch: Launch) -> str | None:
    """SGLang reads the segment size only when its store starts, after the weights
    (``mooncake_store.py:80-93``), from where its configuration comes from
    (:mod:`initorch_sglang.store_config`: ``MOONCAKE_GLOBAL_SEGMENT_SIZE`` only when the
    variables are the source); its own parser decides here."""
    if not launch.uses_mooncake_store:
        return None
    source = store_source(launch.args, launch.environ)
    if source.origin == "environment":
        name, raw = SEGMENT_ENV, launch.environ.get(SEGMENT_ENV)
    else:
        name, raw = f"{source.origin} (global_segment_size)", \
            (source.fields or {}).get("global_segment_size")
    if raw is None:
        return None
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import (
        _parse_global_segment_size,
    )

    try:
        _parse_global_segment_size(raw)
    except (TypeError, ValueError) as error:
        return (f"{name}={raw!r}: SGLang cannot parse it ({error}); give plain bytes "
                "or <N>gb, e.g. 4gb")
    return None


def cpu_threads_bind(launch: Launch) -> str | None:
    """On ``--device cpu`` SGLang asserts one rank per NUMA node unless
    ``SGLANG_CPU_OMP_THREADS_BIND`` names each rank's cores (``numa_utils.py:454-497``);
    drive mode fills it in from initorch's core split.

    A rank reads entry ``gpu_id`` of the ``|``-separated list (``numa_index``,
    ``numa_utils.py:484-497``; ``gpu_id = base_gpu_id + local rank x gpu_id_step``) and
    hands that group to sgl-kernel's ``init_cpu_threads_env`` (``bootstrap.py:277-285``),
    which parses it with libnuma's ``numa_parse_cpustring`` and fails on an empty or
    unparsable group: so each group a rank reads must be there, and be a CPU list."""
    if launch.args.device != "cpu" or launch.options.mode == "drive":
        return None
    from sglang.srt.utils.numa_utils import get_cpu_ids_by_node

    from initorch_sglang.drive import core_split  # the split drive mode would fill in

    nodes = len(get_cpu_ids_by_node())
    base, step = int(launch.args.base_gpu_id or 0), int(launch.args.gpu_id_step or 1)
    bind = launch.environ.get(OMP_BIND_ENV)
    if bind is None:
        if launch.world > nodes:
            split = core_split(launch.world, base_gpu_id=base, gpu_id_step=step)
            return (f"{launch.world} CPU ranks on {nodes} NUMA node(s) and no {OMP_BIND_ENV}: "
                    f"SGLang would assert at start-up; set it (e.g. {OMP_BIND_ENV}='{split}') "
                    "or use INITORCH_SGLANG=drive, which fills it in")
        return None
    groups = bind.split("|")
    local_ranks = max(launch.world // int(launch.args.nnodes or 1), 1)
    for rank in range(local_ranks):
        index = base + rank * step
        if index >= len(groups):
            return (f"{OMP_BIND_ENV}={bind!r} names {len(groups)} core group(s), but rank "
                    f"{rank} reads entry {index} (its gpu_id): SGLang would assert at "
                    "start-up (numa_utils.py:492-496); give one '|'-separated group per rank")
        problem = cpu_list_problem(groups[index])
        if problem is not None:
            return (f"{OMP_BIND_ENV}={bind!r}: group {index} (rank {rank}'s) {problem}: "
                    "sgl-kernel's init_cpu_threads_env would fail at start-up "
                    "(bootstrap.py:277-285); write each group as a CPU list, e.g. 0-3,8")
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
    """tp x pp ranks must split evenly over the nodes.  (``WORLD_SIZE`` is not read: SGLang
    never reads it, and a Kubeflow or torchrun launcher exports its own count there.)"""
    ranks = int(launch.args.tp_size * (launch.args.pp_size or 1))
    nodes = int(launch.args.nnodes or 1)
    if ranks % nodes:
        return (f"tp {launch.args.tp_size} x pp {launch.args.pp_size} = {ranks} rank(s) do "
                f"not split over --nnodes {nodes}; make tp x pp a multiple of the nodes")
    return None


def store_layout(launch: Launch) -> str | None:
    """The Mooncake Store moves an MHA model's pages only in page-major layouts: with
    ``layer_first`` (which SGLang keeps for the ``kernel_ascend`` io backend,
    ``arg_groups/hicache_hook.py:197-226``) it fails on the first transfer
    (``mooncake_store.py:1318-1323``)."""
    if not launch.uses_mooncake_store or launch.args.hicache_mem_layout != "layer_first":
        return None
    if launch.model_config is None or is_mla(launch.model_config):
        return None  # a model that is not local is not judged (said in the notes)
    return ("--hicache-mem-layout layer_first (as SGLang resolved it for io backend "
            f"{launch.args.hicache_io_backend}) with the mooncake backend and an MHA model: "
            "the store refuses it on the first transfer ('Mooncake layer_first multi-buffer "
            "is only supported for MLA host KV pool'); use page_first or page_first_direct")


def master_reachable(launch: Launch) -> str | None:
    """The store reads its configuration as SGLang's ``_load_config`` does
    (``mooncake_store.py:324-344``: the extra-config flag, the config file, the
    variables; :mod:`initorch_sglang.store_config`), and connects to the master (or,
    with standalone storage, the standalone client) after the weights load (setup
    :567-580, setup_dummy :498-510)."""
    if not launch.uses_mooncake_store:
        return None
    source = store_source(launch.args, launch.environ)
    if source.problem is not None:
        return source.problem
    if source.standalone and not _has_mooncake_allocator():
        return ("standalone storage needs Mooncake's MooncakeHostMemAllocator, which the "
                "installed Mooncake lacks: SGLang falls back to its plain allocator "
                "(pool_host/common.py:78-92) and the store refuses it "
                "(mooncake_store.py:498-503); upgrade Mooncake, or give a master")
    address, name = str(source.address), source.address_name
    problem = non_ascii_problem(address, name)
    if problem is not None:
        return (f"{name}={address!r}: {problem.removeprefix(f'{name} {address!r} ')}; "
                "the store would not resolve it (retype it in ASCII)")
    from initorch.plugin import split_host_port

    try:
        host, _ = split_host_port(address)
        port = parse_count(address.rpartition(":")[2], "the port", minimum=1, maximum=65535)
    except ValueError as error:
        return f"{name}={address!r}: {error}"
    try:
        with socket.create_connection((host.strip("[]"), port),
                                      timeout=MASTER_CONNECT_TIMEOUT_S):
            return None
    except OSError as error:
        what = "standalone client" if source.standalone else "master"
        return (f"{name}={address}: the {what} does not answer "
                f"({error.strerror or error}); start "
                f"{'mooncake_client' if source.standalone else 'mooncake_master'} there first")


CHECKS: tuple[Check[Launch], ...] = (segment_size, cpu_threads_bind, host_allocator, world_split,
                             store_layout, master_reachable)


def _has_mooncake_allocator() -> bool:
    try:
        from mooncake.store import MooncakeHostMemAllocator  # noqa: F401
    except ImportError:
        return False
    return True


COUNTS = ("tp_size", "pp_size", "dp_size", "nnodes")


def counts_problem(args: Any) -> str | None:
    """Every count bounded before any check uses one: ``--tp 10**30`` would otherwise
    build a core split with one entry per rank.  The bound is the most ranks initorch
    takes from any launcher (:data:`initorch.plugin.MAX_WORLD_SIZE`)."""
    world = 1
    for name in COUNTS:
        value = getattr(args, name, 1)
        value = 1 if value is None else value
        try:
            count = parse_count(str(value), f"--{name.removesuffix('_size')}", minimum=1,
                                maximum=MAX_WORLD_SIZE)
        except NumberError as error:
            return f"{error} (initorch's bound on ranks)"
        if name != "nnodes":
            world *= count
    if world > MAX_WORLD_SIZE:
        return (f"dp x tp x pp = {world} ranks is larger than {MAX_WORLD_SIZE} (initorch's "
                "bound on ranks)")
    return None


def preflight(argv: list[str], options: Options,
              environ: Mapping[str, str] | None = None) -> Preflight:
    """Parse and resolve ``argv`` as SGLang does (remote code off, nothing downloaded),
    plan it, and run every check."""
    from sglang.srt.arg_groups.model_override_base import resolved_view
    from sglang.srt.server_args import prepare_server_args

    from initorch import InitorchError

    environ = os.environ if environ is None else environ
    raw = prepare_server_args(argv)
    bound = counts_problem(raw)
    if bound is not None:  # nothing below may size anything by these counts
        return Preflight("(not planned)", None, (bound,))
    refusals: list[str] = []
    notes: list[str] = []
    model = str(raw.model_path)
    config = Path(model) / "config.json"
    local = config.is_file()
    remote_code = bool(getattr(raw, "trust_remote_code", False))
    remote = auto_map(config) if local and remote_code else None
    if not local:
        notes.append(f"the model {model!r} is not a folder with a config.json on this "
                     "machine: pre-flight does not download it, so SGLang's resolution and "
                     "the checks that read the model were not run")
    else:
        raw.trust_remote_code = False  # pre-flight never imports the model's own code
        failed: Exception | None = None
        try:
            raw.resolve_once()
        except Exception as error:  # SGLang's own refusal, in its own words
            failed = error
        if remote:
            unchecked = "" if failed is None else \
                f"; SGLang's resolution failed without it ({type(failed).__name__})"
            notes.append(f"the model's config.json names remote code (auto_map: "
                         f"{', '.join(sorted(remote))}): pre-flight read config.json as "
                         f"data and did not run that code, so what it would change was not "
                         f"checked{unchecked}")
        elif failed is not None:
            refusals.append("SGLang refuses the arguments: "
                            f"{type(failed).__name__}: {one_line(failed)}")
    args = resolved_view(raw)  # what resolution decided (the layout it rewrote, ...)
    launch = Launch(args, environ, options, config if local else None)
    selection = selection_for(args, options, environ)
    checked = run_checks(CHECKS, launch)
    plan = None
    try:
        plan = selection.plan()
    except InitorchError as error:
        # initorch reads SGLang's Mooncake variables too: one line per variable, SGLang's.
        named = {line.split("=", 1)[0] for line in checked if "=" in line.split(" ", 1)[0]}
        refusals.extend(f"initorch: {problem}" for problem in error.problems
                        if not any(f"{name}=" in str(problem) for name in named))
    refusals.extend(checked)
    return Preflight(selection.describe(), plan, tuple(refusals), tuple(notes))
