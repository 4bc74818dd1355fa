"""Mooncake listens on every interface even when given loopback: found and warned.

Issue 10, "beyond the tester's list".  The unit tests open real sockets and read
them back from /proc; the e2e test runs the real engine, master and store with
``127.0.0.1`` and reads the warnings.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from initorch.execution.context import RunState, RunStepContext
from initorch.execution.launchers import RankInfo
from initorch.reporting.logs import get_logger
from initorch.steps import listeners as listeners_module
from initorch.steps.listeners import (
    Listener,
    is_loopback,
    listeners,
    parse_proc_address,
    warn_if_exposed,
)
from tests.support.runs import captured_records, json_lines
from tests.support.synthetic import define, synthetic_plan

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def listening(host: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen()
    return sock


@pytest.mark.parametrize(("row", "expected"), [
    ("0100007F:1F90", Listener(8080, "127.0.0.1")),
    ("00000000:0050", Listener(80, "0.0.0.0")),
    ("00000000000000000000000000000000:1F90", Listener(8080, "::")),
    ("00000000000000000000000001000000:0016", Listener(22, "::1")),
])
def test_proc_net_rows_are_read(row, expected):
    assert parse_proc_address(row) == expected


@pytest.mark.parametrize(("host", "wildcard"), [("0.0.0.0", True), ("127.0.0.1", False),
                                                 ("::", True), ("::1", False)])
def test_the_process_listeners_are_found_with_their_interface(host, wildcard):
    with listening(host) as sock:
        port = sock.getsockname()[1]
        [found] = [entry for entry in listeners() if entry.port == port]
    assert found.on_every_interface is wildcard
    assert port not in {entry.port for entry in listeners()}


def test_netlink_and_proc_name_the_same_listeners(monkeypatch):
    # sock_diag answers by default; /proc's tables where netlink is refused.
    with listening("0.0.0.0"), listening("127.0.0.1"), listening("::"), listening("::1"):
        by_netlink = listeners()

        def refused() -> None:
            raise PermissionError("netlink refused")

        monkeypatch.setattr(listeners_module, "_diag_listeners", refused)
        by_proc = listeners()
    assert len(by_netlink) >= 4
    assert by_netlink == by_proc


def test_another_process_listeners_are_found():
    child = subprocess.Popen(
        [sys.executable, "-c", "import socket, sys; s = socket.socket(); "
         "s.bind(('0.0.0.0', 0)); s.listen(); print(s.getsockname()[1], flush=True); "
         "sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert Listener(port, "0.0.0.0") in listeners(child.pid)
        assert port not in {entry.port for entry in listeners()}
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=30)


@pytest.mark.parametrize(("host", "loopback"), [("127.0.0.1", True), ("127.8.0.1", True),
                                                 ("::1", True), ("[::1]", True),
                                                 ("localhost", True), ("10.0.0.1", False),
                                                 ("node-1", False)])
def test_loopback_hosts(host, loopback):
    assert is_loopback(host) is loopback


@pytest.fixture
def contexts(tmp_path: Path):
    """Step contexts of one run: ``contexts(name)``."""
    state = RunState(synthetic_plan([define("engine"), define("store")], tmp_path), RankInfo())
    return lambda name: RunStepContext(state, name, get_logger())


def test_a_wildcard_listener_opened_for_a_loopback_host_is_warned_once_per_run(contexts):
    before = listeners()
    with listening("0.0.0.0") as exposed, listening("127.0.0.1"), \
            captured_records() as records:
        ports = warn_if_exposed(contexts("engine"), "engine", "127.0.0.1", before)
        assert ports == [exposed.getsockname()[1]]
        assert warn_if_exposed(contexts("store"), "store", "127.0.0.1", before) == ports
        warned, listed = records.events("mooncake_listens_on_all_interfaces")
        assert (warned.levelname, warned.component, warned.ports) == ("WARNING", "engine", ports)
        assert "iptables" in warned.hint
        assert (listed.levelname, listed.component) == ("INFO", "store")
        assert not hasattr(listed, "hint")


def test_a_wildcard_listener_for_a_routable_host_is_not_warned(contexts):
    before = listeners()
    with listening("0.0.0.0"):
        assert warn_if_exposed(contexts("engine"), "engine", "10.0.0.1", before) == []


@pytest.mark.e2e
def test_the_real_mooncake_listeners_are_warned_about(tmp_path: Path):
    script = Path(sys.executable).parent / "initorch"
    done = subprocess.run([str(script), "run", "-p", "cpu", "--log-format", "json", "--set",
                           "mooncake.hostname=127.0.0.1", "--set",
                           "mooncake.store.hostname=127.0.0.1"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr
    warned = {e["component"]: e for e in json_lines(done.stderr)
              if e["event"] == "mooncake_listens_on_all_interfaces"}
    assert {"transfer engine", "mooncake_master"} <= set(warned), warned
    assert all(e["ports"] for e in warned.values())
    # the first says how to restrict them; the rest of the run only lists ports
    assert [e["level"] for e in warned.values()].count("warning") == 1
    assert ["iptables" in e.get("hint", "") for e in warned.values()].count(True) == 1
