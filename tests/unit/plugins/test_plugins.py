"""Plugins: installed entry points, ``--plugin MODULE[:FUNCTION]`` and ``INITORCH_PLUGINS``,
allow and deny lists, provenance in listings, profile shadowing, and plugins that fail
in every way a plugin can (exit 2, one line naming it, nothing half-registered)."""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from initorch import Registry
from initorch.entry_points import installed_entry_points
from initorch.errors import EXIT_INVALID_INPUT, PluginError, StepDefinitionError
from initorch.plugin import setting
from initorch.plugins import ENTRY_POINT_GROUP, PluginSelection
from tests.support.profiles import BUILTIN_PROFILES, assert_single_error_line, run_initorch_in
from tests.support.synthetic import define

_unique = itertools.count()

LAUNCHER_STEPS = """\
from initorch.plugin import StepContext, step


@step("load_model", description="Load the model weights", requires=["set_device"],
      wanted_by=["init_torch_distributed"])
def load_model(ctx: StepContext) -> dict:
    return {"weights": 42}


def register(registry):
    registry.steps.add(load_model)


def register_nothing(registry):
    pass
"""


def module_name(stem: str) -> str:
    """A module name no other test has imported (plugins stay in sys.modules)."""
    return f"{stem}_{next(_unique)}"


def write_module(site: Path, name: str, code: str) -> None:
    path = site.joinpath(*name.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for folder in path.relative_to(site).parents:
        if folder != Path("."):
            (site / folder / "__init__.py").touch()
    path.write_text(textwrap.dedent(code), encoding="utf-8")


def install_entry_point(site: Path, plugin: str, code: str) -> str:
    """An installed distribution whose ``initorch.plugins`` entry point is ``plugin``."""
    module = module_name(f"{plugin}_plugin")
    write_module(site, module, code)
    dist = site / f"{module}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n",
                                   encoding="utf-8")
    (dist / "entry_points.txt").write_text(
        f"[initorch.plugins]\n{plugin} = {module}:register\n", encoding="utf-8")
    return module


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder on sys.path, as site-packages is (entry points are read from it)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.delenv("INITORCH_PLUGINS", raising=False)
    monkeypatch.delenv("INITORCH_PLUGINS_ALLOW", raising=False)
    return folder


# --- --plugin MODULE[:FUNCTION] and INITORCH_PLUGINS -------------------------------------------

def test_the_cli_plans_a_launchers_own_steps_from_its_folder(tmp_path: Path):
    """The issue's command, run by the console script from the launcher's folder."""
    project = tmp_path / "project"
    write_module(project, "my_server.steps", LAUNCHER_STEPS)
    (project / "my-server.yaml").write_text("extends: cpu\nconfig:\n  hicache:\n"
                                            "    host_pool_mb: 16\n", encoding="utf-8")
    result = run_initorch_in(project, "plan", "--plugin", "my_server.steps", "-p",
                             "my-server.yaml", "--json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert "load_model" in plan["order"]
    [load_model] = [s for s in plan["steps"] if s["name"] == "load_model"]
    assert load_model["why"] == ["wanted by init_torch_distributed"]
    steps = run_initorch_in(project, "--plugin", "my_server.steps", "steps")
    assert re.search(r"^load_model\s+my_server\.steps\s+Load the model weights$", steps.stdout,
                     re.M), steps.stdout


def test_plugin_function_may_be_named(run_cli, site: Path):
    module = module_name("launcher")
    write_module(site, module, LAUNCHER_STEPS)
    code, out, err = run_cli("steps", "--json", "--plugin", f"{module}:register")
    assert (code, err) == (0, "")
    rows = {row["name"]: row for row in json.loads(out)}
    assert rows["load_model"]["plugin"] == f"{module}:register"
    assert rows["load_model"]["wanted_by"] == ["init_torch_distributed"]
    code, out, _ = run_cli("steps", "--json", "--plugin", f"{module}:register_nothing")
    assert "load_model" not in {row["name"] for row in json.loads(out)}


def test_plugins_come_from_the_environment_then_the_command_line(run_cli, site: Path,
                                                                  monkeypatch):
    first, second = module_name("first"), module_name("second")
    for module, step_name in ((first, "from_env"), (second, "from_option")):
        write_module(site, module, f"""\
            from initorch.plugin import step

            @step("{step_name}", description="a step of {module}")
            def action(ctx):
                return None

            def register(registry):
                registry.steps.add(action)
            """)
    monkeypatch.setenv("INITORCH_PLUGINS", f" {first} ,")
    code, out, err = run_cli("--plugin", second, "steps", "--json")
    assert (code, err) == (0, "")
    providers = {row["name"]: row["plugin"] for row in json.loads(out)}
    assert (providers["from_env"], providers["from_option"]) == (first, second)
    registry = Registry.with_plugins([second])
    assert registry.plugins == ["builtin", first, second]


def test_a_plugin_named_before_and_after_the_command_loads_once(run_cli, site: Path):
    module = module_name("twice")
    write_module(site, module, LAUNCHER_STEPS)
    code, _, err = run_cli("--plugin", module, "steps", "--plugin", module)
    assert (code, err) == (0, "")


@pytest.mark.parametrize("spec", ["my-server", "a..b", "mod:", "mod:not-a-name", "no:", "a b"])
def test_an_invalid_plugin_item_is_a_usage_error(run_cli, spec: str):
    code, _, err = run_cli("steps", "--plugin", spec)
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "invalid plugin" if spec != "no:" else "names no plugin",
                             located=False)


