"""Shared fixtures: registries, profile files, synthetic plans, CLI runner."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from initorch import Registry
from initorch.cli import main
from initorch.loading.compose import compose
from initorch.model.step import StepDefinition
from initorch.plugin import StepContext, setting, step
from initorch.resolution.plan import Plan
from initorch.resolution.resolve import resolve

REPO = Path(__file__).resolve().parent.parent
SIMULATED_SITE = REPO / "tests" / "simulated" / "site"


@pytest.fixture(scope="session")
def builtin_registry() -> Registry:
    """The registry with every installed plugin (read-only use)."""
    return Registry.with_plugins()


@pytest.fixture
def registry() -> Registry:
    """A fresh registry with the installed plugins; tests may add steps to it."""
    return Registry.with_plugins()


@pytest.fixture
def write_profile(tmp_path: Path) -> Callable[[str, str], Path]:
    """Write ``text`` (dedented) to ``tmp_path/name`` and return the path."""

    def write(name: str, text: str) -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@contextmanager
def restored_initorch_logger() -> Iterator[logging.Logger]:
    """Undo what ``configure_logging`` does to the ``initorch`` logger."""
    logger = logging.getLogger("initorch")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        yield logger
    finally:
        logger.handlers[:] = saved[0]
        logger.setLevel(saved[1])
        logger.propagate = saved[2]


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
            ) -> Iterator[Callable[..., tuple[int, str, str]]]:
    """Call ``initorch`` in-process; returns (exit code, stdout, stderr).  What
    ``run`` configures (the CLI's log handler, on a stream capsys closes) is undone
    after the test, so that later tests log as before."""

    def run(*argv: str, cwd: Path | None = None) -> tuple[int, str, str]:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    with restored_initorch_logger():
        yield run


# Switches synthetic steps declare for their `when:` conditions.
FLAGS_ENABLED = setting("flags.enabled", bool, default=True,
                        description="synthetic switch for gated test steps")
FLAG = setting("flag", bool, default=True, description="synthetic switch for test steps")


def noop(ctx: StepContext) -> None:
    """A step action that does nothing (for ordering tests)."""


def define(name: str, action: Callable[[StepContext], Any] = noop, **fields: Any
           ) -> StepDefinition:
    """A step definition for synthetic plans."""
    return step(name, description=f"synthetic step {name}", **fields)(action)


def synthetic_plan(definitions: Iterable[StepDefinition], tmp_path: Path,
                   extra_yaml: str = "") -> Plan:
    """Resolve ``definitions`` as the only steps of a cpu-typed profile in ``tmp_path``."""
    registry = Registry()
    names = []
    for definition in definitions:
        registry.steps.add(definition)
        names.append(definition.fields["name"])
    profile = tmp_path / "synthetic.yaml"
    steps_yaml = "\n".join(f"  {name}: {{}}" for name in names)
    profile.write_text(f"device:\n  type: cpu\nsteps:\n{steps_yaml}\n{extra_yaml}",
                       encoding="utf-8")
    return resolve(compose(registry.profiles, [str(profile)]), registry.steps)


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 120,
               simulated: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (optionally with the simulated vendor stack)."""
    full_env = {**os.environ, **(env or {})}
    if simulated:
        full_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(SIMULATED_SITE), full_env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def initorch_command(*args: str, env: dict[str, str] | None = None, timeout: float = 180,
                     simulated: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the installed ``initorch`` console script as a user would."""
    full_env = {**os.environ, **(env or {})}
    if simulated:
        full_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(SIMULATED_SITE), full_env.get("PYTHONPATH")]))
    script = Path(sys.executable).parent / "initorch"
    return subprocess.run([str(script), *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False)


# The wheel a user would install: built once per session, from a copy of the source tree.
IGNORED = shutil.ignore_patterns(".git", ".venv", ".venv-sglang", ".cache", "build", "dist",
                                 "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
                                 "tests", "out")


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the source tree (no build/ left in the checkout)."""
    source = tmp_path_factory.mktemp("source") / "initorch"
    shutil.copytree(REPO, source, ignore=IGNORED)
    out = tmp_path_factory.mktemp("wheel")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out),
         str(source)],
        capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr
    [built] = out.glob("initorch-*.whl")
    return built
