"""Run mypy over the ``initorch`` package as it is installed.

The repository keeps ``orchestrator/``, ``steps/`` and ``profiles/`` as folders,
while the wheel maps them to ``initorch``, ``initorch.steps`` and
``initorch.profiles``.  mypy names modules after their paths, and the editable
install's import hook is invisible to it, so this script builds a tree of
symbolic links with the installed shape under ``build/typecheck/`` and checks
that.  Reported paths are mapped back to the repository's folders.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TREE = REPO / "build" / "typecheck"
# Installed package -> repository folder, most specific first.
LAYOUT = {"initorch/steps": "steps", "initorch/profiles": "profiles", "initorch": "orchestrator"}
# Example packages checked with it (they are launchers a user copies).
EXAMPLE_PACKAGES = ("tiny_server",)
# Distributions of their own in this repository, checked with it: package -> folder.
INTEGRATIONS = {"initorch_sglang": "integrations/sglang/initorch_sglang",
                "initorch_vllm": "integrations/vllm/initorch_vllm"}


def build_tree() -> None:
    shutil.rmtree(TREE, ignore_errors=True)
    package = TREE / "initorch"
    package.mkdir(parents=True)
    for entry in (REPO / "orchestrator").iterdir():
        if entry.name != "__pycache__":
            os.symlink(entry, package / entry.name)
    for installed, folder in LAYOUT.items():
        if installed != "initorch":
            os.symlink(REPO / folder, TREE / installed)
    for example in EXAMPLE_PACKAGES:
        os.symlink(REPO / "examples" / example, TREE / example)
    for package_name, folder in INTEGRATIONS.items():
        os.symlink(REPO / folder, TREE / package_name)


def repository_paths(line: str) -> str:
    for installed, folder in LAYOUT.items():
        if line.startswith(installed + "/"):
            return folder + line[len(installed):]
    if line.startswith(tuple(f"{example}/" for example in EXAMPLE_PACKAGES)):
        return "examples/" + line
    for package_name, folder in INTEGRATIONS.items():
        if line.startswith(package_name + "/"):
            return folder + line[len(package_name):]
    return line


def main() -> int:
    build_tree()
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
         "-p", "initorch", *(f"-p={name}" for name in (*EXAMPLE_PACKAGES, *INTEGRATIONS)),
         *sys.argv[1:]],
        cwd=TREE, capture_output=True, text=True, check=False)
    for line in (result.stdout + result.stderr).splitlines():
        print(repository_paths(re.sub(r"\s+$", "", line)))
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
