"""``record``: a slotted dataclass, frozen by default, that costs a third as much to define.

initorch's values are slotted dataclasses, about a hundred and thirty of them, and an
engine's worker imports most of them while it starts: defining them was a third of
initorch's own time in an SGLang rank (2026-12-06: 39 ms of 120, CPython 3.11).  A
dataclass compiles each method it generates from source (a frozen one six, one with
``order`` ten; up to Python 3.12 one ``exec`` each).  A record compiles one, its
``__init__``; the others are shared by every record:

* ``__repr__``, ``__eq__``, ``__hash__`` and with ``order=True`` ``__lt__``, ``__le__``,
  ``__gt__`` and ``__ge__`` read the class's fields through an ``operator.attrgetter``
  made when the class is defined (C, no compilation).  They return what the
  dataclass's own would: the same ``repr``, equality and order only against an
  instance of the very same class, over the fields with ``compare`` (and ``hash``)
  set, and the same hash; a mutable record (``frozen=False``) is unhashable, as the
  dataclass makes it.  Comparing and hashing cost about what the generated methods
  cost; only ``repr`` is slower, and it is for people.
* A frozen record's ``__setattr__`` and ``__delattr__`` refuse a field as the frozen
  dataclass's do (:class:`dataclasses.FrozenInstanceError`), reading the class and
  its field names from the class.

The ``__init__`` is the one the dataclass would compile: the same parameters,
defaults, factories and keyword-only fields, each field set with
``object.__setattr__``, then ``__post_init__``.  It is compiled when the first instance
is made, not when the class is defined: a process defines far more records than it
instantiates (an SGLang drive rank defines 68 before its run and has built 24).  Until
then the class shows the signature the compiled one will have, and a parameter without
a default after one with is refused at definition, as the dataclass refuses it.

The dataclass itself is made with nothing to compile (``init``, ``repr``, ``eq`` and
``frozen`` off: it only collects the fields and adds the slots), then reports itself as
the dataclass it is, so that ``fields``, ``replace``, ``asdict`` and pickling work as on
one.  A method the class defines itself is kept, as the dataclass keeps it.  A record
that derives from a dataclass, has an ``InitVar`` or a field named like the compiled
``__init__``'s own names is made by the dataclass itself, with only the shared methods
added.

    @record
    class Edge:
        source: str
        target: str
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
import sys
from collections.abc import Callable, Iterable
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
def record(*, kw_only: bool = False, frozen: bool = True,
           order: bool = False) -> Callable[[_T], _T]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: _T | None = None, /, *, kw_only: bool = False, frozen: bool = True,
           order: bool = False) -> _T | Callable[[_T], _T]:
    """``@dataclass(frozen=True, slots=True)`` (``kw_only`` and ``order`` as there), with
    the ``__init__`` compiled alone and the other methods shared (see the module).

    ``frozen=False`` is ``@dataclass(slots=True)``: a mutable value, unhashable unless
    the class defines ``__hash__``, as the dataclass makes it."""

    def make(cls: _T) -> _T:
        body = dict(vars(cls))
        if order:
            for name in _ORDER:
                if name in body:
                    raise TypeError(f"Cannot overwrite attribute {name} in class "
                                    f"{cls.__name__}. Consider using functools.total_ordering")
        if not _compiles_alone(cls):
            made = cast(_T, dataclasses.dataclass(
                cls, frozen=frozen, order=order, eq=order, repr=False, slots=True,
                kw_only=kw_only))
        else:
            made = cast(_T, dataclasses.dataclass(cls, init=False, repr=False, eq=False,
                                                  slots=True, kw_only=kw_only))
            _complete(made, body, frozen=frozen)
        fields = dataclasses.fields(made)
        compared = _getter([f.name for f in fields if f.compare])
        shared: dict[str, Any] = {"__record_compared__": compared}
        if "__repr__" not in body:
            shared |= {"__repr__": _repr,
                       "__record_shown__": tuple(f.name for f in fields if f.repr)}
        if "__eq__" not in body:
            shared["__eq__"] = _eq
        if order:
            shared |= _ORDER
        # As the dataclass decides (its _hash_action): a __hash__ of the class's own is
        # kept, unless it is the None that defining __eq__ alone leaves; a frozen value
        # hashes its fields, a mutable one is unhashable.
        if "__hash__" not in body or (body["__hash__"] is None and "__eq__" in body):
            shared |= {"__hash__": _hash, "__record_hashed__": _getter(
                [f.name for f in fields if (f.compare if f.hash is None else f.hash)])
            } if frozen else {"__hash__": None}
        for name, value in shared.items():
            setattr(made, name, value)
        return made

    return make if cls is None else make(cls)


# Names the compiled __init__ gives itself: a field may not take one (nor may an InitVar,
# which the dataclass's __init__ takes and a record's does not).
_OWN_NAMES = ("self", "_set", "_FACTORY")
_OWN_PREFIXES = ("_factory_", "_default_", "_type_")


def _compiles_alone(cls: type) -> bool:
    """Whether a record's own ``__init__`` fits ``cls``: no dataclass among its bases
    (whose fields and frozenness the dataclass checks against its own), no field named
    like the compiled ``__init__``'s own names, and no ``InitVar``."""
    if any(dataclasses.is_dataclass(base) for base in cls.__mro__[1:]):
        return False
    annotations = inspect.get_annotations(cls)  # its own (dataclasses imports inspect)
    return not any(name in _OWN_NAMES or name.startswith(_OWN_PREFIXES)
                   or "InitVar" in str(annotation) for name, annotation in annotations.items())


