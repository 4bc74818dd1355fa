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

Each command is printed before it runs, so it can be copied.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
SUMMARISED = ("mooncake_master_ready", "transfer_verified", "mooncake_master_stopped",
              "run_finished")


def show(command: list[str], *, quiet_logs: bool = False, expect: int = 0
         ) -> subprocess.CompletedProcess[str]:
    """Print ``command`` like a shell prompt, run it, stop the demo on a surprise."""
    shown = [Path(part).name if part.startswith(str(BIN)) else part for part in command]
    print(f"\n$ {shlex.join(shown)}", flush=True)
    captured = subprocess.PIPE if quiet_logs or expect else None
    result = subprocess.run(command, text=True, check=False, stdout=captured, stderr=captured)
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


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def listening(port: int) -> bool:
    needle = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as handle:
            if any(f[1].endswith(needle) and f[3] == "0A" for f in map(str.split, handle)):
                return True
    return False


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


if __name__ == "__main__":
    os.environ.pop("MC_FORCE_TCP", None)  # let the profile's env: section say it
    main()
