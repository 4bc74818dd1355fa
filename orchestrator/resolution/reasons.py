"""Why a step is in the plan: the pulls selection records, written as sentences when read.

Selection notes every pull that brings a step in, in the order of the pulls: the
profile entry that lists it, a launcher's request, or a verb and the step that
pulled (``("required by ", "init_torch_distributed")``).  The sentences
(``listed by profile cpu (cpu.yaml:4:3)``, ``required by a, b``) are what
``initorch plan``, ``plan --json`` and a saved plan show; writing them for every
step of every plan cost more than ordering the graph, and most plans are run
without being read, so a plan keeps the pulls and writes the sentences the first
time they are read.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import overload

from initorch.loading.document import StepEntry

Pull = str | tuple[str, str] | StepEntry
"""One pull: a whole sentence, a verb and the step that pulled, or the profile entry
that lists the step (``listed by profile <source> (<location>)``)."""

_NOTHING_SKIPPED: Mapping[str, str] = {}


class Reasons(Sequence[str]):
    """A planned step's reasons: the sentences of its pulls, verbs merged in first-seen
    order (``required by a``, ``required by b`` -> ``required by a, b``), leaving out
    the steps that are skipped (they pull nothing in).  It reads, compares and hashes
    as the tuple of those sentences.

    The resolver hands over ``pulls`` and ``skipped`` once selection is done and
    changes neither afterwards; the sentences are written on first read."""

    __slots__ = ("_pulls", "_skipped", "_written")

    def __init__(self, pulls: Sequence[Pull] = (),
                 skipped: Mapping[str, str] = _NOTHING_SKIPPED) -> None:
        self._pulls = pulls
        self._skipped = skipped
        self._written: tuple[str, ...] | None = None

    def sentences(self) -> tuple[str, ...]:
        """The reasons as the tuple of sentences, written once."""
        written = self._written
        if written is None:
            written = self._written = _write(self._pulls, self._skipped)
        return written

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        return self.sentences()[index]

    def __len__(self) -> int:
        return len(self.sentences())

    def __iter__(self) -> Iterator[str]:
        return iter(self.sentences())

    def __contains__(self, sentence: object) -> bool:
        return sentence in self.sentences()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Reasons):
            other = other.sentences()
        return isinstance(other, tuple) and self.sentences() == other

    def __hash__(self) -> int:
        return hash(self.sentences())

    def __repr__(self) -> str:
        return repr(self.sentences())


def _write(pulls: Sequence[Pull], skipped: Mapping[str, str]) -> tuple[str, ...]:
    merged: dict[str, list[str]] = {}
    for pull in pulls:
        if isinstance(pull, tuple):
            verb, who = pull
            if who in skipped:
                continue
            found = merged.get(verb)
            if found is None:
                merged[verb] = [who]
            else:
                found.append(who)
            continue
        sentence = pull if isinstance(pull, str) else \
            f"listed by profile {pull.source} ({pull.location})"
        if sentence not in merged:
            merged[sentence] = []
    return tuple([key + ", ".join(names) if names else key for key, names in merged.items()])
