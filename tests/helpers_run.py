"""Helpers shared by the run-time tests (executors, invoke, run, report, logs).

Kept out of ``conftest.py`` on purpose: these are plain functions and classes
that the run-time test modules import, not fixtures.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import strategies as st

from initorch import Registry
from initorch.model.step import StepDefinition
from initorch.plugin import StepContext
from initorch.resolution.plan import Plan
from tests.conftest import (  # noqa: F401 - restored_initorch_logger is re-exported
    REPO,
    SIMULATED_SITE,
    define,
    restored_initorch_logger,
    synthetic_plan,
)

EXECUTORS = ("sequential", "parallel")
"""The executors that really run steps; behaviour must be the same in both."""

EDGE_KINDS = ("requires", "wants", "after", "before")

WAIT = 30.0
"""Upper bound for any Event/Barrier wait in a test: a broken executor fails, never hangs."""


# -- simulated Ascend runtime -------------------------------------------------------------

def load_acl() -> ModuleType:
    """``initorch_simulation.acl`` without leaving the simulated site on ``sys.path``
    (other tests probe ``import torch_npu`` and must not find the simulation)."""
    sys.path.insert(0, str(SIMULATED_SITE))
    try:
        return importlib.import_module("initorch_simulation.acl")
    finally:
        sys.path.remove(str(SIMULATED_SITE))


# -- plans ----------------------------------------------------------------------------------

def plan_of(definitions: list[StepDefinition], extra_yaml: str = "") -> Plan:
    """``synthetic_plan`` in a throwaway directory (usable inside hypothesis examples)."""
    with tempfile.TemporaryDirectory(prefix="initorch-test-") as tmp:
        return synthetic_plan(definitions, Path(tmp), extra_yaml)


@dataclass(frozen=True)
class Dag:
    """A random DAG: edges ``(i, j, kind)`` with i < j mean that step ``i`` must finish
    before step ``j`` starts.  ``before`` is declared on step ``i``, every other kind
    on step ``j``.  Names are shuffled, so that name order (the tie-break of the plan
    order) is not a topological order by accident."""

    names: tuple[str, ...]
    edges: tuple[tuple[int, int, str], ...]

    @property
    def n(self) -> int:
        return len(self.names)

    def name_edges(self) -> list[tuple[str, str, str]]:
        return [(self.names[i], self.names[j], kind) for i, j, kind in self.edges]

    def declared(self, j: int) -> dict[str, list[str]]:
        """The edge fields step ``j`` declares."""
        fields: dict[str, list[str]] = {kind: [] for kind in EDGE_KINDS}
        for source, target, kind in self.edges:
            if kind == "before" and source == j:
                fields["before"].append(self.names[target])
            elif kind != "before" and target == j:
                fields[kind].append(self.names[source])
        return {kind: names for kind, names in fields.items() if names}

    def definitions(self, action_for: Callable[[str], Callable[[StepContext], Any]],
                    **fields_for: Callable[[str], Any]) -> list[StepDefinition]:
        """One definition per step; ``fields_for[key](name)`` adds per-step fields."""
        return [
            define(name, action_for(name), **self.declared(j),
                   **{key: pick(name) for key, pick in fields_for.items()})
            for j, name in enumerate(self.names)
        ]

    def requires_closure(self) -> dict[str, set[str]]:
        """For every step, the steps it transitively ``requires``."""
        closure: dict[str, set[str]] = {name: set() for name in self.names}
        for j, name in enumerate(self.names):
            for i, target, kind in self.edges:
                if target == j and kind == "requires":
                    closure[name] |= {self.names[i]} | closure[self.names[i]]
        return closure


@st.composite
def dags(draw: st.DrawFn, min_steps: int = 1, max_steps: int = 7) -> Dag:
    """Random DAGs whose edges mix requires / wants / after / before."""
    n = draw(st.integers(min_steps, max_steps))
    names = draw(st.permutations([f"s{i}" for i in range(n)]))
    edges = []
    for j in range(n):
        for i in range(j):
            kind = draw(st.sampled_from((None, None, *EDGE_KINDS)))
            if kind is not None:
                edges.append((i, j, kind))
    return Dag(tuple(names), tuple(edges))


# -- recording what ran, where and when -------------------------------------------------------

class Recorder:
    """Lock-protected logical clock: every start and finish gets the next tick.

    Ticks give a total order of what happened across threads without looking at
    wall-clock time.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tick = 0
        self.starts: dict[str, list[int]] = {}
        self.finishes: dict[str, list[int]] = {}
        self.order: list[str] = []
        self.threads: dict[str, int] = {}
        self.active = 0
        self.max_active = 0

    def start(self, name: str) -> None:
        with self._lock:
            self._tick += 1
            self.starts.setdefault(name, []).append(self._tick)
            self.order.append(name)
            self.threads[name] = threading.get_ident()
            self.active += 1
            self.max_active = max(self.max_active, self.active)

    def finish(self, name: str) -> None:
        with self._lock:
            self._tick += 1
            self.finishes.setdefault(name, []).append(self._tick)
            self.active -= 1

    def action(self, name: str, body: Callable[[StepContext], Any] | None = None
               ) -> Callable[[StepContext], Any]:
        """A step action that records its start and finish around ``body``."""

        def act(ctx: StepContext) -> Any:
            self.start(name)
            try:
                return body(ctx) if body is not None else name
            finally:
                self.finish(name)

        return act


