"""initorch.resolution.reasons: a planned step's pulls, written as sentences when read."""

from __future__ import annotations

from initorch.loading.document import StepEntry
from initorch.location import SourceLocation
from initorch.resolution.reasons import Reasons

LISTED = StepEntry("s", SourceLocation("cpu.yaml", 4, 3), "cpu", (), ())


def test_pulls_read_as_sentences_with_verbs_merged_in_first_seen_order() -> None:
    reasons = Reasons([LISTED, ("required by ", "b"), ("wanted by ", "w"),
                       ("required by ", "a"), "requested by load_plan(steps=...)",
                       "requested by load_plan(steps=...)"])
    assert reasons == ("listed by profile cpu (cpu.yaml:4:3)", "required by b, a",
                       "wanted by w", "requested by load_plan(steps=...)")
    assert list(reasons) == list(reasons.sentences())
    assert len(reasons) == 4
    assert reasons[1] == "required by b, a"
    assert reasons[-2:] == ("wanted by w", "requested by load_plan(steps=...)")
    assert "wanted by w" in reasons
    assert repr(reasons) == repr(reasons.sentences())


def test_skipped_steps_pull_nothing_in() -> None:
    pulls = [("required by ", "a"), ("required by ", "gone"), ("wanted by ", "gone")]
    assert Reasons(pulls, {"gone": "condition 'x' is false"}) == ("required by a",)


def test_reasons_compare_and_hash_as_their_tuple() -> None:
    one, other = Reasons([("wanted by ", "x")]), Reasons([("wanted by ", "x")])
    assert one == other == ("wanted by x",)
    assert ("wanted by x",) == one  # noqa: SIM300 (the tuple on the left asks Reasons back)
    assert one != ["wanted by x"]  # a tuple, as a planned step's reasons always were
    assert hash(one) == hash(("wanted by x",))
    assert Reasons() == ()
