"""A record is the slotted dataclass it stands for (frozen by default), at a lower cost to
define.

For random fields (defaults, ``compare``, ``hash`` and ``repr`` options, values that
are and are not equal), a record class and ``@dataclass(frozen=True, slots=True)`` over
the same body agree on ``repr``, equality, hash, immutability, ``replace`` and
``fields``; a record pickles, and a method the class defines itself is kept, as the
dataclass keeps it.  (That type checkers read a record as a frozen dataclass is
``make lint``'s: mypy checks every record's construction.)
"""

from __future__ import annotations

import builtins
import dataclasses
import inspect
import pickle
import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from initorch.records import record

_VALUES = st.one_of(st.integers(-3, 3), st.text(max_size=3), st.none(),
                    st.tuples(st.integers(0, 2)), st.floats(allow_nan=False, width=16))
_FIELD = st.fixed_dictionaries({
    "compare": st.booleans(), "repr": st.booleans(), "hash": st.sampled_from([None, True, False]),
    "default": st.sampled_from(["none", "value", "factory"]), "init": st.booleans(),
    "kw_only": st.booleans()}).map(
        lambda spec: spec if spec["default"] != "none" else {**spec, "init": True})


def _pair(specs: list[dict[str, Any]], frozen: bool = True,
          order: bool = False) -> tuple[type, type]:
    """The same class body made a record and a slotted dataclass (``frozen`` and
    ``order`` as given to both)."""
    def body() -> type:
        # Positional fields with a default after those without, as a dataclass requires.
        ordered = sorted(enumerate(specs), key=lambda item: item[1]["default"] != "none")
        namespace: dict[str, Any] = {"__annotations__": {f"f{i}": "Any" for i, _ in ordered},
                                     "__module__": __name__, "__qualname__": "Value"}
        for i, spec in ordered:
            options = {key: spec[key] for key in ("compare", "repr", "hash", "init", "kw_only")}
            if spec["default"] == "value":
                options["default"] = 0
            elif spec["default"] == "factory":
                options["default_factory"] = tuple
            namespace[f"f{i}"] = dataclasses.field(**options)
        return type("Value", (), namespace)

    return (record(frozen=frozen, order=order)(body()),
            dataclasses.dataclass(frozen=frozen, order=order, slots=True)(body()))


def _build(cls: type, values: list[Any]) -> Any:
    return cls(**{f.name: value for f, value in zip(dataclasses.fields(cls), values,
                                                    strict=False) if f.init})


def _raised(call: Any) -> tuple[type, str] | None:
    """The type and message of what ``call()`` raises (``None``: nothing)."""
    try:
        call()
    except Exception as error:
        return type(error), str(error)
    return None


@settings(deadline=None)  # the first example also compiles what it imports
@given(st.lists(_FIELD, max_size=5).flatmap(lambda specs: st.tuples(
    st.just(specs), st.lists(_VALUES, min_size=len(specs), max_size=len(specs)),
    st.lists(_VALUES, min_size=len(specs), max_size=len(specs)))),
    st.booleans(), st.booleans())
def test_a_record_behaves_as_the_slotted_dataclass(case: tuple[list[Any], ...], frozen: bool,
                                                   order: bool) -> None:
    specs, first, second = case
    made, reference = _pair(specs, frozen, order)
    assert str(inspect.signature(made)) == str(inspect.signature(reference))
    assert made.__doc__ == reference.__doc__
    assert made.__match_args__ == reference.__match_args__  # type: ignore[attr-defined]
    assert dataclasses.is_dataclass(made)
    assert made.__dataclass_params__.frozen is frozen  # type: ignore[attr-defined]
    a, b = _build(made, first), _build(made, second)
    ra, rb = _build(reference, first), _build(reference, second)
    assert repr(a) == repr(ra)
    assert dataclasses.asdict(a) == dataclasses.asdict(ra)
    assert (a == b) == (ra == rb)
    assert (a == _build(made, first)) is True and (a != b) == (ra != rb)
    assert _raised(lambda: hash(a)) == _raised(lambda: hash(ra))  # a mutable one: unhashable
    if frozen:
        assert hash(a) == hash(ra)
    for compare in ((lambda x, y: x < y), (lambda x, y: x <= y), (lambda x, y: x > y),
                    (lambda x, y: x >= y)):
        assert _outcome(lambda c=compare: c(a, b)) == _outcome(lambda c=compare: c(ra, rb))
    assert [(f.name, f.compare, f.hash, f.repr) for f in dataclasses.fields(a)] == \
        [(f.name, f.compare, f.hash, f.repr) for f in dataclasses.fields(ra)]
    if specs:  # a field set, then deleted: refused when frozen, done when not
        name = dataclasses.fields(a)[0].name
        assert _raised(lambda: setattr(a, name, 1)) == _raised(lambda: setattr(ra, name, 1))
        assert _raised(lambda: delattr(a, name)) == _raised(lambda: delattr(ra, name))
        a, ra = _build(made, first), _build(reference, first)
    assert dataclasses.replace(a) == a
    if frozen:  # what pickling a frozen slotted class keeps
        assert a.__getstate__() == ra.__getstate__()  # type: ignore[attr-defined]
        restored = object.__new__(made)
        restored.__setstate__(a.__getstate__())  # type: ignore[attr-defined]
        assert restored == a
    assert _raised(lambda: made(*first)) == _raised(lambda: reference(*first))
    with pytest.raises((AttributeError, TypeError)):
        a.unknown = 1  # slots: no other attribute
    assert a.__eq__(ra) is NotImplemented  # only the very same class compares


