"""Real SGLang servers for the tests: the SGLang venv, a managed Mooncake master, a launch.

The servers run SGLang 0.5.23 from its own venv (``.venv-sglang``, built by ``make
sglang-venv``; ``INITORCH_SGLANG_VENV`` points elsewhere), with the test-vehicle CPU
platform of ``tests/sglang/site`` on ``PYTHONPATH`` and the tiny model of
:mod:`tests.sglang.tiny_model`.  Everything listens on loopback, and every process a
launch starts is in its own process group, which ``stop`` ends and checks.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.ports import unassigned_port

REPO = Path(__file__).resolve().parents[2]
SITE = Path(__file__).with_name("site")
REGRESSION_SITE = Path(__file__).with_name("site-regression")
SIMULATED_SITE = REPO / "tests" / "support" / "simulated" / "site"
SIMULATED_ASCEND: dict[str, str | None] = {
    # The test vehicle's SIMULATED Ascend semantics (initorch_test_cpu_platform.simulated_ascend).
    "INITORCH_TEST_SIMULATED_ASCEND": str(SIMULATED_SITE),
    # The simulated Ascend build installs its transport only without MC_FORCE_TCP
    # (Mooncake transfer_engine_impl.cpp init), as the real one does.
    "MC_FORCE_TCP": None,
    # What the npu profile gives SGLang's store and shared engine (mooncake_store.py:219,
    # mooncake_transfer_engine.py:206-209).
    "MOONCAKE_PROTOCOL": "ascend",
    # HiCache gets the shared engine with this (mooncake_transfer_engine.py:315-340); it is
    # SGLang 0.5.23's default (environ.py:881), set so that a later default cannot hide it.
    "SGLANG_HICACHE_MOONCAKE_REUSE_TE": "1",
}
"""A launch where SGLang 0.5.23 builds the shared Mooncake engine, on the test vehicle
with the simulated Ascend device context."""
VENV_ENV = "INITORCH_SGLANG_VENV"

PROMPT = "w1 w2 w3"
MAX_NEW_TOKENS = 8
READY_TIMEOUT_S = 420.0  # 30-60 s on a quiet 2-core machine; CI may share it
HTTP_BIND_FAILED = "error while attempting to bind on address"  # uvicorn's, SGLang's and vLLM's


def sglang_venv() -> Path:
    """The SGLang venv; ``RuntimeError`` with the way to build it when it is missing."""
    venv = Path(os.environ.get(VENV_ENV) or REPO / ".venv-sglang")
    if not (venv / "bin" / "python").exists():
        raise RuntimeError(f"no SGLang venv at {venv}: run 'make sglang-venv' (or set "
                           f"{VENV_ENV})")
    return venv


def free_port() -> int:
    """A loopback port for a server these tests start: one the kernel never hands out
    itself, so that no other test's connection takes it before the server binds it
    (:mod:`tests.support.ports`)."""
    return unassigned_port("127.0.0.1")


@dataclass
class Master:
    """A managed ``mooncake_master`` on loopback, started as initorch's managed master is
    (its binary, its command line, its watchdog): ``MOONCAKE_MASTER`` is ``address``."""

    watchdog: subprocess.Popen[bytes]
    address: str
    log: Path
    pid: int

    def stop(self) -> bool:
        """Stop the master; whether it is gone (no process, its port closed)."""
        if self.watchdog.stdin is not None:
            self.watchdog.stdin.close()  # the watchdog stops the master
        self.watchdog.wait(30)
        if self.watchdog.stdout is not None:
            self.watchdog.stdout.close()
        self.log.unlink(missing_ok=True)
        port = int(self.address.rsplit(":", 1)[1])
        return not Path(f"/proc/{self.pid}").exists() and port_is_free(port)


@contextmanager
def managed_master() -> Iterator[Master]:
    """A master for the servers of one test module."""
    from initorch.steps.mooncake_master import WATCHDOG, master_binary, master_command

    ports = {"rpc": free_port(), "metadata": free_port(), "metrics": free_port()}
    command = master_command(master_binary(), ports, "127.0.0.1")
    log_fd, log_name = tempfile.mkstemp(prefix="initorch-test-master-", suffix=".log")
    os.close(log_fd)
    watchdog = subprocess.Popen([sys.executable, "-I", str(WATCHDOG), "5", log_name, "--",
                                 *command], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = watchdog.stdout.readline().decode() if watchdog.stdout else ""
    pid = int(line.split()[1]) if line.startswith("pid ") else -1
    master = Master(watchdog, f"127.0.0.1:{ports['rpc']}", Path(log_name), pid)
    try:
        _wait_for_master(ports["metrics"], watchdog)
        yield master
    finally:
        gone = master.stop()
    if not gone:
        raise RuntimeError(f"mooncake_master {pid} ({master.address}) outlived its stop")


def _wait_for_master(metrics_port: int, watchdog: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if watchdog.poll() is not None:
            raise RuntimeError("mooncake_master exited before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/health",
                                        timeout=1) as reply:
                if json.loads(reply.read()).get("service_ready"):
                    return
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    raise RuntimeError("mooncake_master did not become ready within 60 s")


BIND = {"SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
"""One core group per rank for tp=2 on this one-NUMA-node host (utils/numa_utils.py:463)."""


def report_paths(folder: Path) -> dict[str, str | None]:
    """``INITORCH_SGLANG_REPORT``/``_TRACE`` for every rank, in ``folder``."""
    return {"INITORCH_SGLANG_REPORT": str(folder / "report-{rank}.json"),
            "INITORCH_SGLANG_TRACE": str(folder / "trace-{rank}.json")}


def assert_nothing_left(server: Server) -> None:
    """No process of the launch outlived its stop, and its port is closed."""
    assert server.leftovers == [], f"processes left after shutdown: {server.leftovers}"
    assert port_is_free(server.port)


def stock_generation(model: Path, master: Master, log: Path) -> tuple[list[int], Server]:
    """Stock SGLang's greedy tokens on the tests' launch line (initorch installed, not
    asked for; the vehicle's CPU host pool, without which stock cannot start HiCache)."""
    with running(model, master, {"INITORCH_TEST_STOCK_CPU_POOL": "1", **BIND}, log) as stock:
        stock.wait_ready()
        tokens = stock.generate()
    assert_nothing_left(stock)
    assert "initorch-sglang" not in stock.text()  # not asked for: not there
    return tokens, stock


def launch_arguments(model: Path, port: int, *, tp: int = 2) -> list[str]:
    """The launch line of every test: tp ranks, HiCache with the Mooncake Store."""
    return ["--model-path", str(model), "--device", "cpu", "--attention-backend",
            "torch_native", "--disable-cuda-graph", "--host", "127.0.0.1", "--port", str(port),
            "--tp", str(tp), "--max-total-tokens", "2048", "--enable-hierarchical-cache",
            "--hicache-storage-backend", "mooncake", "--hicache-mem-layout", "page_first",
            "--page-size", "16"]


def server_environment(master: Master, extra: Mapping[str, str | None], *,
                       site: tuple[Path, ...] = (SITE,)) -> dict[str, str]:
    """What SGLang's Mooncake Store reads (mooncake_store.py:200-230), and the platform;
    a ``None`` in ``extra`` unsets that variable."""
    environ = {key: value for key, value in os.environ.items()
               if not key.startswith(("INITORCH_SGLANG", "SGLANG_", "MOONCAKE_"))}
    environ |= {
        "PYTHONPATH": os.pathsep.join(str(path) for path in site),
        "SGLANG_PLATFORM": "initorch_test_cpu",
        "MOONCAKE_MASTER": master.address, "MOONCAKE_PROTOCOL": "tcp", "MC_FORCE_TCP": "1",
        "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE", "SGLANG_HOST_IP": "127.0.0.1",
        "MOONCAKE_GLOBAL_SEGMENT_SIZE": str(64 << 20),
    }
    environ |= {key: value for key, value in extra.items() if value is not None}
    return {key: value for key, value in environ.items() if extra.get(key, value) is not None}


@dataclass
class Server:
    """One SGLang launch: its process group, its log, its port."""

    process: subprocess.Popen[bytes]
    port: int
    log: Path
    started: float
    up_after: float | None = None  # every rank's Scheduler built, HTTP answering
    ready_after: float | None = None
    leftovers: list[int] = field(default_factory=list)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Seconds from launch until ``/health_generate`` answers 200 (a real
        generation through every rank); ``RuntimeError`` with the log's tail if the
        server dies first."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"SGLang exited with {self.process.returncode} before it "
                                   f"was ready:\n{self.tail()}")
            if self.up_after is None and HTTP_BIND_FAILED in self.text():
                # uvicorn's line: the server lives on without its HTTP port; say so now.
                raise RuntimeError(f"the server could not bind port {self.port}:\n{self.tail()}")
            if self.up_after is None and self._answers("/model_info"):
                self.up_after = time.monotonic() - self.started
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health_generate",
                                            timeout=60) as reply:
                    if reply.status == 200:
                        self.ready_after = time.monotonic() - self.started
                        return self.ready_after
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.25)
        raise RuntimeError(f"SGLang was not ready within {timeout:.0f} s:\n{self.tail()}")

    def _answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                        timeout=5) as reply:
                return bool(reply.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    def wait_exit(self, timeout: float = READY_TIMEOUT_S) -> int:
        return self.process.wait(timeout)

    def generate(self, prompt: str = PROMPT) -> list[int]:
        body = json.dumps({"text": prompt, "sampling_params": {
            "max_new_tokens": MAX_NEW_TOKENS, "temperature": 0}}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/generate", body,
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as reply:
            ids: list[int] = json.loads(reply.read())["output_ids"]
            return ids

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.text().splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the launcher (SGLang shuts its ranks down), then SIGKILL to the
        group after a grace period; ``leftovers`` lists what was still alive."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            with suppress(subprocess.TimeoutExpired):
                self.process.wait(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _group_alive(self.process.pid):
            time.sleep(0.2)
        self.leftovers = _group_members(self.process.pid)
        if self.leftovers:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)


def launch(model: Path, master: Master, extra: Mapping[str, str | None], log: Path, *,
           site: tuple[Path, ...] = (SITE,), tp: int = 2) -> Server:
    """Start ``python -m sglang.launch_server`` from the SGLang venv, in its own group."""
    port = free_port()
    python = sglang_venv() / "bin" / "python"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(python), "-m", "sglang.launch_server", *launch_arguments(model, port, tp=tp)],
            env=server_environment(master, extra, site=site), cwd=log.parent, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    return Server(process, port, log, time.monotonic())


@contextmanager
def running(model: Path, master: Master, extra: Mapping[str, str | None], log: Path,
            **options: object) -> Iterator[Server]:
    """A launch that is stopped (and checked for leftovers) however the block ends."""
    server = launch(model, master, extra, log, **options)  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


def _group_members(group: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def _group_alive(group: int) -> bool:
    return bool(_group_members(group))


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``port`` (a connection is refused); a port left in
    TIME_WAIT by the closed server counts as free."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return False
    except OSError:
        return True


def run_in_sglang(code: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """``code`` in the SGLang venv (where initorch and initorch-sglang are installed),
    with none of this process's ``INITORCH_SGLANG*``/``SGLANG_*`` variables."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("INITORCH_SGLANG", "SGLANG_"))} | environ
    return subprocess.run([str(sglang_venv() / "bin" / "python"), "-c", code],
                          capture_output=True, text=True, env=env, timeout=600, check=False)


def initorch_in_sglang(*arguments: str, **environ: str) -> subprocess.CompletedProcess[str]:
    """The ``initorch`` CLI of the SGLang venv (``initorch sglang ...`` lives there)."""
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("INITORCH_SGLANG", "SGLANG_", "MOONCAKE_"))} | environ
    return subprocess.run([str(sglang_venv() / "bin" / "initorch"), *arguments],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
