"""``initorch sglang drift``: the ``sglang`` profile's ordering claims against SGLang's code.

Reads an SGLang source tree or wheel as text (``ast``), never importing it.  Each step
that SGLang performs has a call chain in :mod:`initorch_sglang.calls`, from a function
SGLang runs down to the call itself.  For every edge of the plan between two such steps
the chains are followed to where they part, inside one function, and the two calls'
lines there decide the order SGLang really has.  A claim whose lines disagree, or a
chain whose call is no longer where it was, is drift (exit 1); an edge whose chains
start in different functions cannot be decided from the source and is listed as such
(verify mode checks it in a running server).
"""

from __future__ import annotations

import ast
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from initorch_sglang.calls import Hop, SGLangCall, call_for

if TYPE_CHECKING:
    from initorch import Edge, Plan

__all__ = ["DriftReport", "EdgeCheck", "SourceTree", "check_drift"]

Verdict = Literal["ok", "drift", "undecidable"]


class SourceError(ValueError):
    """The path is not an SGLang source tree or wheel."""


@dataclass(slots=True)
class SourceTree:
    """The ``sglang`` package's files, from a directory or a wheel, read on demand."""

    origin: Path
    _wheel: zipfile.ZipFile | None = None
    _root: Path | None = None
    _parsed: dict[str, ast.Module | None] = field(default_factory=dict)

    @classmethod
    def open(cls, path: Path) -> SourceTree:
        if path.is_file() and path.suffix == ".whl":
            wheel = zipfile.ZipFile(path)
            if "sglang/srt/managers/scheduler.py" not in wheel.namelist():
                raise SourceError(f"{path}: a wheel without sglang/srt (not an SGLang wheel)")
            return cls(path, _wheel=wheel)
        for candidate in (path, path / "sglang", path / "python" / "sglang"):
            if (candidate / "srt" / "managers" / "scheduler.py").is_file():
                return cls(path, _root=candidate)
        raise SourceError(f"{path}: no sglang package here (looked for srt/managers/"
                          "scheduler.py in it, in sglang/ and in python/sglang/)")

    def text(self, file: str) -> str | None:
        """The text of ``file`` (a path inside the package), or ``None`` if missing."""
        if self._wheel is not None:
            try:
                return self._wheel.read(f"sglang/{file}").decode()
            except KeyError:
                return None
        assert self._root is not None
        target = self._root / file
        return target.read_text() if target.is_file() else None

    def module(self, file: str) -> ast.Module | None:
        if file not in self._parsed:
            text = self.text(file)
            self._parsed[file] = None if text is None else ast.parse(text, filename=file)
        return self._parsed[file]

    def version(self) -> str | None:
        """The release: the wheel's name, the installed distribution's metadata beside
        the package, else the package's ``version.py`` (a source checkout)."""
        if self._wheel is not None:
            match = re.search(r"sglang-([^-]+)-", self.origin.name)
            return match.group(1) if match else None
        assert self._root is not None
        for metadata in sorted(self._root.parent.glob("sglang-*.dist-info/METADATA")):
            found = re.search(r"^Version: (\S+)$", metadata.read_text(), re.MULTILINE)
            if found:
                return found.group(1)
        text = self.text("version.py") or ""
        match = re.search(r"__version__\s*=\s*[\"']([^\"']+)", text)
        return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class Site:
    """Where a hop's call is: ``file:line`` inside ``function``."""

    hop: Hop
    line: int

    def __str__(self) -> str:
        return f"{self.hop.file}:{self.line}"


class MissingCall(LookupError):
    """A hop of a chain is no longer in the source."""


def locate(tree: SourceTree, hop: Hop) -> Site:
    """The first call of ``hop.calls`` in ``hop.function`` of ``hop.file``."""
    module = tree.module(hop.file)
    if module is None:
        raise MissingCall(f"{hop.file} is missing")
    function = _function(module, hop.function.split("."))
    if function is None:
        raise MissingCall(f"{hop.file} has no function {hop.function}")
    lines = [node.lineno for node in ast.walk(function)
             if isinstance(node, ast.Call) and _called_name(node) == hop.calls]
    if not lines:
        raise MissingCall(f"{hop.file} {hop.function} no longer calls {hop.calls}")
    return Site(hop, min(lines))


