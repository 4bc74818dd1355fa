"""Steps and plugins that misbehave: the run holds, from the CLI and the library.

Issue 10: points 7 (a signal at any moment ends the run with 128+N after
teardown), 9 (a vendor abort(): native lines replayed, step named), 13 (a
timeout acts even when native code holds the GIL), 14 (a thread a step left
running), 15 (sys.exit / KeyboardInterrupt / a custom BaseException in a
step), 16 (teardowns that raise BaseException), 17 (two runs in one process),
18 (an exception whose __str__ raises).  The CLI cases run the console script
with a plugin of misbehaving steps; the library cases run :class:`Run` directly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from initorch.console import LINGER_S
from initorch.errors import EXIT_OK, EXIT_STEP_FAILED, ActiveRunError
from initorch.execution.executors import TEARDOWN_MODES
from initorch.execution.run import Run
from initorch.execution.watchdog import UNRESPONSIVE_S
from tests.support.profiles import write
from tests.support.runs import DIAGNOSES, WAIT, json_lines, plan_of
from tests.support.synthetic import define

SCRIPT = Path(sys.executable).parent / "initorch"

PLUGIN = """\
import os, re, signal, sys, threading, time
from initorch.plugin import setting, step
from initorch.execution.native_output import capture_native_stderr

LOG = setting("t.log", str, default="", description="where teardowns are recorded")


class VendorAbort(BaseException):
    pass


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("cannot say")


def record(ctx, output):
    with open(ctx.setting("t.log"), "a") as log:
        log.write(f"teardown {ctx.step}\\n")


def mark(name):
    print(f"STARTED {name}", file=sys.stderr, flush=True)


@step("first", description="succeeds and has a teardown", settings=(LOG,))
def first(ctx):
    return 1


first.teardown(record)


def misbehaving(name, **fields):
    def register(action):
        definition = step(name, description=name, requires=["first"], **fields)(action)
        MISBEHAVING.append(definition)
        return definition
    return register


MISBEHAVING = []


@misbehaving("exits")
def exits(ctx):
    sys.exit(0)


@misbehaving("interrupts")
def interrupts(ctx):
    raise KeyboardInterrupt


@misbehaving("vendor_abort")
def vendor_abort(ctx):
    raise VendorAbort("the vendor gave up")


@misbehaving("unprintable")
def unprintable(ctx):
    raise Unprintable()


@misbehaving("leaves_thread")
def leaves_thread(ctx):
    # Explicitly non-daemon (a thread started on initorch's step thread inherits daemon).
    threading.Thread(target=threading.Event().wait, name="stuck-poller", daemon=False).start()


@misbehaving("holds_gil", timeout=1)
def holds_gil(ctx):
    mark("holds_gil")
    re.match(r"(a*)*b", "a" * 64)  # catastrophic backtracking inside the C regex engine


@misbehaving("aborts")
def aborts(ctx):
    with capture_native_stderr():
        os.write(2, b"F1130 12:00:00.000000 1 plugin.cpp:42] Unable to find metadata "
                    b"storage plugin bogus\\n")
        os.abort()


@misbehaving("swallows_signal")
def swallows_signal(ctx):
    # A vendor import that catches everything (torch's did): the signal must still count.
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.5)
    except BaseException:
        pass
    return "done"


@step("after", description="must not run after a signal", requires=["swallows_signal"])
def after(ctx):
    print("AFTER RAN", flush=True)


def register(registry):
    for definition in (first, *MISBEHAVING, after):
        registry.steps.add(definition)
