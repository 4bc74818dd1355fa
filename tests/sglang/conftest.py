"""Fixtures of the SGLang tests: the SGLang venv, the tiny model, a managed master, the wheel.

These tests start the real SGLang 0.5.23 server (``tests/sglang/server.py``); the unit
tests here import ``initorch_sglang`` from ``integrations/sglang`` directly (it imports
SGLang only inside the functions that need it).  It is imported by path, not put on
``sys.path``: its folder holds the editable install's metadata, whose entry points would
load the ``sglang`` plugin into every other test of this process.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sglang.server import REPO, Master, managed_master, sglang_venv
from tests.sglang.tiny_model import make_tiny_model

PACKAGE = REPO / "integrations" / "sglang" / "initorch_sglang"


def _import_integration() -> None:
    if "initorch_sglang" in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        "initorch_sglang", PACKAGE / "__init__.py", submodule_search_locations=[str(PACKAGE)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["initorch_sglang"] = module
    spec.loader.exec_module(module)


_import_integration()

WHEEL_CACHE = REPO / ".cache" / "wheels"
SGLANG_VERSION = "0.5.23"


@pytest.fixture(scope="session")
def sglang_python() -> Path:
    """The SGLang venv's python (the tests fail, naming the fix, when it is missing)."""
    try:
        return sglang_venv() / "bin" / "python"
    except RuntimeError as missing:
        pytest.fail(str(missing), pytrace=False)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="module")
def master(sglang_python: Path) -> Iterator[Master]:
    with managed_master() as running:
        yield running


@pytest.fixture(scope="session")
def sglang_wheel() -> Path:
    """The published SGLang 0.5.23 wheel (``pip download --no-deps``, cached in .cache/)."""
    found = sorted(WHEEL_CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    if not found:
        WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "-d", str(WHEEL_CACHE), f"sglang=={SGLANG_VERSION}"], check=True)
        found = sorted(WHEEL_CACHE.glob(f"sglang-{SGLANG_VERSION}-*.whl"))
    return found[0]
