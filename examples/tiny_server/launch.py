"""The tiny server's launcher: its whole start-up is one initorch plan.

    python -m tiny_server.weights /tmp/tiny/model.safetensors     # once
    torchrun --nproc-per-node=2 -m tiny_server.launch \\
        --set model.path=/tmp/tiny/model.safetensors --ready-file /tmp/tiny/ready.json
    python -m tiny_server.launch --device npu --plan              # the same server on NPU

The plan is the ``tiny-server`` profile over the device's profile (``--device``,
default cpu): CPU binding, device, Mooncake engine, process group, model-parallel
groups, collective warm-up, memory baseline, weights, KV pool, HiCache host
pool registered with Mooncake, warm-up.  When it has run, rank 0 serves HTTP on
loopback and writes the ready file (URL, every rank's pid and Mooncake port);
``POST /shutdown`` stops every rank, and leaving the ``Run`` block tears the
start-up down in reverse.  SIGINT/SIGTERM tear down too (exit 128+signal): the
serving loop stops on every rank at a command boundary first (see
``tiny_server.serve``), so that torchrun's SIGTERM to every rank ends each one with
its teardown and exit 143, long before torchrun's SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from initorch import (
    InitorchError,
    Registry,
    Run,
    RunInterrupted,
    RunReport,
    configure_logging,
    load_plan,
)
from initorch.renderers import plan_text, run_summary_text


def startup_report(report: RunReport) -> dict[str, Any]:
    """What ``GET /startup`` answers: the run table, and the critical chain as data."""
    return {
        "summary": run_summary_text(report),
        "wall_time_s": round(report.wall_time, 3),
        "critical_chain": [
            {"step": o.name, "finished_s": round(o.finished or 0.0, 3),
             "duration_s": round(o.duration, 3)}
            for o in report.critical_chain()
        ],
    }


def write_ready_file(path: Path, data: dict[str, Any]) -> None:
    """Write atomically, so that a watcher never reads half a file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data), encoding="utf-8")
    partial.replace(path)


def mooncake_processes(run: Run) -> dict[str, Any]:
    """This rank's Mooncake engine port and the managed master it started, if any: what
    must be gone after shutdown."""
    def output(step: str) -> Any:
        return run.output(step) if run.state.has_output(step) else None

    engine = output("init_shared_mooncake_transfer_engine")
    endpoint = output("mooncake_master")
    managed = endpoint.managed if endpoint is not None else None
    return {
        "mooncake_port": engine.rpc_port if engine is not None else None,
        "master": None if managed is None else {
            "pids": [managed.pid, managed.watchdog.pid],
            "ports": sorted(managed.ports.values()),
        },
    }


def serve(run: Run, ready_file: Path | None) -> None:
    """Serve on every rank until ``POST /shutdown``; rank 0 owns HTTP and the ready file."""
    import torch.distributed as dist
    from torch.distributed.distributed_c10d import PrefixStore

    from tiny_server.serve import Server

    setting = run.plan.settings
    job_store = run.output("rendezvous").peers  # this job's keys, a connection of its own
    group = run.output("init_model_parallel").world.cpu_group
    rank = dist.get_rank()
    server = Server(run.output("load_model"), run.output("alloc_kv_pool"), group, rank,
                    host=str(setting["server.host"].value), port=int(setting["server.port"].value),
                    max_new_tokens=int(setting["server.max_new_tokens"].value),
                    startup=startup_report(run.report),
                    store=PrefixStore("tiny-server", job_store))
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, {"pid": os.getpid(), **mooncake_processes(run)}, group=group)
    url = server.open()
    try:
        if url is not None:
            run.log.info("serving", url=url)
            if ready_file is not None:
                write_ready_file(ready_file, {"url": url, "ranks": ranks})
        server.serve_until_stopped(on_request=lambda answer: run.log.info(
            "request_served", tokens=len(answer["tokens"]), ranks_agree=answer["ranks_agree"]))
    finally:
        server.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="device type (its profile goes first)")
    parser.add_argument("--profile", action="append", default=[],
                        help="more profiles to layer over tiny-server")
    parser.add_argument("--set", action="append", default=[], dest="settings",
                        metavar="KEY=VALUE", help="override a setting")
    parser.add_argument("--ready-file", type=Path, help="rank 0 writes the URL here when ready")
    parser.add_argument("--log-format", choices=["console", "json"], default="console")
    parser.add_argument("--plan", action="store_true",
                        help="print the start-up plan and exit (no torch imported)")
    args = parser.parse_args(argv)

    configure_logging(args.log_format)
    try:
        # The same plugin mechanism as `initorch --plugin tiny_server.steps`.
        registry = Registry.with_plugins(["tiny_server.steps"])
        plan = load_plan(["tiny-server", *args.profile], device=args.device,
                         settings=args.settings, registry=registry)
        if args.plan:
            print(plan_text(plan))
            return 0
        with Run(plan, diagnoses=registry.diagnoses, handle_signals=True) as run:
            serve(run, args.ready_file)
    except RunInterrupted as interrupt:
        rank = os.environ.get("RANK", "0")
        print(f"tiny-server: rank {rank} {interrupt}; the start-up was torn down "
              f"(exit {interrupt.exit_code})", file=sys.stderr)
        return interrupt.exit_code
    except InitorchError as error:  # bad profile or settings, or a step failed (torn down)
        print(f"tiny-server: {error}", file=sys.stderr)
        return error.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
