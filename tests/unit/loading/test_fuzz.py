"""Property-based fuzzing of everything that reads user input (issue 10, beyond the list).

Any input to the ``--set`` parser, the profile loader, the condition language
or the resolver yields a result or initorch's own error type
(:class:`~initorch.errors.InitorchError`, exit 2) -- never another exception
(which the CLI would report as an internal error, exit 70).  Time and memory
are bounded by construction: every input here is small, and the size, depth
and alias limits refuse the rest.  Example counts are fixed, so CI runs the
same bounded amount of work every time.
"""

from __future__ import annotations

import string
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from initorch import Registry, load_plan
from initorch.errors import InitorchError
from initorch.loading.compose import parse_assignment
from initorch.loading.document import read_profile
from initorch.model.conditions import parse_condition

FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_SLOW = settings(FUZZ, max_examples=60)

BUILTIN = Registry.with_plugins()
STEP_NAMES = sorted(step.name for step in BUILTIN.steps)
SETTING_KEYS = sorted(spec.key for spec in BUILTIN.settings)

# YAML's own punctuation and the characters that trip parsers, mixed with text.
YAML_TOKENS = [*string.ascii_letters, *string.digits, *":-[]{},&*!|>'\"%@`#?.=\n\t \\~<",
               "\x00", "\x1b", "\u202e", "\ufeff", "\u0430", "1e999", ".nan", "<<",
               "!!python/object", "&a", "*a", "\r\n", "9" * 5000]
text_input = (st.lists(st.sampled_from(YAML_TOKENS), max_size=40).map("".join)
              | st.text(max_size=40))

scalars = (st.none() | st.booleans() | st.integers(-10**20, 10**20)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(STEP_NAMES + SETTING_KEYS))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=8) | st.sampled_from(SETTING_KEYS),
                                        inner, max_size=4), max_leaves=12)


def only_initorch_errors(call: Any, *args: Any) -> Any:
    """``call(*args)``; an InitorchError is an accepted outcome, anything else fails."""
    try:
        return call(*args)
    except InitorchError:
        return None


# --- the --set parser --------------------------------------------------------------------------

@FUZZ
@given(key=st.sampled_from(SETTING_KEYS) | st.text(max_size=10), value=text_input)
def test_any_set_assignment_is_a_value_or_a_profile_error(key, value):
    only_initorch_errors(parse_assignment, f"{key}={value}")


@FUZZ
@given(value=values)
def test_any_yaml_value_round_trips_through_set_or_is_refused(value):
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    text = text.removesuffix("...").strip()
    only_initorch_errors(parse_assignment, f"a.b={text}")


# --- the profile loader ------------------------------------------------------------------------

@FUZZ
@given(text=text_input)
def test_any_text_is_a_profile_or_a_profile_error(text):
    only_initorch_errors(read_profile, text, "fuzz.yaml", "fuzz")


profile_sections = st.fixed_dictionaries({}, optional={
    "description": st.text(max_size=10) | values,
    "extends": st.sampled_from(["cpu", "base", "cuda", "nope", "fuzz"]) | values,
    "device": st.dictionaries(st.sampled_from(["type", "backend_package", "torch_module",
                                               "aliases", "collective_backend", "x"]),
                              values, max_size=4),
    "config": st.dictionaries(st.sampled_from(SETTING_KEYS) | st.text(max_size=6), values,
                              max_size=4),
    "steps": st.dictionaries(
        st.sampled_from(STEP_NAMES) | st.text(max_size=8),
        st.none() | st.fixed_dictionaries({}, optional={
            "requires": st.lists(st.sampled_from(STEP_NAMES), max_size=3) | values,
            "after": st.lists(st.sampled_from(STEP_NAMES), max_size=3),
            "before": st.lists(st.sampled_from(STEP_NAMES), max_size=3),
            "when": st.sampled_from(["mooncake.enabled", "not hicache.enabled",
                                     "device.type == 'cpu'", "x.y or", "1 +"]) | values,
            "enabled": values, "reason": values, "timeout": values, "retries": values,
        }), max_size=4),
    "env": st.dictionaries(st.text(max_size=8), values, max_size=3),
})


# Mostly valid profiles, so that the resolver itself (not only the loader) is exercised:
# a real base, builtin steps with random edges (cycles included), switches and timeouts.
plausible_profiles = st.fixed_dictionaries({
    "extends": st.sampled_from(["cpu", "cuda", "npu", "musa", "mps"]),
    "steps": st.dictionaries(st.sampled_from(STEP_NAMES), st.fixed_dictionaries({}, optional={
        "requires": st.lists(st.sampled_from(STEP_NAMES), max_size=2),
        "after": st.lists(st.sampled_from(STEP_NAMES), max_size=2),
        "before": st.lists(st.sampled_from(STEP_NAMES), max_size=2),
        "timeout": st.sampled_from([1, 30, 0.5]),
    }), max_size=3),
    "config": st.fixed_dictionaries({}, optional={
        "mooncake": st.fixed_dictionaries({}, optional={"enabled": st.booleans()}),
        "hicache": st.fixed_dictionaries({}, optional={"enabled": st.booleans()}),
    }),
})


@FUZZ
@given(document=profile_sections)
def test_any_profile_document_is_read_or_refused(document):
    text = yaml.safe_dump(document, allow_unicode=True)
    only_initorch_errors(read_profile, text, "fuzz.yaml", "fuzz")


# --- the condition language --------------------------------------------------------------------

condition_tokens = st.sampled_from(
    [*SETTING_KEYS[:20], "and", "or", "not", "in", "not in", "==", "!=", "<", ">=", "(", ")",
     "[", "]", ",", "'cpu'", "\"npu\"", "1", "2.5", "true", "false", "None", "__import__",
     "x.__class__", "lambda: 0", "a if b else c", "f'{x}'", "[x for x in y]", "**", "@",
     "\u0430", "\x00", "device.type"])
conditions = st.lists(condition_tokens, max_size=8).map(" ".join) | text_input


@FUZZ
@given(source=conditions, setting_values=st.dictionaries(st.sampled_from(SETTING_KEYS[:20]),
                                                          scalars, max_size=6))
def test_any_condition_parses_and_evaluates_or_is_a_condition_error(source, setting_values):
    condition = only_initorch_errors(parse_condition, source)
    if condition is not None:
        values_in = {key: setting_values.get(key) for key in SETTING_KEYS}
        only_initorch_errors(condition.evaluate, values_in)


# --- the resolver: profile files composed and resolved ----------------------------------------

@FUZZ_SLOW
@given(document=profile_sections | plausible_profiles, overrides=st.lists(
    st.tuples(st.sampled_from(SETTING_KEYS), text_input).map("=".join), max_size=3))
def test_any_profile_resolves_to_a_plan_or_an_initorch_error(document, overrides):
    with tempfile.TemporaryDirectory(prefix="initorch-fuzz-") as folder:
        path = Path(folder) / "fuzz.yaml"
        path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
        plan = only_initorch_errors(_load, str(path), overrides)
    if plan is not None:
        assert set(plan.order) == {step.name for step in plan.steps}


def _load(path: str, overrides: list[str]) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unplanned-step warnings are expected here
        return load_plan([path], settings=overrides, registry=BUILTIN)
