"""Failure analysis: turn a start-up exception into a known cause and an action.

Modelled on Spring Boot's failure analyzers.  A :class:`Diagnosis` is data: an
id, what went wrong, what the operator should do and which profile setting
prevents it, plus a regex (and optionally exception class *names*) that
recognise the failure.  A :class:`DiagnosisCatalog` validates entries once, keeps
them in registration order and answers :meth:`DiagnosisCatalog.match` with a
:class:`Finding` or ``None``.

This module knows nothing about devices: the entries themselves (ACL error
107002, ``cudaHostRegister`` 712, torch rendezvous messages) live in
``steps.diagnoses``.  Exception types are matched by class name so that a
vendor exception (``torch.distributed.DistStoreError``) can be recognised
without importing the vendor package.

What a caller may rely on:

* entries are tried in registration order and the first match wins, so
  specific entries must be registered before generic ones (``add(...,
  before=...)`` lets a plugin place a specific entry ahead of a built-in one);
* matching never raises for any exception object, including ones whose
  ``__str__`` raises and chains that loop;
* an unknown failure gives ``None``: callers report it as it is, unhidden.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Iterable, Iterator
from dataclasses import field

from initorch.errors import InitorchError, Problem
from initorch.location import SourceLocation, caller_location
from initorch.records import record

__all__ = [
    "Diagnosis",
    "DiagnosisCatalog",
    "DiagnosisDefinitionError",
    "Finding",
    "exception_chain",
    "failure_text",
    "vendor_code_of",
]

_ID = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9]+)*$")

# A chain longer than this is not a real traceback; stop rather than build
# megabytes of text for a log line.
_MAX_CHAIN = 100

# Native logs can be megabytes; the failure reason is logged last, so keep the tail.
_MAX_NATIVE_LOG = 1 << 20

# Exception groups exist from Python 3.11; looked up by name to stay 3.10-clean.
_GROUP_TYPE: type[BaseException] | None = getattr(builtins, "BaseExceptionGroup", None)


@record(kw_only=True)
class Diagnosis:
    """One known failure: how to recognise it and what to tell the operator.

    ``pattern`` is searched (case-insensitively unless ``ignore_case`` is
    false; a scoped ``(?-i:...)`` group also works) in the text of each
    exception of the failing chain, see :func:`failure_text`.  An optional
    named group ``code`` extracts the vendor error code.  ``exception_types``
    restricts the search to exceptions having one of these class names
    anywhere in their MRO; empty means any type.  ``prevention`` names the
    profile constraint or setting that keeps the failure from happening, so
    that a report can point at configuration, not only at symptoms.

    Construction records where the entry was written (``defined_at``) so that
    a duplicate id can name both places.
    """

    id: str
    title: str
    cause: str
    remedy: str
    prevention: str
    pattern: str
    exception_types: tuple[str, ...] = ()
    ignore_case: bool = True
    defined_at: SourceLocation | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.defined_at is None:
            # __post_init__ <- __init__ <- the code that wrote the entry.
            object.__setattr__(self, "defined_at", caller_location(3))


@record
class Finding:
    """A diagnosis that matched one failure, with what was extracted from it."""

    diagnosis: Diagnosis
    vendor_code: str | None
    matched: str

    def summary(self) -> str:
        """One line, fit to end CLI output: id, title, cause and remedy."""
        entry = self.diagnosis
        code = f" (vendor code {self.vendor_code})" if self.vendor_code else ""
        return (
            f"diagnosis {entry.id}: {_sentence(entry.title)}{code}. "
            f"Cause: {_sentence(entry.cause)}. Remedy: {_sentence(entry.remedy)}."
        )

    def as_dict(self) -> dict[str, str | None]:
        """Flat, JSON-ready fields for structured logs and run reports."""
        entry = self.diagnosis
        return {
            "id": entry.id,
            "title": entry.title,
            "cause": entry.cause,
            "remedy": entry.remedy,
            "prevention": entry.prevention,
            "vendor_code": self.vendor_code,
            "matched": self.matched,
        }


class DiagnosisDefinitionError(InitorchError):
    """One or more diagnosis entries are invalid; ``ids`` names them."""

    def __init__(self, ids: tuple[str, ...], problems: Iterable[Problem]) -> None:
        self.ids = ids
        problems = tuple(problems)
        count = len(problems)
        super().__init__(
            f"{count} invalid diagnosis entr{'ies' if count != 1 else 'y'}",
            problems=problems,
        )


class _Entry:
    """A registered diagnosis, its exception types and its compiled pattern (compiled at
    the first match when the entry was registered ``checked``)."""

    __slots__ = ("_regex", "diagnosis", "types")

    def __init__(self, diagnosis: Diagnosis, regex: re.Pattern[str] | None,
                 types: frozenset[str]) -> None:
        self.diagnosis, self._regex, self.types = diagnosis, regex, types

    @property
    def regex(self) -> re.Pattern[str]:
        if self._regex is None:
            self._regex = _compiled(self.diagnosis)
        return self._regex


class DiagnosisCatalog:
    """Validated diagnoses in match order.

    All validation happens in :meth:`extend` (``add`` is a one-entry extend),
    and a batch is added all or nothing, so a plugin with one bad entry leaves
    the catalog unchanged and learns about every problem at once.
    """

    def __init__(self, diagnoses: Iterable[Diagnosis] = ()) -> None:
        self._entries: list[_Entry] = []
        self.extend(diagnoses)

    def copy(self) -> DiagnosisCatalog:
        """An independent catalog with the same entries (the plugin loader's undo point)."""
        clone = DiagnosisCatalog()
        clone._entries = list(self._entries)
        return clone

    def add(self, diagnosis: Diagnosis, *, before: str | None = None) -> None:
        """Validate and register ``diagnosis``; see :meth:`extend` for ``before``."""
        self.extend((diagnosis,), before=before)

    def extend(self, diagnoses: Iterable[Diagnosis], *, before: str | None = None,
               checked: bool = False) -> None:
        """Validate and register ``diagnoses`` in order, at the end or ``before`` an id.

        ``before`` exists because the first match wins: an entry that refines
        a registered one (same message, narrower cause) must be tried first.

        ``checked`` says that the patterns were validated where they are written (the
        built-in diagnoses are, by initorch's tests, which register them unchecked):
        each entry is validated as any other, except that its pattern is compiled at
        its first match instead of now.  Compiling is most of what registering costs
        (34 built-in patterns, about 4 ms of every process that loads the plugins),
        and a diagnosis is only ever matched once something failed.
        """
        batch = list(diagnoses)
        problems: list[Problem] = []
        bad: list[str] = []
        compiled: list[_Entry] = []
        seen = {entry.diagnosis.id: entry.diagnosis for entry in self._entries}
        for diagnosis in batch:
            entry, found = _compile(diagnosis, seen, checked=checked)
            if found:
                problems.extend(found)
                bad.append(str(getattr(diagnosis, "id", "?")))
            elif entry is not None:
                compiled.append(entry)
                seen[diagnosis.id] = diagnosis
        index = len(self._entries)
        if before is not None:
            ids = [entry.diagnosis.id for entry in self._entries]
            if before in ids:
                index = ids.index(before)
            else:
                problems.append(
                    Problem(
                        f"cannot insert before unknown diagnosis '{before}'",
                        hint="name a registered diagnosis id",
                    )
                )
                bad.append(before)
        if problems:
            raise DiagnosisDefinitionError(tuple(bad), problems)
        self._entries[index:index] = compiled

    def match(self, exc: BaseException) -> Finding | None:
        """The first registered diagnosis that recognises ``exc``, or ``None``.

        Each exception of the chain (see :func:`exception_chain`) is searched
        separately, outermost first; a pattern never spans two exceptions.
        """
        chain = exception_chain(exc)
        segments = [(_type_names(item), _describe(item)) for item in chain]
        for entry in self._entries:
            for names, text in segments:
                if entry.types and not (entry.types & names):
                    continue
                found = entry.regex.search(text)
                if found is None:
                    continue
                code = found.groupdict().get("code")
                return Finding(
                    diagnosis=entry.diagnosis,
                    vendor_code=code if code else _vendor_code(chain),
                    matched=found.group(0),
                )
        return None

    def __contains__(self, diagnosis_id: object) -> bool:
        return any(entry.diagnosis.id == diagnosis_id for entry in self._entries)

    def __iter__(self) -> Iterator[Diagnosis]:
        return iter([entry.diagnosis for entry in self._entries])

    def __len__(self) -> int:
        return len(self._entries)


def exception_chain(exc: BaseException) -> tuple[BaseException, ...]:
    """``exc`` and the exceptions behind it, outermost first, each once.

    Follows what a Python traceback shows: ``__cause__`` if set, otherwise
    ``__context__`` unless suppressed (``raise ... from None`` hides it here
    too, so a diagnosis never cites text the operator cannot see).  Members of
    an exception group come right after the group.  Loops are cut.
    """
    seen: set[int] = set()
    order: list[BaseException] = []
    stack: list[BaseException] = [exc]
    while stack and len(order) < _MAX_CHAIN:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        order.append(item)
        following: list[BaseException] = list(_group_members(item))
        behind = _behind(item)
        if behind is not None:
            following.append(behind)
        stack.extend(reversed(following))
    return tuple(order)


def failure_text(exc: BaseException) -> str:
    """The whole chain as text: ``Type: message`` then any ``native_log``, per exception.

    This is the text diagnoses are matched against, and what the executor logs
    for a failure, so that an operator can see what the patterns saw.  Only
    the last MiB of each native log is kept: the reason comes last.
    """
    return "\n".join(_describe(item) for item in exception_chain(exc))


def vendor_code_of(exc: BaseException) -> str | None:
    """The first ``vendor_code`` attribute set in the chain, as one line; blank counts as unset."""
    return _vendor_code(exception_chain(exc))


def _compiled(diagnosis: Diagnosis) -> re.Pattern[str]:
    return re.compile(diagnosis.pattern, re.IGNORECASE if diagnosis.ignore_case else 0)


def _compile(
    diagnosis: Diagnosis, seen: dict[str, Diagnosis], *, checked: bool = False
) -> tuple[_Entry | None, list[Problem]]:
    if not isinstance(diagnosis, Diagnosis):
        return None, [
            Problem(
                f"not a Diagnosis: {diagnosis!r}",
                hint="build entries with initorch.reporting.diagnosis.Diagnosis",
            )
        ]
    where = diagnosis.defined_at
    problems: list[Problem] = []

    def fail(message: str, hint: str) -> None:
        problems.append(Problem(f"diagnosis '{diagnosis.id}': {message}", where, hint))

    if not isinstance(diagnosis.id, str) or not _ID.match(diagnosis.id):
        fail("invalid id", "use kebab-case starting with a letter, e.g. 'ascend-context-null'")
    elif diagnosis.id in seen:
        first = seen[diagnosis.id].defined_at
        fail(f"registered twice: first at {first}", "diagnosis ids are global; rename one")
    for name in ("title", "cause", "remedy", "prevention"):
        value = getattr(diagnosis, name)
        if not isinstance(value, str) or not value.strip():
            fail(f"empty {name}", f"say in {name} what the operator needs to know")
    if isinstance(diagnosis.title, str) and "\n" in diagnosis.title:
        fail("title spans several lines", "keep the title to one line")
    types = diagnosis.exception_types
    if not isinstance(types, tuple) or not all(
        isinstance(name, str) and name.isidentifier() for name in types
    ):
        fail(
            f"exception_types must be a tuple of class names, got {types!r}",
            "write ('ImportError', 'OSError'), or ('ImportError',) for one name",
        )
    regex = None
    if not isinstance(diagnosis.pattern, str) or not diagnosis.pattern:
        fail("empty pattern", "a pattern that matches everything would hide other diagnoses")
    elif not checked:
        try:
            regex = _compiled(diagnosis)
        except re.error as error:
            fail(f"pattern does not compile: {error}", "check the regular expression syntax")
        else:
            if regex.search("") is not None:
                fail(
                    "pattern matches the empty string",
                    "it would match every failure; make it require some text",
                )
    if problems:
        return None, problems
    return _Entry(diagnosis, regex, frozenset(types)), []


def _behind(exc: BaseException) -> BaseException | None:
    cause = exc.__cause__
    if cause is not None:
        return cause
    if exc.__suppress_context__:
        return None
    return exc.__context__


def _group_members(exc: BaseException) -> tuple[BaseException, ...]:
    if _GROUP_TYPE is None or not isinstance(exc, _GROUP_TYPE):
        return ()
    members = _attribute(exc, "exceptions")
    if not isinstance(members, tuple):
        return ()
    return tuple(member for member in members if isinstance(member, BaseException))


def _type_names(exc: BaseException) -> frozenset[str]:
    return frozenset(klass.__name__ for klass in type(exc).__mro__)


def _safe_str(value: object) -> str:
    try:
        return str(value)
    except Exception:  # a broken __str__ must not hide the failure
        return f"<unprintable {type(value).__name__} object>"


def _attribute(exc: BaseException, name: str) -> object:
    try:
        return getattr(exc, name, None)
    except Exception:  # a raising property counts as absent
        return None


def _describe(exc: BaseException) -> str:
    message = _safe_str(exc)
    head = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    log = _attribute(exc, "native_log")
    if isinstance(log, bytes):
        log = log.decode("utf-8", errors="replace")
    text = "" if log is None else _safe_str(log).rstrip("\n")
    if len(text) > _MAX_NATIVE_LOG:
        omitted = len(text) - _MAX_NATIVE_LOG
        text = f"[{omitted} earlier characters of native log omitted]\n{text[-_MAX_NATIVE_LOG:]}"
    return f"{head}\n{text}" if text else head


def _vendor_code(chain: Iterable[BaseException]) -> str | None:
    for item in chain:
        code = _attribute(item, "vendor_code")
        if code is None:
            continue
        # One line: the code ends up in a one-line summary and in log fields.
        text = " ".join(_safe_str(code).split())
        if text:
            return text
    return None


def _sentence(text: str) -> str:
    """Collapse whitespace (entries may be written over several lines) and drop a final period."""
    return " ".join(text.split()).rstrip(".")