def _complete(cls: type, body: dict[str, Any], *, frozen: bool) -> None:
    """Give ``cls`` (a dataclass made with nothing compiled) what the dataclass
    compiles or adds: its ``__init__``, the docstring made from the signature, and the
    parameters; a frozen one also the refusals to change a field and the pickling of a
    frozen slotted class."""
    fields = dataclasses.fields(cls)
    parameters = _parameters(fields)
    cls.__init__ = _init_on_first_call(cls, parameters)  # type: ignore[misc]
    if frozen:
        cls.__record_class__ = cls  # type: ignore[attr-defined]
        cls.__record_fields__ = frozenset(f.name for f in fields)  # type: ignore[attr-defined]
        for name, method in (("__setattr__", _setattr), ("__delattr__", _delattr),
                             ("__getstate__", _getstate), ("__setstate__", _setstate)):
            if name not in body:
                setattr(cls, name, method)
    if not body.get("__doc__"):  # as the dataclass writes it
        signature = inspect.Signature(parameters, return_annotation=None)
        cls.__doc__ = cls.__name__ + str(signature).replace(" -> None", "")
    params = cls.__dataclass_params__  # type: ignore[attr-defined]
    params.init, params.frozen = True, frozen


class _Factory:
    """The default of a parameter whose field has a ``default_factory``."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY = _Factory()


def _parameters(fields: Iterable[dataclasses.Field[Any]]) -> list[inspect.Parameter]:
    """The ``__init__``'s parameters as the dataclass orders them (positional, then
    keyword-only), refusing, as it does, a positional one without a default after one
    with."""
    positional: list[inspect.Parameter] = []
    keyword: list[inspect.Parameter] = []
    for f in fields:
        if not f.init:
            continue
        if f.default_factory is not dataclasses.MISSING:
            default: Any = _FACTORY
        elif f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = inspect.Parameter.empty
            last = positional[-1] if positional else None
            if last is not None and last.default is not inspect.Parameter.empty \
                    and not f.kw_only:
                # The dataclass's words; from Python 3.13 on they name the defaulted one.
                raise TypeError(f"non-default argument {f.name!r} follows default argument"
                                + (f" {last.name!r}" if sys.version_info >= (3, 13) else ""))
        kind = inspect.Parameter.KEYWORD_ONLY if f.kw_only else \
            inspect.Parameter.POSITIONAL_OR_KEYWORD
        (keyword if f.kw_only else positional).append(
            inspect.Parameter(f.name, kind, default=default, annotation=f.type))
    return [*positional, *keyword]


_SELF = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _init_on_first_call(cls: type, parameters: list[inspect.Parameter]) -> Callable[..., None]:
    """``cls.__init__`` until the first instance: it compiles the real one
    (:func:`_compiled_init`), puts it on the class and runs it; its signature is the
    compiled one's.  Two threads making the first instances at once each compile one,
    and either is the class's."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init = _compiled_init(cls, dataclasses.fields(cls), parameters)
        cls.__init__ = init  # type: ignore[misc]
        init(self, *args, **kwargs)

    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [_SELF, *parameters], return_annotation=None)
    return __init__


