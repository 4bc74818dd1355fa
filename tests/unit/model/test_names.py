"""initorch.model.names: ASCII names, and look-alike characters named when they are not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch.model.names import (
    SETTING_KEY,
    STEP_NAME,
    describe_character,
    name_problem,
    non_ascii_problem,
)


@pytest.mark.parametrize(("char", "described"), [
    ("\u0435", "'\u0435' (U+0435 CYRILLIC SMALL LETTER IE, looks like 'e')"),
    ("\u03bf", "(U+03BF GREEK SMALL LETTER OMICRON, looks like 'o')"),
    ("\uff4d", "(U+FF4D FULLWIDTH LATIN SMALL LETTER M, looks like 'm')"),  # NFKC folds it
    ("\u00e9", "(U+00E9 LATIN SMALL LETTER E WITH ACUTE)"),  # no ASCII twin claimed
    ("\u200b", "(U+200B ZERO WIDTH SPACE)"),
])
def test_characters_are_named_with_their_ascii_twin(char, described):
    assert described in describe_character(char)


def test_the_first_non_ascii_character_is_named_with_its_position():
    problem = non_ascii_problem("set_d\u0435vic\u0435", "step name")
    assert problem is not None
    assert problem.startswith("step name 'set_d\u0435vic\u0435' contains the non-ASCII character")
    assert "U+0435" in problem and "at position 6" in problem
    assert non_ascii_problem("set_device", "step name") is None


@pytest.mark.parametrize(("text", "valid"), [
    ("set_device", True), ("a1_b", True), ("1a", False), ("A", False), ("a-b", False),
    ("set_device\n", False), ("", False), ("a.b", False),
])
def test_step_names_match_in_full(text, valid):
    assert (name_problem(text, "step name") is None) is valid


@pytest.mark.parametrize(("text", "valid"), [
    ("hicache.layout", True), ("_private", True), ("a.b.c", True), ("a..b", False),
    ("a.", False), ("hicache.layout\n", False), ("Hicache", False),
])
def test_setting_keys_match_in_full(text, valid):
    assert (name_problem(text, "setting key", SETTING_KEY) is None) is valid


def test_non_strings_are_refused_naming_their_type():
    assert name_problem(3, "step name") == "step name must be a string, got int 3"  # type: ignore[arg-type]


@given(st.text(max_size=12))
def test_a_name_is_valid_exactly_when_it_is_ascii_lower_snake_case(text):
    problem = name_problem(text, "step name")
    assert (problem is None) == bool(STEP_NAME.fullmatch(text))
    if problem is not None and not text.isascii():
        assert "non-ASCII character" in problem
