"""tracekit.records: the shared ``__eq__``/``__hash__``/``__repr__`` of record classes against the methods
``dataclasses.dataclass`` itself generates (the oracle), on every record class of the package and on class bodies
that define some of the methods themselves."""
from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import importlib
import pkgutil

import pytest

import tracekit
from tracekit import records


def _record_classes() -> list[type]:
    out = []
    for m in pkgutil.walk_packages(tracekit.__path__, "tracekit."):
        if m.name.endswith("__main__"):
            continue  # (runs the command line)
        mod = importlib.import_module(m.name)
        out += [v for v in vars(mod).values() if isinstance(v, type) and v.__module__ == mod.__name__
                and dataclasses.is_dataclass(v) and (v.__eq__ is records._eq or v.__repr__ is records._repr)]
    return sorted(out, key=lambda c: (c.__module__, c.__qualname__))


RECORDS = _record_classes()


def _twin(cls: type) -> type:
    """``cls``'s fields (their repr/compare/hash flags) in a class made by dataclass itself, same qualname."""
    frozen = cls.__dataclass_params__.frozen
    twin = dataclasses.make_dataclass(cls.__name__, [
        (f.name, object, dataclasses.field(repr=f.repr, compare=f.compare, hash=f.hash))
        for f in dataclasses.fields(cls)], frozen=frozen, eq=True, repr=True)
    twin.__qualname__ = cls.__qualname__
    return twin


def _make(cls: type, values: dict):
    obj = object.__new__(cls)  # (no __init__: any values, any class)
    for k, v in values.items():
        object.__setattr__(obj, k, v)
    return obj