def _compiled_init(cls: type, fields: Iterable[dataclasses.Field[Any]],
                   parameters: list[inspect.Parameter]) -> Callable[..., None]:
    """The ``__init__`` the dataclass would compile for ``fields``, taking ``parameters``
    (:func:`_parameters`; each field set with ``object.__setattr__``, which a frozen
    record's own refusal does not see, and a mutable one's plain assignment would cost
    the same)."""
    given: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": _FACTORY}
    header = ["self"]
    for parameter in parameters:
        name = parameter.name
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in header:
            header.append("*")
        given[f"_type_{name}"] = parameter.annotation
        if parameter.default is inspect.Parameter.empty:
            header.append(f"{name}:_type_{name}")
        else:  # a factory's parameter defaults to _FACTORY
            given[f"_default_{name}"] = parameter.default
            header.append(f"{name}:_type_{name}=_default_{name}")
    lines: list[str] = []
    for f in fields:
        value = f.name
        if f.default_factory is not dataclasses.MISSING:
            given[f"_factory_{f.name}"] = f.default_factory
            value = (f"_factory_{f.name}() if {f.name} is _FACTORY else {f.name}" if f.init
                     else f"_factory_{f.name}()")
        elif not f.init:
            if f.default is dataclasses.MISSING:
                continue  # left unset, as the dataclass leaves it
            given[f"_default_{f.name}"] = f.default
            value = f"_default_{f.name}"
        lines.append(f"  _set(self,{f.name!r},{value})")
    if hasattr(cls, "__post_init__"):
        lines.append("  self.__post_init__()")
    source = (f"def __create__({', '.join(given)}):\n"
              f" def __init__({', '.join(header)}) -> None:\n" + "\n".join(lines or ["  pass"])
              + "\n return __init__\n")
    namespace: dict[str, Any] = {}
    # dont_inherit: without this module's ``from __future__ import annotations``, so that
    # the annotations are the fields' types, as the dataclass's are.
    code = compile(source, f"<record {cls.__qualname__}>", "exec", dont_inherit=True)
    exec(code, {"__builtins__": __builtins__}, namespace)
    init: Callable[..., None] = namespace["__create__"](**given)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _setattr(self: Any, name: str, value: Any) -> None:
    cls = type(self).__record_class__
    if type(self) is cls or name in cls.__record_fields__:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
    super(cls, self).__setattr__(name, value)


def _delattr(self: Any, name: str) -> None:
    cls = type(self).__record_class__
    if type(self) is cls or name in cls.__record_fields__:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
    super(cls, self).__delattr__(name)


def _getstate(self: Any) -> list[Any]:
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)


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


def _ordering(name: str) -> Callable[[Any, Any], object]:
    """The order method ``__<name>__``, as the dataclass's: the compared fields as
    tuples, only against an instance of the very same class."""
    compare = getattr(operator, name)

    def method(self: Any, other: Any) -> object:
        if other.__class__ is not self.__class__:
            return NotImplemented
        compared = type(self).__record_compared__
        return compare(compared(self), compared(other))

    method.__name__ = method.__qualname__ = f"__{name}__"
    return method


_ORDER = {f"__{name}__": _ordering(name) for name in ("lt", "le", "gt", "ge")}
