"""initorch.model.conditions: ``when`` expressions are parsed and interpreted, never eval-ed."""

from __future__ import annotations

import builtins
import contextlib
import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch.errors import ConditionError
from initorch.location import SourceLocation
from initorch.model.conditions import Condition, parse_condition

AT = SourceLocation("p.yaml", 3, 11)
SETTINGS = {
    "mooncake.enabled": True,
    "hicache.enabled": False,
    "hicache.host_pool_mb": 64,
    "device.type": "npu",
    "layouts": ["page_first", "layer_first"],
    "empty": None,
}


def truth(source: str, values: dict[str, Any] = SETTINGS) -> bool:
    return parse_condition(source).evaluate(values)


@pytest.mark.parametrize(("source", "expected"), [
    ("mooncake.enabled", True),
    ("hicache.enabled", False),
    ("not hicache.enabled", True),
    ("mooncake.enabled and hicache.enabled", False),
    ("mooncake.enabled or hicache.enabled", True),
    ("device.type == 'npu'", True),
    ('device.type != "mps"', True),
    ("device.type in ['npu', 'musa']", True),
    ("device.type in ('cuda',)", False),
    ("device.type not in {'cuda', 'rocm'}", True),
    ("'page_first' in layouts", True),
    ("hicache.host_pool_mb >= 64", True),
    ("hicache.host_pool_mb > 64", False),
    ("1 < hicache.host_pool_mb < 100", True),
    ("1 < hicache.host_pool_mb < 10", False),
    ("hicache.host_pool_mb <= 64.0", True),
    ("empty == null", True),
    ("empty == None", True),
    ("mooncake.enabled == true", True),
    ("mooncake.enabled == True", True),
    ("hicache.enabled == false", True),
    ("true", True),
    ("false or (mooncake.enabled and not hicache.enabled)", True),
    ("  mooncake.enabled  ", True),
    ("'np' in device.type", True),
])
def test_evaluation(source, expected):
    assert truth(source) is expected


@pytest.mark.parametrize(("source", "names"), [
    ("mooncake.enabled and not hicache.enabled", {"mooncake.enabled", "hicache.enabled"}),
    ("true or null or False", set()),
    ("device.type in [a, 'x']", {"device.type", "a"}),
    ("a.b.c.d == 1", {"a.b.c.d"}),
])
def test_names_are_the_settings_read(source, names):
    assert parse_condition(source).names == frozenset(names)


@pytest.mark.parametrize(("source", "fragment"), [
    ("", "is not a valid expression"),
    ("a +", "is not a valid expression"),
    ("a = 1", "is not a valid expression"),
    ("x := 1", "is not a valid expression"),
    ("yield", "is not a valid expression"),
    ("__import__('os').system('true')", "unsupported syntax"),
    ("f(a)", "unsupported syntax 'f(a)'"),
    ("a + 1 > 2", "unsupported syntax 'a + 1'"),
    ("a[0]", "unsupported syntax"),
    ("lambda: 1", "unsupported syntax"),
    ("a if b else c", "unsupported syntax"),
    ("{'a': 1}", "unsupported syntax"),
    ("[x for x in y]", "unsupported syntax"),
    ("f'{a}'", "unsupported syntax"),
    ("b'bytes'", "unsupported syntax"),
    ("1j == a", "unsupported syntax"),
    ("a is None", "unsupported syntax"),
    ("'abc'.upper == a", "unsupported syntax"),
    ("().__class__", "unsupported syntax"),
    ("~a", "unsupported syntax"),
])
def test_unsafe_or_malformed_conditions_are_rejected(source, fragment):
    with pytest.raises(ConditionError) as caught:
        parse_condition(source, AT)
    assert fragment in str(caught.value)
    assert caught.value.location == AT
    assert caught.value.problems[0].hint


def test_negative_numbers_are_literals():
    # Oddity: '-1' is a UnaryOp(USub) in Python's AST, which the whitelist rejects,
    # so 'distributed.master_port > -1' is "unsupported syntax".
    assert truth("hicache.host_pool_mb > -1") is True


def test_conditions_never_call_eval_or_exec(monkeypatch, tmp_path):
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)
    assert truth("mooncake.enabled and device.type == 'npu'") is True
    marker = tmp_path / "pwned"
    with pytest.raises(ConditionError):
        parse_condition(f"__import__('os').system('touch {marker}')")
    assert not marker.exists()


def test_dunder_attributes_are_setting_names_not_python_attributes():
    condition = parse_condition("x.__class__")
    assert condition.names == frozenset({"x.__class__"})
    with pytest.raises(ConditionError):
        condition.evaluate({"x": 1})  # no such setting: never getattr(1, "__class__")


def test_unknown_setting_suggests_the_closest():
    condition = parse_condition("mooncake.enabld and hicache.enabled", AT)
    with pytest.raises(ConditionError) as caught:
        condition.check_names(SETTINGS)
    assert "reads unknown setting 'mooncake.enabld'" in str(caught.value)
    assert "did you mean 'mooncake.enabled'?" in str(caught.value)
    assert caught.value.location == AT
    condition = parse_condition("zzz", AT)
    with pytest.raises(ConditionError) as far:
        condition.check_names(SETTINGS)
    assert "see 'initorch settings'" in str(far.value)


def test_known_names_pass_the_check():
    parse_condition("mooncake.enabled and true").check_names(SETTINGS)  # no error


@pytest.mark.parametrize("source", [
    "hicache.host_pool_mb > 'a'",
    "hicache.host_pool_mb in 5",
    "missing_setting",
])
def test_evaluation_errors_are_condition_errors(source):
    with pytest.raises(ConditionError) as caught:
        parse_condition(source, AT).evaluate(SETTINGS)
    assert "cannot evaluate condition" in str(caught.value)
    assert caught.value.location == AT


