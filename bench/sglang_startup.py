"""The real SGLang 0.5.23 server's start-up: stock, under verify mode, under drive mode.

The same launch line each time (HiCache with the Mooncake Store, one managed master, the
tiny model of tests/sglang; tp=2 unless ``--tp`` says otherwise), started round-robin so
that the noise of a shared machine hits every variant alike.  Two points are timed:
*up*, when ``/model_info`` answers (every rank's ``Scheduler`` built: all of the start-up
initorch observes or drives), and *ready*, when ``/health_generate`` answers 200
(SGLang's warm-up generation through every rank done, the same work in all variants, and
most of the noise).  Stock SGLang needs the test vehicle's CPU host-pool allocator to
start HiCache at all (``INITORCH_TEST_STOCK_CPU_POOL=1``); the initorch runs install
theirs.  Ratios are medians over stock's median, measured in this run: reported, not
gated, since two launches of one line differ by more than initorch adds.

What is gated is measured inside each process: initorch's own time there over that
process's time from its start to up, at most 1%.  In a rank it is the report's ``cost``
(plugin load, plan and hooks, recording, report) plus the import of the plugin module,
which SGLang does before the plugin's account starts; in the launcher and the
detokenizer (where SGLang also loads its plugins) it is the import and the call of the
plugin.  The probe in ``bench/sglang_probe`` times what the report cannot see, in every
process; with ``--profile`` it also writes a cProfile of each span.

Verify mode's launches also record their start-up timeline (``INITORCH_SGLANG_TIMELINE``,
the launch ``make demo-sglang`` draws): each phase's seconds, the longest of a launch's
processes, are reported, so that a change which shortens a phase shows in the numbers.

``--rank-path N`` times initorch's own path through a drive-mode rank instead, N rounds
per tree, in fresh interpreters of the SGLang venv that import SGLang's scheduler module
first (what a rank has imported when it loads the plugins): the plugin's import and
load (the release gate and the hooks included), the import of the integration's
verify module, the installed plugins' registry, the plan, then drive mode's registry,
plan and the import of the run.

``--tree LABEL=REV`` adds verify and drive mode on initorch as it was at git revision
REV (its core and its SGLang integration, put ahead of the installed ones on the
servers' ``PYTHONPATH``), interleaved with the others: a change measured against the
state before it, in one session.  ``--integration-from REV`` takes every tree's
integration from REV instead, so that only the core differs between trees.  Every
initorch tree is compiled to bytecode first, as ``pip install`` does for a wheel: an
editable checkout under ``PYTHONDONTWRITEBYTECODE`` would compile its sources in every
process (about 0.3 s, a cost no installed user pays).

    .venv/bin/python bench/sglang_startup.py [--runs 3] [--tp 1 2] [--tree before=ad2bfe2]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo, for tests.sglang

from measure import interleaved, print_ratios, share_line

from tests.sglang.server import BIND, SITE, Master, managed_master, running
from tests.sglang.tiny_model import make_tiny_model

REPO = Path(__file__).resolve().parent.parent
PROBE = REPO / "bench" / "sglang_probe"
STOCK = "stock SGLang"
MODES = {"verify mode": "verify", "drive mode": "drive"}
ROLES = {"launcher": "launcher", "run_scheduler_process": "rank",
         "run_detokenizer_process": "detokenizer"}
"""SGLang's processes that load the plugins, by the function each runs
(``srt/managers/scheduler.py:6323``, ``detokenizer_manager.py:552``, the launcher's
``entrypoints/engine.py:286``)."""
TREE_PARTS = {"orchestrator": "initorch", "steps": "initorch/steps",
              "profiles": "initorch/profiles",
              "integrations/sglang/initorch_sglang": "initorch_sglang"}
"""Where each part of the repository goes in a tree's site folder: the layout of the
installed wheels (``initorch.steps`` and ``initorch.profiles`` inside ``initorch``)."""


@dataclass(frozen=True)
class Variant:
    """One way to start the server: its environment and the site folder of its tree."""

    environ: dict[str, str]
    site: Path | None = None


@dataclass
class Samples:
    """Seconds to up and to ready by variant, initorch's share of each rank's start-up
    to up (``share``), and every process's own seconds and share by variant and role."""

    up: dict[str, list[float]] = field(default_factory=dict)
    ready: dict[str, list[float]] = field(default_factory=dict)
    share: dict[str, list[float]] = field(default_factory=dict)
    own: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)
    phases: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    runtime: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    account: dict[str, list[float]] = field(default_factory=dict)
    timeline: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """Seconds of each phase of a launch's start-up timeline, by variant (verify only)."""


