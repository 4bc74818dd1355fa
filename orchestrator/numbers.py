"""Whole numbers read from text that someone else wrote: the environment, the network.

``str.isdigit`` is not the check it looks like: ``"²".isdigit()`` is True and
``int("²")`` raises, while ``int("٣")`` (an Arabic-Indic three), ``int(" 7 ")``,
``int("+7")`` and ``int("1_0")`` all succeed.  A header or a variable that reaches a
length, a count or a port is meant to be plain decimal, so :func:`parse_count`
accepts ASCII digits only and bounds the value before anyone allocates by it (a
rank count of 10**30 would otherwise become a list with one entry per rank).
"""

from __future__ import annotations

__all__ = ["MAX_WORLD_SIZE", "NumberError", "parse_count"]

MAX_WORLD_SIZE = 1 << 20
"""The most ranks (or hosts) a count may name: the bound the launchers put on a Slurm
host list (``initorch.execution.launchers.MAX_HOSTS``); far above any real job."""

_SHOWN = 40  # how much of a refused value a message repeats


class NumberError(ValueError):
    """Text that is not a whole number within its bounds; the message names ``what``."""


def parse_count(text: str, what: str, *, minimum: int = 0,
                maximum: int | None = None) -> int:
    """``text`` as a whole number of ASCII digits in ``[minimum, maximum]``.

    Raises :class:`NumberError` naming ``what`` (``"Content-Length"``,
    ``"WORLD_SIZE"``) and the bound that failed.  Surrounding blanks are not
    stripped: callers that read a variable strip it themselves, where that is the
    variable's convention.
    """
    shown = text if len(text) <= _SHOWN else text[:_SHOWN] + "..."
    if not text or not text.isascii() or not text.isdigit():
        raise NumberError(f"{what} {shown!r} is not a whole number (ASCII digits 0-9 only)")
    if maximum is not None and len(text.lstrip("0")) > len(str(maximum)):
        raise NumberError(f"{what} {shown!r} is larger than {maximum}")  # before int(): no
        # 4,300-digit conversion, and no ValueError from int's own digit limit
    try:
        value = int(text)
    except ValueError:  # more digits than int() converts (sys.get_int_max_str_digits)
        raise NumberError(f"{what} {shown!r} has too many digits") from None
    if maximum is not None and value > maximum:
        raise NumberError(f"{what} {shown!r} is larger than {maximum}")
    if value < minimum:
        raise NumberError(f"{what} {shown!r} is smaller than {minimum}")
    return value