def test_a_module_without_the_function_is_named(run_cli, site: Path):
    module = module_name("empty")
    write_module(site, module, "x = 1\n")
    code, _, err = run_cli("plan", "-p", "cpu", "--plugin", module)
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, f"plugin '{module}': module '{module}' has no function "
                                  "'register'", located=False)


def test_a_missing_module_is_a_plugin_that_failed_to_load(run_cli):
    code, _, err = run_cli("validate", "--plugin", "no_such_module_here")
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "plugin 'no_such_module_here' failed to load: "
                                  "ModuleNotFoundError: No module named 'no_such_module_here'",
                             located=False)


# --- installed plugins: provenance, shadowing, allow and deny ---------------------------------

VENDOR_PACKAGE = """\
from importlib.resources import files

from initorch.plugin import step


@step("vendor_tune", description="Tune the vendor runtime", requires=["set_device"])
def vendor_tune(ctx):
    return None


def register(registry):
    registry.steps.add(vendor_tune)
    registry.profiles.add_directory(files(__name__).joinpath("profiles"), override=OVERRIDE)
"""


def vendor_plugin(site: Path, profiles: dict[str, str], *, override: bool = False) -> None:
    """An installed plugin 'vendor': a package with one step and a profiles/ folder."""
    module = install_entry_point(site, "vendor", "")
    (site / f"{module}.py").unlink()
    (site / module / "profiles").mkdir(parents=True)
    (site / module / "__init__.py").write_text(
        VENDOR_PACKAGE.replace("OVERRIDE", str(override)), encoding="utf-8")
    for name, text in profiles.items():
        (site / module / "profiles" / name).write_text(text, encoding="utf-8")


def test_listings_name_the_plugin_of_every_step_and_profile(run_cli, site: Path):
    vendor_plugin(site, {"vendor-npu.yaml": "description: NPU with vendor tuning\n"
                                            "extends: npu\nsteps:\n  vendor_tune: {}\n"})
    code, out, _ = run_cli("profiles")
    assert code == 0
    assert re.search(r"^vendor-npu\s+-\s+vendor\s+NPU with vendor tuning$", out, re.M)
    assert re.search(r"^npu\s+npu\s+builtin\s+Huawei Ascend", out, re.M)
    code, out, _ = run_cli("steps")
    assert re.search(r"^vendor_tune\s+vendor\s+Tune the vendor runtime$", out, re.M)
    assert re.search(r"^set_device\s+builtin\s+", out, re.M)
    code, out, _ = run_cli("plan", "-p", "vendor-npu", "--json")
    assert "vendor_tune" in json.loads(out)["order"]


def test_a_plugin_profile_shadowing_a_builtin_is_an_error(run_cli, site: Path):
    vendor_plugin(site, {"npu.yaml": "description: my npu\nextends: base\n"})
    code, _, err = run_cli("plan", "-p", "npu")
    assert code == EXIT_INVALID_INPUT
    assert_single_error_line(err, "profile 'npu' of plugin 'vendor' has the name of "
                                  "profile 'npu' of plugin 'builtin'", "override=True",
                             located=False)


