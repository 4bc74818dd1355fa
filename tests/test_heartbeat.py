"""initorch.execution.heartbeat: long steps say they are still running, and only while they run."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from initorch.execution.heartbeat import Heartbeat
from initorch.execution.run import Run
from initorch.reporting.logs import get_logger
from tests.conftest import define
from tests.helpers_run import (
    DIAGNOSES,
    EXECUTORS,
    WAIT,
    ListHandler,
    captured_records,
    plan_of,
    restored_initorch_logger,
)

INTERVAL = 0.05


class BeatSeen(ListHandler):
    """Records every event and sets ``seen`` on the first beat."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        if getattr(record, "event", None) == "step_still_running":
            self.seen.set()


def waits_for_a_beat(handler: BeatSeen):
    def action(ctx):
        assert handler.seen.wait(WAIT), "no heartbeat while the step ran"
        return "done"

    return action


def heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "initorch-heartbeat"]


@pytest.mark.parametrize("executor", EXECUTORS)
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_a_long_step_logs_that_it_is_still_running(executor, timeout):
    handler = BeatSeen()
    logger = logging.getLogger("initorch")
    logger.addHandler(handler)
    try:
        with captured_records():
            plan = plan_of([define("quick"),
                            define("slow", waits_for_a_beat(handler), requires=["quick"],
                                   timeout=timeout)])
            report = Run(plan, executor=executor, heartbeat=INTERVAL, diagnoses=DIAGNOSES).start()
    finally:
        logger.removeHandler(handler)
    assert report.ok
    events = [(r.event, getattr(r, "step", None)) for r in handler.records]
    beats = [r for r in handler.records if r.event == "step_still_running"]
    assert {r.step for r in beats} == {"slow"}
    # A step without a timeout says nothing of one (no "timeout_s=None").
    assert all(r.elapsed_s >= 0 and getattr(r, "timeout_s", None) == timeout for r in beats)
    assert all(hasattr(r, "timeout_s") == (timeout is not None) for r in beats)
    first_beat = events.index(("step_still_running", "slow"))
    assert events.index(("step_started", "slow")) < first_beat
    assert first_beat < events.index(("step_succeeded", "slow"))
    # no beat after the step's outcome or after the run
    last_beat = max(i for i, e in enumerate(events) if e[0] == "step_still_running")
    assert last_beat < events.index(("step_succeeded", "slow"))


def test_the_heartbeat_thread_ends_with_the_run():
    handler = BeatSeen()
    logger = logging.getLogger("initorch")
    logger.addHandler(handler)
    try:
        with captured_records():
            Run(plan_of([define("slow", waits_for_a_beat(handler))]),
                heartbeat=INTERVAL, diagnoses=DIAGNOSES).start()
    finally:
        logger.removeHandler(handler)
    deadline = time.monotonic() + WAIT
    while heartbeat_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert heartbeat_threads() == []


def test_no_heartbeat_thread_when_it_is_off():
    threads_seen = []

    def look(ctx):
        threads_seen.extend(heartbeat_threads())

    assert Run(plan_of([define("look", look)]), heartbeat=None, diagnoses=DIAGNOSES).start().ok
    assert threads_seen == []


def test_a_failed_step_gets_no_beat_after_its_failure():
    handler = BeatSeen()

    def fails_after_a_beat(ctx):
        assert handler.seen.wait(WAIT)
        raise RuntimeError("broken")

    logger = logging.getLogger("initorch")
    logger.addHandler(handler)
    try:
        with captured_records():
            report = Run(plan_of([define("broken", fails_after_a_beat)]),
                         heartbeat=INTERVAL, diagnoses=DIAGNOSES).start()
    finally:
        logger.removeHandler(handler)
    assert not report.ok
    events = [r.event for r in handler.records]
    assert events.index("step_still_running") < events.index("step_failed")
    assert "step_still_running" not in events[events.index("step_failed"):]


@pytest.mark.parametrize("interval", [0, -1.0, float("nan")])
def test_the_interval_must_be_positive(interval):
    with pytest.raises(ValueError, match="must be positive"):
        Heartbeat(interval, get_logger())


@pytest.mark.parametrize(("value", "code"), [("0", 0), ("2.5", 0), ("-1", 2), ("x", 2),
                                             ("inf", 2)])
def test_cli_heartbeat_option(run_cli, value, code):
    with restored_initorch_logger():
        try:
            result, _, err = run_cli("run", "-p", "cpu", "--executor", "dry-run",
                                     "--heartbeat", value)
        except SystemExit as exit_:
            result, err = exit_.code, ""
    assert result == code, err
