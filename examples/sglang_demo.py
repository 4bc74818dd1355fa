"""``make demo-sglang``: the real SGLang 0.5.23 server started through initorch on this CPU.

1. ``initorch sglang check``: SGLang's own parser and resolver read the launch line,
   initorch prints the plan and what would fail (here: nothing).
2. ``initorch sglang drift`` on the installed SGLang: the ``sglang`` profile's ordering
   claims against SGLang's code, with file:line.
3. Verify mode: SGLang starts tp=2 with HiCache and the Mooncake Store (a managed
   ``mooncake_master`` on loopback); every rank records SGLang's own start-up calls as
   initorch steps and checks them against the plan; one request; rank 0's run table.
4. Drive mode: initorch runs SGLang's parallel runtime as steps (the ranks agree on the
   plan first, and initorch fills in the CPU core split); the same request gives the
   same tokens.
5. The bug SGLang 0.5.23 still has, on the SIMULATED Ascend device context of the test
   vehicle (``set_device`` binds the calling thread; Mooncake is the simulated
   ascend-direct build): the shared engine's ``TransferEngine.initialize`` runs on
   ``run_with_deadline``'s daemon thread, which never set the device.  Stock SGLang
   fails as on an Ascend machine; verify mode stops it naming the vendor call, the
   thread and SGLang's line; drive mode binds that thread and the server serves.
6. Where the verify-mode start-up of part 3 went: every process of that launch (the
   launcher, the two ranks, the detokenizer) recorded its start-up timeline
   (``INITORCH_SGLANG_TIMELINE``), and ``initorch sglang timeline`` prints the chain to
   ready and the phases longest first, and writes the merged trace and the picture
   (``build/sglang-demo-timeline/``).

SGLang runs from ``.venv-sglang`` with the test-vehicle CPU platform of
``tests/sglang/site`` (SGLang has no CPU kernels on PyPI; see tests/sglang/site) and a
tiny Llama made locally.  Each command is printed before it runs.
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

from tests.sglang.server import (  # noqa: E402
    SIMULATED_ASCEND,
    Master,
    launch_arguments,
    managed_master,
    running,
    server_environment,
    sglang_venv,
)
from tests.sglang.tiny_model import make_tiny_model  # noqa: E402

TIMELINE = REPO / "build" / "sglang-demo-timeline"
"""Where the verify-mode launch writes its processes' timelines, and the picture goes."""


def show(command: list[str], environ: dict[str, str]) -> None:
    given = " ".join(f"{key}={shlex.quote(value)}" for key, value in sorted(environ.items())
                     if key.startswith(("INITORCH_SGLANG", "MOONCAKE_MASTER", "SGLANG_CPU")))
    print(f"\n$ {given} {shlex.join(command)}", flush=True)


def run_initorch(arguments: list[str], environ: dict[str, str]) -> int:
    command = [str(sglang_venv() / "bin" / "initorch"), *arguments]
    show(command, environ)
    result = subprocess.run(command, env=environ, capture_output=True, text=True, check=False)
    lines = [line for line in (result.stdout + result.stderr).splitlines()
             if "Warning" not in line and "warnings.warn" not in line]
    print("\n".join(lines))
    return result.returncode