def test_a_plugin_profile_may_replace_a_builtin_explicitly(run_cli, site: Path):
    vendor_plugin(site, {"npu.yaml": "description: my npu\nextends: base\ndevice:\n"
                                     "  type: npu\n  aliases: [ascend]\n"},
                  override=True)
    code, out, err = run_cli("profiles")
    assert (code, err) == (0, "")
    assert re.search(r"^npu\s+npu\s+vendor\s+my npu  \(replaces the profile of builtin\)$",
                     out, re.M)
    code, out, _ = run_cli("profiles", "--json")
    row = next(r for r in json.loads(out) if r["name"] == "npu")
    assert row["replaces"]["plugin"] == "builtin"
    assert row["replaces"]["path"].endswith("npu.yaml")


BROKEN_AT_IMPORT = "import vendor_toolkit_that_is_not_installed\n"


@pytest.fixture
def broken(site: Path) -> str:
    """An installed plugin whose import fails, as a half-installed vendor stack does."""
    install_entry_point(site, "broken", BROKEN_AT_IMPORT)
    return "broken"


@pytest.mark.parametrize("command", [["validate"], ["plan", "-p", "cpu"], ["steps"],
                                     ["profiles"], ["run", "-p", "cpu", "--executor",
                                                    "dry-run"]])
def test_a_broken_installed_plugin_exits_2_naming_it(run_cli, broken: str, command):
    code, out, err = run_cli(*command)
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert_single_error_line(
        err, "plugin 'broken' failed to load: ModuleNotFoundError: No module named "
             "'vendor_toolkit_that_is_not_installed'",
        "disable it: --plugin no:broken or INITORCH_PLUGINS=no:broken", located=False)


def test_a_broken_plugin_can_be_denied_on_the_command_line(run_cli, broken: str):
    code, out, err = run_cli("--plugin", "no:broken", "profiles")
    assert (code, err) == (0, "")
    assert [line.split()[0] for line in out.splitlines()] == list(BUILTIN_PROFILES)
    code, _, err = run_cli("validate", "--plugin", "no:broken")
    assert (code, err) == (0, "")


def test_a_broken_plugin_can_be_denied_or_left_off_the_allow_list(run_cli, broken: str,
                                                                   monkeypatch):
    monkeypatch.setenv("INITORCH_PLUGINS", "no:broken")
    assert run_cli("validate")[0] == 0
    monkeypatch.delenv("INITORCH_PLUGINS")
    monkeypatch.setenv("INITORCH_PLUGINS_ALLOW", "some_other_plugin")
    code, _, err = run_cli("validate")
    assert (code, err) == (0, "")  # builtin always loads unless denied by name
    assert Registry.with_plugins(allow=()).plugins == ["builtin"]
    assert Registry.with_plugins(deny=["broken", "builtin"]).plugins == []
    monkeypatch.setenv("INITORCH_PLUGINS_ALLOW", "broken")
    assert run_cli("validate")[0] == EXIT_INVALID_INPUT


def test_schema_help_and_version_work_with_a_broken_plugin(run_cli, broken: str, capsys):
    code, out, err = run_cli("schema")
    assert code == 0
    assert json.loads(out)["title"] == "initorch profile"
    assert err.startswith("initorch: warning: plugin 'broken' failed to load: ")
    assert err.rstrip().endswith("-- left out")
    for argv in (["--help"], ["--version"], ["plan", "--help"]):
        with pytest.raises(SystemExit) as caught:
            run_cli(*argv)
        assert caught.value.code == 0
    capsys.readouterr()


class VendorAbort(BaseException):
    """A custom BaseException, as some vendor runtimes raise on fatal errors."""


@pytest.mark.parametrize(("statement", "described"), [
    ("import sys; sys.exit(0)", "it called sys.exit(0)"),
    ("import sys; sys.exit('no device')", "it called sys.exit('no device')"),
    ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    ("raise BaseException('vendor abort')", "BaseException: vendor abort"),
])
def test_a_plugin_that_exits_or_interrupts_at_import_is_a_failed_plugin(
        run_cli, site: Path, statement: str, described: str):
    """Issue 10, case 15: 'validate' exited 0 in silence when a plugin called sys.exit(0)."""
    install_entry_point(site, "quitter", statement + "\n")
    code, out, err = run_cli("validate")
    assert (code, out) == (EXIT_INVALID_INPUT, "")
    assert_single_error_line(err, f"plugin 'quitter' failed to load: {described}",
                             located=False)


def test_a_plugin_that_exits_at_import_fails_the_console_script_too(tmp_path: Path):
    site = tmp_path / "site"
    site.mkdir()
    install_entry_point(site, "quitter", "import sys; sys.exit(0)\n")
    result = run_initorch_in(tmp_path, "validate", env={"PYTHONPATH": str(site)})
    assert result.returncode == EXIT_INVALID_INPUT
    assert_single_error_line(result.stderr, "plugin 'quitter' failed to load: it called "
                                            "sys.exit(0)", located=False)


