"""Structured run events, captured through plain stdlib logging and rendered by the CLI setup."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator

import pytest

from initorch import RankInfo
from initorch.errors import StepError
from initorch.execution.run import Run
from initorch.reporting.logs import configure_logging, get_logger
from tests.support.runs import (
    DIAGNOSES,
    ListHandler,
    TeardownLog,
    captured_records,
    load_acl,
    plan_of,
    restored_initorch_logger,
    with_teardown,
)
from tests.support.synthetic import FLAGS_ENABLED, define

RANK = RankInfo(rank=1, local_rank=1, world_size=2)
RUN_EVENTS = {"run_started", "run_finished"}
REGISTER_712 = "cudaHostRegister(ptr=0x7f00, nbytes=4096) failed with error 712"


@pytest.fixture
def host_logging() -> Iterator[ListHandler]:
    """What a host server does: one handler on the root logger at INFO."""
    with captured_records("", logging.INFO) as handler:
        yield handler


def eventful_plan():
    """Every kind of event: success, retry, failure, both kinds of skip, teardowns."""
    attempts = []

    def flaky(ctx):
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionResetError("store not ready")
        return "ok"

    def broken(ctx):
        raise StepError(REGISTER_712, vendor_code=712)

    teardowns = TeardownLog()
    return plan_of([
        with_teardown(define("a", lambda ctx: "a"), teardowns),
        with_teardown(define("flaky", flaky, requires=["a"], retries=1,
                             retry_on=(ConnectionError,), retry_backoff=0.001),
                      teardowns.failing),
        define("broken", broken, after=["flaky"]),
        define("needs_broken", requires=["broken"]),
        define("gated", when="flags.enabled", settings=FLAGS_ENABLED),
    ], extra_yaml="config:\n  flags:\n    enabled: false\n")


def run_eventful(registry) -> Run:
    run = Run(eventful_plan(), rank=RANK, diagnoses=registry.diagnoses,
              sleep=lambda seconds: None)
    run.start()
    return run


def test_a_host_servers_stdlib_handler_captures_every_event(host_logging, registry):
    run_eventful(registry)
    records = [r for r in host_logging.records if r.name == "initorch"]
    names = [r.event for r in records]
    assert names[0] == "run_started"
    assert {"step_started", "step_succeeded", "step_retry", "step_failed", "step_skipped",
            "run_finished", "teardown_started", "teardown_succeeded",
            "teardown_failed"} <= set(names)
    for record in records:
        assert (record.profile, record.rank) == ("synthetic", 1), record.event
        if record.event not in RUN_EVENTS:
            assert isinstance(record.step, str), record.event


def test_event_fields_and_levels(host_logging, registry):
    run = run_eventful(registry)
    by_name = host_logging.events

    [started] = by_name("run_started")
    assert (started.executor, started.steps, started.skipped, started.fingerprint) == (
        "sequential", 4, 1, run.plan.fingerprint)
    assert started.working_directory == os.getcwd()  # the root of ./relative paths

    succeeded = {r.step: r for r in by_name("step_succeeded")}
    assert set(succeeded) == {"a", "flaky"}
    assert succeeded["flaky"].attempts == 2
    assert all(isinstance(r.duration_s, float) and r.duration_s >= 0
               for r in succeeded.values())

    [retry] = by_name("step_retry")
    assert (retry.step, retry.attempt, retry.delay_s, retry.error_type, retry.levelno) == (
        "flaky", 1, 0.001, "ConnectionResetError", logging.WARNING)

    [failed] = by_name("step_failed")
    assert failed.levelno == logging.ERROR
    assert (failed.step, failed.error_type, failed.vendor_code, failed.attempts) == (
        "broken", "StepError", "712", 1)
    assert failed.error == f"StepError: {REGISTER_712}"
    assert failed.diagnosis.startswith("diagnosis cuda-host-register-already-registered: ")

    skipped = {r.step: r.reason for r in by_name("step_skipped")}
    assert skipped["needs_broken"] == "upstream failed: broken"
    assert skipped["gated"].startswith("condition 'flags.enabled' is false")

    [finished] = by_name("run_finished")
    assert (finished.ok, finished.failed) == (False, ["broken"])
    assert isinstance(finished.wall_time_s, float)

    assert [r.step for r in by_name("teardown_started")] == ["flaky", "a"]
    [teardown_failed] = by_name("teardown_failed")
    assert (teardown_failed.step, teardown_failed.error_type, teardown_failed.levelno) == (
        "flaky", "OSError", logging.ERROR)
    assert [r.step for r in by_name("teardown_succeeded")] == ["a"]
    assert all(r.levelno == logging.INFO for r in by_name("step_started"))


def test_step_failed_carries_the_vendor_code_the_diagnosis_found(host_logging, registry):
    # ACL errors carry their code in the message (and in `.code`), not in a
    # `vendor_code` attribute; the diagnosis extracts 107002 and the log line
    # should say so too instead of vendor_code=None.
    acl = load_acl()

    def engine(ctx):
        acl.SimulatedAclRuntime(environ={}).get_device()

    Run(plan_of([define("engine", engine)]), diagnoses=registry.diagnoses).start()
    [failed] = host_logging.events("step_failed")
    assert failed.diagnosis.startswith("diagnosis ascend-context-null")
    assert failed.vendor_code == "107002"


def test_a_step_may_log_fields_named_like_log_record_attributes():
    def chatty(ctx):
        ctx.log.info("engine_ready", module="mooncake", name="engine", message="up",
                     lineno=7)
        return "ok"

    with captured_records() as records:
        assert Run(plan_of([define("chatty", chatty)]), diagnoses=DIAGNOSES).start().ok
    [ready] = records.events("engine_ready")
    assert (ready.module_, ready.name_, ready.message_, ready.lineno_) == (
        "mooncake", "engine", "up", 7)
    assert ready.name == "initorch"
    assert (ready.step, ready.profile) == ("chatty", "synthetic")


def test_the_library_never_configures_logging(registry):
    logger = logging.getLogger("initorch")
    root = logging.getLogger()
    before = (list(logger.handlers), logger.level, logger.propagate, list(root.handlers),
              root.level)
    get_logger(profile="x").info("probe")
    run_eventful(registry)
    assert (list(logger.handlers), logger.level, logger.propagate, list(root.handlers),
            root.level) == before


def test_json_format_is_one_object_per_line(registry):
    stream = io.StringIO()
    with restored_initorch_logger():
        configure_logging("json", stream=stream)
        configure_logging("json", stream=stream)  # again: replaces, never duplicates
        run_eventful(registry)
    lines = stream.getvalue().splitlines()
    events = [json.loads(line) for line in lines]  # every line is one JSON object
    assert all(isinstance(e, dict) for e in events)
    names = [e["event"] for e in events]
    assert names.count("run_started") == 1
    assert names[-1] == "teardown_succeeded"
    for event in events:
        assert {"event", "level", "timestamp", "profile", "rank"} <= set(event)
        assert (event["profile"], event["rank"]) == ("synthetic", 1)
    [failed] = [e for e in events if e["event"] == "step_failed"]
    assert (failed["level"], failed["step"], failed["vendor_code"]) == ("error", "broken", "712")


def test_console_format_renders_for_people():
    stream = io.StringIO()
    with restored_initorch_logger():
        configure_logging("console", stream=stream)
        Run(plan_of([define("only")]), diagnoses=DIAGNOSES).start()
    text = stream.getvalue()
    assert "\x1b[" not in text  # no colours when the stream is not a terminal
    lines = text.splitlines()
    assert len(lines) == 4  # run_started, step_started, step_succeeded, run_finished
    assert "run_started" in lines[0]
    assert "profile=synthetic" in lines[0]
    assert "step_succeeded" in lines[2]
    assert "step=only" in lines[2]
    assert "[info" in lines[0]


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_plain_stdlib_formatter_shows_every_field(registry):
    # What logging.basicConfig(format="%(message)s") gives a host server.
    stream = io.StringIO()
    plain = logging.StreamHandler(stream)
    plain.setFormatter(logging.Formatter("%(message)s"))
    with captured_records("", logging.INFO) as records:
        logging.getLogger().addHandler(plain)
        try:
            run = run_eventful(registry)
        finally:
            logging.getLogger().removeHandler(plain)
    lines = stream.getvalue().splitlines()
    assert lines[0] == ("run_started profile=synthetic rank=1 executor=sequential steps=4 "
                        f"skipped=1 fingerprint={run.plan.fingerprint} "
                        f"working_directory={os.getcwd()} world_size=2 local_rank=1 "
                        "launcher=code")
    [failed] = [line for line in lines if line.startswith("step_failed ")]
    assert f'error="StepError: {REGISTER_712}"' in failed
    assert "vendor_code=712 " in failed and "step=broken" in failed
    assert "reason=\"upstream failed: broken\"" in stream.getvalue()
    # structured handlers keep the fields as attributes and the bare event name
    [started] = records.events("run_started")
    assert (started.event, started.steps) == ("run_started", 4)


def test_console_lines_name_each_field_once():
    stream = io.StringIO()
    with restored_initorch_logger():
        configure_logging("console", stream=stream)
        Run(plan_of([define("only")]), rank=RANK, diagnoses=DIAGNOSES).start()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4
    for line in lines:
        timestamp, rest = line.split(" ", 1)
        level, rest = rest.split("] ", 1)
        event, *pairs = rest.split()  # no value of this run has a blank in it
        keys = [pair.split("=", 1)[0] for pair in pairs]
        assert len(keys) == len(set(keys)), line
        assert "=" not in event, line
        assert {"profile", "rank"} <= set(keys), line
        assert timestamp.endswith("Z") and level.startswith("[")


@pytest.mark.parametrize(("no_color", "coloured"), [(None, True), ("1", False), ("", True)])
def test_console_colours_only_on_a_terminal_without_no_color(monkeypatch, no_color, coloured):
    if no_color is None:
        monkeypatch.delenv("NO_COLOR", raising=False)
    else:
        monkeypatch.setenv("NO_COLOR", no_color)
    stream = Terminal()
    with restored_initorch_logger():
        configure_logging("console", stream=stream)
        Run(plan_of([define("only")]), diagnoses=DIAGNOSES).start()
    assert ("\x1b[" in stream.getvalue()) is coloured
    assert "run_started" in stream.getvalue()


def test_json_lines_never_carry_colour_even_on_a_terminal(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    stream = Terminal()
    with restored_initorch_logger():
        configure_logging("json", stream=stream)
        Run(plan_of([define("only")]), diagnoses=DIAGNOSES).start()
    assert "\x1b[" not in stream.getvalue()
    assert all(json.loads(line) for line in stream.getvalue().splitlines())


def test_configure_logging_respects_the_level():
    stream = io.StringIO()
    with restored_initorch_logger():
        configure_logging("json", stream=stream, level=logging.WARNING)
        Run(plan_of([define("only")]), diagnoses=DIAGNOSES).start()
    assert stream.getvalue() == ""


def test_records_point_at_the_code_that_logged(host_logging):
    from initorch.reporting.logs import get_logger

    get_logger(profile="p").bind(step="s").info("probe_event")  # the line recorded
    [record] = host_logging.events("probe_event")
    assert record.pathname == __file__
    assert record.funcName == "test_records_point_at_the_code_that_logged"


def test_exceptions_and_stacks_reach_the_record(host_logging):
    logger = get_logger(profile="p")
    try:
        raise ValueError("probe failure")
    except ValueError:
        logger.exception("probe_exception")
    logger.info("probe_stack", stack_info=True)
    [failed] = host_logging.events("probe_exception")
    [stacked] = host_logging.events("probe_stack")
    assert failed.levelno == logging.ERROR
    assert failed.exc_info is not None and failed.exc_info[0] is ValueError
    assert "test_exceptions_and_stacks_reach_the_record" in (stacked.stack_info or "")


def test_events_below_the_level_make_no_record(host_logging):
    get_logger(profile="p").debug("probe_debug")  # the host logs at INFO
    assert host_logging.events("probe_debug") == []
