"""The built-in diagnoses against what the real stacks print (tests/support/diagnosis_corpus.py).

Five promises: every sample maps to its entry through the whole book (first match
wins); every entry has a sample from upstream unless it only diagnoses initorch's
own checks; every alternative of every pattern matches some sample, so that no
alternative is kept that nothing prints; every quote of a sample occurs where its
origin says (the downloaded wheel, the SGLang source, the installed torch, a
statement that raises it); and the text a diagnosis matches is made of those quotes
and the declared arguments, so that a sample cannot be invented around its quotes.
"""

from __future__ import annotations

import functools
import importlib.metadata
import mmap
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from initorch.errors import StepError
from initorch.reporting.diagnosis import Diagnosis, DiagnosisCatalog
from initorch.steps.diagnoses import BUILTIN_DIAGNOSES
from tests.support.diagnosis_corpus import (
    CORPUS,
    InInitorch,
    InMooncakeSource,
    InSGLang,
    InTorch,
    InWheel,
    NeededBy,
    Origin,
    Raised,
    Sample,
    Unverifiable,
)
from tests.support.paths import REPO
from tests.support.wheels import wheel

# Failures initorch detects itself; no other stack prints them.
INITORCH_ONLY = {"mooncake-transport-mismatch"}
SGLANG = ("sglang", "0.5.23")  # the published wheel whose source the samples quote
TORCH_VERSION = "2.13.0"
BY_ID = {d.id: d for d in BUILTIN_DIAGNOSES}


def as_failure(sample: Sample) -> BaseException:
    """The sample as it reaches diagnosis: a message, or glog lines behind a step error."""
    if sample.via == "native_log":
        return StepError("the vendor call returned an error", native_log=sample.text)
    return RuntimeError(sample.text)


def alternatives(pattern: str) -> list[str]:
    """The top-level ``|`` branches of ``pattern`` (groups and classes kept whole)."""
    branches, depth, in_class, start, index = [], 0, False, 0, 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "|" and depth == 0:
            branches.append(pattern[start:index])
            start = index + 1
        index += 1
    return [*branches, pattern[start:]]


def in_text(quote: str) -> re.Pattern[str]:
    """``quote`` as it appears in a filled-in message: each ``{}`` is some argument; the
    literal pieces are groups, so their spans can be told from the arguments'."""
    return re.compile("(?:.+?)".join(f"({re.escape(piece)})" for piece in quote.split("{}")),
                      re.DOTALL)


def in_python_source(quote: str) -> re.Pattern[str]:
    """``quote`` as it is written in Python source: each ``{}`` is an f-string field."""
    return re.compile(r"\{[^{}\n]*\}".join(re.escape(piece) for piece in quote.split("{}")))


def joined_literals(source: str) -> str:
    """``source`` with implicit string concatenation undone (``"a "\\n    f"b"`` -> ``a b``)."""
    return re.sub(r"""(["'])\s*\n\s*[rfbu]*\1""", "", source)


def window(text: str, line: int, before: int = 3, after: int = 6) -> str:
    lines = text.splitlines()
    return joined_literals("\n".join(lines[max(0, line - 1 - before):line + after]))


@functools.cache
def binary(path: Path) -> mmap.mmap:
    with path.open("rb") as handle:
        return mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)


def torch_file(path: str) -> Path:
    version = importlib.metadata.version("torch").split("+")[0]
    assert version == TORCH_VERSION, f"the corpus quotes torch {TORCH_VERSION}, not {version}"
    files = importlib.metadata.distribution("torch").locate_file("torch")
    return Path(str(files)) / path


def check_python(source: str, quotes: tuple[str, ...], where: str) -> None:
    joined = joined_literals(source)
    for quote in quotes:
        assert in_python_source(quote).search(joined), f"{quote!r} is not in {where}"


def check_binary(path: Path, quotes: tuple[str, ...], where: str) -> None:
    data = binary(path)
    for quote in quotes:
        assert data.find(quote.encode()) >= 0, f"{quote!r} is not in {where}"


