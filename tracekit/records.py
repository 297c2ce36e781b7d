"""tracekit's record classes: :func:`record` is ``dataclasses.dataclass`` with its methods shared by every record
class, or written only when first needed, instead of compiled for each class as it is defined.

Python 3.11's ``dataclass`` writes each method it generates as source and compiles it with its own ``exec``: six
for a frozen class (``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``, ``__delattr__``). A
tracekit command defines about 70 record classes (57 frozen), and those compiles were the largest single item of
what the post-run hook's analysis child adds to the import floor (41 ms of ~0.3 CPU-s on the small trace). The
methods here behave as the generated ones (``tests/test_records.py`` checks every record class against a twin made
by ``dataclasses.dataclass`` itself):

- ``==`` compares the fields whose ``compare`` is true, in order, as one tuple, and only between instances of
  the very same class (else ``NotImplemented``);
- ``hash`` (frozen classes; a mutable record is unhashable, as a dataclass with ``eq``) hashes the tuple of the
  fields whose ``hash`` is true, or whose ``compare`` is true where ``hash`` is None;
- ``repr`` is ``QualName(field=value!r, ...)`` over the fields whose ``repr`` is true, ``...`` for an instance
  already being shown higher up (a cycle);
- ``__init__`` is the one dataclass writes (same parameters, defaults, ``<factory>`` defaults, frozen assignments,
  ``__post_init__`` call), compiled the first time the class' ``__init__`` is looked up (its first instance,
  ``inspect.signature``, ``help``): a command instantiates most record classes, never some;
- a frozen class' ``__setattr__``/``__delattr__`` raise ``FrozenInstanceError`` as dataclass' do, as closures
  over the class and its field names (nothing compiled). These two compiles (114 of the ~190 left after the
  first three methods were shared) and the ``__init__`` ones were 118 M of the hook child's 2,931 M instructions.

A class outside what the lazy ``__init__`` writes (no docstring: dataclass writes one from the signature; a
dataclass base; an InitVar, KW_ONLY, keyword-only or ``init=False`` field; a field named ``self``) gets
dataclass' own ``__init__`` and frozen methods. A method the class body defines itself is kept, as ``dataclass``
keeps it. ``dataclasses.fields``, ``replace`` and ``asdict`` work on records as on any dataclass: a record *is*
one (its ``__dataclass_params__`` say ``init`` and ``frozen`` as given; only its methods differ in origin).
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
        if _compiles_nothing(c):
            c = _without_compiles(c, frozen)
        else:
            c = dataclasses.dataclass(c, frozen=frozen, eq=False, repr=False)
        if not has_repr:
            c.__repr__ = _repr
        if not has_eq:
            c.__eq__ = _eq
        if not explicit_hash:  # (as dataclass with eq: frozen -> a hash of the fields; mutable -> unhashable)
            c.__hash__ = _hash if frozen else None
        return c
    return wrap if cls is None else wrap(cls)


def _compiles_nothing(c) -> bool:
    """Whether :func:`_without_compiles` makes ``c`` as dataclass would: a class with a docstring (dataclass writes
    one from ``__init__``'s signature otherwise), no dataclass among its bases, and only plain fields (no InitVar,
    KW_ONLY, keyword-only or init=False field, none named ``self``)."""
    if not c.__doc__ or any(dataclasses.is_dataclass(b) for b in c.__mro__[1:]):
        return False
    for name, ann in c.__dict__.get("__annotations__", {}).items():
        if name == "self" or ann is dataclasses.KW_ONLY or "InitVar" in str(ann) or "KW_ONLY" in str(ann):
            return False
        f = c.__dict__.get(name)
        if isinstance(f, dataclasses.Field) and (not f.init or f.kw_only is True):
            return False
    return True


def _without_compiles(c, frozen: bool):
    """``dataclasses.dataclass(c, frozen=frozen, eq=False, repr=False)`` without a compile: dataclass processes
    the fields (``init=False``: it writes no ``__init__``), ``__init__`` is written the first time the class'
    ``__init__`` is looked up (:class:`_FirstInit`: most record classes of a command are instantiated, a few
    never), and a frozen class gets closures for ``__setattr__``/``__delattr__`` instead of two compiled methods."""
    body = c.__dict__
    own_init = "__init__" in body
    if frozen and ("__setattr__" in body or "__delattr__" in body):
        raise TypeError(f"Cannot overwrite attribute {'__setattr__' if '__setattr__' in body else '__delattr__'} "
                        f"in class {c.__name__}")
    c = dataclasses.dataclass(c, init=False, eq=False, repr=False)
    fs = dataclasses.fields(c)
    seen_default = None
    for f in fs:  # (the check dataclass makes while writing __init__)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            if seen_default:
                raise TypeError(f"non-default argument {f.name!r} follows default argument")
        else:
            seen_default = f
    params = c.__dataclass_params__
    params.init, params.frozen = True, frozen
    if not own_init:
        c.__init__ = _FIRST_INIT
    if frozen:
        c.__setattr__, c.__delattr__ = _frozen_methods(c, frozenset(f.name for f in fs))
    return c


class _FirstInit:
    """A record's ``__init__`` until it is first looked up (the first instance, ``inspect.signature``, ``help``):
    then the class' own is written (:func:`_init_for`), put in its place, and given."""

    def __get__(self, obj, owner):
        c = next(k for k in owner.__mro__ if k.__dict__.get("__init__") is self)
        c.__init__ = init = _init_for(c)
        return init if obj is None else init.__get__(obj, owner)


