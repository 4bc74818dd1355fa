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


# -- waiting for rank 0 to serve the store ----------------------------------------------------

class FakeTime:
    """``time.monotonic`` and ``time.sleep`` for :func:`wait_for_store`: the clock moves
    only by the sleeps, which are kept."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("serving_after", [0.05, 1.0, 30.0])
def test_a_rank_early_for_the_store_retries_within_a_twentieth_of_its_wait(
        monkeypatch, serving_after):
    # Every 0.2 s made a rank that came a moment before rank 0 lose 0.1 s on average
    # (issue 26: drive mode at tp=2); a retry after a twentieth of the wait so far
    # costs at most 5% of the wait, and 0.2 s at most once rank 0 is long late.
    from initorch.steps import rendezvous

    clock = FakeTime()
    began = clock.now
    monkeypatch.setattr(rendezvous, "time", clock)
    monkeypatch.setattr(rendezvous, "can_connect", lambda host, port, timeout:
                        None if clock.now - began >= serving_after else "refused")

    class Context:
        log = type("Log", (), {"info": staticmethod(lambda *a, **k: None)})()

    left = rendezvous.wait_for_store(Context(), "127.0.0.1", 1, bound=60.0)
    waited = clock.now - began
    assert serving_after <= waited <= max(serving_after * 1.05, serving_after + 0.005)
    assert left == pytest.approx(60.0 - waited)
    assert all(0.005 <= pause <= 0.2 for pause in clock.sleeps)


def test_a_rank_early_for_the_store_stops_retrying_at_its_bound(monkeypatch):
    from initorch.steps import rendezvous

    clock = FakeTime()
    monkeypatch.setattr(rendezvous, "time", clock)
    monkeypatch.setattr(rendezvous, "can_connect", lambda host, port, timeout: "refused")
    said: list[dict] = []

    class Context:
        log = type("Log", (), {"info": staticmethod(lambda event, **k: said.append(k))})()

    assert rendezvous.wait_for_store(Context(), "127.0.0.1", 1, bound=12.0) == 0.0
    assert sum(clock.sleeps) == pytest.approx(12.0)  # the last pause ends at the bound
    left = [entry["time_left_s"] for entry in said]  # said every 5 s, at the next look
    assert len(left) == 2 and 6.8 <= left[0] <= 7.0 and 1.8 <= left[1] <= 2.0, left
