"""Pre-flight: what would fail minutes into an engine's launch, said before it starts.

An integration's ``check`` command parses and resolves the launch with the engine's own
code, maps it to initorch's selection and plans it; then each of its checks (a
:data:`Check`: one question, answered ``None`` or with one line that cites the engine's
``file:line`` that would fail) asks what, on a real machine, was answered by a crash
after the weights loaded.  This module holds what every engine's pre-flight shares: the
result (:class:`Preflight`: the plan, every refusal, and what was *not* checked, one line
each), how it is printed and its exit code (:func:`show_preflight`: 0 ok, 2 a refusal), and the
checks of facts that are not any one engine's: a model's ``config.json`` read as data
(:func:`auto_map`, :func:`is_mla`) and a CPU list as libnuma parses it
(:func:`cpu_list_problem`).

Pre-flight, like ``initorch plan``, never runs model code and never downloads: what
could not be judged so is a note, not a refusal.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from initorch.errors import EXIT_INVALID_INPUT, EXIT_OK, EXIT_STEP_FAILED, InitorchError
from initorch.plugin import non_ascii_problem
from initorch.records import record

__all__ = ["EXIT_FOUND", "EXIT_REFUSED", "Check", "Preflight", "UsageError",
           "auto_map", "cpu_list_problem", "is_mla", "one_line", "run_checks", "show_preflight"]

EXIT_FOUND = EXIT_STEP_FAILED
"""Drift (or a hazard) found: the engine's code no longer matches what initorch states."""
EXIT_REFUSED = EXIT_INVALID_INPUT
"""The launch would fail (or bad usage, or a release that cannot be read)."""

Launch = TypeVar("Launch")
Check = Callable[[Launch], "str | None"]
"""One pre-flight question about a launch: ``None``, or the refusal in one line."""


class UsageError(InitorchError):
    """Bad arguments to an engine's ``initorch`` command (exit 2)."""


@record
class Preflight:
    """The plan for the launch (``None`` when it cannot be made), every refusal, and
    ``notes``: what pre-flight did not judge, one line each (a model that is not on this
    machine, a config whose remote code it would have to run)."""

    selection: str
    plan: Any
    refusals: tuple[str, ...]
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.refusals


def run_checks(checks: Iterable[Callable[[Launch], str | None]], launch: Launch) -> list[str]:
    """Every check's refusal for ``launch``, in the checks' order."""
    return [problem for check in checks if (problem := check(launch)) is not None]


def show_preflight(result: Preflight, *, command: str, as_json: bool) -> int:
    """Print ``result`` (the plan and the verdict on stdout, each refusal and each
    "not checked" note as one line on stderr naming ``command``; or all of it as JSON)
    and return the exit code: 0 ok, 2 refused."""
    from initorch.renderers import plan_json, plan_text

    if as_json:
        print(json.dumps({"ok": result.ok, "refusals": list(result.refusals),
                          "not_checked": list(result.notes), "selection": result.selection,
                          "plan": None if result.plan is None else plan_json(result.plan)},
                         indent=2, default=str))
    else:
        if result.plan is not None:
            print(plan_text(result.plan))
        print(f"selection: {result.selection}")
        for refusal in result.refusals:
            sys.stderr.write(f"{command}: refused: {refusal}\n")
        for note in result.notes:
            sys.stderr.write(f"{command}: not checked: {note}\n")
        print("pre-flight: ok" if result.ok else
              f"pre-flight: {len(result.refusals)} problem(s); the launch would fail")
    return EXIT_OK if result.ok else EXIT_REFUSED


_CPU_ITEM = r"\+?(?:[0-9]+(?:-[0-9]+)?(?::[0-9]+)?|all)"
_CPU_LIST = re.compile(rf"!?{_CPU_ITEM}(?:,{_CPU_ITEM})*")
"""libnuma's cpu string (``numa_parse_cpustring``, numa(3)): comma-separated CPUs and
ranges (``0-3``, ``0-31:2``), ``all``, a leading ``!`` (inverse) or ``+`` (relative)."""


def cpu_list_problem(group: str) -> str | None:
    """Why libnuma would not parse ``group`` as a CPU list (engines hand each rank's
    ``|``-separated group of an OMP threads-bind variable to it); ``None`` when it would."""
    if not group.strip():
        return "is empty"
    problem = non_ascii_problem(group, "group")
    if problem is not None:
        return problem.removeprefix(f"group {group!r} ")
    if not _CPU_LIST.fullmatch(group.strip()):
        return f"{group!r} is not a CPU list"
    return None


def _config(config: Path) -> dict[str, Any] | None:
    try:
        loaded = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return loaded if isinstance(loaded, dict) else None


def is_mla(config: Path) -> bool:
    """Whether the checkpoint's ``config.json`` is an MLA model (DeepSeek's
    ``kv_lora_rank``), read as data."""
    loaded = _config(config)
    return loaded is not None and bool(loaded.get("kv_lora_rank"))


def auto_map(config: Path) -> dict[str, Any] | None:
    """The ``config.json``'s ``auto_map`` (the modules ``--trust-remote-code`` would
    import), read as data; ``None`` when it names none."""
    loaded = _config(config)
    found = loaded.get("auto_map") if loaded is not None else None
    return found if isinstance(found, dict) and found else None


def one_line(error: BaseException, limit: int = 300) -> str:
    """``error``'s message on one line, cut at ``limit`` characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[:limit] + "..."
