"""Helpers for the foundation tests (issue 2): profile files, plans, and assertions.

Plain functions, not fixtures, so that test modules import exactly what they use
next to the shared fixtures of ``conftest.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from initorch import InitorchError, Plan, Registry
from initorch.errors import Problem
from initorch.loading.catalog import ProfileCatalog
from initorch.loading.compose import compose
from initorch.model.step import StepDefinition
from initorch.resolution.resolve import resolve

REPO = Path(__file__).resolve().parent.parent

# Every built-in profile, and the ones that set a device (the rest are base/overlays).
BUILTIN_PROFILES = ("base", "cpu", "cuda", "mooncake-ep", "mps", "musa", "npu", "npu-hccl", "rocm",
                    "server",
                    "xpu")
DEVICE_PROFILES = ("cpu", "cuda", "mps", "musa", "npu", "rocm", "xpu")
# Device profiles on hardware that Mooncake supports (all but mps).
MOONCAKE_PROFILES = tuple(p for p in DEVICE_PROFILES if p != "mps")
MOONCAKE_STEPS = ("launch_mooncake_master", "init_shared_mooncake_transfer_engine",
                  "mooncake_master", "init_mooncake_store", "register_mem_pool_host")
# Device profiles where Mooncake registers a process-group backend (mooncake-ep works).
MOONCAKE_PG_PROFILES = ("cpu", "cuda", "musa")
VENDOR_MODULES = ("torch", "torch_npu", "torch_musa", "mooncake")

# ``initorch: error: <file>:<line>:<col>: <message>`` (file may contain '/' and '.').
ERROR_LINE = re.compile(
    r"^initorch: error: (?P<file>[^\s:]+):(?P<line>\d+):(?P<col>\d+): (?P<msg>.+)$")


def write(directory: Path, name: str, text: str) -> Path:
    """Write dedented ``text`` to ``directory/name`` (creating folders) and return the path."""
    path = directory / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def registry_of(*definitions: StepDefinition) -> Registry:
    """A registry holding only ``definitions`` (no plugins, no named profiles)."""
    registry = Registry()
    for definition in definitions:
        registry.steps.add(definition)
    return registry


def plan_of(tmp_path: Path, text: str, *definitions: StepDefinition,
            overrides: Iterable[tuple[str, object]] = ()) -> Plan:
    """Resolve the profile ``text`` (written to ``tmp_path/p.yaml``).

    With ``definitions`` only those steps exist; without, the installed plugins
    (built-in steps and named profiles) are available.
    """
    registry = registry_of(*definitions) if definitions else Registry.with_plugins()
    path = write(tmp_path, "p.yaml", text)
    return resolve(compose(registry.profiles, [str(path)], overrides), registry.steps)


def error_of(tmp_path: Path, text: str, *definitions: StepDefinition,
             expected: type[InitorchError] = InitorchError) -> InitorchError:
    """The error that resolving the profile ``text`` raises (see :func:`plan_of`)."""
    with pytest.raises(expected) as caught:
        plan_of(tmp_path, text, *definitions)
    return caught.value


def find_problem(error: InitorchError, *fragments: str) -> Problem:
    """The problem of ``error`` whose text contains every fragment; fails listing all."""
    for problem in error.problems:
        if all(fragment in str(problem) for fragment in fragments):
            return problem
    shown = "\n".join(str(p) for p in error.problems)
    raise AssertionError(f"no problem contains {fragments!r}; problems:\n{shown}")


def assert_problem(error: InitorchError, *fragments: str, at: str | None = None) -> Problem:
    """Assert ``error`` has a problem containing ``fragments``, located ``at`` (a suffix
    of ``file:line[:col]``) when given."""
    problem = find_problem(error, *fragments)
    if at is not None:
        assert problem.location is not None, f"{problem} has no location"
        assert str(problem.location).endswith(at), f"{problem.location} is not at {at}"
    return problem


def assert_before(order: Sequence[str], first: str, second: str) -> None:
    """``first`` and ``second`` are both planned, ``first`` earlier."""
    assert first in order, f"{first} not in {order}"
    assert second in order, f"{second} not in {order}"
    assert order.index(first) < order.index(second), f"{first} not before {second}: {order}"


def assert_chain(chain: Sequence[object], first: str, second: str) -> None:
    """``chain`` is a contiguous path of located edges from ``first`` to ``second``."""
    assert chain, "empty chain"
    names = [first]
    for edge in chain:
        assert edge.source == names[-1]  # type: ignore[attr-defined]
        assert edge.declared_at.path  # type: ignore[attr-defined]
        names.append(edge.target)  # type: ignore[attr-defined]
    assert names[-1] == second


def assert_single_error_line(stderr: str, *fragments: str, located: bool = True
                             ) -> re.Match[str] | None:
    """stderr is exactly one ``initorch: error: ...`` line, without a traceback."""
    lines = stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{stderr}"
    assert "Traceback" not in stderr
    assert lines[0].startswith("initorch: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    if not located:
        return None
    match = ERROR_LINE.match(lines[0])
    assert match, f"not 'initorch: error: file:line:col: ...': {lines[0]!r}"
    return match


def catalog_in(directory: Path) -> ProfileCatalog:
    """A catalog whose named profiles are the YAML files in ``directory``."""
    catalog = ProfileCatalog()
    catalog.add_directory(directory, plugin="test")
    return catalog


def make_blockers(directory: Path, names: Iterable[str] = VENDOR_MODULES) -> Path:
    """A folder of packages called ``names`` whose import fails; put it first on PYTHONPATH."""
    for name in names:
        package = directory / name
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            f"raise ImportError('{name} is blocked: the dry run must not import it')\n",
            encoding="utf-8")
    return directory


def run_initorch_in(cwd: Path, *args: str, env: dict[str, str] | None = None
                    ) -> subprocess.CompletedProcess[str]:
    """The installed console script, run from ``cwd``."""
    script = Path(sys.executable).parent / "initorch"
    return subprocess.run([str(script), *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=120, check=False)
