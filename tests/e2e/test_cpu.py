"""The real start-up on this machine's CPU: gloo, Mooncake over TCP loopback, a
managed Mooncake master, the store set up, the host pool registered with it and KV
pages verified through it; then nothing left behind (no master, no listening port)."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.support.commands import initorch_command, run_python

ALL_STEPS = ("launch_mooncake_master", "import_backend", "rendezvous", "set_device",
             "alloc_host_mem_pool", "init_shared_mooncake_transfer_engine",
             "init_torch_distributed", "mooncake_master", "init_mooncake_store",
             "register_mem_pool_host", "verify_transfer")
TORN_DOWN = ["register_mem_pool_host", "init_mooncake_store", "mooncake_master",
             "init_torch_distributed", "init_shared_mooncake_transfer_engine",
             "alloc_host_mem_pool", "rendezvous", "launch_mooncake_master"]

LEAK_CHECK = """
import json, os, threading
from initorch import Registry, load_plan
from initorch.execution.run import Run

def listening_sockets():
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as handle:
            next(handle)
            for line in handle:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A = LISTEN
                    found.append(fields[1])
    return found

def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead too
        return stat.read().split(")")[-1].split()[0] != "Z"

def master_ports(endpoint):
    return [endpoint.managed.ports[name] for name in ("rpc", "metadata", "metrics")]

def port_listens(port):
    needle = ":%04X" % port
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as handle:
            if any(l.split()[1].endswith(needle) and l.split()[3] == "0A" for l in handle):
                return True
    return False

registry = Registry.with_plugins()
plan = load_plan(["cpu"], settings={"checks.verify_transfer": True}, registry=registry)
run = Run(plan, executor="__EXECUTOR__", diagnoses=registry.diagnoses)
report = run.start()
during = listening_sockets()
endpoint = run.output("mooncake_master")
pid, ports = endpoint.managed.pid, master_ports(endpoint)
master_up = [alive(pid), [port_listens(p) for p in ports]]
run.teardown()
print(json.dumps({
    "ok": report.ok,
    "statuses": {n: o.status for n, o in report.outcomes.items()},
    "teardown": [t.step for t in report.teardown],
    "listening_during": len(during),
    "listening_after": listening_sockets(),
    "master_during": master_up,
    "master_after": [alive(pid), [port_listens(p) for p in ports]],
    "mc_force_tcp_after": os.environ.get("MC_FORCE_TCP"),
    "non_daemon_threads": [t.name for t in threading.enumerate() if not t.daemon],
}))
"""


@pytest.mark.parametrize("executor", ["sequential", "parallel"])
def test_real_cpu_run_tears_everything_down(executor: str) -> None:
    result = run_python(LEAK_CHECK.replace("__EXECUTOR__", executor))
    assert result.returncode == 0, result.stderr[-3000:]
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["ok"]
    assert set(facts["statuses"].values()) == {"succeeded"}
    assert facts["listening_during"] >= 1  # the engine and the gloo store really listened
    assert facts["listening_after"] == []
    assert facts["master_during"] == [True, [True, True, True]]
    assert facts["master_after"] == [False, [False, False, False]]  # no process, no port
    assert facts["mc_force_tcp_after"] is None  # the profile's env: is undone
    assert facts["non_daemon_threads"] == ["MainThread"]
    # Reverse completion order: whatever the executor overlapped, a registration is
    # undone before the store, the store before the master, all before the pool.
    order = facts["teardown"]
    assert sorted(order) == sorted(TORN_DOWN)
    for first, then in itertools.pairwise(TORN_DOWN[:5]):  # a chain of hard edges
        assert order.index(first) < order.index(then)
    assert order.index("register_mem_pool_host") < order.index("alloc_host_mem_pool")
    # the job's store outlives the process group formed over it
    assert order.index("init_torch_distributed") < order.index("rendezvous")


def test_cli_run_cpu_with_report(tmp_path) -> None:
    report_path, trace_path = tmp_path / "run.json", tmp_path / "trace.json"
    result = initorch_command("run", "--profile", "cpu", "--set", "checks.verify_transfer=true",
                              "--report", str(report_path), "--trace", str(trace_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "run: ok" in result.stdout
    report = json.loads(report_path.read_text())
    statuses = {s["step"]: s["status"] for s in report["steps"]}
    assert statuses == dict.fromkeys(ALL_STEPS, "succeeded")
    assert report["critical_chain"][0] == "verify_transfer"
    assert [t["status"] for t in report["teardown"]] == ["succeeded"] * len(TORN_DOWN)
    assert report["environment"] == [{"name": "MC_FORCE_TCP", "value": "1",
                                      "source": "profile", "profile_value": "1"}]
    trace = json.loads(trace_path.read_text())
    assert {e["name"] for e in trace["traceEvents"] if e.get("cat") == "initorch.step"} == set(
        statuses)


def test_cli_run_without_mooncake_skips_its_steps() -> None:
    result = initorch_command("run", "--profile", "cpu", "--set", "mooncake.enabled=false",
                              "--log-format", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    skipped = {e["step"] for e in events if e["event"] == "step_skipped"}
    assert skipped == {"launch_mooncake_master", "init_shared_mooncake_transfer_engine",
                       "mooncake_master",
                       "init_mooncake_store", "register_mem_pool_host", "verify_transfer"}


def test_json_logs_are_json_only_with_mooncake_native_lines_as_events() -> None:
    # Mooncake logs through glog on fd 2; in JSON mode each of its lines is an event.
    result = initorch_command("run", "--profile", "cpu", "--set", "checks.verify_transfer=true",
                              "--log-format", "json")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout == ""
    events = [json.loads(line) for line in result.stderr.splitlines()]  # every line is JSON
    native = [e for e in events if e["event"] == "native_output"]
    glog = [e for e in native if "source" in e]
    assert glog, "Mooncake's glog lines were expected as native_output events"
    assert all(e["source"].split(":")[0].endswith((".cpp", ".h", ".cc")) for e in glog)
    assert all(isinstance(e["native_thread"], int) for e in glog)
    # The cpu profile forces TCP, so Mooncake says so (I) and warns about its allocator (W).
    forced = [e for e in glog if "MC_FORCE_TCP is set" in e["text"]]
    assert forced and forced[0]["level"] == "info"  # glog's I
    malloc = [e for e in glog if "Using default malloc/free for protocol: tcp" in e["text"]]
    assert malloc and malloc[0]["level"] == "warning"  # glog's W
    assert all((e["profile"], e["rank"]) == ("base+cpu", 0) for e in native)
    # Mooncake's ERROR line on every successful init (one per engine) is said to be expected
    noise = [e for e in glog if e["text"] == "Local segment descriptor not found"]
    assert noise and {e["level"] for e in noise} == {"error"}
    expected = [e for e in events if e["event"] == "mooncake_error_line_expected"]
    assert len(expected) == len(noise)
    assert {e["component"] for e in expected} == {"transfer engine", "store client"}
    assert events[-1]["event"] == "run_summary" and events[-1]["ok"] is True
