"""The open files the job's store needs (``steps/rendezvous.py``): checked before the
ranks meet, raised where the hard limit allows, refused with what to raise where it
does not.  Each case runs in a process of its own: it changes that process's limits."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from initorch.steps.rendezvous import open_files_needed

CASE = """\
import json, resource, sys
from initorch import RankInfo
from initorch.plugin import StepError
from initorch.steps.rendezvous import ensure_open_files

soft, hard, world, rank, hosted = json.loads(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

class Log:
    events = []
    def __getattr__(self, level):
        return lambda event, **fields: self.events.append([level, event, fields])

class Context:
    rank = RankInfo(rank, 0, world)
    log = Log()

try:
    ensure_open_files(Context(), hosted)
    error = None
except StepError as exc:
    error = [str(exc), exc.hint]
print(json.dumps({"limits": resource.getrlimit(resource.RLIMIT_NOFILE), "error": error,
                  "events": Log.events}))
"""


def case(soft: int, hard: int, world: int, *, rank: int = 0, hosted: bool = True,
         agent: bool = False) -> dict:
    env = {"TORCHELASTIC_USE_AGENT_STORE": "True"} if agent else {}
    done = subprocess.run([sys.executable, "-c", CASE,
                           json.dumps([soft, hard, world, rank, hosted])],
                          capture_output=True, text=True, check=True,
                          env={**_base_env(), **env})
    return json.loads(done.stdout)


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "TORCHELASTIC_USE_AGENT_STORE"}


def test_two_connections_per_rank_and_a_spare():
    assert open_files_needed(1024) == 2 * 1024 + 128


def test_the_process_serving_the_store_raises_its_soft_limit_as_far_as_needed():
    found = case(256, 8192, 1024)
    needed = open_files_needed(1024)
    assert found["limits"] == [needed, 8192] and found["error"] is None
    assert found["events"] == [["info", "open_files_raised",
                                {"limit": needed, "was": 256, "hard_limit": 8192}]]


def test_a_hard_limit_too_low_for_the_job_is_refused_naming_what_to_raise():
    found = case(256, 512, 1024)
    needed = open_files_needed(1024)
    message, hint = found["error"]
    assert message == (f"serving the job's store for 1024 ranks takes about {needed} open "
                       "files (two connections per rank), but this process may open only "
                       "512 (the hard RLIMIT_NOFILE)")
    assert f"ulimit -n {needed}" in hint and "LimitNOFILE=" in hint
    assert found["limits"] == [256, 512]


def test_under_torchrun_rank_0_warns_since_the_agent_serves_the_store():
    found = case(256, 512, 1024, hosted=False, agent=True)
    [[level, event, fields]] = found["events"]
    assert (level, event, fields["needed"], fields["limit"]) == (
        "warning", "open_files_low", open_files_needed(1024), 256)
    assert "torchrun's agent" in fields["why"] and found["limits"] == [256, 512]


@pytest.mark.parametrize(("world", "rank", "agent"), [(2, 0, False), (1024, 1, True)])
def test_a_small_job_or_another_rank_changes_nothing(world, rank, agent):
    found = case(256, 512, world, rank=rank, hosted=rank == 0 and not agent, agent=agent)
    assert found == {"limits": [256, 512], "error": None, "events": []}
