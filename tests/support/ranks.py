"""Starting several real ``initorch run`` processes as one job, and reading what they said.

Plain functions for the multi-rank end-to-end tests; the processes are started
the way a user's launcher starts them (no torchrun unless a test says so).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import REPO
from tests.support.runs import json_lines

BIN = Path(sys.executable).parent
# What torchrun and SLURM export: removed so that a test describes the job itself.
LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
                      "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT")
BOUND = 240.0
"""How long a test waits for a job: far below every collective timeout the tests set, so
that a rank that waited for one would show up as hung."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def clean_env(extra: Mapping[str, str] = ()) -> dict[str, str]:  # type: ignore[assignment]
    """This process's environment without launcher variables (SLURM's too), plus ``extra``;
    the repository on PYTHONPATH so that ``--plugin tests.support.job_plugin`` imports."""
    env = {key: value for key, value in os.environ.items()
           if key not in LAUNCHER_VARIABLES and not key.startswith("SLURM_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return {**env, **dict(extra)}


def spawn(args: Sequence[str], env: Mapping[str, str],
          prefix: Sequence[str] = ()) -> subprocess.Popen[str]:
    """``initorch ARGS`` (after ``prefix``, e.g. ``ip netns exec NAME``) from the repo root."""
    return subprocess.Popen([*prefix, str(BIN / "initorch"), *args], env=dict(env), cwd=REPO,
                            text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@dataclass
class Ended:
    """A rank's process after it ended: exit code, output, and its JSON events."""

    returncode: int | None
    stdout: str
    stderr: str

    @property
    def events(self) -> list[dict[str, Any]]:
        return json_lines(self.stderr)

    def named(self, event: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event]

    @property
    def last(self) -> dict[str, Any]:
        return self.events[-1]


def wait_all(procs: Iterable[subprocess.Popen[str]], bound: float = BOUND) -> list[Ended]:
    """Wait for every process within one shared ``bound``; kill (and fail) on a hang."""
    deadline = time.monotonic() + bound
    ended = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"a rank did not exit within {bound:g}s:\n{err[-4000:]}"
                                 ) from None
        ended.append(Ended(proc.returncode, out, err))
    return ended


def wait_for_line(proc: subprocess.Popen[str], needle: str, bound: float = BOUND) -> str:
    """Read ``proc``'s stderr until a line contains ``needle``; returns what was read."""
    assert proc.stderr is not None
    seen = []
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return "".join(seen)
    raise AssertionError(f"{needle!r} never appeared:\n{''.join(seen)[-4000:]}")
