"""Shared fixtures (registries, profile files, the CLI runner, the wheel) and the tiers by
folder; the helpers tests import are in ``tests/support/``."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from initorch import Registry
from initorch.cli import main
from tests.support.paths import REPO
from tests.support.runs import restored_initorch_logger

TESTS = Path(__file__).resolve().parent

# A test's tier is the folder it sits in, so that no test has to say it: tests/e2e/ start
# real processes (torch, gloo, Mooncake), tests/perf/ time the code on this machine,
# tests/sglang/ run SGLang itself.  tests/unit/ is the fast tier (``make unit``); a test
# there that starts a real process carries ``@pytest.mark.e2e`` itself.
FOLDER_MARKS = {"e2e": pytest.mark.e2e, "perf": pytest.mark.perf, "sglang": pytest.mark.sglang}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its folder's tier and, under pytest-xdist (``-n``), give it its
    xdist group: its file (so that a module's fixtures run once, on one worker), or one
    group for all of tests/sglang/ (its session fixtures start an SGLang server)."""
    grouped = config.pluginmanager.hasplugin("xdist")
    for item in items:
        folder = item.path.relative_to(TESTS).parts[0]
        mark = FOLDER_MARKS.get(folder)
        if mark is not None:
            item.add_marker(mark)
        if grouped:
            group = folder if folder == "sglang" else item.path.relative_to(TESTS).as_posix()
            item.add_marker(pytest.mark.xdist_group(group))


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
