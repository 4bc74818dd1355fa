"""The public face of ``initorch``: what the README and the examples import is exported
by the package itself, the imports work, and the objects read well when printed."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import initorch
from initorch import load_plan
from initorch.reporting.render import plan_text
from tests.conftest import run_python
from tests.helpers_foundation import REPO

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def documented_snippets() -> list[tuple[str, str]]:
    """(label, code) of every ```python block in the README and docs/."""
    snippets = []
    for document in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = document.read_text(encoding="utf-8")
        for match in PYTHON_BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            snippets.append((f"{document.relative_to(REPO)}:{line}", match.group(1)))
    return snippets


def examples() -> list[tuple[str, str]]:
    return [(str(path.relative_to(REPO)), path.read_text(encoding="utf-8"))
            for path in sorted((REPO / "examples").glob("*.py"))]


SOURCES = documented_snippets() + examples()


def imports_of(code: str, label: str) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(code, filename=label)  # a snippet that does not compile fails here
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def test_the_readme_has_an_embedding_snippet():
    labels = [label for label, code in documented_snippets() if "from initorch import" in code]
    assert any(label.startswith("README.md:") for label in labels)


@pytest.mark.parametrize(("label", "code"), SOURCES, ids=[label for label, _ in SOURCES])
def test_snippets_and_examples_import_only_what_initorch_exports(label, code):
    for node in imports_of(code, label):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("initorch"):
            assert node.module == "initorch", (
                f"{label}:{node.lineno} imports from {node.module}; use the public face "
                "'from initorch import ...'")
            unexported = {alias.name for alias in node.names} - set(initorch.__all__)
            assert not unexported, f"{label}:{node.lineno}: not exported: {unexported}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("initorch."), f"{label}:{node.lineno}"


def test_every_import_of_the_snippets_and_examples_runs_without_torch():
    """Executed in a fresh interpreter: the names exist, and importing them (the
    embedding API, the renderers, the logging set-up) does not import torch."""
    statements = sorted({ast.unparse(node) for label, code in SOURCES
                         for node in imports_of(code, label)
                         if not isinstance(node, ast.ImportFrom) or node.level == 0})
    assert "from initorch import Run" not in statements  # they are grouped, not one per name
    code = "\n".join([*statements, "import sys",
                      "print(sorted(m for m in ('torch', 'mooncake') if m in sys.modules))"])
    # Examples import their sibling packages (demo.py uses tiny_server.client).
    result = run_python(code, env={"PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO / "examples"), os.environ.get("PYTHONPATH")]))})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_exported_name_resolves():
    for name in initorch.__all__:
        assert getattr(initorch, name) is not None, name


def test_import_initorch_defers_the_renderers_and_logging():
    code = ("import sys, initorch\n"
            "print(sorted(m for m in ('initorch.reporting.render', 'initorch.reporting.logs',"
            " 'structlog') if m in sys.modules))")
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_plan_text_is_the_dry_run_text(run_cli):
    plan = load_plan(["npu"])
    code, out, _ = run_cli("plan", "-p", "npu")
    assert code == 0
    assert plan_text(plan) + "\n" == out
    assert plan_text(plan).startswith("profiles: base -> npu\ndevice:   npu\n")
    assert repr(plan).startswith("Plan(")  # repr stays the dataclass one, for debugging


def test_examples_are_the_files_the_readme_links():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for path in Path(REPO / "examples").glob("*.py"):
        if path.name != "demo.py":  # make demo runs it; the README shows its output
            assert f"examples/{path.name}" in readme


def run_example(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "examples" / "embed_launcher.py"), *args],
                          capture_output=True, text=True, timeout=300, check=False)


def test_the_embedding_example_plans_its_step_through_wanted_by():
    result = run_example("--dry-run")
    assert result.returncode == 0, result.stderr
    assert re.search(r"^\s+12\s+8\s+warm_kv_cache\s+wanted by register_mem_pool_host$",
                     result.stdout, re.MULTILINE), result.stdout
    assert "UnplannedStepWarning" not in result.stderr


@pytest.mark.e2e
def test_the_embedding_example_starts_the_real_stack():
    result = run_example()
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^serving with Mooncake engine at 127\.0\.0\.1:\d+; 16777216 bytes of KV "
                     r"cache warmed$", result.stdout, re.MULTILINE)