class FakeClock:
    """A clock that moves only when a step says so: exact offsets and durations."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TeardownLog:
    """Teardown callables that record the order they ran in."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.order: list[str] = []
        self.outputs: dict[str, Any] = {}
        self.done = threading.Event()

    def __call__(self, ctx: StepContext, output: Any) -> None:
        with self._lock:
            self.order.append(ctx.step)
            self.outputs[ctx.step] = output

    def failing(self, ctx: StepContext, output: Any) -> None:
        self(ctx, output)
        raise OSError(f"cannot release {ctx.step}")


def with_teardown(definition: StepDefinition, teardown: Callable[[StepContext, Any], None]
                  ) -> StepDefinition:
    definition.teardown(teardown)
    return definition


# -- logs -------------------------------------------------------------------------------------

class ListHandler(logging.Handler):
    """A plain stdlib handler, as a host server would attach one."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def events(self, name: str) -> list[logging.LogRecord]:
        return [r for r in self.records if getattr(r, "event", None) == name]


@contextmanager
def captured_records(logger_name: str = "initorch", level: int = logging.DEBUG
                     ) -> Iterator[ListHandler]:
    """Attach a :class:`ListHandler` to ``logger_name`` ("" is the root logger) at
    ``level``; restore everything after."""
    logger = logging.getLogger(logger_name)
    handler = ListHandler()
    saved = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)


def json_lines(text: str) -> list[dict[str, Any]]:
    """Every line of ``text`` that is a JSON object (native libraries may log plain lines)."""
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


# -- subprocesses -------------------------------------------------------------------------------

SCRIPT_PRELUDE = f"""
import os, signal, sys, threading
sys.path.insert(0, {str(REPO)!r})
from tests.conftest import define, synthetic_plan
from tests.helpers_run import DIAGNOSES, plan_of
from initorch.execution.run import Run
from initorch.errors import RunInterrupted
"""


def spawn_python(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``SCRIPT_PRELUDE + code`` in a fresh interpreter, pipes on stdout/stderr."""
    full_env = {**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"}
    script = SCRIPT_PRELUDE + textwrap.dedent(code)
    return subprocess.Popen([sys.executable, "-c", script], env=full_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)


@dataclass
class Finished:
    returncode: int | None
    stdout: str
    stderr: str
    hung: bool = False


def finish(proc: subprocess.Popen[str], timeout: float = 20.0) -> Finished:
    """Wait for ``proc``; a process that does not exit in time is killed and reported hung."""
    try:
        out, err = proc.communicate(timeout=timeout)
        return Finished(proc.returncode, out, err)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return Finished(None, out, err, hung=True)


DIAGNOSES = Registry.with_plugins().diagnoses
"""The built-in diagnoses, which every ``Run`` in the tests is handed (a run takes its
diagnoses explicitly; only :func:`initorch.start` finds them itself)."""