def variants(trees: dict[str, Path], chosen: tuple[str, ...] = ("stock", *MODES.values())
             ) -> dict[str, Variant]:
    """Stock SGLang, then verify and drive mode on each tree (``""``: the installed one);
    ``chosen`` names the ones to start (``stock``, ``verify``, ``drive``)."""
    found = {STOCK: Variant({"INITORCH_TEST_STOCK_CPU_POOL": "1", **BIND})} \
        if "stock" in chosen else {}
    for label, site in trees.items():
        for name, mode in MODES.items():
            if mode not in chosen:
                continue
            key = f"{name} ({label})" if label else name
            found[key] = Variant({"INITORCH_SGLANG": mode, **BIND}, site if label else None)
    return found


def build_tree(revision: str, integration: str | None, folder: Path) -> Path:
    """A site folder with initorch and initorch-sglang as they were at ``revision`` (the
    integration at ``integration`` when given), compiled to bytecode."""
    site = folder / "site"
    for part, target in TREE_PARTS.items():
        source = integration if integration and part.startswith("integrations/") \
            else revision
        unpacked = folder / "unpacked" / source
        if not (unpacked / part).exists():
            unpacked.mkdir(parents=True, exist_ok=True)
            archive = subprocess.run(["git", "-C", str(REPO), "archive", source, part],
                                     check=True, capture_output=True).stdout
            subprocess.run(["tar", "x", "-C", str(unpacked)], input=archive, check=True)
        shutil.copytree(unpacked / part, site / target, dirs_exist_ok=True)
    compileall.compile_dir(site, quiet=1)
    return site


def cache_verdict(site: Path | None) -> None:
    """Have the integration of ``site`` (``None``: the installed one) judge the installed
    SGLang once, outside the timed launches: the verdict is cached per release and per
    integration code (``initorch_sglang.version``), which an installed integration reads
    from its first launch on; a tree's first launcher would otherwise read the release
    for about 20 s."""
    from tests.sglang.server import sglang_venv

    environ = {**os.environ, "PYTHONPATH": str(site)} if site is not None else None
    subprocess.run([str(sglang_venv() / "bin" / "python"), "-c",
                    "from initorch_sglang.version import sglang_verdict; sglang_verdict()"],
                   env=environ, check=True, capture_output=True)


def compile_checkout() -> None:
    """Write the checkout's bytecode (the installed editable initorch and integration)."""
    for part in TREE_PARTS:
        compileall.compile_dir(REPO / part, quiet=1)


def process_start(probe: dict[str, int]) -> float:
    """When the probed process started, in seconds of ``/proc/uptime``."""
    return probe["started_ticks"] / probe["ticks_per_s"]


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


RUNTIME_POINTS = {
    "runtime: wait for the last rank": ("runtime in", "last runtime in"),
    "runtime: after the last rank": ("last runtime in", "groups out"),
    "process groups": ("groups in", "groups out"),
    "process groups: wait for the last rank": ("groups in", "last groups in"),
    "process groups: after the last rank": ("last groups in", "groups out"),
    "rendezvous step": ("rendezvous in", "rendezvous out"),
    "rendezvous: wait for the last rank": ("rendezvous in", "last rendezvous in"),
    "rendezvous: after the last rank": ("last rendezvous in", "rendezvous out"),
    "rendezvous: store joined": ("rendezvous in", "agree in"),
    "agreement": ("agree in", "agree out"),
}
"""Spans of a rank's parallel runtime, between the probe's marks (``last X``: the latest
rank's ``X`` in the launch).  A rank that arrived first waits for the last one in any
mode: stock SGLang in its process-group init, drive mode in its plan agreement.  What a
rank spends after the last rank arrived is what the mode itself costs there."""


def runtime_spans(marks: list[dict[str, float]], found: dict[str, list[float]]) -> None:
    """Each rank's :data:`RUNTIME_POINTS` spans, from the marks of one launch's ranks."""
    latest = {f"last {point}": max(rank[point] for rank in marks)
              for point in ("runtime in", "groups in", "rendezvous in")
              if marks and all(point in rank for rank in marks)}
    for rank in marks:
        points = rank | latest
        for span, (start, end) in RUNTIME_POINTS.items():
            if start in points and end in points:
                found.setdefault(span, []).append(points[end] - points[start])


