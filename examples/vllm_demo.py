"""``make demo-vllm``: the real vLLM 0.32.0 server started through initorch on this CPU.

1. ``initorch vllm check``: vLLM's own parser and config read the server's arguments;
   tp=2 on this one-NUMA-node host is refused (vLLM would stop before starting its
   workers), then accepted with a CPU list per worker.
2. ``initorch vllm drift`` on the installed vLLM: the ``vllm`` overlay's ordering claims
   against vLLM's code, with file:line.
3. ``initorch explain``: why the Mooncake engine comes after the process group in vLLM.
4. Verify mode: the OpenAI-compatible server starts tp=2; each worker records vLLM's own
   start-up calls as initorch steps and checks them against the plan; one completion;
   rank 0's run table and where each worker's report and trace are.
5. Where that start-up went: every process of the launch (the API server, the engine
   core, the two workers) recorded its start-up timeline (``INITORCH_VLLM_TIMELINE``),
   and ``initorch vllm timeline`` prints the chain to ready and the phases longest
   first, and writes the merged trace and the picture (``build/vllm-demo-timeline/``).

vLLM runs from ``.venv-vllm`` (``make vllm-venv``) on a tiny Llama made locally.  Each
command is printed before it runs.
"""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.vllm.server import (  # noqa: E402
    BIND,
    environment,
    running,
    server_arguments,
    vllm_venv,
)
from tests.vllm.tiny_model import make_tiny_model  # noqa: E402

TIMELINE = REPO / "build" / "vllm-demo-timeline"
"""Where the verify-mode launch writes its processes' timelines, and the picture goes."""


def show(command: list[str], extra: dict[str, str]) -> None:
    given = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(extra.items()))
    print(f"\n$ {given} {shlex.join(command)}".replace("$  ", "$ "), flush=True)


def run_initorch(venv: Path, arguments: list[str], extra: dict[str, str], *,
                 verdict_only: bool = False) -> int:
    """Run ``initorch`` from the vLLM venv and print what it says (vLLM's own log lines
    left out; with ``verdict_only``, the selection, the refusals and the verdict)."""
    command = [str(venv / "bin" / "initorch"), *arguments]
    show(command, extra)
    result = subprocess.run(command, env=environment(extra), capture_output=True, text=True,
                            check=False)
    out = result.stdout.splitlines()
    if verdict_only:
        out = [line for line in out if line.startswith(("selection:", "pre-flight:"))]
    said = [line for line in result.stderr.splitlines() if line.startswith("initorch")]
    print("\n".join([*out, *said]))
    print(f"(exit {result.returncode})")
    return result.returncode


def main() -> int:
    venv = vllm_venv()
    if venv is None:
        print("no vLLM venv: run 'make vllm-venv'")
        return 2
    with tempfile.TemporaryDirectory(prefix="initorch-vllm-demo-") as folder:
        work = Path(folder)
        model = make_tiny_model(work / "tiny-llama")
        arguments = server_arguments(model, tp=2)
        if run_initorch(venv, ["vllm", "check", "--", *arguments], {}, verdict_only=True) != 2:
            return 1
        if run_initorch(venv, ["vllm", "check", "--", *arguments], BIND) != 0:
            return 1
        tree = next(venv.glob("lib/python3*/site-packages/vllm"))
        if run_initorch(venv, ["vllm", "drift", str(tree)], {}) != 0:
            return 1
        run_initorch(venv, ["explain", "--profile", "cpu", "--profile", "vllm",
                            "init_torch_distributed", "init_shared_mooncake_transfer_engine"],
                     {})
        extra = {"INITORCH_VLLM": "verify", **BIND,
                 "INITORCH_VLLM_REPORT": str(work / "report-{rank}.json"),
                 "INITORCH_VLLM_TRACE": str(work / "trace-{rank}.json"),
                 "INITORCH_VLLM_TIMELINE": str(TIMELINE)}
        shutil.rmtree(TIMELINE, ignore_errors=True)
        show([str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server",
              *arguments, "--host", "127.0.0.1", "--port", "PORT"], extra)
        with running(model, extra, work / "vllm.log", tp=2) as server:
            ready = server.wait_ready()
            tokens = server.generate()
            print(f"ready after {ready:.1f} s; POST /v1/completions 'w1 w2 w3' -> {tokens}")
            from initorch.kit import written_ready

            deadline = time.monotonic() + 60  # written just after the first 200 of /health
            while written_ready(TIMELINE, server.process.pid) is None and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
        for rank in (0, 1):
            report = json.loads((work / f"report-{rank}.json").read_text())
            section = report["vllm"]
            if rank == 0:
                print(section["table"])
            print(f"rank {rank}: {len(section['calls'])} vLLM calls recorded, violations: "
                  f"{section['violations'] or 'none'}; initorch's own time "
                  f"{section['cost']['total_s']:.2f} s of the worker's "
                  f"{section['cost']['process_up_s']:.1f} s; report and trace written")
        print(f"processes left after shutdown: {server.leftovers or 'none'}")
        timeline = run_initorch(venv, ["vllm", "timeline", str(TIMELINE)], {})
        return 0 if not server.leftovers and timeline == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
