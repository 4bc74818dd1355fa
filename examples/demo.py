"""``make demo``: a real start-up on this machine's CPU, then dry runs for hardware
we do not have here.

1. ``initorch run --profile cpu``: torch, a gloo process group, a Mooncake
   transfer engine forced to TCP, a managed ``mooncake_master`` on loopback, the
   Mooncake Store set up, the host KV pool registered with it and KV pages put
   and read back through it, byte-checked — then torn down.
2. The same with two ranks under ``torchrun``: one master for both, each rank
   reads the other's pages; afterwards no master process and no master port is
   left.
3. ``initorch plan`` / ``explain`` for Ascend NPU: the order and its reasons,
   the legacy-build overlay's environment, and the ``mooncake-ep`` overlay refused
   on a device without a Mooncake process-group backend — computed without
   importing torch.
4. ``examples/tiny_server``: a real tensor-parallel server started by initorch
   on 2 ranks under torchrun; its NPU plan, one request, the start-up's critical
   chain, a clean shutdown (no process or port left).

Each command is printed before it runs, so it can be copied.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
EXAMPLES = Path(__file__).resolve().parent
sys.path.insert(0, str(EXAMPLES))

from tiny_server.client import alive, get, leftovers, listening, post, wait_ready  # noqa: E402

SUMMARISED = ("mooncake_master_ready", "transfer_verified", "mooncake_master_stopped",
              "run_finished")


def show(command: list[str], *, quiet_logs: bool = False, expect: int = 0,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Print ``command`` like a shell prompt, run it, stop the demo on a surprise."""
    shown = [Path(part).name if part.startswith(str(BIN)) else part for part in command]
    print(f"\n$ {shlex.join(shown)}", flush=True)
    captured = subprocess.PIPE if quiet_logs or expect else None
    result = subprocess.run(command, text=True, check=False, stdout=captured, stderr=captured,
                            env=env)
    if expect:
        print(result.stderr.strip())
    if result.returncode != expect:
        if captured:
            sys.stderr.write(result.stdout + result.stderr)
        sys.exit(f"demo step exited {result.returncode}, expected {expect}")
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> None:
    initorch = str(BIN / "initorch")
    print("== 1. real start-up on this CPU (one process): engine, master, store, pages ==")
    show([initorch, "run", "--profile", "cpu", "--set", "checks.verify_transfer=true"])

    print("\n== 2. two ranks under torchrun (JSON logs, summarised) ==")
    result = show([str(BIN / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}",
                   "--no-python", initorch, "run", "--profile", "cpu",
                   "--set", "checks.verify_transfer=true", "--log-format", "json"],
                  quiet_logs=True)
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    for event in events:
        if event["event"] in SUMMARISED:
            fields = {k: v for k, v in event.items()
                      if k not in ("event", "level", "timestamp", "profile", "step")}
            print(f"  {event['event']:<24} {fields}")
    [started] = [e for e in events if e["event"] == "mooncake_master_starting"]
    ports = [started[f"{name}_port"] for name in ("rpc", "metadata", "metrics")]
    left = [p for p in ports if listening(p)]
    print(f"  after the run: master pid {started['pid']} "
          f"{'STILL RUNNING' if alive(started['pid']) else 'gone'}, "
          f"ports {ports} {'still listening: ' + str(left) if left else 'closed'}")
    if alive(started["pid"]) or left:
        sys.exit("the managed master outlived the run")

    print("\n== 3. dry runs for Ascend NPU (no torch imported) ==")
    show([initorch, "plan", "--profile", "npu", "--profile", "npu-hccl"])
    show([initorch, "explain", "init_shared_mooncake_transfer_engine",
          "init_torch_distributed", "--profile", "npu"])
    show([initorch, "explain", "set_device", "init_shared_mooncake_transfer_engine",
          "--profile", "npu"])
    show([initorch, "plan", "--profile", "npu", "--profile", "mooncake-ep"], expect=2)

    print("\n== 4. a tiny tensor-parallel server, started by initorch (2 ranks) ==")
    tiny_server()


def tiny_server() -> None:
    """Start examples/tiny_server under torchrun, ask it once, print its start-up's
    critical chain, stop it and check that nothing is left behind."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory(prefix="tiny-server-") as folder:
        weights, ready, log = (Path(folder) / name
                               for name in ("model.safetensors", "ready.json", "ranks.log"))
        print("\nthe same server's start-up, planned for Ascend NPU (no torch imported):")
        show([str(BIN / "initorch"), "--plugin", "tiny_server.steps", "plan", "--device", "npu",
              "--profile", "tiny-server"],
             env={**env, "LOCAL_WORLD_SIZE": "2", "WORLD_SIZE": "2"})
        show([sys.executable, "-m", "tiny_server.weights", str(weights)], env=env)
        command = [str(BIN / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}",
                   "-m", "tiny_server.launch", "--set", f"model.path={weights}",
                   "--ready-file", str(ready), "--log-format", "json"]
        print(f"\n$ {shlex.join(Path(c).name if c.startswith(str(BIN)) else c for c in command)}"
              "   # logs to a file", flush=True)
        with open(log, "w", encoding="utf-8") as sink:
            proc = subprocess.Popen(command, env=env, text=True, stdout=sink, stderr=sink)
            try:
                info = wait_ready(proc, ready)
                url = info["url"]
                print(f"  ready: {url} (rank pids {[r['pid'] for r in info['ranks']]})")
                request = {"prompt": "hello", "max_new_tokens": 8}
                print(f"\n$ curl -s -X POST {url}/generate -d '{json.dumps(request)}'")
                _, answer = post(f"{url}/generate", request)
                print("  " + json.dumps({k: answer[k] for k in
                                         ("tokens", "ranks", "ranks_agree", "tokens_by_rank")}))
                startup = get(f"{url}/startup")
                summary = startup["summary"]
                print("\nstart-up (rank 0):\n" + summary[:summary.index("\nblame:")])
                print(f"\n$ curl -s -X POST {url}/shutdown")
                print("  " + json.dumps(post(f"{url}/shutdown", {})[1]))
                code = proc.wait(timeout=60)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        if code != 0:
            sys.stderr.write(log.read_text(encoding="utf-8")[-6000:])
            sys.exit(f"the tiny server exited with code {code}")
        left = leftovers(info)
        if left:
            sys.exit("left behind: " + "; ".join(left))
        print("  torchrun exited 0; no rank process, HTTP port, Mooncake port or master left")


if __name__ == "__main__":
    os.environ.pop("MC_FORCE_TCP", None)  # let the profile's env: section say it
    main()
