"""How a launch asks for the integration: environment variables, read once per process.

vLLM passes its environment to the engine core and to every worker it spawns, so the
variables set for ``python -m vllm.entrypoints.openai.api_server`` reach every process
alike.  Nothing is on by default: without ``INITORCH_VLLM`` the plugin returns at once
and the server starts exactly as it would without initorch installed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["MODE_ENV", "ON_VIOLATION_ENV", "PROFILE_ENV", "PROGRESS_ENV", "REPORT_ENV",
           "STATUS_ENV", "TIMELINE_ENV", "TRACE_ENV",
           "Options", "OptionsError", "read_options"]

MODE_ENV = "INITORCH_VLLM"
PROFILE_ENV = "INITORCH_VLLM_PROFILE"
ON_VIOLATION_ENV = "INITORCH_VLLM_ON_VIOLATION"
REPORT_ENV = "INITORCH_VLLM_REPORT"
TRACE_ENV = "INITORCH_VLLM_TRACE"
STATUS_ENV = "INITORCH_VLLM_STATUS"
PROGRESS_ENV = "INITORCH_VLLM_PROGRESS"
TIMELINE_ENV = "INITORCH_VLLM_TIMELINE"
"""A directory: every process of the launch writes its start-up timeline there
(:mod:`initorch_vllm.timeline`)."""

Mode = Literal["off", "verify"]
MODES: tuple[Mode, ...] = ("off", "verify")


class OptionsError(ValueError):
    """An ``INITORCH_VLLM*`` variable holds a value the integration cannot use."""


@dataclass(frozen=True, slots=True)
class Options:
    """What the launch asked for.

    ``mode``: ``verify`` records each worker's start-up and checks it against the plan.
    ``profiles``: the profiles of the plan, comma-separated in the variable (default:
    the worker's device profile, then ``vllm``).  ``stop_on_violation``: an order
    violation stops start-up (``INITORCH_VLLM_ON_VIOLATION=warn`` only logs it).
    ``report``/``trace``: per-rank output paths (``{rank}`` filled in).  ``status``:
    each worker's status file (``{rank}`` filled in), and ``progress_s``: how long a
    phase lasts before a progress line names it (``None``: no lines), as
    :class:`initorch.kit.progress.Progress` takes them.
    """

    mode: Mode = "off"
    profiles: tuple[str, ...] = ()
    stop_on_violation: bool = True
    report: str | None = None
    trace: str | None = None
    status: str | None = None
    progress_s: float | None = None

    @property
    def active(self) -> bool:
        return self.mode != "off"


def read_options(environ: Mapping[str, str] | None = None) -> Options:
    """The options in ``environ`` (default ``os.environ``); :class:`OptionsError` naming
    the variable when one is malformed."""
    environ = os.environ if environ is None else environ
    mode = _choice(environ, MODE_ENV, MODES)
    on_violation = _choice(environ, ON_VIOLATION_ENV, ("stop", "warn"))
    return Options(mode=mode,  # type: ignore[arg-type]  # one of MODES, checked
                   profiles=tuple(item.strip() for item in
                                  environ.get(PROFILE_ENV, "").split(",") if item.strip()),
                   stop_on_violation=on_violation == "stop",
                   report=environ.get(REPORT_ENV) or None,
                   trace=environ.get(TRACE_ENV) or None,
                   status=environ.get(STATUS_ENV) or None,
                   progress_s=_progress_s(environ) if mode != "off" else None)


def _progress_s(environ: Mapping[str, str]) -> float | None:
    """``INITORCH_VLLM_PROGRESS``, read only when the integration is on."""
    from initorch.kit import progress_seconds

    try:
        return progress_seconds(environ.get(PROGRESS_ENV))
    except ValueError as error:
        raise OptionsError(f"initorch-vllm: {PROGRESS_ENV}: {error}") from None


def _choice(environ: Mapping[str, str], name: str, choices: tuple[str, ...]) -> str:
    """Variable ``name`` (case and blanks ignored; unset or empty: the first choice)."""
    value = environ.get(name, "").strip().lower() or choices[0]
    if value not in choices:
        raise OptionsError(f"initorch-vllm: {name}={value!r} is not one of "
                           f"{', '.join(choices)}")
    return value
