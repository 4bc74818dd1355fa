"""Reading a generated profile, taken apart stage by stage against graphlib.

    python bench/reading.py [--size N] [--runs N]

The profile is the one of ``make bench`` (every step gives its ``requires``
itself).  Each stage includes the ones above it: libyaml's events as PyYAML hands
them to Python (the floor for any reader built on PyYAML), ``parse_yaml`` (values
and positions), and ``read_profile`` (the format checks and the records the
resolver takes: a ``StepEntry`` per step, an ``EdgeChange`` and a location per
edge).  Runs are interleaved; the baseline is graphlib sorting the same graph.
"""

from __future__ import annotations

import argparse
import graphlib
from collections.abc import Callable

import yaml
from graphs import profile_text, random_dag
from measure import interleaved, print_ratios, timed

from initorch.gc_pause import gc_paused
from initorch.loading.document import read_profile
from initorch.loading.yamlsource import parse_yaml


def events(text: str) -> None:
    """Every event of ``text`` from the parser parse_yaml uses, and nothing else."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)(text)
    with gc_paused():
        try:
            while loader.get_event() is not None and loader.check_event():
                pass
        finally:
            loader.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000, help="steps (default 10,000)")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    dependencies = random_dag(args.size)
    text = profile_text(dependencies)
    stages: dict[str, Callable[[], object]] = {
        "graphlib static_order": lambda: list(
            graphlib.TopologicalSorter(dependencies).static_order()),
        "libyaml events only": lambda: events(text),
        "parse_yaml": lambda: parse_yaml(text, "p.yaml"),
        "read_profile": lambda: read_profile(text, "p.yaml", "p"),
    }
    samples = interleaved({name: lambda action=action: timed(action)  # type: ignore[misc]
                           for name, action in stages.items()}, args.runs)
    print(f"a generated profile of {args.size:,} steps, {args.runs} runs each "
          "(median [min-max]; ratio of medians against graphlib)")
    print_ratios(samples, "graphlib static_order", "ms", scale=1e3)


if __name__ == "__main__":
    main()