def waited_for_the_last_rank(probes: list[dict[str, Any]]) -> dict[int, float]:
    """Each rank's seconds between its arrival at drive mode's rendezvous and the last
    rank's (by world rank; none outside drive mode).

    The rendezvous step counts that wait as initorch's, but stock SGLang waits for the
    last rank too, in its process-group init (the ``process groups: wait for the last
    rank`` span measures it); what a rank spends in the rendezvous after the last rank
    arrived (the plan agreement, the store) is initorch's alone."""
    arrivals = {probe["rank"]: probe["marks_s"]["rendezvous in"] for probe in probes
                if probe["rank"] is not None and "rendezvous in" in probe.get("marks_s", {})}
    ranks = sum(1 for probe in probes if probe.get("marks_s"))
    if not arrivals or len(arrivals) != ranks:
        return {}
    last = max(arrivals.values())
    return {rank: last - arrived for rank, arrived in arrivals.items()}


def collect(work: Path, name: str, up_at: float, found: Samples) -> None:
    """Each process's own seconds and share, from the probe and the ranks' reports.

    A rank's own time is its report's account and the plugin's import, less the wait for
    the last rank at drive mode's rendezvous (:func:`waited_for_the_last_rank`); the
    account's own share, as the rank's log states it, goes to ``found.account``."""
    probes = [json.loads(path.read_text()) for path in sorted((work / "probe").glob("*.json"))]
    waited = waited_for_the_last_rank(probes)
    for probe in probes:
        role = ROLES.get(str(probe["role"]), str(probe["role"]))
        spans = probe["spans_s"]
        imported = spans.get("plugin import", 0.0)
        report = work / "reports" / f"report-{probe['rank']}.json"
        if role == "rank" and probe["rank"] is not None and report.exists():
            cost = json.loads(report.read_text())["sglang"]["cost"]
            counted, process_up = imported + cost["total_s"], cost["process_up_s"]
            found.account[name].append(counted / process_up)
            wait = waited.get(probe["rank"], 0.0)
            own = counted - wait
            found.share[name].append(own / process_up)
            for phase, seconds in {"plugin import": imported, **cost["phases_s"],
                                   "(less the wait for the last rank)": -wait}.items():
                found.phases[name].setdefault(phase, []).append(seconds)
        else:  # stock SGLang's processes too: the plugin is installed, not asked for
            own = imported + spans.get("plugin call", 0.0)
            process_up = up_at - process_start(probe)
        found.own[name].setdefault(role, []).append((own, own / process_up))
    runtime_spans([probe["marks_s"] for probe in probes if probe.get("marks_s")],
                  found.runtime[name])


def timeline_phases(folder: Path, into: dict[str, list[float]]) -> None:
    """Each measured phase of the launch timeline in ``folder``, by process kind
    (``Scheduler.__init__ [SGLang scheduler]``), its seconds (the longest of the
    processes of that kind: the slower rank), and the seconds from the first process's
    start to ready, into ``into``."""
    from initorch.kit import read_launch

    launch = read_launch(folder)
    longest: dict[str, float] = {"(ready after)": launch.ready_at() - launch.origin}
    for phase in launch.blame():
        kind = launch.process(phase.process).name.split(" (")[0].split(", rank")[0]
        key = f"{phase.name} [{kind}]"
        longest[key] = max(longest.get(key, 0.0), phase.duration)
    for name, seconds in longest.items():
        into.setdefault(name, []).append(seconds)


def start_up(model: Path, master: Master, variant: Variant, work: Path, name: str, tp: int,
             profile: bool, found: Samples) -> float:
    """Seconds to ready; the seconds to up, each process's account and (verify mode)
    the timeline's phases go to ``found``."""
    for folder in ("reports", "probe", "timeline"):
        shutil.rmtree(work / folder, ignore_errors=True)
        (work / folder).mkdir(parents=True)
    environ = variant.environ | {"INITORCH_SGLANG_REPORT": str(work / "reports" /
                                                                "report-{rank}.json"),
                                 "INITORCH_BENCH_PROBE": str(work / "probe"),
                                 "INITORCH_BENCH_PROFILE": "1" if profile else ""}
    timeline = environ.get("INITORCH_SGLANG") == "verify"
    if timeline:
        environ["INITORCH_SGLANG_TIMELINE"] = str(work / "timeline")
    site = (*(() if variant.site is None else (variant.site,)), SITE, PROBE)
    with running(model, master, environ, work / "server.log", site=site, tp=tp) as server:
        ready = server.wait_ready()
        up = server.up_after if server.up_after is not None else ready
        up_at = uptime() - (time.monotonic() - server.started - up)
        found.up[name].append(up)
        if timeline:  # untimed: the launcher writes the ready moment just after answering
            from initorch.kit import written_ready

            deadline = time.monotonic() + 60
            while written_ready(work / "timeline", server.process.pid) is None and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
    collect(work, name, up_at, found)
    if timeline:
        timeline_phases(work / "timeline", found.timeline.setdefault(name, {}))
    if profile:
        kept = work / "profiles" / f"{name}-{len(found.up[name])}"
        shutil.copytree(work / "probe", kept, dirs_exist_ok=True)
    return ready


