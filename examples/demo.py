"""``make demo``: a real start-up on this machine's CPU, then dry runs for hardware
we do not have here.

1. ``initorch run --profile cpu``: torch, a gloo process group, a Mooncake
   transfer engine over TCP on loopback, a host KV pool allocated and
   registered, real bytes moved through it and checked — then torn down.
2. The same with two ranks under ``torchrun``.
3. ``initorch plan --profile npu`` (and with the ``mooncake-ep`` overlay): the
   order an Ascend server would use, computed without importing torch.

Each command is printed before it runs, so it can be copied.
"""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent


def show(command: list[str], *, quiet_logs: bool = False) -> subprocess.CompletedProcess[str]:
    """Print ``command`` like a shell prompt, run it, stop the demo if it fails."""
    shown = [Path(part).name if part.startswith(str(BIN)) else part for part in command]
    print(f"\n$ {shlex.join(shown)}", flush=True)
    captured = subprocess.PIPE if quiet_logs else None
    result = subprocess.run(command, text=True, check=False, stdout=captured,
                            stderr=captured)
    if result.returncode != 0:
        if quiet_logs:
            sys.stderr.write(result.stdout + result.stderr)
        sys.exit(f"demo step failed with exit code {result.returncode}")
    return result


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def main() -> None:
    initorch = str(BIN / "initorch")
    print("== 1. real start-up on this CPU (one process) ==")
    show([initorch, "run", "--profile", "cpu", "--set", "checks.verify_transfer=true"])

    print("\n== 2. two ranks under torchrun (JSON logs, summarised) ==")
    result = show([str(BIN / "torchrun"), "--nproc-per-node=2", f"--master-port={free_port()}",
                   "--no-python", initorch, "run", "--profile", "cpu",
                   "--set", "checks.verify_transfer=true", "--log-format", "json"],
                  quiet_logs=True)
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    for event in events:
        if event["event"] in ("transfer_verified", "run_finished"):
            fields = {k: v for k, v in event.items()
                      if k not in ("event", "level", "timestamp", "profile")}
            print(f"  {event['event']:<18} {fields}")

    print("\n== 3. dry runs for Ascend NPU (no torch imported) ==")
    show([initorch, "plan", "--profile", "npu"])
    show([initorch, "plan", "--profile", "npu", "--profile", "mooncake-ep"])
    show([initorch, "explain", "set_device", "init_shared_mooncake_transfer_engine",
          "--profile", "npu"])


if __name__ == "__main__":
    main()
