"""An audit's verdicts: releases of an engine against the hazards of a device, as a table.

An audit reads each release as text (never importing it), recognises its code layout and
judges each hazard from that layout's call map; what a hazard is, is the engine's (its
integration's audit module).  What every audit shares lives here: a hazard's
:class:`Finding` (``hazard``: would fail on the device; ``clear``; ``n/a``: the code is
not in the release) with the upstream ``file:line`` it was judged from, the
:class:`ReleaseAudit` of one release, whether the integration supports it (its hook
targets resolve: :func:`support`), the table of releases x hazards, and the exit code:
2 when any release could not be read or has a layout no call map knows (never reported
clean), else 1 when any has a hazard, else 0.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from initorch.kit.follow import resolve_target
from initorch.kit.source import SourceError, SourceTree
from initorch.records import record

if TYPE_CHECKING:
    from initorch.kit.callmap import CallMap
    from initorch.kit.engine import Engine

__all__ = ["Finding", "ReleaseAudit", "State", "audit_path", "exit_code", "render_table",
           "support", "version_key"]

State = Literal["hazard", "clear", "n/a"]


@record
class Finding:
    """One hazard of one release: ``hazard`` (fails on the device), ``clear`` (the code
    is there and does not fail), or ``n/a`` (the code it is about is not in the release);
    ``where`` holds the upstream ``file:line`` it was judged from."""

    hazard: str
    state: State
    detail: str
    where: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"hazard": self.hazard, "state": self.state, "detail": self.detail,
                "where": list(self.where)}


@record
class ReleaseAudit:
    """What the audit read in one release (``error``: it could not read it)."""

    origin: Path
    version: str | None
    device: str
    layout: str | None = None
    findings: tuple[Finding, ...] = ()
    supported: bool = False
    support_detail: str = ""
    differences: tuple[str, ...] = ()
    error: str | None = None

    @property
    def hazards(self) -> tuple[Finding, ...]:
        return tuple(finding for finding in self.findings if finding.state == "hazard")

    @property
    def unreadable(self) -> bool:
        """Never clean: the input could not be read or no call map knows its layout."""
        return self.error is not None

    def to_dict(self) -> dict[str, Any]:
        return {"origin": str(self.origin), "version": self.version, "device": self.device,
                "layout": self.layout, "error": self.error,
                "findings": [finding.to_dict() for finding in self.findings],
                "supported": self.supported, "support_detail": self.support_detail,
                "differences": list(self.differences)}


def audit_path(path: Path, device: str, engine: Engine,
               audit_tree: Callable[[SourceTree, str], ReleaseAudit]) -> ReleaseAudit:
    """``audit_tree`` over the wheel or tree of ``engine`` at ``path``; an unreadable one
    comes back with ``error`` (one line naming the file), so that no input ends the
    command as an internal error."""
    try:
        return audit_tree(SourceTree.open(path, engine), device)
    except (SourceError, OSError, RecursionError, MemoryError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
    except Exception as error:  # a release no reading foresaw: not audited, never exit 70
        message = f"cannot be audited ({type(error).__name__}: " \
                  f"{(str(error).splitlines() or [''])[0]})"
    if not message.startswith(str(path)):
        message = f"{path}: {message}"
    return ReleaseAudit(path, None, device, error=message)


def support(tree: SourceTree, layout: CallMap, plugin_system: str) -> tuple[bool, str]:
    """Whether an integration can hook ``tree``: the engine's plugin system
    (``plugin_system``, a file inside the package) is there and every hook target of
    ``layout`` resolves; and, in one line, why not."""
    if not tree.has(plugin_system):
        return False, f"no {tree.engine.name} plugin system ({plugin_system} is missing)"
    missing = [target for target in layout.hook_targets()
               if resolve_target(tree, target) is None]
    if missing:
        return False, "hook targets missing: " + ", ".join(missing)
    return True, f"every hook target of layout {layout.name} resolves"


def version_key(version: str | None) -> tuple[tuple[int, ...], int, str]:
    """Sort key of a release (``0.5.10`` < ``0.5.10.post1`` < ``0.5.11``); an unknown or
    unusual version sorts last, by its text."""
    match = re.fullmatch(r"(\d+(?:\.\d+)*)(?:\.?post(\d+))?", version or "")
    if match is None:
        return ((10**9,), 0, version or "")
    return (tuple(int(part) for part in match.group(1).split(".")),
            int(match.group(2) or -1), "")


def render_table(audits: Sequence[ReleaseAudit], device: str, hazards: Sequence[str],
                 engine: str) -> str:
    """The releases of ``engine`` (rows, in the order given) against ``hazards``, then
    one line per hazard found."""
    cell = {"hazard": "HAZARD", "clear": "-", "n/a": "n/a"}
    head = ["version", "layout", *hazards, "integration supports it"]
    rows = []
    for audit in audits:
        if audit.error is not None:
            rows.append([audit.version or "?", audit.layout or "unknown",
                         *("?" for _ in hazards), "?"])
            continue
        states = {finding.hazard: cell[finding.state] for finding in audit.findings}
        rows.append([audit.version or "?", audit.layout or "?",
                     *(states[name] for name in hazards),
                     "yes" if audit.supported else "no"])
    widths = [max(len(row[column]) for row in [head, *rows]) for column in range(len(head))]
    lines = [f"{engine} releases on {device}: HAZARD fails on {device}, - does not, n/a: "
             "the code is not in the release"]
    lines += ["  ".join(text.ljust(width) for text, width in zip(row, widths,
                                                                 strict=True)).rstrip()
              for row in [head, *rows]]
    for audit in audits:
        name = audit.version or str(audit.origin)
        if audit.error is not None:  # the error names the file
            lines.append(f"UNREADABLE: {audit.error}")
        for finding in audit.hazards:
            lines.append(f"{name}: {finding.hazard}: {finding.detail} "
                         f"[{', '.join(finding.where)}]")
    hazardous = sum(1 for audit in audits if audit.hazards)
    unread = sum(1 for audit in audits if audit.unreadable)
    lines.append(f"{len(audits)} release(s): {hazardous} with a hazard on {device}, "
                 f"{unread} not audited")
    return "\n".join(lines)


def exit_code(audits: Sequence[ReleaseAudit]) -> int:
    """2 if any release could not be audited (never reported clean), else 1 if any has a
    hazard, else 0."""
    if any(audit.unreadable for audit in audits):
        return 2
    return 1 if any(audit.hazards for audit in audits) else 0