def _outcome(call: Any) -> Any:
    """What ``call()`` returns, or the type of what it raises."""
    try:
        return call()
    except Exception as error:
        return type(error)


def test_order_methods_of_the_class_itself_are_refused_as_the_dataclass_refuses_them() -> None:
    def body() -> type:
        return type("Value", (), {"__annotations__": {"a": "int"}, "__module__": __name__,
                                  "__lt__": lambda self, other: True})

    for decorate in (record(order=True), dataclasses.dataclass(frozen=True, order=True,
                                                               slots=True)):
        with pytest.raises(TypeError, match=r"Cannot overwrite attribute __lt__ in class "
                                            r"Value\.? Consider using functools.total_ordering"):
            decorate(body())


def test_post_init_runs_last_and_an_initvar_is_taken_as_the_dataclass_takes_it() -> None:
    @record
    class Checked:
        low: int
        high: int = 10

        def __post_init__(self) -> None:
            if self.low > self.high:
                raise ValueError("low above high")

    @record
    class Scaled:
        value: int
        scale: dataclasses.InitVar[int] = 1

        def __post_init__(self, scale: int) -> None:
            object.__setattr__(self, "value", self.value * scale)

    assert Checked(1).high == 10
    with pytest.raises(ValueError, match="low above high"):
        Checked(11)
    assert Scaled(2, 3).value == 6 and Scaled(2).value == 2


def _methods(compiled: Any) -> list[str]:
    """The functions an ``exec`` defines inside the factory that returns them (the
    dataclass's ``__create_fn__``, the record's ``__create__``): source or code."""
    if isinstance(compiled, str):
        return [line.split("(")[0].removeprefix(" def ") for line in compiled.splitlines()
                if line.startswith(" def ")]
    factories = [const for const in compiled.co_consts if isinstance(const, types.CodeType)]
    return [const.co_name for factory in factories for const in factory.co_consts
            if isinstance(const, types.CodeType)]


def test_a_record_compiles_its_init_alone_when_the_first_instance_is_made() -> None:
    # What makes a record cheaper to define: a frozen dataclass compiles six methods.
    compiled: list[str] = []
    real = builtins.exec

    def counting(source: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.extend(_methods(source))
        return real(source, *args, **kwargs)

    builtins.exec = counting
    try:
        made = record(type("Value", (), {"__annotations__": {"a": "int", "b": "str"}, "b": "",
                                         "__module__": __name__}))
        defined = list(compiled)
        first = made(1)
        after_first = list(compiled)
        assert made(1, "") == first and first.b == ""
    finally:
        builtins.exec = real
    assert defined == []  # nothing compiled until an instance is made
    assert after_first == ["__init__"] and compiled == ["__init__"]  # once, alone
    assert str(inspect.signature(made)) == "(a: 'int', b: 'str' = '') -> None"


def test_a_positional_field_without_default_after_one_with_is_refused_at_definition() -> None:
    body = {"__annotations__": {"a": "int", "b": "str"}, "a": 0, "__module__": __name__}
    with pytest.raises(TypeError) as made:
        record(type("Value", (), dict(body)))
    with pytest.raises(TypeError) as reference:
        dataclasses.dataclass(frozen=True, slots=True)(type("Value", (), dict(body)))
    assert str(made.value) == str(reference.value)


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