def test_every_record_class_is_found():
    assert len(RECORDS) >= 60  # the package's dataclasses but for the few with methods of their own
    assert {c.__qualname__ for c in RECORDS} >= {"Options", "Rule", "Chip", "ClockFit", "Finding"}


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_record_methods_match_dataclass(cls):
    twin = _twin(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    base = {n: (i, f"v{i}") for i, n in enumerate(names)}
    a, ta = _make(cls, base), _make(twin, base)
    if cls.__repr__ is records._repr:
        assert repr(a) == repr(ta)
    if cls.__eq__ is not records._eq:
        return
    assert (a == _make(cls, dict(base))) is True
    for n in names:  # one field changed at a time: equal exactly where dataclass' __eq__ says so
        changed = {**base, n: ("other", n)}
        assert (a == _make(cls, changed)) == (ta == _make(twin, changed)), n
        assert (a != _make(cls, changed)) == (ta != _make(twin, changed)), n
    assert a.__eq__(ta) is NotImplemented and (a == ta) is False  # another class, same fields
    assert (cls.__hash__ is None) == (twin.__hash__ is None)
    if cls.__hash__ is not None:
        assert hash(a) == hash(ta)
        for n in names:
            changed = {**base, n: ("other", n)}
            assert (hash(_make(cls, changed)) == hash(a)) == (hash(_make(twin, changed)) == hash(ta)), n


@pytest.mark.parametrize("cls", [c for c in RECORDS if c.__repr__ is records._repr][:5])
def test_recursive_repr_matches_dataclass(cls):
    names = [f.name for f in dataclasses.fields(cls)]
    twin = _twin(cls)
    a, ta = _make(cls, {n: 1 for n in names}), _make(twin, {n: 1 for n in names})
    object.__setattr__(a, names[0], a)
    object.__setattr__(ta, names[0], ta)
    assert repr(a) == repr(ta)


def _bodies():
    """Class bodies (name -> namespace maker) with and without methods of their own."""
    def eq(self, other):
        return True

    def hsh(self):
        return 7

    def rep(self):
        return "mine"

    return {"plain": {}, "own_eq": {"__eq__": eq}, "own_hash": {"__hash__": hsh}, "own_repr": {"__repr__": rep},
            "own_eq_hash": {"__eq__": eq, "__hash__": hsh}}


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("body", list(_bodies()))
def test_own_methods_kept_as_dataclass_keeps_them(body, frozen):
    def make(decorate):
        ns = {"__annotations__": {"a": "int", "b": "str"}, "b": dataclasses.field(default="x", compare=False),
              **_bodies()[body]}
        if "__eq__" in ns and "__hash__" not in ns:
            ns["__hash__"] = None  # (what the class statement itself does beside an __eq__ of the body)
        return decorate(type("C", (), ns))
    ours = make(records.record(frozen=frozen))
    theirs = make(lambda c: dataclasses.dataclass(c, frozen=frozen))
    x, y = ours(1), theirs(1)
    assert repr(x).replace(ours.__qualname__, "Q") == repr(y).replace(theirs.__qualname__, "Q")
    assert (x == ours(1, "y")) == (y == theirs(1, "y"))
    assert (x == ours(2)) == (y == theirs(2))
    assert (ours.__hash__ is None) == (theirs.__hash__ is None)
    if ours.__hash__ is not None:
        assert (hash(x) == hash(ours(1, "y"))) == (hash(y) == hash(theirs(1, "y")))
    if frozen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            x.a = 3
    assert dataclasses.replace(x, a=5).a == 5 and dataclasses.asdict(x) == dataclasses.asdict(y)


# ------------------------------------------------------------------ __init__ and the frozen methods, written lazily
def _init_twin(cls: type) -> type:
    """``cls``'s fields with their types and defaults in a class made by dataclass itself (its own ``__init__``)."""
    twin = dataclasses.make_dataclass(cls.__name__, [
        (f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
        for f in dataclasses.fields(cls)], frozen=cls.__dataclass_params__.frozen)
    twin.__qualname__ = cls.__qualname__
    return twin


@pytest.mark.parametrize("cls", [c for c in RECORDS if "__init__" not in vars(c) or
                                 vars(c)["__init__"] is records._FIRST_INIT or
                                 vars(c)["__init__"].__code__.co_filename == "<string>"],
                         ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_record_init_signature_matches_dataclass(cls):
    assert str(inspect.signature(cls)) == str(inspect.signature(_init_twin(cls)))
    assert cls.__dataclass_params__.init is True


def _body(decorate, *, frozen: bool, doc: bool, post: list | None = None, extra: dict | None = None):
    ns = {"__annotations__": {"a": "int", "b": "list", "c": "str"}, "b": dataclasses.field(default_factory=list),
          "c": "x", "__doc__": "A record." if doc else None, **(extra or {})}
    if post is not None:
        ns["__post_init__"] = lambda self: post.append((type(self).__name__, self.a))
    return decorate(type("C", (), ns))


def _raised(f):
    try:
        f()
    except Exception as e:  # (the exception's type and text, to compare with dataclass')
        return type(e), str(e)
    return None


@pytest.mark.parametrize("frozen", [False, True])
@pytest.mark.parametrize("doc", [True, False])
def test_init_and_frozen_methods_behave_as_dataclass(frozen, doc):
    po, pt = [], []
    ours = _body(records.record(frozen=frozen), frozen=frozen, doc=doc, post=po)
    theirs = _body(lambda c: dataclasses.dataclass(c, frozen=frozen), frozen=frozen, doc=doc, post=pt)
    assert ours.__doc__ == theirs.__doc__
    assert str(inspect.signature(ours)) == str(inspect.signature(theirs))
    for p in ("init", "frozen", "order", "unsafe_hash"):
        assert getattr(ours.__dataclass_params__, p) == getattr(theirs.__dataclass_params__, p), p
    for args, kw in [((1,), {}), ((1, [2], "y"), {}), ((), {"a": 3, "c": "z"}), ((1,), {"b": [5]})]:
        x, y = ours(*args, **kw), theirs(*args, **kw)
        assert vars(x) == vars(y)
    assert po == pt and len(po) == 4
    x1, x2, y1, y2 = ours(1), ours(1), theirs(1), theirs(1)
    assert (x1.b is x2.b) == (y1.b is y2.b) and x1.b is not x2.b  # a fresh list per instance
    for args, kw in [((), {}), ((1, 2, 3, 4), {}), ((1,), {"d": 0}), ((1,), {"a": 2})]:
        assert _raised(lambda: ours(*args, **kw)) == _raised(lambda: theirs(*args, **kw)), (args, kw)
    for x, y in [(ours(1), theirs(1))]:
        assert _raised(lambda: setattr(x, "a", 9)) == _raised(lambda: setattr(y, "a", 9))
        assert _raised(lambda: setattr(x, "new", 9)) == _raised(lambda: setattr(y, "new", 9))
        assert _raised(lambda: delattr(x, "c")) == _raised(lambda: delattr(y, "c"))
        assert vars(x) == vars(y)
    sub_ours, sub_theirs = type("D", (ours,), {}), type("D", (theirs,), {})  # a plain subclass
    for x, y in [(sub_ours(1), sub_theirs(1))]:
        assert _raised(lambda: setattr(x, "new", 9)) == _raised(lambda: setattr(y, "new", 9))
        assert _raised(lambda: setattr(x, "a", 9)) == _raised(lambda: setattr(y, "a", 9))
        assert _raised(lambda: delattr(x, "new")) == _raised(lambda: delattr(y, "new"))
        assert vars(x) == vars(y)
    if frozen:
        with pytest.raises(dataclasses.FrozenInstanceError):
            ours(1).a = 2
    x = ours(1, [2], "y")
    assert copy.deepcopy(x) == x and copy.copy(x) == x and dataclasses.replace(x, a=5).a == 5


def test_package_records_pickle():  # (the Dask engine sends records between processes)
    from tracekit.options import Options
    o = Options(chip="v6e")
    assert pickle.loads(pickle.dumps(o)) == o and pickle.loads(pickle.dumps(o)).chip == "v6e"


@pytest.mark.parametrize("frozen", [False, True])
def test_refusals_as_dataclass(frozen):
    bad_order = {"__annotations__": {"a": "int", "z": "int"}, "a": 1, "__doc__": "Bad."}
    assert _raised(lambda: records.record(type("C", (), dict(bad_order)), frozen=frozen)) == \
        _raised(lambda: dataclasses.dataclass(type("C", (), dict(bad_order)), frozen=frozen))
    if frozen:
        own = {"__annotations__": {"a": "int"}, "__doc__": "Own.", "__setattr__": lambda self, n, v: None}
        assert _raised(lambda: records.record(type("C", (), dict(own)), frozen=True)) == \
            _raised(lambda: dataclasses.dataclass(type("C", (), dict(own)), frozen=True))


def test_own_init_is_kept():
    def __init__(self, a):
        self.a = a * 2
    c = records.record(type("C", (), {"__annotations__": {"a": "int"}, "__doc__": "Own.", "__init__": __init__}))
    assert c(2).a == 4
