"""SGLang 0.5.23 as the oracle: its own functions run in its own venv, answers as JSON.

SGLang pins a torch that initorch's test venv does not have, so the two never share a
process.  :func:`ask` runs a script with the SGLang venv's python
(:func:`tests.sglang.server.sglang_venv`: ``<repo>/.venv-sglang`` or
``INITORCH_SGLANG_VENV``); the script reads its cases from ``argv[1]`` (JSON) and
prints one JSON document as its last stdout line.  The caller computes initorch's
decision on the same cases in the pytest process and compares.  A missing SGLang venv
fails the test, with one line: an oracle that is not asked proves nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.sglang.server import sglang_venv

# What SGLang reads from the environment must come from the case, not from the runner.
_INHERITED_PREFIXES = ("MOONCAKE_", "MC_", "SGLANG_", "ASCEND_", "HOST_IP")


def sglang_python() -> Path:
    try:
        return sglang_venv() / "bin" / "python"
    except RuntimeError as missing:
        pytest.fail(str(missing), pytrace=False)


def ask(script: str, cases: Any, timeout: float = 300) -> Any:
    """Run ``script`` under SGLang's python with ``cases``; its last stdout line, parsed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED_PREFIXES)}
    env["PYTHONWARNINGS"] = "ignore"
    done = subprocess.run([str(sglang_python()), "-c", script, json.dumps(cases)],
                          capture_output=True, text=True, env=env, timeout=timeout,
                          check=False, cwd=tempfile.gettempdir())  # not our tree on sys.path
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        pytest.fail(f"the SGLang oracle failed (rc {done.returncode}): "
                    f"{done.stderr.strip()[-2000:]}", pytrace=False)
    return json.loads(lines[-1])
