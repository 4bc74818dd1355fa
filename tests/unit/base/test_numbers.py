"""``initorch.numbers``: whole numbers from text someone else wrote, ASCII digits only."""

from __future__ import annotations

import pytest

from initorch.numbers import MAX_WORLD_SIZE, NumberError, parse_count
from initorch.plugin import parse_count as exported


def test_plain_digits_are_read_and_the_kit_exports_the_helper() -> None:
    assert parse_count("0", "n") == 0 and parse_count("0042", "n") == 42
    assert exported is parse_count
    assert parse_count(str(MAX_WORLD_SIZE), "tp", maximum=MAX_WORLD_SIZE) == MAX_WORLD_SIZE


# ² passes isdigit(); ٣ (Arabic-Indic) and the fullwidth 12 pass int()
@pytest.mark.parametrize("text", ["²", "٣", "1_0", "+7", "-1", " 7", "7 ", "", "0x10", "7.0",
                                  "\uff11\uff12"])
def test_anything_but_ascii_digits_is_refused_naming_what(text: str) -> None:
    assert not (text.isascii() and text.isdigit())
    with pytest.raises(NumberError, match=r"^Content-Length .* is not a whole number"):
        parse_count(text, "Content-Length")


def test_bounds_are_checked_before_the_number_is_built() -> None:
    huge = "9" * 100_000  # int() alone raises ValueError past 4,300 digits
    shown = r"'9{40}\.\.\.'"
    with pytest.raises(NumberError, match=rf"^--tp {shown} is larger than {MAX_WORLD_SIZE}$"):
        parse_count(huge, "--tp", maximum=MAX_WORLD_SIZE)
    with pytest.raises(NumberError, match="has too many digits"):
        parse_count(huge, "n")
    with pytest.raises(NumberError, match="is smaller than 1"):
        parse_count("0", "--tp", minimum=1)
    assert parse_count("0" * 50 + "5", "n", maximum=5) == 5