_FIRST_INIT = _FirstInit()


class _Factory:
    """The default of a field made by a default factory, in ``__init__``'s signature (shown as dataclass shows
    it)."""

    def __repr__(self):
        return "<factory>"


_HAS_FACTORY = _Factory()


def _init_for(c):
    """The ``__init__`` dataclass writes for ``c`` (fields in order, defaults, default factories, frozen
    assignments, ``__post_init__``), compiled once."""
    fs = dataclasses.fields(c)
    frozen = c.__dataclass_params__.frozen
    ns = {"__tk_set": object.__setattr__, "__tk_factory": _HAS_FACTORY}
    args, lines = [], []
    for f in fs:
        value = f.name
        if f.default is not dataclasses.MISSING:
            ns[f"__tk_dflt_{f.name}"] = f.default
            args.append(f"{f.name}=__tk_dflt_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            ns[f"__tk_make_{f.name}"] = f.default_factory
            args.append(f"{f.name}=__tk_factory")
            value = f"__tk_make_{f.name}() if {f.name} is __tk_factory else {f.name}"
        else:
            args.append(f.name)
        lines.append(f"__tk_set(self, {f.name!r}, {value})" if frozen else f"self.{f.name} = {value}")
    if hasattr(c, "__post_init__"):
        lines.append("self.__post_init__()")
    src = f"def __init__(self, {', '.join(args)}):\n    " + ("\n    ".join(lines) or "pass")
    exec(src, ns)
    fn = ns["__init__"]
    fn.__qualname__ = f"{c.__qualname__}.__init__"
    fn.__module__ = c.__module__
    fn.__annotations__ = {**{f.name: f.type for f in fs}, "return": None}
    return fn


def _frozen_methods(c, names: frozenset):
    """The ``__setattr__`` and ``__delattr__`` of a frozen dataclass ``c`` (fields ``names``), as closures."""
    def __setattr__(self, name, value):
        if type(self) is c or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(c, self).__setattr__(name, value)

    def __delattr__(self, name):
        if type(self) is c or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(c, self).__delattr__(name)

    __setattr__.__qualname__, __delattr__.__qualname__ = f"{c.__qualname__}.__setattr__", f"{c.__qualname__}.__delattr__"
    return __setattr__, __delattr__


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
