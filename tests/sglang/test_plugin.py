"""The SGLang plugin in SGLang's own loader: off by default, hooks checked (the release
gate is tests/sglang/test_version.py)."""

from __future__ import annotations

import json

from tests.sglang.server import run_in_sglang

LOAD = ("import json, sys\n"
        "from sglang.srt.plugins import load_plugins\n"
        "from sglang.srt.plugins.hook_registry import HookRegistry\n"
        "from sglang.srt.mem_cache.pool_host.common import ALLOC_MEMORY_FUNCS\n")


def test_a_server_that_did_not_ask_is_untouched() -> None:
    code = LOAD + ("load_plugins()\n"
                   "ours = [t for t, hooks in HookRegistry._hooks.items()\n"
                   "        if any(s and s.plugin_name == 'initorch' for _, _, s in hooks)]\n"
                   "print(json.dumps({'hooks': ours,\n"
                   "                  'cpu_allocator': 'cpu' in ALLOC_MEMORY_FUNCS,\n"
                   "                  'initorch': sorted(m for m in sys.modules\n"
                   "                                     if m.split('.')[0] == 'initorch')}))\n")
    result = run_in_sglang(code)
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    # Not one module of initorch's core: deciding "off" reads two variables (the plugin
    # module imported initorch whole before, 40-45 ms of every stock process's start).
    assert outcome == {"hooks": [], "cpu_allocator": False, "initorch": []}


RANK_LOAD = LOAD + (
    "import multiprocessing, os, pkgutil, types\n"
    "launcher = types.SimpleNamespace(pid=os.getppid())  # as in a rank: this test's\n"
    "multiprocessing.parent_process = lambda: launcher\n"
    "before = set(sys.modules)\n"
    "load_plugins()\n"
    "imported = sorted(name for name in set(sys.modules) - before\n"
    "                  if getattr(sys.modules[name], '__file__', None))  # ran code\n"
    "def hooked(target):\n"
    "    return getattr(pkgutil.resolve_name(target), '__initorch_hook__', False)\n"
    "store = 'sglang.srt.mem_cache.storage.mooncake_store.mooncake_store'\n"
    "pending = store not in sys.modules\n"
    "TARGETS = ('sglang.srt.managers.scheduler.Scheduler.__init__',\n"
    "    'sglang.srt.distributed.bootstrap.init_parallel_runtime',\n"
    "    'sglang.srt.utils.common.run_with_deadline',\n"
    "    'sglang.srt.distributed.parallel_state.init_distributed_environment',\n"
    "    'torch.cpu.set_device',\n"
    "    store + '.MooncakeStore.register_mem_pool_host')  # imported by SGLang now\n"
    "loaded = [hooked(t) for t in TARGETS]\n"
    "begun = None\n"
    "if os.environ.get('INITORCH_SGLANG') == 'drive':  # the session begins, as in\n"
    "    from initorch_sglang.calls import installed_layout  # Scheduler.__init__\n"
    "    from initorch_sglang.options import read_options\n"
    "    from initorch_sglang.plugin import session_hooks\n"
    "    from initorch_sglang.verify import begin\n"
    "    args = types.SimpleNamespace(tp_size=1, pp_size=1, nnodes=1, device='cpu',\n"
    "        enable_hierarchical_cache=False, disaggregation_mode='null')\n"
    "    begin(args, read_options(), 0, session_hooks(read_options(), installed_layout()))\n"
    "    begun = [hooked(t) for t in TARGETS]\n"
    "print(json.dumps({'imported': imported, 'loaded': loaded, 'begun': begun,\n"
    "                  'pending': pending}))\n")


def test_a_rank_hooks_every_call_when_its_session_begins_and_checks_that_they_took(
        ) -> None:
    outcomes = {}
    for mode in ("off", "drive"):
        result = run_in_sglang(RANK_LOAD, INITORCH_SGLANG=mode)
        assert result.returncode == 0, result.stderr
        outcomes[mode] = json.loads(result.stdout.strip().splitlines()[-1])
    # The plugin makes SGLang import no module it would not have imported anyway (its
    # own load_plugins imports the server arguments): a target whose module SGLang has
    # not imported yet is hooked right after SGLang imports it.
    assert set(outcomes["drive"]["imported"]) - set(outcomes["off"]["imported"]) <= {
        name for name in outcomes["drive"]["imported"] if name.startswith("initorch")}
    assert outcomes["drive"]["pending"] is True
    # At plugin load only the constructor that frames the start-up: SGLang makes the
    # other calls inside it, and a process without one (the detokenizer) walks nothing.
    assert outcomes["drive"]["loaded"] == [True, False, False, False, False, False]
    # When the session begins, every call of the layout, drive's replacement and
    # deadline helper, and set_device on the profile's module, in one pass.
    assert outcomes["drive"]["begun"] == [True, True, True, True, True, True]
    assert outcomes["off"]["loaded"] == [False] * 6 and outcomes["off"]["begun"] is None


def test_a_missing_hook_target_stops_start_up_naming_it() -> None:
    code = ("from initorch.kit import HookError, apply_hooks\n"
            "from initorch_sglang.engine import SGLANG\n"
            "try:\n"
            "    apply_hooks({'sglang.srt.distributed.bootstrap.init_parallel_runtime_v2':\n"
            "                 (lambda original, *a, **k: original(*a, **k), 'around')}, SGLANG)\n"
            "    import sglang.srt.distributed.bootstrap  # the hook applies on import\n"
            "except HookError as error:\n"
            "    print(error)\n")
    result = run_in_sglang(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == (
        "initorch-sglang: hook target sglang.srt.distributed.bootstrap."
        "init_parallel_runtime_v2 is missing: sglang.srt.distributed.bootstrap has no "
        "attribute 'init_parallel_runtime_v2' (SGLang 0.5.23)")


def test_a_hook_target_whose_module_is_gone_stops_at_plugin_load() -> None:
    code = ("from initorch.kit import HookError, apply_hooks\n"
            "from initorch_sglang.engine import SGLANG\n"
            "try:\n"
            "    apply_hooks({'sglang.srt.no_such_package.no_module.function':\n"
            "                 (lambda original, *a, **k: original(*a, **k), 'around')}, SGLANG)\n"
            "except HookError as error:\n"
            "    print(error)\n")
    result = run_in_sglang(code)
    assert result.returncode == 0, result.stderr
    assert "hook target sglang.srt.no_such_package.no_module.function is missing" in \
        result.stdout.strip().splitlines()[-1]


def test_the_launcher_refuses_a_bad_setting_before_any_rank_is_spawned() -> None:
    result = run_in_sglang("from initorch_sglang.plugin import load\nload()\n",
                           INITORCH_SGLANG="verify",
                           INITORCH_SGLANG_SET="hicache.host_pool_mb=lots")
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if "initorch-sglang" in line]
    assert len(lines) == 1 and "INITORCH_SGLANG_SET" in lines[0] and "lots" in lines[0]
