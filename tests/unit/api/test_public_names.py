"""The public face of ``initorch``: what the README and the examples import is exported
by the package itself, the imports work, and the objects read well when printed."""

from __future__ import annotations

import ast
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import initorch
from initorch import load_plan
from initorch.reporting.render import plan_text
from tests.support.commands import run_python
from tests.support.paths import REPO

PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def documented_snippets() -> list[tuple[str, str]]:
    """(label, code) of every ```python block in the README and docs/ (subfolders too)."""
    snippets = []
    for document in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        text = document.read_text(encoding="utf-8")
        for match in PYTHON_BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            snippets.append((f"{document.relative_to(REPO)}:{line}", match.group(1)))
    return snippets


def python_files(folder: Path) -> list[tuple[str, str]]:
    return [(str(path.relative_to(REPO)), path.read_text(encoding="utf-8"))
            for path in sorted(folder.rglob("*.py"))]


SOURCES = documented_snippets() + python_files(REPO / "examples")
PUBLIC_TIERS = ("initorch", "initorch.plugin", "initorch.errors", "initorch.renderers",
                "initorch.steps",  # the built-in plugin's exports, for plugins built on it
                "initorch.kit")  # the engine integrations' kit (docs/kit.md)


def imports_of(code: str, label: str) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(code, filename=label)  # a snippet that does not compile fails here
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def non_public_imports(code: str, label: str, own_package: str | None = None) -> list[str]:
    """Every import in ``code`` of an initorch module that is not a public tier, or of a
    name a tier does not export (``TYPE_CHECKING`` imports included); a package may
    import its own modules (``initorch.steps`` its siblings)."""
    found = []
    for node in imports_of(code, label):
        modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) \
            else [node.module or ""] if node.level == 0 else []
        for module in modules:
            if module.split(".")[0] != "initorch" or \
                    (own_package and (module + ".").startswith(own_package + ".")):
                continue
            if module not in PUBLIC_TIERS:
                found.append(f"{label}:{node.lineno} imports {module}")
            elif isinstance(node, ast.ImportFrom):
                exported = set(importlib.import_module(module).__all__)
                unexported = sorted({alias.name for alias in node.names} - exported)
                if unexported:
                    found.append(f"{label}:{node.lineno}: {module} does not export {unexported}")
    return found


def test_the_readme_has_an_embedding_snippet():
    labels = [label for label, code in documented_snippets() if "from initorch import" in code]
    assert any(label.startswith("README.md:") for label in labels)


@pytest.mark.parametrize(("label", "code"), SOURCES, ids=[label for label, _ in SOURCES])
def test_snippets_and_examples_import_only_the_public_tiers(label, code):
    assert non_public_imports(code, label) == []


def test_the_built_in_steps_import_only_the_public_tiers():
    # import-linter cannot see initorch.steps (its folder is mapped into the package),
    # so this is the contract for it: what a third-party plugin could do, they do.
    found = [problem for label, code in python_files(REPO / "steps")
             for problem in non_public_imports(code, label, own_package="initorch.steps")]
    assert found == []


def test_the_engine_integrations_import_only_the_public_tiers():
    # An integration is a plugin of initorch's like any third party's: it may reuse the
    # built-in steps' exports and the kit's, never a private module (import-linter
    # cannot see it); ``import initorch.kit.session`` is refused like any other.
    found = [problem for label, code in python_files(REPO / "integrations")
             for problem in non_public_imports(code, label)]
    assert found == []


def test_the_import_policy_sees_what_it_must_refuse():
    code = ("from initorch.execution.run import Run\nimport initorch.model.step\n"
            "from initorch import StepError\nfrom initorch.steps import register\n")
    assert non_public_imports(code, "x.py", own_package="initorch.steps") == [
        "x.py:1 imports initorch.execution.run", "x.py:2 imports initorch.model.step",
        "x.py:3: initorch does not export ['StepError']"]


def test_each_tier_lists_exactly_what_it_shows():
    for name in PUBLIC_TIERS:
        module = importlib.import_module(name)
        assert sorted(set(module.__all__)) == sorted(module.__all__), name
        for attribute in module.__all__:
            assert getattr(module, attribute) is not None, f"{name}.{attribute}"
    assert dir(initorch) == sorted(initorch.__all__)
    assert len(initorch.__all__) <= 20  # the embedding face stays small


def test_a_name_that_moved_tier_still_works_with_a_warning_naming_its_home():
    from initorch.plugin import step

    with pytest.warns(DeprecationWarning, match=r"import it from initorch\.plugin"):
        assert initorch.step is step
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        initorch.no_such_name  # noqa: B018


def test_every_import_of_the_snippets_and_examples_runs_without_torch():
    """Executed in a fresh interpreter: the names exist, and importing them (the
    embedding API, the renderers, the logging set-up) does not import torch."""
    # The server's own modules (examples/tiny_server/) import torch: they are not asked.
    top_level = documented_snippets() + [(str(path), path.read_text(encoding="utf-8"))
                                         for path in sorted((REPO / "examples").glob("*.py"))]
    statements = sorted({ast.unparse(node) for label, code in top_level
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
