"""What the benchmarks share: interleaved samples and a table of ratios against a baseline.

Samples are taken round-robin (one of each, then again), so that the noise of a
shared machine hits every figure alike; a ratio is a median over the baseline's
median, both measured in the same run.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping


def timed(action: Callable[[], object]) -> float:
    """Seconds ``action()`` takes."""
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def interleaved(samplers: Mapping[str, Callable[[], float]], runs: int) -> dict[str, list[float]]:
    """``runs`` samples of every sampler, taken round-robin."""
    samples: dict[str, list[float]] = {name: [] for name in samplers}
    for _ in range(runs):
        for name, sample in samplers.items():
            samples[name].append(sample())
    return samples


def print_ratios(samples: Mapping[str, list[float]], baseline: str, unit: str,
                 scale: float = 1.0) -> None:
    """One line per figure: median [min-max] in ``unit`` (values times ``scale``) and the
    ratio of its median to the baseline's."""
    base = statistics.median(samples[baseline])
    width = max(len(name) for name in samples)
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"  {name:<{width}}  {median * scale:8.1f} {unit} "
              f"[{min(values) * scale:.1f}-{max(values) * scale:.1f}]  {median / base:5.2f}x")


class Sink:
    """A text stream that drops what it is given (not a terminal: no colours)."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False
