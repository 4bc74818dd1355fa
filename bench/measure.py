"""What the benchmarks share: interleaved samples and a table of ratios against a baseline.

Samples are taken round-robin (one of each, then again), so that the noise of a
shared machine hits every figure alike; a ratio is a median over the baseline's
median, both measured in the same run.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path


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


def share_line(label: str, values: list[tuple[float, float]]) -> str:
    """One row of a per-process cost table: the seconds and the share of the process's
    start-up of each ``(seconds, share)`` sample, median [min-max], and how many."""
    seconds = [value for value, _ in values]
    shares = [share for _, share in values]
    return (f"  {label} {statistics.median(seconds):6.3f} s "
            f"[{min(seconds):.3f}-{max(seconds):.3f}]  "
            f"{statistics.median(shares):6.2%} [{min(shares):.2%}-{max(shares):.2%}]"
            f"  ({len(values)})")


def uptime() -> float:
    """Seconds since the host booted (``/proc/uptime``): the clock of a process's start."""
    return float(Path("/proc/uptime").read_text().split()[0])


def process_start(probe: Mapping[str, object]) -> float:
    """When a probed process started, in seconds of :func:`uptime`: its ``started_ticks``
    (``/proc/<pid>/stat`` field 22) over ``ticks_per_s``."""
    return int(str(probe["started_ticks"])) / int(str(probe["ticks_per_s"]))


def command_time(command: list[str], cwd: Path | None = None) -> float:
    """Seconds ``command`` takes from process start to exit, its output dropped (a
    failure raises: a figure of a command that failed means nothing)."""
    return timed(lambda: subprocess.run(command, cwd=cwd, check=True,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))


def compile_initorch() -> None:
    """Write initorch's bytecode, as ``pip install`` does for a wheel.

    torch, networkx and yaml are imported from the bytecode pip wrote; an editable
    checkout has none until an import writes it, and never under
    ``PYTHONDONTWRITEBYTECODE`` (set on some machines): then every start-up would
    compile initorch's own sources (about 0.3-0.4 s here), a cost no installed user pays.
    """
    import compileall

    import initorch
    import initorch.steps

    for package in (initorch, initorch.steps):
        for folder in package.__path__:
            compileall.compile_dir(folder, quiet=1)
