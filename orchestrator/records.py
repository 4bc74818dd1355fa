"""``record``: a frozen, slotted dataclass that costs 40% less to define.

initorch's values are frozen dataclasses, about a hundred of them, and an engine's
worker imports most of them while it starts: defining them was half of initorch's own
time in a vLLM worker (2026-12-05: 29 ms of 57, CPython 3.11).  Defining a dataclass
compiles each method it generates from source, one ``exec`` each; ``__repr__``,
``__eq__`` and ``__hash__`` are three of the six of a frozen one.  A record takes
those three from here instead: one function each, shared by every record, that reads
the class's fields through an ``operator.attrgetter`` made when the class is defined
(no compilation).  What they return is what the dataclass's own would: the same
``repr``, equality only with an instance of the very same class, over the fields with
``compare`` (and ``hash``) set, and the same hash.  Comparing and hashing cost about
what the generated methods cost (the getter is C); only ``repr`` is slower, and it is
for people.  ``__init__``, the frozen ``__setattr__``/``__delattr__`` and the slots stay
the dataclass's own, as do ``fields``, ``replace`` and ``asdict``; a method the class
defines itself is kept, as the dataclass keeps it.

    @record
    class Edge:
        source: str
        target: str
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar, cast, overload

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    try:
        from typing import dataclass_transform
    except ImportError:  # Python 3.10: only a type checker reads it
        def dataclass_transform(**_kwargs: object) -> Callable[[Any], Any]:
            return lambda decorator: decorator

__all__ = ["record"]

_T = TypeVar("_T", bound=type)


@overload
def record(cls: _T, /) -> _T: ...


@overload
def record(*, kw_only: bool = False) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: _T | None = None, /, *, kw_only: bool = False) -> _T | Callable[[_T], _T]:
    """``@dataclass(frozen=True, slots=True)`` (``kw_only`` as there), with the shared
    ``__repr__``, ``__eq__`` and ``__hash__`` of this module."""

    def make(cls: _T) -> _T:
        body = dict(vars(cls))
        made = cast(_T, dataclasses.dataclass(cls, frozen=True, slots=True, kw_only=kw_only,
                                              repr=False, eq=False))
        fields = dataclasses.fields(made)
        shared: dict[str, Any] = {}
        if "__repr__" not in body:
            shared |= {"__repr__": _repr,
                       "__record_shown__": tuple(f.name for f in fields if f.repr)}
        if "__eq__" not in body:
            shared |= {"__eq__": _eq, "__record_compared__":
                       _getter([f.name for f in fields if f.compare])}
        # As the dataclass decides (its _hash_action): a __hash__ of the class's own is
        # kept, unless it is the None that defining __eq__ alone leaves.
        if "__hash__" not in body or (body["__hash__"] is None and "__eq__" in body):
            shared |= {"__hash__": _hash, "__record_hashed__": _getter(
                [f.name for f in fields if (f.compare if f.hash is None else f.hash)])}
        for name, value in shared.items():
            setattr(made, name, value)
        return made

    return make if cls is None else make(cls)


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """The fields ``names`` of an instance, always as a tuple (``attrgetter`` of one
    name gives the bare value)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        single = attrgetter(names[0])
        return lambda instance: (single(instance),)
    return lambda _instance: ()


def _repr(self: Any) -> str:
    shown = ", ".join(f"{name}={getattr(self, name)!r}"
                      for name in type(self).__record_shown__)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: Any) -> object:
    if other.__class__ is not self.__class__:
        return NotImplemented
    compared = type(self).__record_compared__
    return bool(compared(self) == compared(other))


def _hash(self: Any) -> int:
    return hash(type(self).__record_hashed__(self))