def samples(runs: int, tp: int = 2, trees: dict[str, Path] | None = None,
            profile: bool = False, kinds: tuple[str, ...] = ("stock", *MODES.values())
            ) -> Samples:
    """Every variant of ``kinds`` ``runs`` times, interleaved, on ``tp`` ranks."""
    chosen = variants(trees or {"": REPO}, kinds)
    found = Samples(up={name: [] for name in chosen}, share={name: [] for name in chosen},
                    own={name: {} for name in chosen}, phases={name: {} for name in chosen},
                    runtime={name: {} for name in chosen},
                    account={name: [] for name in chosen})
    if not trees:
        compile_checkout()
    sites: list[Path | None] = list(trees.values()) if trees else [None]
    for site in sites:
        cache_verdict(site)
    with tempfile.TemporaryDirectory(prefix="initorch-bench-sglang-") as folder:
        work = Path(folder)
        model = make_tiny_model(work / "tiny-llama")
        with managed_master() as master:
            def sampler(name: str, variant: Variant) -> Callable[[], float]:
                return lambda: start_up(model, master, variant, work, name, tp, profile, found)

            found.ready = interleaved({name: sampler(name, variant)
                                       for name, variant in chosen.items()}, runs)
        if profile:
            kept = REPO / "out" / "sglang-profiles"
            shutil.copytree(work / "profiles", kept, dirs_exist_ok=True)
            print(f"cProfile of each span: {kept}")
    return found


RANK_PATH_PHASES = ("plugin import", "plugin load", "import", "plugins", "plan", "drive")


def rank_path() -> None:
    """In an SGLang venv: initorch's path through a drive-mode rank, its phases' seconds
    as JSON.

    As a rank takes it: SGLang's scheduler module imported first, then the plugin as
    SGLang's ``load_plugins`` takes it, in a process whose parent is the launcher (the
    plugin module's import, then its load: the release gate, the hooks), then the tree's own
    integration: verify's registry and plan, then drive mode's registry (from verify's,
    where the tree reuses it), its plan and the import of the run.  Each phase is the
    process's CPU time, not the wall clock: on a shared machine a tree's phases then
    differ by what the tree does, not by what else ran meanwhile."""
    import importlib
    import multiprocessing
    import types

    importlib.import_module("sglang.srt.managers.scheduler")  # as a rank has, first
    launcher = types.SimpleNamespace(pid=os.getppid())  # this bench: a rank's launcher
    multiprocessing.parent_process = lambda: launcher  # type: ignore[assignment,return-value]
    os.environ["INITORCH_SGLANG"] = "drive"
    spent: dict[str, float] = {}
    began = time.process_time()
    plugin = importlib.import_module("initorch_sglang.plugin")
    spent["plugin import"] = time.process_time() - began
    began = time.process_time()
    plugin.load()
    spent["plugin load"] = time.process_time() - began
    began = time.process_time()
    verify = importlib.import_module("initorch_sglang.verify")
    spent["import"] = time.process_time() - began
    from initorch import Registry
    from initorch.kit import engine_performed
    from initorch_sglang import drive
    from initorch_sglang.selection import DRIVE_OVERLAY, Selection

    selection = Selection(("sglang",), "cpu", (("hicache.enabled", True),))
    shared = getattr(verify, "installed_registry", None)
    began = time.process_time()
    registry = Registry.with_plugins() if shared is None else shared()
    spent["plugins"] = time.process_time() - began
    began = time.process_time()
    selection.plan(registry)
    spent["plan"] = time.process_time() - began
    began = time.process_time()
    importlib.import_module("initorch.execution.run")
    driven = engine_performed(vars(drive)["_ACTIONS"], engine="SGLang",
                              installed=None if shared is None else shared())
    selection.with_overlay(DRIVE_OVERLAY).plan(driven)
    spent["drive"] = time.process_time() - began
    print(json.dumps(spent))


def rank_path_samples(runs: int, trees: dict[str, Path]) -> dict[str, dict[str, list[float]]]:
    """``runs`` rounds of :func:`rank_path` per tree, interleaved: seconds by phase."""
    from tests.sglang.server import sglang_venv

    found: dict[str, dict[str, list[float]]] = {
        label: {phase: [] for phase in (*RANK_PATH_PHASES, "total")} for label in trees}
    python = str(sglang_venv() / "bin" / "python")
    for _ in range(runs):
        for label, site in trees.items():
            result = subprocess.run(
                [python, str(Path(__file__).resolve()), "--rank-path-child"],
                env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True, text=True,
                check=True)
            spent = json.loads(result.stdout.strip().splitlines()[-1])
            for phase in RANK_PATH_PHASES:
                found[label][phase].append(spent[phase])
            found[label]["total"].append(sum(spent.values()))
    return found