# --- the library side: undo, naming, pass-through ----------------------------------------------

def test_a_plugin_failing_halfway_leaves_nothing_registered(tmp_path: Path):
    (tmp_path / "p.yaml").write_text("description: x\n", encoding="utf-8")
    registry = Registry()
    registry.load_plugin("good", lambda reg: reg.steps.add(define("kept")))

    def halfway(reg: Registry) -> None:
        reg.steps.add(define("half_registered"))
        reg.profiles.add_directory(tmp_path)
        reg.diagnoses.extend(Registry.with_plugins().diagnoses)
        raise KeyboardInterrupt

    with pytest.raises(PluginError) as caught:
        registry.load_plugin("halfway", halfway)
    assert caught.value.plugin == "halfway"
    assert isinstance(caught.value.__cause__, KeyboardInterrupt)
    assert [s.name for s in registry.steps] == ["kept"]
    assert registry.profiles.names() == []
    assert registry.diagnoses.match(RuntimeError("Numpy is not available")) is None
    assert registry.plugins == ["good"]
    assert registry.steps.plugin_of("kept") == "good"


def test_a_failing_plugin_takes_the_implementations_it_provided_with_it():
    table = setting("a.engine", str, default="slow", choices={"slow": str.lower},
                    description="an engine")
    registry = Registry()
    registry.steps.add(define("engine", settings=table))

    def halfway(reg: Registry) -> None:
        reg.settings.extend_choices("a.engine", {"turbo": str.upper})
        raise RuntimeError("boom")

    with pytest.raises(PluginError, match="boom"):
        registry.load_plugin("halfway", halfway)
    assert registry.settings.get("a.engine") == table
    assert registry.settings.implementations({"a.engine": "turbo"}) == {}


def test_declaration_errors_name_the_plugin_that_registered_first():
    registry = Registry()
    registry.load_plugin("first", lambda reg: reg.steps.add(define("same")))
    with pytest.raises(StepDefinitionError, match="registered twice: first by plugin 'first'"):
        registry.load_plugin("second", lambda reg: reg.steps.add(define("same")))
    assert registry.plugins == ["first"]


def test_on_error_leaves_a_broken_plugin_out(broken: str):
    reported: list[PluginError] = []
    registry = Registry.with_plugins(on_error=reported.append)
    assert registry.plugins == ["builtin"]
    assert [error.plugin for error in reported] == ["broken"]


def test_steps_added_in_code_have_no_plugin():
    registry = Registry()
    registry.steps.add(define("mine"))
    assert registry.steps.plugin_of("mine") is None


def test_selection_items_parse():
    selection = PluginSelection.parse(["a.b", "no:x", "a.b", "c:register"], "test")
    assert selection.modules == ("a.b", "c:register")
    assert selection.deny == {"x"}


def test_schema_also_leaves_out_a_plugin_whose_declarations_are_refused(run_cli, site: Path):
    vendor_plugin(site, {"npu.yaml": "description: my npu\n"})  # shadows the built-in npu
    code, out, err = run_cli("schema")
    assert code == 0 and json.loads(out)["title"] == "initorch profile"
    assert err.startswith("initorch: warning: plugin 'vendor' failed to register: ")
    assert "profile 'npu' of plugin 'vendor' has the name of profile 'npu'" in err


# --- discovery (tests/unit/plugins/test_entry_points.py holds the reading to importlib's) ---

def test_a_shadowed_distributions_plugin_is_not_installed(site: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    # Two distributions of one name: the first on sys.path counts, with its entry points or
    # without them (here without: the shadowed copy's plugin is not installed).
    shadowed = install_entry_point(site, "shadowed", "def register(registry):\n    pass\n")
    first = tmp_path / "first"
    (first / f"{shadowed}-2.0.dist-info").mkdir(parents=True)
    (first / f"{shadowed}-2.0.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {shadowed}\nVersion: 2.0\n", encoding="utf-8")
    install_entry_point(site, "plain", "def register(registry):\n    pass\n")
    monkeypatch.syspath_prepend(str(first))
    assert [(entry.name, entry.value) for entry in installed_entry_points(ENTRY_POINT_GROUP)] \
        == [(entry.name, entry.value) for entry in entry_points(group=ENTRY_POINT_GROUP)]
    plugins = Registry.with_plugins().plugins
    assert "plain" in plugins and "shadowed" not in plugins
