"""A new user's first minutes, as the README's quick start tells them, with no Makefile.

The built wheel is installed with ``pip install --no-index --find-links`` into a fresh
venv; its dependencies (torch, numpy, Mooncake, networkx, ...) are the ones this test
environment already has, made visible to the new venv much as ``--system-site-packages``
would (everything except this checkout's own editable install), so the test runs
offline.  Then the README's ``initorch`` commands run from a folder outside the
checkout, against the installed wheel only.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import initorch
from tests.support.paths import REPO

QUICK_START = re.compile(r"^### Quick start[^\n]*\n+```sh\n(?P<body>.*?)^```",
                         re.MULTILINE | re.DOTALL)
# The checkout's own install must stay invisible to the new venv.
OWN_INSTALL = re.compile(r"^(?:initorch-[^/]*\.dist-info|__editable__.*initorch.*)$")


def quick_start_commands() -> list[str]:
    match = QUICK_START.search((REPO / "README.md").read_text(encoding="utf-8"))
    assert match, "README.md has no '### Quick start' sh block"
    return [line.split("#", 1)[0].strip() for line in match["body"].splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_the_quick_start_installs_the_extras_this_test_installs():
    commands = quick_start_commands()
    assert "pip install '.[torch,mooncake-cpu]'" in commands
    assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in commands
    assert [c for c in commands if c.startswith("initorch ")] == [
        "initorch --version",
        "initorch plan --profile npu",
        "initorch run --profile cpu --set checks.verify_transfer=true",
    ]


def dependencies_without_this_checkout(folder: Path) -> Path:
    """A folder of links to this environment's installed packages, minus initorch itself."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    folder.mkdir()
    for entry in site_packages.iterdir():
        if not OWN_INSTALL.match(entry.name) and not entry.name.endswith(".pth"):
            (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="module")
def fresh_venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel and its extras installed, offline; returns its bin/."""
    root = tmp_path_factory.mktemp("newuser")
    venv = root / "venv"
    # Without its own pip and setuptools: those come with the dependencies below (torch
    # needs a newer setuptools than the one venv bundles, and nothing may be downloaded).
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=300)
    python = venv / "bin" / "python"
    deps = dependencies_without_this_checkout(root / "deps")
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    Path(purelib, "already-installed-deps.pth").write_text(f"{deps}\n", encoding="utf-8")
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "--no-index", "--find-links", str(wheel.parent),
         f"initorch[torch,mooncake-cpu]=={initorch.__version__}"],
        capture_output=True, text=True, timeout=600, check=False, env=user_env(venv / "bin"))
    assert install.returncode == 0, install.stdout[-3000:] + install.stderr[-3000:]
    return venv / "bin"


def user_env(bin_dir: Path) -> dict[str, str]:
    """A shell with the venv activated and nothing of this checkout on the path."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not key.startswith("PIP_")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(bin_dir.parent),
               PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def test_the_readme_commands_work_from_a_fresh_venv(fresh_venv: Path, tmp_path: Path):
    elsewhere = tmp_path / "my-server"
    elsewhere.mkdir()
    env = user_env(fresh_venv)
    where = subprocess.run([str(fresh_venv / "python"), "-c",
                            "import initorch; print(initorch.__file__, initorch.__version__)"],
                           cwd=elsewhere, env=env, capture_output=True, text=True, timeout=60,
                           check=False)
    assert where.returncode == 0, where.stderr
    location, version = where.stdout.split()
    assert location.startswith(str(fresh_venv.parent)), "the wheel, not the checkout"
    assert version == initorch.__version__

    results = {}
    for command in (c for c in quick_start_commands() if c.startswith("initorch ")):
        argv = shlex.split(command)
        results[command] = result = subprocess.run(
            [str(fresh_venv / argv[0]), *argv[1:]], cwd=elsewhere, env=env,
            capture_output=True, text=True, timeout=300, check=False)
        assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr[-3000:]}"
    assert results["initorch --version"].stdout == f"initorch {initorch.__version__}\n"
    plan = results["initorch plan --profile npu"].stdout.splitlines()
    assert plan[:2] == ["profiles: base -> npu", "device:   npu"]
    run = results["initorch run --profile cpu --set checks.verify_transfer=true"]
    assert run.stdout.startswith("run: ok in ")
    assert re.search(r"^  verify_transfer\s+succeeded\s", run.stdout, re.MULTILINE)