def print_rank_path(found: dict[str, dict[str, list[float]]]) -> None:
    print("initorch's path through a drive-mode rank (SGLang's scheduler module imported "
          "first), CPU milliseconds, median [min-max]; each tree's ratio to the first's:")
    first = next(iter(found))
    for phase in (*RANK_PATH_PHASES, "total"):
        print(f"  {phase}:")
        print_ratios({label: by_phase[phase] for label, by_phase in found.items()}, first,
                     "ms", 1000)


def print_samples(found: Samples, tp: int) -> None:
    print(f"the real SGLang server (tp={tp}, HiCache + Mooncake Store), seconds to up:")
    baseline = STOCK if STOCK in found.up else next(iter(found.up))
    print_ratios(found.up, baseline, "s")
    print("seconds to ready:")
    print_ratios(found.ready, baseline, "s")
    print("initorch's own time in each process: seconds, and share of the process's "
          "start-up to up (goal <= 1%), median [min-max]:")
    for name, roles in found.own.items():
        for role, values in sorted(roles.items()):
            print(share_line(f"{name:<28} {role:<12}", values))
    print("a rank's account as its log states it (drive: the rendezvous's wait for the last "
          "rank included), share of its start-up to up, median [min-max]:")
    for name, shares in found.account.items():
        if shares:
            print(f"  {name:<28} {statistics.median(shares):6.2%} "
                  f"[{min(shares):.2%}-{max(shares):.2%}]  ({len(shares)})")
    print("a rank's own time by phase, milliseconds, median [min-max]:")
    for name, phases in found.phases.items():
        if phases:
            print(f"  {name}: " + ", ".join(
                f"{phase} {statistics.median(values) * 1000:.0f} "
                f"[{min(values) * 1000:.0f}-{max(values) * 1000:.0f}]"
                for phase, values in phases.items()))
    if any(found.runtime.values()):
        print("a rank's parallel runtime by span (probe marks, every rank), milliseconds, "
              "median [min-max]:")
    for name, spans in found.runtime.items():
        for span, lengths in spans.items():
            print(f"  {name:<28} {span:<40} {statistics.median(lengths) * 1000:7.0f} "
                  f"[{min(lengths) * 1000:.0f}-{max(lengths) * 1000:.0f}]  ({len(lengths)})")
    for name, phases in found.timeline.items():
        print(f"{name}: the start-up timeline's phases (the longest process's), seconds, "
              "median [min-max]:")
        for phase, lengths in sorted(phases.items(), key=lambda item: -max(item[1])):
            print(f"  {phase:<60} {statistics.median(lengths):8.3f} "
                  f"[{min(lengths):.3f}-{max(lengths):.3f}]  ({len(lengths)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--tp", type=int, nargs="+", default=[2],
                        help="tensor-parallel sizes, each a run of its own (default 2)")
    parser.add_argument("--tree", action="append", default=[], metavar="LABEL=REV",
                        help="also initorch at git revision REV (repeatable; then the "
                             "installed checkout is left out)")
    parser.add_argument("--integration-from", metavar="REV",
                        help="every tree's SGLang integration from REV")
    parser.add_argument("--variants", nargs="+", choices=("stock", *MODES.values()),
                        default=("stock", *MODES.values()),
                        help="which start-ups to time (default all three)")
    parser.add_argument("--profile", action="store_true",
                        help="a cProfile of each span, kept in out/sglang-profiles")
    parser.add_argument("--rank-path", type=int, metavar="N",
                        help="time initorch's path through a rank instead, N rounds per tree")
    parser.add_argument("--rank-path-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank_path_child:
        rank_path()
        return
    with tempfile.TemporaryDirectory(prefix="initorch-bench-trees-") as folder:
        trees = {}
        for item in args.tree:
            label, _, revision = item.partition("=")
            trees[label] = build_tree(revision, args.integration_from, Path(folder) / label)
        if args.rank_path:
            print_rank_path(rank_path_samples(args.rank_path, trees or {"checkout": REPO}))
            return
        for tp in args.tp:
            print_samples(samples(args.runs, tp, trees or None, args.profile,
                                  tuple(args.variants)), tp)


if __name__ == "__main__":
    main()
