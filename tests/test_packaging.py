"""Packaging: profiles ship inside the installed package; entry points exist; a wheel
built from the source tree carries both."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points
from importlib.resources import files
from pathlib import Path

import pytest

from tests.helpers_foundation import BUILTIN_PROFILES, REPO


def test_builtin_profiles_are_package_resources():
    shipped = {entry.name for entry in files("profiles").iterdir() if entry.name.endswith(".yaml")}
    assert shipped == {f"{name}.yaml" for name in BUILTIN_PROFILES}
    in_tree = {path.name for path in (REPO / "profiles").glob("*.yaml")}
    assert shipped == in_tree


def test_builtin_plugin_entry_point():
    plugins = {ep.name: ep for ep in entry_points(group="initorch.plugins")}
    assert "builtin" in plugins
    assert plugins["builtin"].value == "steps:register"
    assert callable(plugins["builtin"].load())


def test_console_script_entry_point():
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("initorch") == "orchestrator.cli:main"
    assert (Path(sys.executable).parent / "initorch").exists()


IGNORED = shutil.ignore_patterns(".git", ".venv", "build", "dist", "*.egg-info", "__pycache__",
                                 ".*_cache", ".hypothesis", "tests", "out")


@pytest.fixture(scope="module")
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


@pytest.mark.e2e
def test_wheel_contains_profiles_and_entry_points(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_text = next(archive.read(n).decode() for n in names
                          if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(archive.read(n).decode() for n in names
                        if n.endswith(".dist-info/METADATA"))
    assert {f"profiles/{name}.yaml" for name in BUILTIN_PROFILES} <= names
    assert {"orchestrator/py.typed", "steps/py.typed", "orchestrator/cli.py"} <= names
    assert not any(name.startswith("tests/") for name in names)
    assert "[console_scripts]\ninitorch = orchestrator.cli:main" in entry_text
    assert "[initorch.plugins]\nbuiltin = steps:register" in entry_text
    assert "Name: initorch" in metadata.splitlines()
    requires = [line.split(":", 1)[1].strip().lower() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    core = {re.split(r"[<>=!;\s\[]", r)[0] for r in requires if "extra ==" not in r}
    assert core == {"networkx", "pyyaml", "structlog"}  # torch and vendors are extras


@pytest.mark.e2e
def test_installed_wheel_lists_profiles_from_any_folder(wheel, tmp_path):
    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target",
         str(target), str(wheel)],
        capture_output=True, text=True, timeout=600, check=False)
    assert install.returncode == 0, install.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import sys, orchestrator, profiles; "
            "assert orchestrator.__file__.startswith(sys.argv[1]), orchestrator.__file__; "
            "assert profiles.__file__.startswith(sys.argv[1]), profiles.__file__; "
            "from orchestrator.cli import main; sys.exit(main(['profiles']))")
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run([sys.executable, "-c", code, str(target)], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(BUILTIN_PROFILES)
