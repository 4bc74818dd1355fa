"""How a launch asks for the integration: environment variables, read once per process.

SGLang passes its environment to every rank it spawns, so the variables set for
``python -m sglang.launch_server`` reach the launcher and every rank alike.  Nothing is
on by default: without ``INITORCH_SGLANG`` the plugin returns at once, and the server
starts exactly as it would without initorch installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["MODE_ENV", "Options", "OptionsError", "read_options"]

MODE_ENV = "INITORCH_SGLANG"
PROFILE_ENV = "INITORCH_SGLANG_PROFILE"
ON_VIOLATION_ENV = "INITORCH_SGLANG_ON_VIOLATION"
REPORT_ENV = "INITORCH_SGLANG_REPORT"
TRACE_ENV = "INITORCH_SGLANG_TRACE"
SET_ENV = "INITORCH_SGLANG_SET"
RENDEZVOUS_ENV = "INITORCH_SGLANG_RENDEZVOUS"
TIMELINE_ENV = "INITORCH_SGLANG_TIMELINE"
STATUS_ENV = "INITORCH_SGLANG_STATUS"
PROGRESS_ENV = "INITORCH_SGLANG_PROGRESS"

Mode = Literal["off", "verify", "drive"]
MODES: tuple[Mode, ...] = ("off", "verify", "drive")


class OptionsError(ValueError):
    """An ``INITORCH_SGLANG*`` variable holds a value the integration cannot use."""


@dataclass(frozen=True, slots=True)
class Options:
    """What the launch asked for.

    ``mode``: ``verify`` records SGLang's own start-up and checks it against the plan;
    ``drive`` also runs SGLang's parallel runtime as initorch steps.  ``profile``: the
    device profile (default: the one for SGLang's ``--device``).  ``stop_on_violation``:
    an order violation stops start-up (``INITORCH_SGLANG_ON_VIOLATION=warn`` only logs
    it).  ``report``/``trace``: per-rank output paths (``{rank}`` filled in).
    ``settings``: ``key=value`` items, as ``initorch --set`` takes them, separated by
    commas.  ``rendezvous``: where drive mode's ranks meet (the launcher picks it).
    ``status``: each rank's status file (``{rank}`` filled in), and ``progress_s``: how
    long a phase lasts before a progress line names it (``None``: no lines), as
    :class:`initorch.kit.progress.Progress` takes them.
    """

    mode: Mode = "off"
    profile: str | None = None
    stop_on_violation: bool = True
    report: str | None = None
    trace: str | None = None
    settings: tuple[str, ...] = ()
    rendezvous: str | None = None
    status: str | None = None
    progress_s: float | None = None

    @property
    def active(self) -> bool:
        return self.mode != "off"


def read_options(environ: Mapping[str, str] | None = None) -> Options:
    """The options in ``environ`` (default ``os.environ``); :class:`OptionsError` naming
    the variable when one is malformed."""
    environ = os.environ if environ is None else environ
    mode = environ.get(MODE_ENV, "off").strip().lower() or "off"
    if mode not in MODES:
        raise OptionsError(f"initorch-sglang: {MODE_ENV}={mode!r} is not one of "
                           f"{', '.join(MODES)}")
    on_violation = environ.get(ON_VIOLATION_ENV, "stop").strip().lower()
    if on_violation not in ("stop", "warn"):
        raise OptionsError(f"initorch-sglang: {ON_VIOLATION_ENV}={on_violation!r} is not "
                           "stop or warn")
    settings = tuple(item.strip() for item in environ.get(SET_ENV, "").split(",")
                     if item.strip())
    return Options(
        mode=mode,  # checked against MODES above
        profile=environ.get(PROFILE_ENV) or None,
        stop_on_violation=on_violation == "stop",
        report=environ.get(REPORT_ENV) or None,
        trace=environ.get(TRACE_ENV) or None,
        settings=settings,
        rendezvous=environ.get(RENDEZVOUS_ENV) or None,
        status=environ.get(STATUS_ENV) or None,
        progress_s=_progress_s(environ) if mode != "off" else None,
    )


def _progress_s(environ: Mapping[str, str]) -> float | None:
    """``INITORCH_SGLANG_PROGRESS``, read only when the integration is on (an SGLang
    that did not ask imports nothing of initorch's core)."""
    from initorch.kit import progress_seconds

    try:
        return progress_seconds(environ.get(PROGRESS_ENV))
    except ValueError as error:
        raise OptionsError(f"initorch-sglang: {PROGRESS_ENV}: {error}") from None