def _function(scope: ast.AST, path: list[str]) -> ast.AST | None:
    for node in ast.iter_child_nodes(scope):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                and node.name == path[0]:
            return node if len(path) == 1 else _function(node, path[1:])
    return None


def _called_name(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


@dataclass(frozen=True, slots=True)
class EdgeCheck:
    """One claim (``edge``) and what SGLang's source says of it."""

    edge: Edge
    verdict: Verdict
    evidence: str

    def line(self) -> str:
        label = {"ok": "ok", "drift": "DRIFT", "undecidable": "run-time"}[self.verdict]
        reason = f"\n           profile: {self.edge.reason}" if self.edge.reason else ""
        return (f"  {label:<8} {self.edge.source} before {self.edge.target}: "
                f"{self.evidence}{reason}")


@dataclass(frozen=True, slots=True)
class DriftReport:
    """Every checked claim, and the chains that could not be followed."""

    version: str | None
    origin: Path
    checks: tuple[EdgeCheck, ...]
    missing: tuple[str, ...]

    @property
    def drifted(self) -> bool:
        return bool(self.missing) or any(check.verdict == "drift" for check in self.checks)

    def text(self, plan: Plan) -> str:
        counts = {verdict: sum(1 for c in self.checks if c.verdict == verdict)
                  for verdict in ("ok", "drift", "undecidable")}
        head = (f"SGLang {self.version or '(version unknown)'} at {self.origin}, against "
                f"profiles {' -> '.join(plan.profiles)}")
        body = [check.line() for check in self.checks]
        body += [f"  MISSING  {problem}" for problem in self.missing]
        tail = (f"{len(self.checks)} claim(s): {counts['ok']} ok, {counts['drift']} drift, "
                f"{counts['undecidable']} not decidable from the source (verify mode checks "
                f"them in a running server); {len(self.missing)} call(s) missing")
        verdict = "drift: SGLang's code no longer matches the profile" if self.drifted \
            else "no drift"
        return "\n".join([head, *body, tail, verdict])


def check_drift(tree: SourceTree, plan: Plan) -> DriftReport:
    """Check every plan edge between two steps SGLang performs."""
    sites: dict[str, list[Site]] = {}
    missing: list[str] = []
    for step in plan.order:
        call = call_for(step)
        if call is None:
            continue
        try:
            sites[step] = [locate(tree, hop) for hop in call.chain]
        except MissingCall as problem:
            missing.append(f"{step}: {problem} (call chain: {_chain(call)})")
    checks = tuple(_judge(edge, sites[edge.source], sites[edge.target])
                   for edge in _unique_edges(plan) if edge.source in sites
                   and edge.target in sites)
    return DriftReport(tree.version(), tree.origin, checks, tuple(missing))


def _unique_edges(plan: Plan) -> Iterator[Edge]:
    """One edge per ordered pair, the declared one (with a reason) first."""
    seen: set[tuple[str, str]] = set()
    for edge in sorted(plan.graph.edges(), key=lambda e: (e.reason is None, e.source,
                                                          e.target)):
        if (edge.source, edge.target) not in seen:
            seen.add((edge.source, edge.target))
            yield edge


def _judge(edge: Edge, first: list[Site], second: list[Site]) -> EdgeCheck:
    for a, b in zip(first, second, strict=False):
        if (a.hop.file, a.hop.function) != (b.hop.file, b.hop.function):
            break
        if a.hop.calls == b.hop.calls:
            continue
        where = f"{a.hop.file} {a.hop.function}: {a.hop.calls} at :{a.line}, " \
                f"{b.hop.calls} at :{b.line}"
        return EdgeCheck(edge, "ok" if a.line < b.line else "drift", where)
    return EdgeCheck(edge, "undecidable",
                     f"{first[0].hop.function} ({first[0]}) and {second[0].hop.function} "
                     f"({second[0]}) are separate call chains")


def _chain(call: SGLangCall) -> str:
    return " / ".join(str(hop) for hop in call.chain)
