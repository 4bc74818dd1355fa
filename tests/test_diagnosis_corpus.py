"""The built-in diagnoses against what the real stacks print (tests/diagnosis_corpus.py).

Three promises: every sample maps to its entry through the whole book (first match
wins); every entry has a sample from upstream unless it only diagnoses initorch's
own checks; and every alternative of every pattern matches some sample, so that
no alternative is kept that nothing prints.
"""

from __future__ import annotations

import re

import pytest

from initorch import StepError
from initorch.reporting.diagnosis import DiagnosisBook
from initorch.steps.diagnoses import BUILTIN_DIAGNOSES
from tests.diagnosis_corpus import CORPUS, Sample

# Failures initorch detects itself; no other stack prints them.
INITORCH_ONLY = {"mooncake-transport-mismatch"}


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


def test_alternatives_split_only_at_the_top_level() -> None:
    assert alternatives(r"a(?:b|c)|[|x]|d\|e") == ["a(?:b|c)", "[|x]", r"d\|e"]


@pytest.mark.parametrize("sample", CORPUS, ids=lambda s: f"{s.expected}:{s.text[:40]}")
def test_each_sample_gets_its_diagnosis(sample: Sample) -> None:
    finding = DiagnosisBook(BUILTIN_DIAGNOSES).match(as_failure(sample))
    assert finding is not None, f"nothing matched {sample.source}"
    assert finding.diagnosis.id == sample.expected, sample.source
    assert finding.vendor_code == sample.code


def test_every_entry_has_an_upstream_sample() -> None:
    upstream = {s.expected for s in CORPUS if s.upstream}
    missing = {d.id for d in BUILTIN_DIAGNOSES} - upstream - INITORCH_ONLY
    assert not missing, f"entries without an upstream sample: {sorted(missing)}"
    assert {s.expected for s in CORPUS} >= INITORCH_ONLY


@pytest.mark.parametrize("diagnosis", BUILTIN_DIAGNOSES, ids=lambda d: d.id)
def test_every_alternative_matches_a_sample(diagnosis) -> None:  # type: ignore[no-untyped-def]
    flags = re.IGNORECASE if diagnosis.ignore_case else 0
    texts = [s.text for s in CORPUS if s.expected == diagnosis.id]
    for branch in alternatives(diagnosis.pattern):
        assert any(re.search(branch, text, flags) for text in texts), (
            f"{diagnosis.id}: alternative {branch!r} matches no sample of it; "
            "add the upstream message it stands for, or remove it")


def test_every_sample_names_its_source() -> None:
    for sample in CORPUS:
        assert sample.source.strip() and sample.expected in {d.id for d in BUILTIN_DIAGNOSES}
        if sample.upstream:
            assert re.search(r"\d", sample.source), f"no file:line or version: {sample.source}"