"""

NAMES = ("exits", "interrupts", "vendor_abort", "unprintable", "leaves_thread", "holds_gil",
         "aborts", "swallows_signal", "after")


class Cli:
    """The console script with the misbehaving plugin, in a folder of its own."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        site = folder / "site"
        site.mkdir()
        (site / "misbehave.py").write_text(PLUGIN, encoding="utf-8")
        self.env = {**os.environ, "PYTHONPATH": str(site), "INITORCH_PLUGINS": "misbehave"}
        self.log = folder / "teardowns.log"

    def argv(self, *steps: str, extra: tuple[str, ...] = ()) -> list[str]:
        body = "".join(f"  {name}: {{}}\n" if name in steps
                       else f"  {name}: {{enabled: false, reason: not this test}}\n"
                       for name in NAMES)
        profile = write(self.folder, "p.yaml", f"device:\n  type: cpu\nsteps:\n  first: {{}}\n"
                                               f"{body}")
        return [str(SCRIPT), "run", "-p", str(profile), "--set", f"t.log={self.log}", *extra]

    def run(self, *steps: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(*steps, extra=extra), cwd=self.folder, env=self.env,
                              capture_output=True, text=True, timeout=120, check=False)

    def teardowns(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    return Cli(tmp_path)


def last_line(stderr: str) -> str:
    return stderr.rstrip("\n").splitlines()[-1]


# --- point 15: sys.exit, KeyboardInterrupt, a custom BaseException in a step ---------------------

@pytest.mark.parametrize(("name", "said"), [
    ("exits", "called sys.exit(0)"), ("interrupts", "raised KeyboardInterrupt"),
    ("vendor_abort", "VendorAbort: the vendor gave up"),
])
def test_a_step_raising_a_base_exception_is_that_steps_failure(cli, name, said):
    done = cli.run(name)
    assert done.returncode == EXIT_STEP_FAILED, done.stderr
    assert f"initorch: step '{name}' failed" in last_line(done.stderr)
    assert said in last_line(done.stderr)
    assert "Traceback" not in done.stderr
    assert cli.teardowns() == ["teardown first"]
    assert done.stdout.startswith("run: FAILED")


# --- point 18: an exception whose __str__ raises ------------------------------------------------

def test_a_step_error_whose_str_raises_is_a_step_failure(cli):
    done = cli.run("unprintable")
    assert done.returncode == EXIT_STEP_FAILED, done.stderr
    assert "initorch: step 'unprintable' failed: Unprintable" in last_line(done.stderr)
    assert "internal error" not in done.stderr
    assert cli.teardowns() == ["teardown first"]


# --- point 14: a thread a step left running never hangs the CLI ----------------------------------

def test_a_thread_left_running_is_named_and_the_cli_exits(cli):
    done = cli.run("leaves_thread")  # subprocess.run's timeout bounds a hang
    assert done.returncode == EXIT_OK, done.stderr
    assert done.stdout.startswith("run: ok")
    assert f"thread 'stuck-poller' is still running {LINGER_S:g}s after" in done.stderr


# --- point 13: a timeout acts while native code holds the GIL ------------------------------------

def test_a_timeout_acts_while_a_step_holds_the_gil(cli):
    done = cli.run("holds_gil")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert "STARTED holds_gil" in done.stderr
    assert "holds_gil" in last_line(done.stderr)
    assert "timeout" in last_line(done.stderr)


# --- point 9: a vendor abort() loses nothing ------------------------------------------------------

def test_a_vendor_abort_replays_the_native_lines_and_names_the_step(cli):
    done = cli.run("aborts")
    assert done.returncode == -signal.SIGABRT
    assert "Unable to find metadata storage plugin bogus" in done.stderr
    assert "aborts" in last_line(done.stderr)


# --- point 7: a signal at any moment ends the run with 128+N after teardown ----------------------

def test_a_signal_a_step_swallows_still_ends_the_run(cli):
    done = cli.run("swallows_signal")
    assert done.returncode == 128 + signal.SIGTERM, done.stderr
    assert "AFTER RAN" not in done.stdout
    assert cli.teardowns() == ["teardown first"]


def signal_at(argv: list[str], folder: Path, marker: str, env: dict[str, str] | None = None,
              timeout: float = 25) -> tuple[int | None, list[dict[str, object]]]:
    """Run ``argv`` with JSON logs, send SIGTERM once an event containing ``marker``
    appears, and return its exit code and its events (stderr goes to a file, so
    that nothing read ahead is lost).  ``timeout`` bounds a hang."""
    log = folder / "stderr.jsonl"
    with log.open("w") as sink:
        proc = subprocess.Popen(argv, cwd=folder, env=env, text=True,
                                stdout=subprocess.DEVNULL, stderr=sink)
    try:
        for _ in range(int(timeout / 0.02)):
            if marker in log.read_text() or proc.poll() is not None:
                break
            threading.Event().wait(0.02)
        proc.send_signal(signal.SIGTERM)
        code: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    finally:
        proc.kill()
    return code, json_lines(log.read_text())


@pytest.mark.e2e
def test_sigterm_during_the_real_import_backend_ends_the_run(tmp_path):
    code, events = signal_at([str(SCRIPT), "run", "-p", "cpu", "--log-format", "json"],
                             tmp_path, '"step": "import_backend", "attempt"')
    assert code == 143, events
    started = [e.get("step") for e in events if e["event"] == "step_started"]
    assert started == ["launch_mooncake_master", "import_backend"], started
    assert not any(e["event"] == "run_finished" for e in events)
    # the master launched before torch is stopped by the teardown the signal runs
    assert [e["step"] for e in events if e["event"] == "mooncake_master_stopped"] == [
        "launch_mooncake_master"], events


@pytest.mark.e2e
def test_sigterm_while_blocked_in_the_rendezvous_ends_the_run_with_teardown(tmp_path):
    # Rank 0 of 2 waits in the job's store (the rendezvous step agrees on the plan) for
    # a rank 1 that never comes (torchrun's SIGTERM to the survivor of a dead peer);
    # 120 s of timeout must not matter, nor torchrun's 30 s before SIGKILL: the wait is
    # bounded far below both.  The parallel executor allocates the host pool meanwhile,
    # which the teardown must undo.
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    code, events = signal_at([str(SCRIPT), "run", "-p", "cpu", "--log-format", "json",
                              "--executor", "parallel", "--set", "mooncake.enabled=false"],
                             tmp_path, '"step": "alloc_host_mem_pool", "attempts"', env=env)
    assert code == 143, events
    completed = {e["step"] for e in events if e["event"] == "step_succeeded"}
    torn = {e["step"] for e in events if e["event"] == "teardown_succeeded"}
    assert {"rendezvous", "init_torch_distributed"}.isdisjoint(completed)
    assert "alloc_host_mem_pool" in torn
    assert torn and torn <= completed, (torn, completed)  # what completed is undone
    assert not any(e["event"] == "teardown_failed" for e in events)
    assert any(e["event"] == "signal_received" for e in events)
    [interrupted] = [e for e in events if e["event"] == "run_interrupted"]
    assert interrupted["exit_code"] == 143


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- point 16: every teardown runs whatever the others raise -------------------------------------

@pytest.mark.parametrize("mode", TEARDOWN_MODES)
@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_a_teardown_raising_a_base_exception_never_skips_the_others(raised, mode):
    torn: list[str] = []
    steps = []
    for name, requires in (("a", []), ("b", ["a"]), ("c", ["b"])):
        definition = define(name, requires=requires)

        def teardown(ctx, output, name=name):
            torn.append(name)
            if name == "b":
                raise raised()

        definition.teardown(teardown)
        steps.append(definition)
    run = Run(plan_of(steps), teardown=mode, diagnoses=DIAGNOSES)
    run.start()
    run.teardown()
    assert torn == ["c", "b", "a"]
    [failed] = [entry for entry in run.report.teardown if entry.status == "failed"]
    assert failed.step == "b" and raised.__name__ in (failed.error or "")


@pytest.mark.parametrize("mode", TEARDOWN_MODES)
def test_a_second_teardown_finishes_what_the_first_could_not(mode):
    torn: list[str] = []
    cut = threading.Event()
    steps = []
    for name, requires in (("a", []), ("b", ["a"])):
        definition = define(name, requires=requires)

        def teardown(ctx, output, name=name):
            if name == "b" and not cut.is_set():
                cut.set()
                raise _Escape  # stands for a cut that gets past the per-teardown guard
            torn.append(name)

        definition.teardown(teardown)
        steps.append(definition)
    run = Run(plan_of(steps), teardown=mode, diagnoses=DIAGNOSES)
    run.start()
    run.teardown()
    run.teardown()
    assert torn == ["a"]  # b's teardown ran once (and failed), a's ran, nothing twice
    assert [entry.step for entry in run.report.teardown] == ["b", "a"]


class _Escape(BaseException):
    pass


# --- point 17: two runs in one process -----------------------------------------------------------

def test_a_second_concurrent_run_is_refused_clearly():
    first = Run(plan_of([define("only")]), diagnoses=DIAGNOSES)
    first.start()
    errors: list[BaseException] = []

    def second() -> None:
        try:
            Run(plan_of([define("other")]), diagnoses=DIAGNOSES).start()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=second)
    thread.start()
    thread.join(WAIT)
    try:
        [error] = errors
        assert isinstance(error, ActiveRunError)
        assert "another run is active in this process" in str(error)
        assert "profile synthetic, rank 0" in str(error)
    finally:
        first.teardown()
    Run(plan_of([define("third")]),
        diagnoses=DIAGNOSES).start()  # the first one torn down: free again


