"""Whether a plan's order delivers the outputs its steps read.

A step names the steps whose outputs it reads (``@step(reads=...)``), each one it
``requires`` or ``wants``.  Profiles may remove edges, and a plan loaded from a file
brings its own; either can leave a reader without a path from the step it reads.
The sequential executor would still run them in listing order, by luck, while the
parallel one fails mid-run with a missing output.  Checking the order when the plan
is made turns that into one line at plan time, for both.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from initorch.model.step import Step
from initorch.records import record
from initorch.resolution.plangraph import PlanGraph


@record
class UnmetRead:
    """A step that reads the output of ``target``, which the plan does not deliver."""

    reader: str
    target: str
    why: str  # "is not in the plan", "is skipped: ...", "is not ordered before it"

    def message(self) -> str:
        return f"step '{self.reader}' reads the output of '{self.target}', which {self.why}"

    def hint(self, removed: bool) -> str:
        if removed:
            return f"keep the edge to '{self.target}' that this line removes"
        return f"order '{self.target}' before step '{self.reader}' (its requires)"


def unmet_reads(readers: Iterable[Step], graph: PlanGraph, skipped: Mapping[str, str],
                in_plan: Callable[[str], bool]) -> Iterator[UnmetRead]:
    """Every read of ``readers`` (the declared steps that will run) that ``graph`` does
    not deliver: a required read of a step that will not run, or a read of a planned
    step without a chain of edges to the reader.  An optional read (a ``wants``) of a
    step that will not run is fine: ``ctx.has_output`` tells the step so."""
    for step in readers:
        for target in step.reads:
            if not in_plan(target):
                if target in step.requires:
                    why = f"is skipped: {skipped[target]}" if target in skipped \
                        else "is not in the plan"
                    yield UnmetRead(step.name, target, why)
            elif graph.path(target, step.name) is None:
                yield UnmetRead(step.name, target, "the plan does not order before it")
