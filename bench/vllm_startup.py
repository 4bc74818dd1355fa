"""The real vLLM 0.32.0 server's start-up, stock and in verify mode, and initorch's own time
in each of its processes.

One launch line for every start (``python -m vllm.entrypoints.openai.api_server`` on the
tiny model of tests/vllm: float32, eager, a 256-token context; tp=1 unless ``--tp`` says
otherwise), the variants started round-robin so that the noise of a shared machine hits
both alike.  *Ready* is when ``/health`` answers 200.  Stock vLLM has the plugin installed
and not asked for (no ``INITORCH_VLLM``), as an operator who installed initorch runs it.
The ratio of the medians is reported, not gated: two launches of one line differ by more
than initorch adds.

What is gated is measured inside each process vLLM starts (the API server, the engine
core, each worker): initorch's own time there over that process's start-up, at most 1%.
The probe in ``bench/vllm_probe`` reads, in every process, the import of the plugin
module and the call of its ``load``, and initorch's own account (``COST``) for what it
does after the call (hooks applied when vLLM imports their modules; a worker's plan,
recording and report).  A worker's start-up ends when its warm-up returns (its report's
``process_up_s``); the API server's and the engine core's when the server is ready.
initorch and its vLLM integration are compiled to bytecode first, as ``pip install``
does for a wheel: an editable checkout under ``PYTHONDONTWRITEBYTECODE`` would compile
them in every process, a cost no installed user pays.

    .venv/bin/python bench/vllm_startup.py [--runs 3] [--tp 1 2]
"""

from __future__ import annotations

import argparse
import compileall
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo, for tests.vllm

from measure import (
    compile_initorch,
    interleaved,
    print_ratios,
    process_start,
    share_line,
    uptime,
)

from tests.vllm.server import BIND, running, vllm_venv
from tests.vllm.tiny_model import make_tiny_model

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "bench" / "vllm_probe"
INTEGRATION = REPO / "integrations" / "vllm" / "initorch_vllm"
STOCK = "stock vLLM"
VERIFY = "verify mode"
ROLES = ("api server", "engine core", "worker")


@dataclass
class Samples:
    """Seconds to ready by variant; each process's own seconds and share of its
    start-up by variant and role (one pair per process and round), and each launch's
    highest share (``worst``)."""

    ready: dict[str, list[float]] = field(default_factory=dict)
    own: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    worst: dict[str, list[float]] = field(default_factory=dict)
    phases: dict[str, list[float]] = field(default_factory=dict)  # a worker's, verify mode


def own_time(probe: dict[str, object]) -> float:
    """initorch's seconds in a probed process: the plugin's import and call, and its
    account beyond the part the call already holds."""
    spans: dict[str, float] = probe["spans_s"]  # type: ignore[assignment]
    cost: dict[str, float] = probe["cost"]  # type: ignore[assignment]
    return (spans.get("plugin import", 0.0) + spans.get("plugin call", 0.0)
            + cost["total_s"] - spans.get("account during call", 0.0))


def collect(work: Path, name: str, ready_at: float, found: Samples) -> None:
    """Each process's own seconds and share, from the probe and the workers' reports."""
    shares = []
    for path in sorted((work / "probe").glob("*.json")):
        probe = json.loads(path.read_text())
        role = str(probe["role"])
        own = own_time(probe)
        up = ready_at - process_start(probe)
        report = work / "reports" / f"report-{probe['rank']}.json"
        if role == "worker" and report.exists():
            cost = json.loads(report.read_text())["vllm"]["cost"]
            up = cost["process_up_s"]
            for phase, seconds in cost["phases_s"].items():
                found.phases.setdefault(phase, []).append(seconds)
        found.own[name].setdefault(role, []).append((own, own / up))
        shares.append(own / up)
    found.worst.setdefault(name, []).append(max(shares, default=0.0))


def start_up(model: Path, environ: dict[str, str], work: Path, name: str, tp: int,
             found: Samples) -> float:
    """Seconds to ready; each process's account goes to ``found``."""
    for folder in ("reports", "probe"):
        shutil.rmtree(work / folder, ignore_errors=True)
        (work / folder).mkdir(parents=True)
    extra = environ | {"PYTHONPATH": str(PROBE), "INITORCH_BENCH_PROBE": str(work / "probe")}
    if tp > 1:
        extra |= BIND
    with running(model, extra, work / "vllm.log", tp=tp) as server:
        ready = server.wait_ready()
        ready_at = uptime() - (time.monotonic() - server.started - ready)
        time.sleep(1.0)  # the probes' last look at their account (every 0.5 s)
    collect(work, name, ready_at, found)
    return ready


def samples(runs: int, tp: int = 1) -> Samples:
    """Stock vLLM and verify mode, ``runs`` times each, interleaved, on ``tp`` workers."""
    found = Samples(own={STOCK: {}, VERIFY: {}})
    compile_initorch()
    compileall.compile_dir(INTEGRATION, quiet=1)
    with tempfile.TemporaryDirectory(prefix="initorch-bench-vllm-") as folder:
        work = Path(folder)
        model = make_tiny_model(work / "tiny-llama")
        variants = {STOCK: {}, VERIFY: {
            "INITORCH_VLLM": "verify",
            "INITORCH_VLLM_REPORT": str(work / "reports" / "report-{rank}.json")}}

        def sampler(name: str, environ: dict[str, str]) -> Callable[[], float]:
            return lambda: start_up(model, environ, work, name, tp, found)

        found.ready = interleaved({name: sampler(name, environ)
                                   for name, environ in variants.items()}, runs)
    return found


def print_samples(found: Samples, tp: int) -> None:
    print(f"the real vLLM server (tp={tp}), seconds to ready, median [min-max], and the "
          "ratio to stock:")
    print_ratios(found.ready, STOCK, "s")
    print("initorch's own time in each process: seconds, and share of the process's "
          "start-up (goal <= 1%), median [min-max]:")
    for name, roles in found.own.items():
        for role in (*ROLES, *sorted(set(roles) - set(ROLES))):
            values = roles.get(role)
            if not values:
                continue
            print(share_line(f"{name:<12} {role:<12}", values))
    if found.phases:
        print("a worker's account by phase (verify mode), milliseconds, median [min-max]: "
              + ", ".join(f"{phase} {statistics.median(values) * 1000:.0f} "
                          f"[{min(values) * 1000:.0f}-{max(values) * 1000:.0f}]"
                          for phase, values in found.phases.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--tp", type=int, nargs="+", default=[1],
                        help="tensor-parallel sizes, each a run of its own (default 1)")
    args = parser.parse_args()
    if vllm_venv() is None:
        sys.exit("no vLLM venv (.venv-vllm): run 'make vllm-venv'")
    for tp in args.tp:
        print_samples(samples(args.runs, tp), tp)


if __name__ == "__main__":
    main()
