"""The dry run never imports torch, torch_npu, torch_musa or mooncake.

Two guards, like click's import test: the CLI runs with those names made
unimportable (packages of the same name, first on PYTHONPATH, whose import
raises), and a fresh interpreter that loads a plan has none of them in
``sys.modules``.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.support.commands import initorch_command, run_python
from tests.support.profiles import VENDOR_MODULES, make_blockers


@pytest.fixture(scope="module")
def blocked_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    blockers = make_blockers(tmp_path_factory.mktemp("blocked"))
    path = os.pathsep.join(filter(None, [str(blockers), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path}


def test_blockers_really_block(blocked_env):
    result = run_python("import torch", env=blocked_env)
    assert result.returncode != 0
    assert "torch is blocked" in result.stderr


def test_plan_runs_without_the_vendor_stack(blocked_env):
    result = initorch_command("plan", "--profile", "npu", env=blocked_env)
    assert result.returncode == 0, result.stderr
    assert "init_shared_mooncake_transfer_engine" in result.stdout
    assert result.stderr == ""


def test_plan_json_runs_without_the_vendor_stack(blocked_env):
    result = initorch_command("plan", "--profile", "npu", "--profile", "npu-hccl", "--json",
                              env=blocked_env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["device"] == "npu"
    assert "init_torch_distributed" in data["order"]
    assert data["env"] == {"ENABLE_ASCEND_TRANSFER_WITH_MOONCAKE": "1",
                           "MOONCAKE_PROTOCOL": "ascend"}


def test_every_dry_command_runs_without_the_vendor_stack(blocked_env):
    code = """
        import sys
        from initorch.cli import main
        commands = [
            ["plan", "-d", "musa:0"],
            ["plan", "-d", "npu", "-p", "server", "--set", "parallel.tp_size=2"],
            ["graph", "-p", "npu", "--format", "mermaid"],
            ["explain", "-p", "npu", "set_device", "init_shared_mooncake_transfer_engine"],
            ["validate"],
            ["profiles"],
            ["steps", "--json"],
            ["schema"],
            ["settings", "-p", "npu", "--json"],
        ]
        codes = [main(argv) for argv in commands]
        vendor = sorted(m for m in sys.modules if m.split(".")[0] in VENDOR)
        print("RESULT", codes, vendor)
        """.replace("VENDOR", repr(set(VENDOR_MODULES)))
    result = run_python(code, env=blocked_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "RESULT [0, 0, 0, 0, 0, 0, 0, 0, 0] []"


def test_loading_a_plan_imports_no_vendor_module():
    # Without blockers: torch and mooncake are installed here, so this is the real check
    # that nothing imports them (not merely that the import would fail).
    code = f"""
        import sys
        import initorch, steps
        from initorch import load_plan
        for profiles in (["npu"], ["npu", "npu-hccl"], ["cuda", "mooncake-ep"], ["musa"],
                         ["cpu"], ["cuda", "server"]):
            load_plan(profiles)
        load_plan(device="musa:0")
        vendor = sorted(m for m in sys.modules if m.split(".")[0] in {set(VENDOR_MODULES)!r})
        print(vendor)
        """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_a_dry_run_loads_neither_the_executors_nor_structlog():
    # The run-time half of the package (the executors, the ranks' agreement, logging) is
    # imported on first use; a plan needs none of it (its JSON is written by
    # initorch.resolution.saved, which imports nothing the resolver did not).  Only the
    # signal guard that every command holds while its plugins load comes along
    # (initorch.execution.signals, under a millisecond).
    code = """
        import sys
        from initorch.cli import main
        main(["plan", "--profile", "npu", "--json"])
        loaded = sorted(m for m in sys.modules
                        if m.split(".")[0] == "structlog"
                        or m in ("initorch.execution.run", "initorch.execution.executors",
                                 "initorch.execution.peers", "initorch.execution.agreement",
                                 "initorch.execution.watchdog",
                                 "initorch.reporting.logs",
                                 "initorch.reporting.render", "initorch.reporting.report"))
        print(loaded, file=sys.stderr)
        """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "[]"


def test_resolving_an_acyclic_plan_never_imports_networkx():
    # networkx only enumerates cycles; a plan without one is ordered by plain dicts.
    code = """
        import sys
        from initorch.cli import main
        for argv in (["plan", "-p", "npu", "--json"], ["graph", "-p", "cpu"],
                     ["explain", "-p", "npu", "set_device", "init_torch_distributed"],
                     ["validate"]):
            assert main(argv) == 0, argv
        print(sorted(m for m in sys.modules if m.split(".")[0] == "networkx"), file=sys.stderr)
        """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "[]"


def test_run_time_names_are_still_public():
    import initorch
    import initorch.plugin
    from initorch.execution.executors import Executor
    from initorch.execution.run import Run

    assert initorch.Run is Run
    assert initorch.plugin.Executor is Executor
    assert {"Run", "RunReport", "StepOutcome", "RunInterrupted"} <= set(initorch.__all__)
    assert {"Executor", "RunDriver", "JobStore", "PeerBounds"} <= set(initorch.plugin.__all__)
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        initorch.Nope  # noqa: B018
