"""The whole CLI process for a large plan: ``initorch plan`` on 20,000 steps against plain work.

    python bench/cli_plan.py [--runs N] [--size N]

What a user meets is the command, from process start to exit: the interpreter, the
imports, the plugin registering its steps, reading the profile, resolving and printing
the plan.  So both figures are whole processes, taken round-robin, in a temporary
folder that holds (bytecode written, as ``pip install`` writes it):

* ``cli_plan_graph.py``: the steps and what each requires (the random DAG of
  ``bench/graphs.py``), as one literal;
* ``cli_plan_steps.py``: the plugin, ``register(registry)`` registering one no-op step
  per name with its ``requires``;
* ``cli_plan.yaml``: the profile, listing every step.

The command is ``initorch plan --plugin cli_plan_steps --profile cli_plan.yaml``, run in
that folder (the plugin is found as ``python -m`` finds a module).  The baseline is the
same work written plainly and as carefully as ours: a process that imports networkx and
yaml, reads the same graph, loads the profile with libyaml's C loader, sorts the listed
steps with ``graphlib`` and prints the order, one step a line.

``table.py`` takes its row from :func:`rows`.
"""

from __future__ import annotations

import argparse
import compileall
import os
import sys
import tempfile
from pathlib import Path

from graphs import random_dag
from measure import command_time, compile_initorch, interleaved, print_ratios

SIZE = 20_000
BIN = Path(sys.executable).parent

PLUGIN = '''\
"""A generated plugin: one no-op step per name of cli_plan_graph, with its requires."""

from cli_plan_graph import REQUIRES

from initorch.plugin import Registry, StepContext, step


def _noop(ctx: StepContext) -> None:
    return None


def register(registry: Registry) -> None:
    for name, requires in REQUIRES.items():
        registry.steps.add(step(name, description="a synthetic step",
                                requires=requires)(_noop))
'''

PLAIN = '''\
"""The plain work: the same graph and profile, loaded and sorted, the order printed."""

import graphlib
import sys

import networkx  # noqa: F401  (initorch's graph library: what a plan imports)
import yaml
from cli_plan_graph import REQUIRES

with open(sys.argv[1], encoding="utf-8") as stream:
    profile = yaml.load(stream, Loader=yaml.CSafeLoader)
listed = profile["steps"]
order = graphlib.TopologicalSorter({name: REQUIRES[name] for name in listed}).static_order()
sys.stdout.write("".join(name + "\\n" for name in order))
'''


def generate(folder: Path, size: int) -> tuple[list[str], list[str]]:
    """Write the graph, the plugin, the profile and the plain script into ``folder``, with
    their bytecode; return the two commands (ours, the baseline's), run in ``folder``."""
    dependencies = random_dag(size)
    modules = {"cli_plan_graph.py": f'"""{size:,} generated steps and what each requires."""'
                                    f"\n\nREQUIRES = {dependencies!r}\n",
               "cli_plan_steps.py": PLUGIN, "plain_plan.py": PLAIN}
    for file, text in modules.items():
        (folder / file).write_text(text, encoding="utf-8")
        compileall.compile_file(folder / file, quiet=1)
    lines = ["device: {type: cpu}", "steps:"] + [f"  {name}: {{}}" for name in dependencies]
    (folder / "cli_plan.yaml").write_text("\n".join(lines) + "\n", encoding="utf-8")
    compile_initorch()
    ours = [str(BIN / "initorch"), "plan", "--plugin", "cli_plan_steps",
            "--profile", "cli_plan.yaml"]
    return ours, [sys.executable, "plain_plan.py", "cli_plan.yaml"]


def samples(runs: int, size: int = SIZE) -> dict[str, list[float]]:
    """``runs`` whole-process times of the command and of the plain work, round-robin."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ours, plain = generate(folder, size)
        figures = {"initorch plan": ours, "plain work": plain}
        for command in figures.values():
            command_time(command, folder)  # warm the page cache; fails loudly if it fails
        return interleaved({name: lambda command=command: command_time(command, folder)
                            for name, command in figures.items()}, runs)


def rows(runs: int) -> list[tuple[str, str, list[float], float]]:
    """The row of ``make bench``: the command over the plain work, round by round."""
    found = samples(runs)
    ratios = [ours / plain for ours, plain in
              zip(found["initorch plan"], found["plain work"], strict=True)]
    return [(f"whole CLI process, initorch plan, {SIZE:,} steps (--plugin, generated "
             "profile) / plain work (networkx, yaml C loader, graphlib)", "<= 2.0x",
             ratios, 2.0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--size", type=int, default=SIZE)
    args = parser.parse_args()
    found = samples(args.runs, args.size)
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"{args.size:,} steps, fresh processes, {args.runs} rounds interleaved, load "
          f"average {load} (median [min-max]; ratio of medians against the plain work)")
    print_ratios(found, "plain work", "ms", scale=1e3)


if __name__ == "__main__":
    main()
