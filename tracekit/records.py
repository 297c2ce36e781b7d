"""tracekit's record classes: :func:`record` is ``dataclasses.dataclass`` with ``__eq__``, ``__hash__`` and
``__repr__`` shared by every record class instead of generated for each.

Python 3.11's ``dataclass`` writes each method it generates as source and compiles it with its own ``exec``: six
for a frozen class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``). A
tracekit command defines about 70 record classes, and those compiles were the largest single item of what the
post-run hook's analysis child adds to the import floor (41 ms of ~0.3 CPU-s on the small trace; the comparison,
hash and repr compiles ~13 ms of it, about 115 M of its 3,020 M instructions under callgrind). The methods here
behave as the generated ones (``tests/test_records.py`` checks every record class against a twin made by
``dataclasses.dataclass`` itself):

- ``==`` compares the fields whose ``compare`` is true, in order, as one tuple, and only between instances of
  the very same class (else ``NotImplemented``);
- ``hash`` (frozen classes; a mutable record is unhashable, as a dataclass with ``eq``) hashes the tuple of the
  fields whose ``hash`` is true, or whose ``compare`` is true where ``hash`` is None;
- ``repr`` is ``QualName(field=value!r, ...)`` over the fields whose ``repr`` is true, ``...`` for an instance
  already being shown higher up (a cycle).

A method the class body defines itself is kept, as ``dataclass`` keeps it. ``dataclasses.fields``, ``replace`` and
``asdict`` work on records as on any dataclass: a record *is* one (only its three methods differ in origin).
"""
from __future__ import annotations

import _thread
import dataclasses
from operator import attrgetter

#: record class -> (getter of the compared fields' tuple, of the hashed fields', [(name, getter)] shown by repr)
_PLANS: dict = {}


def record(cls=None, /, *, frozen: bool = False):
    """``@record`` or ``@record(frozen=True)``: ``dataclasses.dataclass(cls, frozen=frozen)`` with the shared
    methods of this module (module doc)."""
    def wrap(c):
        body = c.__dict__
        # dataclass' own test: a __hash__ the body wrote (not the None Python sets beside a body's __eq__)
        explicit_hash = "__hash__" in body and not (body["__hash__"] is None and "__eq__" in body)
        has_repr, has_eq = "__repr__" in body, "__eq__" in body
        c = dataclasses.dataclass(c, frozen=frozen, eq=False, repr=False)
        if not has_repr:
            c.__repr__ = _repr
        if not has_eq:
            c.__eq__ = _eq
        if not explicit_hash:  # (as dataclass with eq: frozen -> a hash of the fields; mutable -> unhashable)
            c.__hash__ = _hash if frozen else None
        return c
    return wrap if cls is None else wrap(cls)


def _tuple_getter(names: tuple):
    """A function of an instance giving the tuple of its ``names`` attributes (attrgetter gives a bare value for
    one name)."""
    if len(names) > 1:
        return attrgetter(*names)
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _plan(cls) -> tuple:
    """The getters of ``cls`` (made once per class)."""
    plan = _PLANS.get(cls)
    if plan is None:
        fs = dataclasses.fields(cls)
        compared = _tuple_getter(tuple(f.name for f in fs if f.compare))
        hashed = _tuple_getter(tuple(f.name for f in fs if (f.compare if f.hash is None else f.hash)))
        shown = [(f.name, attrgetter(f.name)) for f in fs if f.repr]
        plan = _PLANS[cls] = (compared, hashed, shown)
    return plan


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    get = _plan(self.__class__)[0]
    return get(self) == get(other)


def _hash(self):
    return hash(_plan(self.__class__)[1](self))


#: (id of the instance, thread) pairs whose repr is being made: a cycle shows "..." (as dataclass' repr does)
_SHOWING: set = set()


def _repr(self):
    key = (id(self), _thread.get_ident())
    if key in _SHOWING:
        return "..."
    _SHOWING.add(key)
    try:
        shown = _plan(self.__class__)[2]
        return f"{self.__class__.__qualname__}({', '.join(f'{n}={get(self)!r}' for n, get in shown)})"
    finally:
        _SHOWING.discard(key)
