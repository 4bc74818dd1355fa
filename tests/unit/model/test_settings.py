"""initorch.model.settings: declarations, value checks, the catalog, and what steps read."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch import Plan, Registry, Run
from initorch.errors import InitorchError, StepDefinitionError
from initorch.loading.compose import compose
from initorch.model.canonical import spec_json
from initorch.model.settings import CORE_KEYS, MAX_INT, show_value
from initorch.plugin import SettingCatalog, SettingSpec, StepCatalog, setting
from initorch.resolution.resolve import resolve
from tests.support.runs import DIAGNOSES
from tests.support.synthetic import define, synthetic_plan

REPO = Path(__file__).resolve().parents[3]

FLAG = setting("a.flag", bool, default=False, description="a switch")
COUNT = setting("a.count", int, default=1, minimum=0, maximum=10, description="a count")
RATIO = setting("a.ratio", float, default=0.5, exclusive_minimum=0, maximum=1,
                description="a ratio")
MODE = setting("a.mode", str, default="fast", choices=("fast", "safe"), description="a mode")
NAMES = setting("a.names", list[str], default=["x"], pattern="[a-z]+", description="names")
MAYBE = setting("a.maybe", str, nullable=True, description="text or null")
NEEDED = setting("device.thing", str, required=True, description="a device fact")


# --- the factory -----------------------------------------------------------------------------

def test_the_factory_records_the_declaration_and_where_it_was_made():
    assert (COUNT.key, COUNT.kind, COUNT.default, COUNT.minimum) == ("a.count", "int", 1, 0)
    assert COUNT.defined_at.path.endswith("test_settings.py")
    assert NAMES.kind == "list[str]" and NAMES.default == ("x",)  # frozen: a tuple
    assert NAMES.default_value == ["x"]  # what a plan holds: a fresh list
    assert setting("k", "float", default=1, description="d").kind == "float"
    assert MAYBE.default is None and NEEDED.required


@pytest.mark.parametrize("kind", [dict, list, "text", list[int], None])
def test_unsupported_kinds_are_refused_where_declared(kind):
    with pytest.raises(StepDefinitionError) as caught:
        setting("k", kind, default=1, description="d")
    assert "kind" in str(caught.value) and "bool, int, float, str or list[str]" in str(caught.value)
    assert caught.value.location is not None
    assert caught.value.location.path.endswith("test_settings.py")


# --- checking values ---------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "value", "fragments"), [
    (FLAG, "false", ("a.flag must be true or false, got the text 'false'",
                     "write false without quotes")),
    (FLAG, "True", ("write true without quotes",)),
    (FLAG, 1, ("a.flag must be true or false, got the number 1",)),
    (FLAG, None, ("a.flag must not be null", "omit it to use the default false")),
    (COUNT, "3", ("a.count must be a whole number, got the text '3'",
                  "write the number without quotes")),
    (COUNT, "1e3", ("exponent but no decimal point",)),
    (RATIO, "1e999", ("a.ratio must be a finite number, got the text '1e999'",)),
    (COUNT, True, ("a.count must be a whole number, got the boolean true",)),
    (COUNT, 1.5, ("a.count must be a whole number, got the number 1.5",)),
    (COUNT, 11, ("a.count must be <= 10, got 11",)),
    (COUNT, -1, ("a.count must be >= 0, got -1",)),
    pytest.param(COUNT, 10**5000, ("a.count is too large: about 5001 digits",), id="huge"),
    (COUNT, float("nan"), ("a.count must be a finite number, got .nan",)),
    (RATIO, 0, ("a.ratio must be > 0, got 0.0",)),
    (RATIO, float("inf"), ("a.ratio must be a finite number, got .inf",)),
    (RATIO, -float("inf"), ("got -.inf",)),
    (RATIO, float("nan"), ("got .nan",)),
    (RATIO, 1e308 * 10, ("must be a finite number",)),
    (MODE, "quick", ("a.mode must be one of fast, safe, got 'quick'",)),
    (MODE, "saf", ("did you mean 'safe'?",)),
    (MODE, 3, ("a.mode must be text, got the number 3", "quote it to pass text")),
    (MODE, ["fast"], ("a.mode must be text, got the list ['fast']",)),
    (MAYBE, "a\nb", ("a.maybe value 'a\\nb' contains the control character U+000A",)),
    (MAYBE, "\x1b[31mok", ("control character U+001B",)),
    (MAYBE, "\u202eevil", ("control character U+202E",)),
    (MAYBE, "x" * 5000, ("is 5000 characters long (at most 4096)",)),
    (NAMES, "x", ("a.names must be a list of text, got the text 'x'",)),
    (NAMES, ["ok", 3], ("a.names must be a list of text",)),
    (NAMES, ["ok", "NO"], ("a.names item 2: must match [a-z]+, got 'NO'",)),
    (NEEDED, None, ("device.thing must not be null (give it a value)",)),
])
def test_invalid_values_are_explained_in_one_sentence_naming_the_key(spec, value, fragments):
    problem = spec.check(value)
    assert problem is not None
    assert "\n" not in problem
    for fragment in fragments:
        assert fragment in problem, problem


@pytest.mark.parametrize(("spec", "value", "normal"), [
    (FLAG, True, True),
    (COUNT, 3, 3),
    (COUNT, 3.0, 3),  # JSON cannot tell 3.0 from 3
    (RATIO, 1, 1.0),
    (MODE, "safe", "safe"),
    (MAYBE, None, None),
    (MAYBE, "", ""),
    (NAMES, ("a", "b"), ["a", "b"]),
])
def test_valid_values_are_normalised(spec, value, normal):
    assert spec.check(value) is None
    result = spec.normalise(value)
    assert result == normal and type(result) is type(normal)


@given(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
                 st.lists(st.text(max_size=5), max_size=4)))
def test_every_value_is_either_refused_or_valid_json(value):
    # A value that passes is what `plan --json` prints: it must be strict JSON.
    for spec in (FLAG, COUNT, RATIO, MODE, NAMES, MAYBE, NEEDED):
        problem = spec.check(value)
        if problem is None:
            json.dumps(spec.normalise(value), allow_nan=False)
        else:
            assert problem.startswith(spec.key)


@pytest.mark.parametrize(("value", "shown"), [
    (True, "true"), (None, "null"), (float("nan"), ".nan"), (-math.inf, "-.inf"), ("a", "'a'"),
    ([1, "b"], "[1, 'b']"),
])
def test_values_are_shown_as_yaml_writes_them(value, shown):
    assert show_value(value) == shown


def test_kinds_are_described_for_people():
    assert COUNT.describe_kind() == "a whole number >= 0 and <= 10"
    assert RATIO.describe_kind() == "a number > 0 and <= 1"
    assert MODE.describe_kind() == "text, one of: fast, safe"
    assert MAYBE.describe_kind() == "text or null"


# --- the catalog -------------------------------------------------------------------------------

def test_a_catalog_starts_with_the_core_device_fields():
    catalog = SettingCatalog()
    assert {spec.key for spec in catalog} == CORE_KEYS == {"device.type", "device.aliases"}
    assert catalog.declarations("device.type")[0].by == "initorch core"


def test_registering_a_step_declares_its_settings():
    registry = Registry()
    registry.steps.add(define("a", settings=(FLAG, COUNT)))
    registry.steps.add(define("b", settings=FLAG))  # a single spec is one setting
    assert registry.settings.get("a.count") == COUNT
    assert [d.by for d in registry.settings.declarations("a.flag")] == ["step a", "step b"]
    assert registry.steps.get("b").settings == (FLAG,)


def test_a_free_standing_setting_for_conditions():
    registry = Registry()
    registry.settings.add(setting("cluster.fast_path", bool, default=False,
                                  description="read by conditions only"), by="plugin acme")
    registry.steps.add(define("a", when="cluster.fast_path"))
    [declaration] = registry.settings.declarations("cluster.fast_path")
    assert declaration.by == "plugin acme"
    assert declaration.where.path.endswith("test_settings.py")


def test_the_same_key_declared_differently_names_both_places():
    registry = StepCatalog()
    registry.add(define("first", settings=COUNT))
    other = setting("a.count", int, default=2, description="a count")
    with pytest.raises(StepDefinitionError) as caught:
        registry.add(define("second", settings=other))
    text = str(caught.value)
    assert "setting 'a.count' is declared differently by step second" in text
    assert "and by step first at" in text
    assert text.count("test_settings.py") >= 2
    assert "second" not in registry  # nothing registered


@pytest.mark.parametrize(("spec", "fragment"), [
    (setting("Bad.Key", bool, default=True, description="d"), "is not a valid name"),
    (setting("a.k\u0435y", bool, default=True, description="d"),
     "non-ASCII character '\u0435' (U+0435 CYRILLIC SMALL LETTER IE"),
    (setting("a.k", bool, default=True, description=""), "needs a one-line description"),
    (setting("a.k", bool, default=True, description="two\nlines"), "one-line description"),
    (setting("a.k", int, description="d"), "has no default"),
    (setting("a.k", int, default="1", description="d"), "has an invalid default"),
    (setting("a.k", int, default=5, maximum=3, description="d"), "must be <= 3, got 5"),
    (setting("a.k", str, default="x", choices=("y",), description="d"), "invalid default"),
    (setting("a.k", str, default="x", minimum=1, description="d"), "has bounds but is not a"),
    (setting("a.k", int, default=1, pattern="x", description="d"), "has a pattern but is not"),
    (setting("a.k", str, default="x", pattern="(", description="d"), "invalid pattern"),
    (setting("a.k", bool, default=True, choices=(True,), description="d"), "has choices"),
    (setting("a.k", str, default="x", choices=("x", 3), description="d"), "choice 3"),
    (setting("a.k", str, default="x", required=True, description="d"), "is required"),
    (setting("a.k", str, required=True, nullable=True, description="d"), "is required"),
])
def test_invalid_declarations_are_refused_where_made(spec, fragment):
    with pytest.raises(StepDefinitionError) as caught:
        StepCatalog().add(define("a", settings=spec))
    assert fragment in str(caught.value)
    assert caught.value.location is not None
    assert caught.value.location.path.endswith("test_settings.py")


def test_a_key_is_a_value_or_a_section_not_both():
    registry = StepCatalog()
    registry.add(define("a", settings=FLAG))
    with pytest.raises(StepDefinitionError) as caught:
        registry.add(define("b", settings=setting("a.flag.extra", int, default=1,
                                                  description="d")))
    assert "setting 'a.flag.extra' lies below setting 'a.flag'" in str(caught.value)
    with pytest.raises(StepDefinitionError):
        registry.add(define("c", settings=setting("a", int, default=1, description="d")))


def test_a_step_declaring_a_key_twice_or_a_non_setting_is_refused():
    with pytest.raises(StepDefinitionError, match=r"declares setting 'a\.flag' twice"):
        StepCatalog().add(define("a", settings=(FLAG, FLAG)))
    with pytest.raises(StepDefinitionError, match="is not a setting"):
        StepCatalog().add(define("a", settings=("a.flag",)))  # type: ignore[arg-type]


def test_plugins_extend_the_choices_of_a_setting():
    catalog = SettingCatalog()
    catalog.add(MODE)
    extended = catalog.extend_choices("a.mode", ["turbo", "fast"], by="plugin acme")
    assert extended.choices == ("fast", "safe", "turbo")
    assert catalog.get("a.mode") == extended
    assert extended.check("turbo") is None
    assert MODE.check("turbo") is not None  # the declaration itself is unchanged


@pytest.mark.parametrize(("key", "choices", "fragment"), [
    ("a.mod", ["x"], "undeclared setting 'a.mod' (did you mean 'a.mode'?)"),
    ("a.maybe", ["x"], "accepts any value of its kind"),
    ("a.mode", [3], "choice 3 is invalid"),
    ("a.mode", ["bad\nvalue"], "control character"),
])
def test_extending_choices_is_checked(key, choices, fragment):
    catalog = SettingCatalog()
    catalog.add(MODE)
    catalog.add(MAYBE)
    with pytest.raises(StepDefinitionError) as caught:
        catalog.extend_choices(key, choices)
    assert fragment in str(caught.value)
    assert caught.value.location is not None
    assert caught.value.location.path.endswith("test_settings.py")


def _slow() -> str:
    return "slow"


def _quick() -> str:
    return "quick"


def _turbo() -> str:
    return "turbo"


ENGINE = setting("a.engine", str, default="slow", choices={"slow": _slow, "quick": _quick},
                 description="an engine, chosen from a table")


def test_a_table_of_choices_keeps_what_each_name_selects():
    assert ENGINE.choices == ("slow", "quick")
    assert ENGINE.implementation("quick") is _quick
    assert ENGINE.check("warp") is not None
    assert "implementations" not in spec_json(ENGINE)  # code: the names stand for it
    assert spec_json(ENGINE) == spec_json(setting(
        "a.engine", str, default="slow", choices=("slow", "quick"),
        description="an engine, chosen from a table"))


def test_one_call_extends_a_table_with_names_and_what_they_select():
    catalog = SettingCatalog()
    catalog.add(ENGINE)
    extended = catalog.extend_choices("a.engine", {"turbo": _turbo, "slow": _slow},
                                      by="plugin acme")
    assert extended.choices == ("slow", "quick", "turbo")
    assert extended.implementation("turbo") is _turbo
    assert catalog.implementations({"a.engine": "turbo", "a.mode": "fast"}) == \
        {"a.engine": _turbo}
    assert catalog.implementations({"a.engine": "warp"}) == {}  # refused by its check
    assert ENGINE.choices == ("slow", "quick")  # the declaration itself is unchanged


@pytest.mark.parametrize(("key", "choices", "fragment"), [
    ("a.engine", ["turbo"], "extends the choices of 'a.engine' without their implementations"),
    ("a.mode", {"turbo": _turbo}, "'a.mode', which is declared with a plain list"),
    ("a.engine", {"slow": _turbo}, "gives choice 'slow' of 'a.engine' another implementation"),
])
def test_extending_a_table_takes_the_shape_of_its_declaration(key, choices, fragment):
    catalog = SettingCatalog()
    catalog.add(MODE)
    catalog.add(ENGINE)
    with pytest.raises(StepDefinitionError) as caught:
        catalog.extend_choices(key, choices)
    assert fragment in str(caught.value)
    assert caught.value.location is not None
    assert caught.value.location.path.endswith("test_settings.py")
    assert catalog.get("a.engine") == ENGINE


def test_a_nullable_table_is_refused():
    with pytest.raises(StepDefinitionError, match="has a table of choices but is nullable"):
        SettingCatalog().add(setting("a.engine", str, nullable=True, choices={"x": _slow},
                                     description="d"))


def _plan_with(registry: Registry, tmp_path: Path, config: str) -> Plan:
    profile = tmp_path / "p.yaml"
    names = "\n".join(f"  {s.name}: {{}}" for s in registry.steps)
    profile.write_text(f"device:\n  type: cpu\nsteps:\n{names}\nconfig:\n{config}",
                       encoding="utf-8")
    return resolve(compose(registry.profiles, [str(profile)]), registry.steps)


def test_steps_and_previews_get_what_the_value_names_plugins_included(tmp_path):
    seen = []
    registry = Registry()
    engine = define("engine", lambda ctx: seen.append(ctx.implementation("a.engine")()),
                    settings=ENGINE)
    engine.preview(lambda ctx: [f"engine {ctx.implementation('a.engine')()}"])
    registry.steps.add(engine)
    registry.load_plugin("acme", lambda reg: reg.settings.extend_choices(
        "a.engine", {"turbo": _turbo}))
    plan = _plan_with(registry, tmp_path, "  a:\n    engine: turbo\n")
    assert plan.step("engine").notes == ("engine turbo",)
    assert Run(plan, diagnoses=DIAGNOSES).start().ok
    assert seen == ["turbo"]


def test_a_name_outside_the_table_is_refused_at_plan_time(tmp_path):
    registry = Registry()
    registry.steps.add(define("engine", settings=ENGINE))
    with pytest.raises(InitorchError) as caught:
        _plan_with(registry, tmp_path, "  a:\n    engine: turbo\n")
    [problem] = caught.value.problems
    assert problem.message == "a.engine must be one of slow, quick, got 'turbo'"
    assert (problem.location.line, problem.location.column) == (7, 13)  # type: ignore[union-attr]


def test_implementation_of_a_plain_setting_fails_naming_it(tmp_path):
    registry = Registry()
    registry.steps.add(define("pick", lambda ctx: ctx.implementation("a.mode"), settings=MODE))
    [failed] = Run(_plan_with(registry, tmp_path, "  a: {}\n"),
                   diagnoses=DIAGNOSES).start().failed
    assert isinstance(failed.error, StepDefinitionError)
    assert "'a.mode' is not declared with a table of choices (its value is 'fast')" \
        in str(failed.error)


def test_settings_are_frozen_and_slotted():
    with pytest.raises(AttributeError):
        FLAG.default = True  # type: ignore[misc]
    assert not hasattr(FLAG, "__dict__")
    assert isinstance(FLAG, SettingSpec)


# --- steps read only what they declare ---------------------------------------------------------

def test_a_step_reading_an_undeclared_setting_fails_naming_it(tmp_path):
    def reads(ctx):
        return ctx.setting("a.count")

    plan = synthetic_plan([define("declares_flag", reads, settings=FLAG),
                           define("other", settings=COUNT)], tmp_path)
    run = Run(plan, diagnoses=DIAGNOSES)
    report = run.start()
    [failed] = report.failed
    assert isinstance(failed.error, StepDefinitionError)
    assert ("step 'declares_flag' reads setting 'a.count' but does not declare it "
            "(declared: a.flag)") in str(failed.error)


def test_a_step_reads_its_declared_settings_and_the_core_ones(tmp_path):
    seen = {}

    def reads(ctx):
        seen.update(count=ctx.setting("a.count"), type=ctx.setting("device.type"))

    plan = synthetic_plan([define("a", reads, settings=COUNT)], tmp_path)
    assert Run(plan, diagnoses=DIAGNOSES).start().ok
    assert seen == {"count": 1, "type": "cpu"}


def _literal_setting_reads(path: Path) -> set[str]:
    """Keys passed as literals to ``<something>.setting(...)`` in one module."""
    keys = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "setting" and node.args \
                and isinstance(node.args[0], ast.Constant):
            keys.add(node.args[0].value)
    return keys


def test_every_setting_the_builtin_steps_read_is_declared_by_a_step_of_their_module(
        builtin_registry):
    # Static half of the guarantee; the real and simulated end-to-end runs execute every
    # built-in step, where ctx.setting refuses anything the step does not declare.
    by_module: dict[str, set[str]] = {}
    for declared in builtin_registry.steps:
        module = declared.action.__module__.rsplit(".", 1)[-1]
        by_module.setdefault(module, set()).update(spec.key for spec in declared.settings)
    for module, declared_keys in by_module.items():
        read = _literal_setting_reads(REPO / "steps" / f"{module}.py")
        assert read <= declared_keys | CORE_KEYS, (module, read - declared_keys)


def test_every_builtin_step_declares_what_its_condition_reads(builtin_registry):
    from initorch.model.conditions import parse_condition

    for declared in builtin_registry.steps:
        if declared.when is not None:
            names = parse_condition(declared.when).names
            assert names <= {spec.key for spec in declared.settings}, declared.name


def test_builtin_declarations_have_sane_bounds(builtin_registry):
    for spec in builtin_registry.settings:
        assert spec.description and "\n" not in spec.description
        if spec.kind in ("int", "float"):
            assert spec.maximum is not None and spec.maximum <= MAX_INT, spec.key


def test_a_failing_plugin_leaves_no_declarations_behind():
    from initorch.errors import PluginError

    registry = Registry()

    def broken(reg: Registry) -> None:
        reg.steps.add(define("half", settings=COUNT))
        reg.settings.add(setting("acme.switch", bool, default=False, description="d"))
        raise RuntimeError("boom")

    with pytest.raises(PluginError, match="boom"):
        registry.load_plugin("acme", broken)
    assert "a.count" not in registry.settings and "acme.switch" not in registry.settings
    assert registry.settings is registry.steps.settings
    # the same keys can be declared afresh, differently, by a working plugin
    registry.load_plugin("good", lambda reg: reg.steps.add(define(
        "half", settings=setting("a.count", int, default=5, description="other"))))
    assert registry.settings.get("a.count").default == 5  # type: ignore[union-attr]


def test_declarations_made_while_a_plugin_loads_are_credited_to_it():
    registry = Registry()

    def acme(reg: Registry) -> None:
        reg.settings.add(setting("acme.switch", bool, default=False, description="d"))
        reg.steps.add(define("pick", settings=MODE))
        reg.settings.extend_choices("a.mode", ["turbo"])

    registry.load_plugin("acme", acme)
    assert [d.by for d in registry.settings.declarations("acme.switch")] == ["plugin acme"]
    assert "turbo" in registry.settings.get("a.mode").choices  # type: ignore[union-attr]
