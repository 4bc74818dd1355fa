"""A SIGTERM to the launcher of a real SGLang 0.5.23 start-up (tp=2, HiCache with the
Mooncake Store, ``tests/sglang/server.py``): nothing initorch owns outlives it (issue 27).

What SGLang does (0.5.23, ``sglang/`` of the wheel):

- during start-up the launcher has no SIGTERM handler (SGLang installs one only when it
  serves: ``srt/entrypoints/http_server.py:2829``, ``srt/managers/tokenizer_manager.py:2455``),
  so it dies at once and its ``finally: kill_process_tree`` (``launch_server.py:85-88``)
  never runs;
- every process it spawned (``multiprocessing`` spawn) is tied to it by
  ``kill_itself_when_parent_died`` (``PR_SET_PDEATHSIG`` SIGKILL, ``srt/utils/common.py:3432``),
  which a rank calls only in ``configure_scheduler_process`` (``managers/scheduler.py:6269``,
  after its module import and after ``load_plugins`` at ``:6323``), the detokenizer at the
  start of ``run_detokenizer_process`` (``managers/detokenizer_manager.py:550``), after its
  module import;
- the kernel sends nothing for a parent that died before the ``prctl``: a process still
  importing SGLang when the launcher dies is an orphan that starts up anyway: a rank whose
  peer was killed waits for it; ranks orphaned together run their whole start-up
  (segments mounted on the master) and die at ``pipe_writer.send`` (``scheduler.py:6365``,
  BrokenPipeError); the detokenizer waits in its event loop for good
  (``detokenizer_manager.py:188``); ``multiprocessing``'s resource tracker lives as long
  as any of them.

So a SIGTERM while a rank still imports leaves processes behind with stock SGLang too
(seen with stock SGLang: the SIGTERM at the first rank's "Init parallel begin", the other
rank still importing, left that rank and the resource tracker). initorch's plugin runs in
that window (``load_plugins`` before ``configure_scheduler_process``), so it first ties the
process to the launcher and stops an orphan (``initorch_sglang.plugin._follow_the_launcher``).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.sglang.server import BIND, REPO, Master, Server, _group_members, launch

VERIFY = {"INITORCH_SGLANG": "verify", **BIND}
STOCK = {"INITORCH_TEST_STOCK_CPU_POOL": "1", **BIND}
SPAWNED = 4  # two ranks, the detokenizer, multiprocessing's resource tracker
TITLED = ("sglang::scheduler_TP0", "sglang::scheduler_TP1", "sglang::detokenizer")
GRACE_S = 30.0  # what the issue measured
MOMENT_TIMEOUT_S = 420.0


def _command(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _children(server: Server) -> dict[int, str]:
    return {pid: _command(pid) for pid in _group_members(server.process.pid)
            if pid != server.process.pid}


def _role(command: str) -> str:
    """A spawned process as SGLang names it once tied to the launcher, else what it is."""
    for title in TITLED:
        if command.startswith(title):
            return title
    if "multiprocessing.resource_tracker" in command:
        return "resource tracker"
    if "multiprocessing.spawn" in command:
        return "spawned, importing"
    return command


@contextmanager
def _launched(model: Path, master: Master, extra: dict[str, str], log: Path) -> Iterator[Server]:
    server = launch(model, master, extra, log)
    try:
        yield server
    finally:
        if _group_members(server.process.pid):
            os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(30)


def _sigterm_when(server: Server, moment: Callable[[Server], bool], what: str) -> None:
    deadline = time.monotonic() + MOMENT_TIMEOUT_S
    while not moment(server):
        if server.process.poll() is not None:
            pytest.fail(f"SGLang exited with {server.process.returncode} before {what}:\n"
                        f"{server.tail()}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {MOMENT_TIMEOUT_S:.0f} s:\n{server.tail()}")
        time.sleep(0.05)
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(60)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the launcher outlived its SIGTERM at {what} by 60 s")


def _left_after(server: Server, seconds: float) -> dict[int, str]:
    """The launcher's group, ``seconds`` after it exited (what is alive then, by role)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.5)
    return {pid: _role(command) for pid, command in _children(server).items()}


def _logged_by_every_rank(pattern: str) -> Callable[[Server], bool]:
    def moment(server: Server) -> bool:
        ranks = set(re.findall(rf"TP(\d)\] {pattern}", server.text()))
        return len(ranks) == 2 and _every_process_tied(server)
    return moment


def _every_process_tied(server: Server) -> bool:
    """Each rank and the detokenizer past SGLang's ``kill_itself_when_parent_died`` (they
    take SGLang's process title right after it)."""
    return set(TITLED) <= {_role(command) for command in _children(server).values()}