def serve(mode: str, model: Path, master: Master, work: Path) -> list[int]:
    extra = {"INITORCH_SGLANG": mode,
             "INITORCH_SGLANG_REPORT": str(work / f"{mode}-report-{{rank}}.json"),
             "INITORCH_SGLANG_TRACE": str(work / f"{mode}-trace-{{rank}}.json")}
    if mode == "verify":
        extra["SGLANG_CPU_OMP_THREADS_BIND"] = "0|1"
        shutil.rmtree(TIMELINE, ignore_errors=True)
        extra["INITORCH_SGLANG_TIMELINE"] = str(TIMELINE)
    command = [str(sglang_venv() / "bin" / "python"), "-m", "sglang.launch_server",
               *launch_arguments(model, 0)]
    show(command, server_environment(master, extra))
    with running(model, master, extra, work / f"{mode}.log") as server:
        ready = server.wait_ready()
        tokens = server.generate()
        print(f"ready after {ready:.1f} s; POST /generate 'w1 w2 w3' -> {tokens}")
        if mode == "verify":  # the launcher writes the ready moment just after answering
            from initorch.kit import written_ready

            deadline = time.monotonic() + 60
            while written_ready(TIMELINE, server.process.pid) is None and \
                    time.monotonic() < deadline:
                time.sleep(0.2)
    report = json.loads((work / f"{mode}-report-0.json").read_text())
    print(report["sglang"]["table"])
    print(f"processes left after shutdown: {server.leftovers or 'none'}")
    return tokens


def simulated_ascend(model: Path, master: Master, work: Path) -> bool:
    """Part 5: stock, verify and drive on the simulated Ascend device context; whether
    each did what it should (stock fails, verify stops, drive serves)."""
    print("\n--- SGLang 0.5.23 on the SIMULATED Ascend device context (test vehicle) ---")
    base = {**SIMULATED_ASCEND, "SGLANG_CPU_OMP_THREADS_BIND": "0|1"}
    profile = str(REPO / "tests" / "sglang" / "simulated-ascend.yaml")
    outcomes = []
    for mode in ("stock", "verify", "drive"):
        extra = dict(base) | ({"INITORCH_TEST_STOCK_CPU_POOL": "1"} if mode == "stock" else
                              {"INITORCH_SGLANG": mode, "INITORCH_SGLANG_PROFILE": profile})
        show(["python", "-m", "sglang.launch_server", "..."],
             {key: value for key, value in extra.items() if value is not None})
        with running(model, master, extra, work / f"ascend-{mode}.log") as server:
            if mode == "drive":
                server.wait_ready()
                tokens = server.generate()
                print(f"drive mode serves: POST /generate 'w1 w2 w3' -> {tokens}")
                outcomes.append(True)
                continue
            code = server.wait_exit()
        lines = server.text().splitlines()
        wanted = ("Call acl failed", "RuntimeError: Mooncake") if mode == "stock" else \
            ("initorch-sglang: order violation",)
        shown = [line for line in lines if any(word in line for word in wanted)][:3]
        print("\n".join(shown) + f"\n{mode}: exit {code}")
        outcomes.append(code != 0 and bool(shown))
    return all(outcomes)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="initorch-sglang-demo-") as folder:
        work = Path(folder)
        model = make_tiny_model(work / "tiny-llama")
        with managed_master() as master:
            environ = server_environment(master, {"INITORCH_SGLANG": "verify",
                                                  "SGLANG_CPU_OMP_THREADS_BIND": "0|1"})
            if run_initorch(["sglang", "check", "--", *launch_arguments(model, 30000)],
                            environ):
                return 1
            site = subprocess.run(
                [str(sglang_venv() / "bin" / "python"), "-c",
                 "import sglang, pathlib; print(pathlib.Path(sglang.__file__).parent)"],
                capture_output=True, text=True, check=True).stdout.strip()
            if run_initorch(["sglang", "drift", site], environ):
                return 1
            verified = serve("verify", model, master, work)
            driven = serve("drive", model, master, work)
            ascend = simulated_ascend(model, master, work)
        same = "the same tokens" if verified == driven else "DIFFERENT tokens"
        story = "stock failed, verify stopped it, drive served" if ascend else \
            "something DID NOT behave as expected"
        print(f"\nverify and drive mode gave {same}; on the simulated Ascend context {story}; "
              "the master is stopped")
        print("\n--- Where the verify-mode start-up went, every process ---")
        timeline = run_initorch(["sglang", "timeline", str(TIMELINE)], environ)
        return 0 if verified == driven and ascend and timeline == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
