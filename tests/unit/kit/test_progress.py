"""A rank's progress through its start-up (the kit's ``/startupz`` answer): the phase it
is in, the progress line of a slow phase, and the status file a probe reads."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from initorch import load_plan
from initorch.kit import Engine, Outputs, RankSession, Recorder, begin, end, observer
from initorch.kit.progress import Progress
from initorch.reporting.status import read_status, verdict

PLAIN = Engine(name="Plain", package="plainengine", distributions=(), marker="x.py",
               command="plain", integration="initorch-plain")
LOGGER = "initorch_plain.progress_test"


def progress(status: str | None = None, every_s: float | None = None) -> Progress:
    return Progress(integration="initorch-plain", rank=3, steps_total=9, status=status,
                    every_s=every_s, logger=logging.getLogger(LOGGER))


def test_the_phase_is_the_innermost_running_call_then_after_the_last() -> None:
    rank = progress()
    assert rank.line() == "rank 3 has begun its start-up"
    with rank.phase("init_torch_distributed"):
        with rank.phase("set_device"):
            assert rank.line().startswith("rank 3 is in set_device for ")
        assert rank.line().startswith("rank 3 is in init_torch_distributed for ")
    line = rank.line()
    assert line.startswith("rank 3 is after init_torch_distributed for ")
    assert "(2 of 9 steps done" in line and "s since the process started)" in line


def test_a_call_that_raises_is_left_and_not_done() -> None:
    rank = progress()
    with pytest.raises(OSError), rank.phase("load_model"):
        raise OSError("disk")
    assert "after load_model" in rank.line() and "(0 of 9 steps done" in rank.line()


def test_a_slow_phase_is_named_while_it_lasts_and_a_short_one_never(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    rank = progress(every_s=0.2)
    with rank.phase("set_device"):
        pass  # short: no line

    def said() -> list[str]:
        return [r.getMessage() for r in list(caplog.records)]

    try:
        with rank.phase("load_model"):
            # Waited for in the captured records themselves: a handler of the progress
            # logger is called before the root's capturing one, so an event it set could
            # wake this thread before the line was captured (seen under load).
            deadline = time.monotonic() + 30
            while not any(line.startswith("initorch-plain: rank 3 is in load_model for ")
                          for line in said()):
                assert time.monotonic() < deadline, "a phase longer than every_s was never named"
                time.sleep(0.01)
    finally:
        rank.over(failed=False)
    assert not any("in set_device" in line for line in said())


def test_the_status_file_follows_the_phases_and_says_ready(tmp_path: Path) -> None:
    template = str(tmp_path / "status" / "rank-{rank}.json")  # its folder is made
    rank = progress(status=template)
    path = tmp_path / "status" / "rank-3.json"
    with rank.phase("load_model"):
        doc = read_status(str(path))
        assert (doc["state"], doc["phase"], doc["rank"]) == ("starting", "load_model", 3)
        assert verdict(doc).outcome == "not ready"
    rank.over(failed=False)
    doc = read_status(str(path))
    assert (doc["state"], doc["steps_done"], doc["steps_total"]) == ("ready", 1, 9)
    assert verdict(doc).exit_code == 0


def test_a_failed_start_up_says_failed(tmp_path: Path) -> None:
    rank = progress(status=str(tmp_path / "s.json"))
    rank.over(failed=True)
    assert json.loads((tmp_path / "s.json").read_text())["state"] == "failed"
    assert verdict(read_status(str(tmp_path / "s.json"))).outcome == "not ready"


def test_an_unwritable_status_folder_does_not_stop_the_start_up(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    rank = progress(status=str(tmp_path / "file" / "s-{rank}.json"))  # under a file
    with rank.phase("load_model"):
        pass
    rank.over(failed=False)


def test_a_session_reports_its_observed_calls_to_its_status_file(tmp_path: Path) -> None:
    plan = load_plan(["cpu"])
    session = RankSession(plan, Recorder(plan, PLAIN), 1, "verify",
                          Outputs("plain", status=str(tmp_path / "r{rank}.json")))
    begin(lambda: session)
    seen: list[str | None] = []
    observer("set_device")(lambda: seen.append(read_status(str(tmp_path / "r1.json"))["phase"]))
    end(session)
    doc = read_status(str(tmp_path / "r1.json"))
    assert seen == ["set_device"]
    assert (doc["state"], doc["steps_done"], doc["steps_total"]) == ("ready", 1,
                                                                     len(plan.order))


def test_a_step_called_twice_is_done_once(tmp_path: Path) -> None:
    rank = progress(status=str(tmp_path / "s.json"))
    for _ in range(2):  # SGLang sets the device twice
        with rank.phase("set_device"):
            pass
    assert read_status(str(tmp_path / "s.json"))["steps_done"] == 1
    assert "(1 of 9 steps done" in rank.line()
