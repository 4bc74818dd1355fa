"""Which SGLang releases this integration knows, and the one line that refuses the others.

Every hook target, drive step and drift chain was read in these releases; another
release may have moved any of them, so the integration refuses to guess.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["KNOWN_SGLANG", "UnknownSGLangError", "check_sglang_version", "installed_sglang"]

KNOWN_SGLANG = ("0.5.23",)


class UnknownSGLangError(RuntimeError):
    """The installed SGLang is not one whose start-up this integration has read."""


def installed_sglang() -> str | None:
    """The installed ``sglang`` distribution's version, without importing it."""
    try:
        return version("sglang")
    except PackageNotFoundError:
        return None


def check_sglang_version(found: str | None = None) -> str:
    """``found`` (default: the installed one) if it is known; else :class:`UnknownSGLangError`."""
    found = installed_sglang() if found is None else found
    if found in KNOWN_SGLANG:
        return found
    known = ", ".join(KNOWN_SGLANG)
    what = "SGLang is not installed" if found is None else f"SGLang {found} is not supported"
    raise UnknownSGLangError(
        f"initorch-sglang: {what} (known: {known}); install sglang=={KNOWN_SGLANG[-1]}, or "
        f"unset INITORCH_SGLANG to start SGLang without initorch")
