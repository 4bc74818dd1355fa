"""Packaging: profiles ship inside the installed package; entry points exist; a wheel
built from the source tree carries both."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from importlib.metadata import entry_points
from importlib.resources import files
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.profiles import BUILTIN_PROFILES


def test_builtin_profiles_are_package_resources():
    shipped = {entry.name for entry in files("initorch.profiles").iterdir()
               if entry.name.endswith(".yaml")}
    assert shipped == {f"{name}.yaml" for name in BUILTIN_PROFILES}
    in_tree = {path.name for path in (REPO / "profiles").glob("*.yaml")}
    assert shipped == in_tree


def test_builtin_plugin_entry_point():
    plugins = {ep.name: ep for ep in entry_points(group="initorch.plugins")}
    assert "builtin" in plugins
    assert plugins["builtin"].value == "initorch.steps:register"
    assert callable(plugins["builtin"].load())


def test_console_script_entry_point():
    scripts = {ep.name: ep.value for ep in entry_points(group="console_scripts")}
    assert scripts.get("initorch") == "initorch.cli:console_main"
    assert (Path(sys.executable).parent / "initorch").exists()


@pytest.mark.e2e
def test_wheel_contains_profiles_and_entry_points(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_text = next(archive.read(n).decode() for n in names
                          if n.endswith(".dist-info/entry_points.txt"))
        metadata = next(archive.read(n).decode() for n in names
                        if n.endswith(".dist-info/METADATA"))
    assert {f"initorch/profiles/{name}.yaml" for name in BUILTIN_PROFILES} <= names
    assert {"initorch/py.typed", "initorch/steps/py.typed", "initorch/cli/__init__.py"} <= names
    top_level = {name.split("/", 1)[0] for name in names if "/" in name
                 and not name.split("/", 1)[0].endswith(".dist-info")}
    assert top_level == {"initorch"}  # no generic top-level names (steps, profiles, ...)
    assert "[console_scripts]\ninitorch = initorch.cli:console_main" in entry_text
    assert "[initorch.plugins]\nbuiltin = initorch.steps:register" in entry_text
    assert "Name: initorch" in metadata.splitlines()
    requires = [line.split(":", 1)[1].strip().lower() for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    core = {re.split(r"[<>=!;\s\[]", r)[0] for r in requires if "extra ==" not in r}
    assert core == {"networkx", "pyyaml", "structlog"}  # torch and vendors are extras
    # torch.distributed's object collectives need NumPy, which torch does not require.
    for extra in ("torch", "npu"):
        assert any(r.startswith("numpy") and f'extra == "{extra}"' in r for r in requires)
    import initorch

    assert f"Version: {initorch.__version__}" in metadata.splitlines()


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
    code = ("import sys, initorch, initorch.profiles; "
            "assert initorch.__file__.startswith(sys.argv[1]), initorch.__file__; "
            "assert initorch.profiles.__file__.startswith(sys.argv[1]), "
            "initorch.profiles.__file__; "
            "from initorch.cli import main; sys.exit(main(['profiles']))")
    env = {**os.environ, "PYTHONPATH": str(target)}
    result = subprocess.run([sys.executable, "-c", code, str(target)], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(BUILTIN_PROFILES)


OLD_TOP_LEVEL_IMPORT = re.compile(r"^\s*(?:from|import)\s+(?:orchestrator|steps|profiles)\b",
                                  re.MULTILINE)


def test_no_code_imports_the_repository_folders_by_name():
    """Everything imports ``initorch...``; the folder names are not import names."""
    sources = [p for folder in ("orchestrator", "steps", "tests", "examples", "bench", "scripts")
               for p in (REPO / folder).rglob("*.py")]
    offenders = [str(p.relative_to(REPO)) for p in sources
                 if OLD_TOP_LEVEL_IMPORT.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_core_sessions_name_test_paths_that_exist():
    # A moved test file would make every nox session fail with "file not found" (exit 4).
    import ast

    from tests.support.paths import REPO

    tree = ast.parse((REPO / "noxfile.py").read_text(encoding="utf-8"))
    [paths] = [node.value for node in ast.walk(tree) if isinstance(node, ast.Assign)
               and any(isinstance(t, ast.Name) and t.id == "CORE_TESTS" for t in node.targets)]
    listed = ast.literal_eval(paths)
    assert listed
    assert [path for path in listed if not (REPO / path).exists()] == []