def _still_importing(server: Server) -> bool:
    """Every spawned process started, none tied to the launcher yet: all still import."""
    roles = [_role(command) for command in _children(server).values()]
    return (len(roles) == SPAWNED and roles.count("spawned, importing") == SPAWNED - 1
            and "resource tracker" in roles)


@pytest.mark.e2e
@pytest.mark.parametrize(("pattern", "what"), [
    (r"Init parallel begin", "the parallel runtime (every rank in init_parallel_runtime)"),
    (r"Load weight begin", "the weight loading (every rank in load_model)"),
])
def test_sigterm_during_start_up_leaves_nothing_in_verify_mode(
        tiny_model: Path, master: Master, tmp_path: Path, pattern: str, what: str) -> None:
    with _launched(tiny_model, master, VERIFY, tmp_path / "verify.log") as server:
        _sigterm_when(server, _logged_by_every_rank(pattern), what)
        left = _left_after(server, GRACE_S)
    assert left == {}, f"alive {GRACE_S:.0f} s after a SIGTERM at {what}: {left}"


@pytest.mark.e2e
def test_sigterm_while_the_ranks_import_leaves_only_what_stock_sglang_leaves(
        tiny_model: Path, master: Master, tmp_path: Path) -> None:
    """The launcher dies before any spawned process tied itself to it. Stock SGLang's
    orphans start up anyway (``managers/scheduler.py:6269``, ``detokenizer_manager.py:550``
    run after the import; ``srt/utils/common.py:3432`` cannot reach a parent already gone);
    under initorch each stops when its plugin loads, the first thing it runs after the
    import, so the group empties once they have imported SGLang."""
    with _launched(tiny_model, master, STOCK, tmp_path / "stock.log") as stock:
        _sigterm_when(stock, _still_importing, "the imports")
        stock_left = _left_after(stock, GRACE_S)
    # SGLang's own behaviour: the orphans are alive 30 s on.
    assert "resource tracker" in stock_left.values(), stock_left

    with _launched(tiny_model, master, VERIFY, tmp_path / "verify.log") as server:
        _sigterm_when(server, _still_importing, "the imports")
        left = _left_after(server, GRACE_S)
        # Nothing that ran initorch's plugin (it runs after SGLang's process title is set
        # in the detokenizer, before it in a rank) is alive; what is, stock left too.
        assert not set(left.values()) & set(TITLED), left
        assert len(left) <= len(stock_left), (left, stock_left)
        deadline = time.monotonic() + MOMENT_TIMEOUT_S
        while _children(server) and time.monotonic() < deadline:
            time.sleep(1)
        left_late = {pid: _role(command) for pid, command in _children(server).items()}
    assert left_late == {}, f"orphans of a launcher killed while they imported: {left_late}"
    log = server.text()
    assert "initorch-sglang: the SGLang launcher" in log and "is gone" in log


# The plugin's tie to the launcher, without SGLang: a spawned process calls it with its
# parent alive (it is tied: PR_GET_PDEATHSIG is SIGKILL) and after its parent died (it stops).
TIE = """
import ctypes, multiprocessing, os, sys, time
sys.path.insert(0, {integration!r})

def child(result, orphan):
    if orphan:
        while os.getppid() == multiprocessing.parent_process().pid:
            time.sleep(0.01)
    from initorch_sglang.plugin import _follow_the_launcher
    try:
        _follow_the_launcher()
    except SystemExit as stop:
        outcome = f"stopped: {{stop}}"
    else:
        signal = ctypes.c_int()
        ctypes.CDLL(None).prctl(2, ctypes.byref(signal))  # PR_GET_PDEATHSIG
        outcome = f"tied: {{signal.value}}"
    with open(result + ".part", "w") as out:
        out.write(outcome)
    os.replace(result + ".part", result)

if __name__ == "__main__":
    process = multiprocessing.get_context("spawn").Process(
        target=child, args=(sys.argv[1], sys.argv[2] == "orphan"))
    process.start()
    if sys.argv[2] == "orphan":
        os._exit(0)  # as a launcher killed by SIGTERM: no join, no clean-up
    process.join(60)
"""


@pytest.mark.parametrize(("case", "expected"), [
    ("tied", f"tied: {int(signal.SIGKILL)}"),
    ("orphan", "stopped: initorch-sglang: the SGLang launcher (pid "),
])
def test_the_plugin_ties_a_spawned_process_to_its_launcher(
        tmp_path: Path, case: str, expected: str) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    script = tmp_path / "launcher.py"
    script.write_text(TIE.format(integration=str(REPO / "integrations" / "sglang")))
    result = tmp_path / "result"
    subprocess.run([sys.executable, str(script), str(result), case], check=True, timeout=120)
    deadline = time.monotonic() + 60
    while not result.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert result.read_text().startswith(expected)