def check_origin(origin: Origin) -> None:
    """Each quote of ``origin`` occurs in the real artifact it names."""
    match origin:
        case InWheel(dist, member, quotes):
            path = wheel(*dist).file(member)
            if member.endswith(".py"):
                check_python(path.read_text(), quotes, str(origin))
            else:
                check_binary(path, quotes, str(origin))
        case NeededBy(dist, member, quotes):
            entries = wheel(*dist).needed(member)
            for quote in quotes:
                assert quote in entries, f"{quote} is not DT_NEEDED by {origin}: {entries}"
        case InSGLang(path, line, quotes):
            file = wheel(*SGLANG).file(f"sglang/{path}")
            check_python(window(file.read_text(), line), quotes, str(origin))
        case InTorch(path, quotes):
            file = torch_file(path)
            if path.endswith(".py"):
                check_python(file.read_text(), quotes, str(origin))
            else:
                check_binary(file, quotes, str(origin))
        case Raised(statement, quotes, site):
            done = subprocess.run([sys.executable, *([] if site else ["-S"]), "-c", statement],
                                  check=False, capture_output=True, text=True,
                                  timeout=120)
            assert done.returncode != 0, f"{statement!r} did not raise"
            for quote in quotes:
                assert quote in done.stderr, f"{quote!r} not raised by {statement!r}"
        case InMooncakeSource(tag, path, line, quotes):
            git = os.environ.get("INITORCH_MOONCAKE_GIT")
            if not git:
                pytest.skip(f"{origin}: no published wheel has it; set INITORCH_MOONCAKE_GIT "
                            "to a Mooncake git directory to check it")
            text = subprocess.run(["git", "--git-dir", git, "show", f"{tag}:{path}"],
                                  check=True, capture_output=True, text=True).stdout
            lines = text.splitlines()[max(0, line - 4):line + 3]
            for quote in quotes:
                assert any(quote.replace("{}", "") in x for x in lines), f"{quote!r}: {origin}"
        case Unverifiable(what, _):
            pytest.skip(f"unverifiable: {what}")
        case InInitorch(path, quotes):
            check_python((REPO / path).read_text(), quotes, str(origin))


def sample_id(sample: Sample) -> str:
    return f"{sample.expected}:{sample.text[:40]}"


def test_alternatives_split_only_at_the_top_level() -> None:
    assert alternatives(r"a(?:b|c)|[|x]|d\|e") == ["a(?:b|c)", "[|x]", r"d\|e"]


def test_the_python_source_reading_joins_literals_and_f_string_fields() -> None:
    source = 'raise X(\n    f"rc={rc}, "\n    "done"\n)'
    assert in_python_source("rc={}, done").search(joined_literals(source))


@pytest.mark.parametrize("sample", CORPUS, ids=sample_id)
def test_each_sample_gets_its_diagnosis(sample: Sample) -> None:
    finding = DiagnosisCatalog(BUILTIN_DIAGNOSES).match(as_failure(sample))
    assert finding is not None, f"nothing matched {sample.source}"
    assert finding.diagnosis.id == sample.expected, sample.source
    assert finding.vendor_code == sample.code


@pytest.mark.parametrize(("sample", "origin"),
                         [(s, o) for s in CORPUS for o in s.origins],
                         ids=[f"{sample_id(s)}@{type(o).__name__}" for s in CORPUS
                              for o in s.origins])
def test_each_quote_occurs_where_its_origin_says(sample: Sample, origin: Origin) -> None:
    check_origin(origin)


def matched_span(diagnosis: Diagnosis, text: str) -> tuple[int, int]:
    flags = re.IGNORECASE if diagnosis.ignore_case else 0
    found = re.search(diagnosis.pattern, text, flags)
    assert found is not None
    return found.span()


@pytest.mark.parametrize("sample", CORPUS, ids=sample_id)
def test_the_matched_text_is_made_of_quotes_and_arguments(sample: Sample) -> None:
    covered: set[int] = set()
    for origin in sample.origins:
        for quote in origin.quotes:
            template = in_text(quote)
            found = [each for at in range(len(sample.text))
                     if (each := template.match(sample.text, at)) is not None]
            assert found, f"{quote!r} ({origin}) is not in the sample"
            for each in found:
                for group in range(1, (each.lastindex or 0) + 1):
                    covered.update(range(*each.span(group)))
    for arg in sample.args:
        assert arg in sample.text, f"argument {arg!r} is not in the sample"
        for found in re.finditer(re.escape(arg), sample.text):
            covered.update(range(*found.span()))
    start, end = matched_span(BY_ID[sample.expected], sample.text)
    loose = "".join(c if i in covered else "_" for i, c in enumerate(sample.text[start:end],
                                                                     start))
    assert all(i in covered for i in range(start, end)), (
        f"the diagnosed text has parts no origin writes: {loose!r}")


def test_every_entry_has_an_upstream_sample() -> None:
    upstream = {s.expected for s in CORPUS if s.upstream}
    missing = {d.id for d in BUILTIN_DIAGNOSES} - upstream - INITORCH_ONLY
    assert not missing, f"entries without an upstream sample: {sorted(missing)}"
    assert {s.expected for s in CORPUS} >= INITORCH_ONLY


@pytest.mark.parametrize("diagnosis", BUILTIN_DIAGNOSES, ids=lambda d: d.id)
def test_every_alternative_matches_a_sample(diagnosis: Diagnosis) -> None:
    flags = re.IGNORECASE if diagnosis.ignore_case else 0
    texts = [s.text for s in CORPUS if s.expected == diagnosis.id]
    for branch in alternatives(diagnosis.pattern):
        assert any(re.search(branch, text, flags) for text in texts), (
            f"{diagnosis.id}: alternative {branch!r} matches no sample of it; "
            "add the upstream message it stands for, or remove it")


def test_every_sample_names_where_it_comes_from() -> None:
    for sample in CORPUS:
        assert sample.origins and sample.expected in BY_ID, sample.text
        assert all(origin.quotes for origin in sample.origins), sample.source
