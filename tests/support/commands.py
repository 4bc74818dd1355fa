"""initorch as a user runs it: code in a fresh interpreter, and the installed console script."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.paths import SIMULATED_SITE


def run_python(code: str, *, env: dict[str, str] | None = None, timeout: float = 120,
               simulated: bool = False) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (optionally with the simulated vendor stack)."""
    full_env = {**os.environ, **(env or {})}
    if simulated:
        full_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(SIMULATED_SITE), full_env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def initorch_command(*args: str, env: dict[str, str] | None = None, timeout: float = 180,
                     simulated: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the installed ``initorch`` console script as a user would."""
    full_env = {**os.environ, **(env or {})}
    if simulated:
        full_env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(SIMULATED_SITE), full_env.get("PYTHONPATH")]))
    script = Path(sys.executable).parent / "initorch"
    return subprocess.run([str(script), *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False)
