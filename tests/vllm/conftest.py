"""Fixtures of the vLLM tests: the vLLM venv, the tiny model, the integration.

Every test here is marked ``vllm`` (registered below) and ``e2e``: they start the real
vLLM 0.32.0 server, run its own code, or read its tree.  They are skipped, with one
reason, when the vLLM venv is missing (``make vllm-venv`` builds it; ``make test`` does
too, and runs them in its e2e tier, the two-node test included).
``initorch_vllm`` (and ``initorch_sglang``, for the two overlays side by side) are
imported by path, not put on ``sys.path``: their folders hold the editable installs'
metadata, whose entry points would load the plugins into every other test.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.sglang.server import REPO
from tests.vllm.server import vllm_venv
from tests.vllm.tiny_model import make_tiny_model

HERE = Path(__file__).resolve().parent
NO_VENV = "no vLLM venv (.venv-vllm): run 'make vllm-venv' (3.5 GB, about 4 minutes)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.vllm)
            item.add_marker(pytest.mark.e2e)


def import_integration(package: str, folder: Path) -> None:
    """Import ``package`` from ``folder`` by path (once)."""
    if package in sys.modules:
        return
    spec = importlib.util.spec_from_file_location(
        package, folder / "__init__.py", submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[package] = module
    spec.loader.exec_module(module)


import_integration("initorch_vllm", REPO / "integrations" / "vllm" / "initorch_vllm")
import_integration("initorch_sglang", REPO / "integrations" / "sglang" / "initorch_sglang")


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The vLLM venv's python (the test is skipped when the venv is missing)."""
    venv = vllm_venv()
    if venv is None:
        pytest.skip(NO_VENV)
    return venv / "bin" / "python"


@pytest.fixture(scope="session")
def vllm_has_mooncake(vllm_python: Path) -> bool:
    """Whether the vLLM venv has Mooncake (``make vllm-venv`` installs the CPU build; a
    venv built before it has none)."""
    found = subprocess.run([str(vllm_python), "-c", "import importlib.util as u, sys; "
                            "sys.exit(u.find_spec('mooncake') is None)"], check=False)
    return found.returncode == 0


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny-llama-vllm"))
