"""A record is the frozen, slotted dataclass it stands for, at a lower cost to define.

For random fields (defaults, ``compare``, ``hash`` and ``repr`` options, values that
are and are not equal), a record class and ``@dataclass(frozen=True, slots=True)`` over
the same body agree on ``repr``, equality, hash, immutability, ``replace`` and
``fields``; a record pickles, and a method the class defines itself is kept, as the
dataclass keeps it.  (That type checkers read a record as a frozen dataclass is
``make lint``'s: mypy checks every record's construction.)
"""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from initorch.records import record

_VALUES = st.one_of(st.integers(-3, 3), st.text(max_size=3), st.none(),
                    st.tuples(st.integers(0, 2)), st.floats(allow_nan=False, width=16))
_FIELD = st.fixed_dictionaries({"compare": st.booleans(), "repr": st.booleans(),
                                "hash": st.sampled_from([None, True, False]),
                                "default": st.booleans()})


def _pair(specs: list[dict[str, Any]]) -> tuple[type, type]:
    """The same class body made a record and a frozen slotted dataclass."""
    def body() -> type:
        # Fields with a default last, as a dataclass requires.
        ordered = sorted(enumerate(specs), key=lambda item: item[1]["default"])
        namespace: dict[str, Any] = {"__annotations__": {f"f{i}": "Any" for i, _ in ordered},
                                     "__module__": __name__, "__qualname__": "Value"}
        for i, spec in ordered:
            options = {key: spec[key] for key in ("compare", "repr", "hash")}
            namespace[f"f{i}"] = (dataclasses.field(default=0, **options) if spec["default"]
                                  else dataclasses.field(**options))
        return type("Value", (), namespace)

    return record(body()), dataclasses.dataclass(frozen=True, slots=True)(body())


def _build(cls: type, values: list[Any]) -> Any:
    return cls(**{f.name: value for f, value in zip(dataclasses.fields(cls), values,
                                                    strict=False)})


@given(st.lists(_FIELD, max_size=5).flatmap(lambda specs: st.tuples(
    st.just(specs), st.lists(_VALUES, min_size=len(specs), max_size=len(specs)),
    st.lists(_VALUES, min_size=len(specs), max_size=len(specs)))))
def test_a_record_behaves_as_the_frozen_slotted_dataclass(case: tuple[list[Any], ...]) -> None:
    specs, first, second = case
    made, reference = _pair(specs)
    a, b = _build(made, first), _build(made, second)
    ra, rb = _build(reference, first), _build(reference, second)
    assert repr(a) == repr(ra)
    assert (a == b) == (ra == rb)
    assert (a == _build(made, first)) is True and (a != b) == (ra != rb)
    assert hash(a) == hash(ra)
    assert [(f.name, f.compare, f.hash, f.repr) for f in dataclasses.fields(a)] == \
        [(f.name, f.compare, f.hash, f.repr) for f in dataclasses.fields(ra)]
    if specs:
        with pytest.raises(dataclasses.FrozenInstanceError):
            a.f0 = 1
        assert dataclasses.replace(a) == a
    with pytest.raises((AttributeError, TypeError)):
        a.unknown = 1  # slots: no other attribute
    assert a.__eq__(ra) is NotImplemented  # only the very same class compares


def test_a_method_the_class_defines_is_kept() -> None:
    @record
    class Shown:
        value: int

        def __repr__(self) -> str:
            return f"<{self.value}>"

    @record
    class Compared:  # noqa: PLW1641 (the point: the record supplies __hash__)
        value: int
        ignored: int = 0

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Compared) and other.value == self.value

    assert repr(Shown(1)) == "<1>"
    assert Compared(1, 2) == Compared(1, 3)
    # Defining __eq__ alone leaves __hash__ None in the body: the record hashes, as the
    # frozen dataclass does.
    assert hash(Compared(1, 2)) == hash((1, 2))


def test_keyword_only_and_subclasses() -> None:
    @record(kw_only=True)
    class Base:
        a: int

    @record
    class Derived(Base):
        b: int = 2

    with pytest.raises(TypeError):
        Base(1)  # type: ignore[misc]
    assert repr(Derived(a=1)) == "test_keyword_only_and_subclasses.<locals>.Derived(a=1, b=2)"
    assert Derived(a=1) != Base(a=1) and Derived(a=1) == Derived(a=1, b=2)
    assert hash(Derived(a=1)) == hash((1, 2))


@record
class _Pickled:
    name: str
    sizes: tuple[int, ...] = ()


def test_a_record_pickles_as_the_dataclass_does() -> None:
    value = _Pickled("a", (1, 2))
    assert pickle.loads(pickle.dumps(value)) == value