def test_dry_runs_may_run_beside_a_real_one():
    real = Run(plan_of([define("only")]), diagnoses=DIAGNOSES)
    real.start()
    try:
        assert Run(plan_of([define("dry")]), executor="dry-run", diagnoses=DIAGNOSES).start().ok
    finally:
        real.teardown()


def test_the_watchdog_overshoot_is_documented():
    page = Path(__file__).resolve().parents[3] / "docs" / "failures.md"
    assert f"{UNRESPONSIVE_S:g} s" in page.read_text(encoding="utf-8").split("## Signals", 1)[1]


@pytest.fixture
def silent_etcd():
    """A TCP port that accepts connections and never answers: an etcd that hangs."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"etcd://127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.e2e
def test_a_timeout_acts_while_the_real_engine_init_holds_the_gil(tmp_path, silent_etcd):
    # Mooncake's initialize waits for the metadata server holding the GIL (issue 10,
    # point 13: the timeout used to be reported only when the call gave up, 10 s on).
    profile = write(tmp_path, "stall.yaml", "extends: cpu\nsteps:\n"
                    "  init_shared_mooncake_transfer_engine: {timeout: 1}\n")
    done = subprocess.run([str(SCRIPT), "run", "-p", str(profile), "--set",
                           f"mooncake.metadata_server={silent_etcd}"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    line = last_line(done.stderr)
    assert "step 'init_shared_mooncake_transfer_engine' is still running" in line
    assert "(timeout 1s)" in line and "the watchdog ends the process" in line


@pytest.mark.e2e
def test_sigterm_during_a_stalled_real_engine_init_is_bounded(tmp_path, silent_etcd):
    code, events = signal_at(
        [str(SCRIPT), "run", "-p", "cpu", "--log-format", "json", "--set",
         f"mooncake.metadata_server={silent_etcd}"], tmp_path,
        '"step": "init_shared_mooncake_transfer_engine", "attempt"')
    # Either the run acted (143, after teardown) or, with the interpreter held, the
    # watchdog ended it UNRESPONSIVE_S later, naming the step; never Mooncake's 10 s+.
    assert code in (143, -signal.SIGKILL), events
    if code == -signal.SIGKILL:
        [killed] = [e for e in events if e["event"] == "watchdog_killed_on_signal"]
        assert killed["steps"] == ["init_shared_mooncake_transfer_engine"]
