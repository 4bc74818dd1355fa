"""The session pair of the kit: begin and end, their hooks, and the framed session beside
them; the engine's calls are plain functions here (the toy engine of
test_a_third_engine runs them as a real package)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from initorch import load_plan
from initorch.kit import (
    Engine,
    Outputs,
    RankSession,
    Recorder,
    active,
    begin,
    begin_hook,
    end,
    observer,
    run_framed,
)

PLAIN = Engine(name="Plain", package="plainengine", distributions=(), marker="x.py",
               command="plain", integration="initorch-plain")


def new_session(rank: int = 0) -> RankSession:
    plan = load_plan(["cpu"])
    return RankSession(plan, Recorder(plan, PLAIN), rank, "verify", Outputs("plain"))


@pytest.fixture(autouse=True)
def no_session_left() -> Iterator[None]:
    yield
    session = active()
    if session is not None:
        end(session)
    assert active() is None


def test_begin_makes_the_session_only_when_none_is_active() -> None:
    first = new_session()
    assert begin(lambda: first) is first and active() is first
    assert begin(new_session) is None and active() is first  # nothing is made


def test_a_session_ends_once_and_only_while_it_is_active() -> None:
    session = new_session()
    assert end(session) is None  # never begun
    begin(lambda: session)
    report = end(session)
    assert report is not None and report.ok and active() is None
    assert end(session) is None


def test_begin_from_nothing_leaves_the_rank_unobserved() -> None:
    assert begin(lambda: None) is None and active() is None
    assert observer("set_device", last=True)(lambda: "called") == "called"


def test_the_begin_hook_plans_from_the_call_arguments_by_name() -> None:
    given: list[dict[str, object]] = []

    def make(arguments: dict[str, object]) -> RankSession:
        given.append(arguments)
        return new_session(int(str(arguments["rank"])))

    def construct(config: object, rank: int, *, name: str = "worker") -> str:
        return f"{name} {rank}"

    hook = begin_hook(make)
    assert hook(construct, {"tp": 2}, 3) == "worker 3"
    assert given == [{"config": {"tp": 2}, "rank": 3}]
    session = active()
    assert session is not None and session.rank == 3
    hook(construct, {}, 4)  # a session is active: the call goes straight through
    assert active() is session and len(given) == 1


def test_the_last_call_ends_a_begun_session_and_records_what_it_binds() -> None:
    session = new_session()
    begin(lambda: session)
    bind = observer("set_device", binds=lambda _session, index: f"cpu:{index}")
    assert bind(lambda index: index, 0) == 0
    assert active() is session
    observer("init_torch_distributed", last=True)(lambda: None)
    assert active() is None
    assert [(call.step, call.device) for call in session.recorder.calls] == [
        ("set_device", "cpu:0"), ("init_torch_distributed", "cpu:0")]


def test_a_raise_ends_a_begun_session_but_not_a_framed_one() -> None:
    def fail() -> None:
        raise OSError("no route")

    step = observer("init_torch_distributed")
    begun = new_session()
    begin(lambda: begun)
    with pytest.raises(OSError, match="no route"):
        step(fail)
    assert active() is None and begun.extra["error"] == "OSError: no route"

    framed = new_session()

    def start() -> str:
        with contextlib.suppress(OSError):  # an engine may catch an error and go on
            step(fail)
        assert active() is framed
        return "started"

    assert run_framed(lambda: framed, start) == "started"
    assert active() is None and framed.extra["error"] is None