def test_describe_shows_values_and_origins():
    condition = parse_condition("mooncake.enabled and device.type == 'npu' and empty == null")
    assert condition.describe(SETTINGS) == "device.type='npu', empty=null, mooncake.enabled=true"
    origins = {"mooncake.enabled": "p.yaml:3:5"}
    assert "mooncake.enabled=true from p.yaml:3:5" in condition.describe(SETTINGS, origins)


@pytest.mark.parametrize("depth", [2000, 10000])
def test_deeply_nested_conditions_are_condition_errors(depth):
    # BUG: conditions._validate recurses once per 'not', so a long chain raises
    # RecursionError (a traceback from 'initorch plan') instead of ConditionError.
    with pytest.raises(ConditionError):
        parse_condition("not " * depth + "x")


# --- properties ----------------------------------------------------------------------------

@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=60) | st.text(alphabet="ab.() =!<>'\"[],:andortinTF01_", max_size=60))
def test_arbitrary_text_is_a_condition_or_a_condition_error(source):
    try:
        condition = parse_condition(source)
    except ConditionError:
        return
    assert isinstance(condition, Condition)
    values = dict.fromkeys(condition.names, 1)
    with contextlib.suppress(ConditionError):
        assert isinstance(condition.evaluate(values), bool)


# Generated expressions are pairs (source text, reference evaluator over settings).
Expr = tuple[str, Callable[[dict[str, Any]], Any]]
NAMES = {"flag.a": st.booleans(), "flag.b": st.booleans(), "num.n": st.integers(-3, 3),
         "text.s": st.sampled_from(["npu", "cuda", ""])}


def _name(key: str) -> Expr:
    return key, lambda env: env[key]


def _literal(value: Any) -> Expr:
    return repr(value), lambda env: value


ints: st.SearchStrategy[Expr] = st.one_of(st.just(_name("num.n")),
                                          st.integers(0, 3).map(_literal))
texts: st.SearchStrategy[Expr] = st.one_of(st.just(_name("text.s")),
                                           st.sampled_from(["npu", "cuda", ""]).map(_literal))
BOOL_LITERALS = {"true": True, "false": False, "True": True, "False": False}


def _bool_literal(word: str) -> Expr:
    return word, lambda env: BOOL_LITERALS[word]


bools: st.SearchStrategy[Expr] = st.one_of(st.sampled_from(["flag.a", "flag.b"]).map(_name),
                                           st.sampled_from(sorted(BOOL_LITERALS)).map(_bool_literal))
COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b,
}


@st.composite
def comparisons(draw: st.DrawFn) -> Expr:
    kind = draw(st.sampled_from(["ints", "texts", "member"]))
    if kind == "member":
        (left, lfn), items = draw(texts), draw(st.lists(texts, max_size=3))
        negate = draw(st.booleans())
        source = f"{left} {'not in' if negate else 'in'} [{', '.join(s for s, _ in items)}]"
        return source, lambda env: (lfn(env) in [f(env) for _, f in items]) != negate
    (left, lfn), (right, rfn) = draw(ints if kind == "ints" else texts), draw(
        ints if kind == "ints" else texts)
    op = draw(st.sampled_from(sorted(COMPARE) if kind == "ints" else ["==", "!="]))
    return f"{left} {op} {right}", lambda env: COMPARE[op](lfn(env), rfn(env))


def _combine(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    def negate(expr: Expr) -> Expr:
        return f"not ({expr[0]})", lambda env: not expr[1](env)

    def join(word: str, exprs: list[Expr]) -> Expr:
        source = f" {word} ".join(f"({s})" for s, _ in exprs)
        if word == "and":
            return source, lambda env: all(bool(f(env)) for _, f in exprs)
        return source, lambda env: any(bool(f(env)) for _, f in exprs)

    return st.one_of(
        children.map(negate),
        st.builds(join, st.sampled_from(["and", "or"]), st.lists(children, min_size=2,
                                                                 max_size=3)),
    )


expressions = st.recursive(st.one_of(bools, comparisons()), _combine, max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(expressions, st.fixed_dictionaries(NAMES))
def test_generated_expressions_match_a_reference_evaluator(expr, env):
    source, reference = expr
    condition = parse_condition(source)
    assert condition.names <= set(NAMES)
    assert condition.evaluate(env) is bool(reference(env))



@pytest.mark.parametrize(("source", "deciding"), [
    ("a.on and b.on and c.n > 1", "b.on=false"),            # only the false operands
    ("a.on and not a.on", "a.on=true"),
    ("b.on or c.n > 5", "b.on=false, c.n=3"),                # not an and: every read
    ("not (a.on and c.n == 3)", "a.on=true, c.n=3"),
])
def test_a_false_condition_is_summed_up_by_what_decided_it(source, deciding):
    settings = {"a.on": True, "b.on": False, "c.n": 3}
    condition = parse_condition(source)
    assert not condition.evaluate(settings)
    assert condition.deciding(settings) == deciding


def test_a_number_run_into_a_keyword_is_refused_without_a_warning_on_stderr(recwarn):
    # Python 3.11+ only warns ("invalid decimal literal") and parses on; a profile's condition
    # with it is a typo, and a warning printed in the middle of `initorch plan` says nothing.
    # Python 3.10 reads it silently, as "== 1 or", and so does initorch there.
    source = "parallel.tp_size == 1or hicache.enabled"
    if sys.version_info >= (3, 11):
        with pytest.raises(ConditionError, match="invalid decimal literal"):
            parse_condition(source)
    else:
        assert parse_condition(source).names == {"parallel.tp_size", "hicache.enabled"}
    assert not [w for w in recwarn if issubclass(w.category, SyntaxWarning)]
