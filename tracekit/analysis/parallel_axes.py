"""The mesh a program ran on and what each axis does, from its HLO facts (:mod:`tracekit.analysis.parallel_hlo`).

**Axes.** Every collective splits the devices into groups (its replica groups; a permute's source->target pairs
joined into chains). Each distinct split is a candidate. A split that is the product of two or more smaller ones
(its groups are unions of theirs, their groups meet in at most one device, and the sizes multiply) spans several
mesh axes; the others are the axes. An axis that only ever appears inside such a product is derived from it (the
devices at the same position in each of the known axis's groups). The HLO carries no axis names: axes are
numbered in mesh order (the largest stride between a group's devices first, as a row-major mesh lays them out).

**Roles**, from what each collective moves (each operand's source and what its result feeds), strongest first:

* ``expert``: an all-to-all whose data reaches a grouped matmul (a dot whose weight has a batch dimension: one
  slice per local expert), or comes from one;
* ``pipeline``: a collective-permute of activations into a weight dot (one stage hands its output to the next);
* ``tensor``: an all-reduce or reduce-scatter of a weight dot's output (partial sums over a sharded contracting
  dimension: Megatron), or an all-gather of activations into a weight dot;
* ``fsdp``: an all-gather of a weight before the dots read it, or a reduce-scatter of a weight gradient;
* ``data``: an all-reduce of a weight gradient (a weight's shape, from activations x activations over the tokens);
* ``sequence``: an all-gather, all-to-all or permute whose data only reaches activations x activations dots
  (attention over a sharded sequence);
* ``unknown``: no collective of the axis moves anything that says (scalars: a loss, a metric).

Evidence from collectives over the axis alone decides; when there is none, that of collectives spanning it with
other axes (then the evidence says so). Every role names the collectives and shapes it rests on.
"""
from __future__ import annotations

from dataclasses import field
from itertools import combinations

from tracekit.analysis.parallel_hlo import ACT_DOT, DATA, GRAD_DOT, TINY_BYTES, WEIGHT, WEIGHT_DOT
from tracekit.records import record

ROLES = ("expert", "pipeline", "tensor", "fsdp", "data", "sequence", "unknown")
#: roles whose axes split the batch (the book's X: per-device batch = B / X)
BATCH_ROLES = ("data", "fsdp", "expert")


@record(frozen=True)
class Evidence:
    """One collective operand's testimony: the role it points at and why, in words."""

    role: str
    text: str
    collective: str
    kind: str
    nbytes: int = 0
    contracts: int = 0  #: tensor: the weight-side contracting size of the dot whose output it reduces
    weight: int = -1


@record
class Axis:
    """A mesh axis: ``groups`` of device ids, ``size`` devices per group, its ``role`` and ``evidence`` (text,
    strongest first); ``direct``: evidence from collectives over this axis alone; ``spanning``: from collectives
    over it and other axes (``spans``: the other axes' indices)."""

    index: int
    size: int
    groups: tuple
    stride: int
    role: str = "unknown"
    evidence: list = field(default_factory=list)
    direct: list = field(default_factory=list)
    spanning: list = field(default_factory=list)
    spans: set = field(default_factory=set)
    derived: bool = False
    collectives: dict = field(default_factory=dict)  #: kind -> number of collective instructions


def classify(c, o, weights: dict, dots: dict) -> Evidence | None:
    """The :class:`Evidence` of operand ``o`` of collective ``c`` (None: a scalar or nothing to go on)."""
    k = c.kind
    if o.nbytes <= TINY_BYTES:
        return None
    if not weights:  # without a weight the HLO cannot tell activations from weights: no role, never a guess
        return None
    feeds = [dots[n] for n, _ in o.feeds if n in dots]
    wfeeds = [d for d in feeds if d.kind == WEIGHT_DOT]
    grouped = [d for d in wfeeds if d.weight_batch]
    src = dots.get(o.source) if o.source_kind in (WEIGHT_DOT, GRAD_DOT, ACT_DOT) else None
    shape = f"{o.dtype}[{','.join(map(str, o.dims))}]"
    wname = (lambda n: f"weight {weights[n].name} {weights[n].dtype}[{','.join(map(str, weights[n].dims))}]"
             if n in weights else "a weight")
    ev = lambda role, text, contracts=0, w=-1: Evidence(role, text, c.name, k, o.nbytes, contracts, w)  # noqa: E731
    if k == "all-to-all" or k == "ragged-all-to-all":
        if grouped or (src is not None and src.kind == WEIGHT_DOT and src.weight_batch):
            d = grouped[0] if grouped else src
            return ev("expert", f"{c.name}: {k} of {shape} {'into' if grouped else 'out of'} the grouped matmul "
                                f"{d.name} ({wname(d.weight)}, a batch of {d.weight_dims[d.weight_batch[0]]} local "
                                "experts)")
        if wfeeds:
            return ev("expert", f"{c.name}: {k} of {shape} into weight dot {wfeeds[0].name} (tokens dispatched to "
                                "the weights that hold them)")
        if feeds and all(d.kind == ACT_DOT for d in feeds):
            return ev("sequence", f"{c.name}: {k} of {shape} into activations x activations dot {feeds[0].name} "
                                  "(attention over a sharded sequence)")
        return None
    if k in ("collective-permute", "send", "recv"):
        if wfeeds:
            return ev("pipeline", f"{c.name}: collective-permute of activations {shape} to the next device of the "
                                  f"axis, into weight dot {wfeeds[0].name} ({wname(wfeeds[0].weight)}): one stage "
                                  "hands its output to the next")
        if feeds and all(d.kind == ACT_DOT for d in feeds):
            return ev("sequence", f"{c.name}: collective-permute of {shape} around the axis into activations x "
                                  f"activations dot {feeds[0].name} (ring attention)")
        return None
    grad = (src is not None and src.kind == GRAD_DOT) or (o.source_kind not in (WEIGHT_DOT, ACT_DOT, DATA)
                                                         and o.weight >= 0)
    if k == "all-gather":
        if o.source_kind == WEIGHT:
            return ev("fsdp", f"{c.name}: all-gather of {wname(int(o.source))} to "
                              f"[{','.join(map(str, o.result_dims))}] before {len(wfeeds) or 'no'} weight dot(s)"
                              + (f" ({', '.join(d.name for d in wfeeds[:3])})" if wfeeds else ""),
                      w=int(o.source))
        if wfeeds:
            return ev("tensor", f"{c.name}: all-gather of activations {shape} -> "
                                f"[{','.join(map(str, o.result_dims))}] into weight dot {wfeeds[0].name}")
        if feeds and all(d.kind == ACT_DOT for d in feeds):
            return ev("sequence", f"{c.name}: all-gather of {shape} into activations x activations dot "
                                  f"{feeds[0].name} (keys/values of a sharded sequence)")
        return None
    if k not in ("all-reduce", "reduce-scatter"):
        return None
    if src is not None and src.kind == WEIGHT_DOT:
        kk = 1
        for i in src.weight_contracting:
            kk *= src.weight_dims[i]
        return ev("tensor", f"{c.name}: {k} of {shape}, the output of weight dot {src.name} ({wname(src.weight)}), "
                            f"which contracts the weight's dimension of {kk}: partial sums of a sharded contraction",
                  contracts=kk, w=src.weight)
    if grad:
        w = src.weight if src is not None and src.weight >= 0 else o.weight
        what = f"weight gradient {src.name}" if src is not None else "an array of a weight's shape"
        if k == "reduce-scatter":
            return ev("fsdp", f"{c.name}: reduce-scatter of {what} {shape} (shape of {wname(w)}) to "
                              f"[{','.join(map(str, o.result_dims))}]", w=w)
        return ev("data", f"{c.name}: all-reduce of {what} {shape} (shape of {wname(w)})", w=w)
    return None


def _partition(c) -> tuple:
    """The device groups a collective splits the devices into: its replica groups, or its pairs' chains."""
    if c.groups:
        return tuple(sorted(tuple(sorted(g)) for g in c.groups))
    if not c.pairs:
        return ()
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x
    for s, t in c.pairs:
        parent[find(s)] = find(t)
    comps: dict = {}
    for x in list(parent):
        comps.setdefault(find(x), []).append(x)
    return tuple(sorted(tuple(sorted(g)) for g in comps.values() if len(g) > 1))


def _refines(a: tuple, b: tuple) -> bool:
    """Every group of ``a`` lies inside a group of ``b``."""
    where = {d: i for i, g in enumerate(b) for d in g}
    return all(len({where.get(d, -1 - d) for d in g}) == 1 for g in a)


def _product_of(p: tuple, parts: list) -> bool:
    """``p`` is the product of ``parts``: sizes multiply, each refines it, and any two meet in one device at most."""
    size = 1
    for q in parts:
        size *= len(q[0])
    if size != len(p[0]) or not all(_refines(q, p) for q in parts):
        return False
    for q, r in combinations(parts, 2):
        sets = [set(g) for g in r]
        if any(len(set(g) & s) > 1 for g in q for s in sets):
            return False
    return True


def _stride(groups: tuple) -> int:
    g = groups[0]
    return min((b - a for a, b in zip(g, g[1:])), default=1)


def _complement(p: tuple, known: tuple) -> tuple:
    """The groups of ``p`` left when ``known`` (which refines it) is factored out: in each group of ``p``, the
    devices at the same position in their ``known`` group."""
    pos = {d: i for g in known for i, d in enumerate(g)}
    out = []
    for g in p:
        by: dict = {}
        for d in g:
            by.setdefault(pos.get(d, 0), []).append(d)
        out += [tuple(sorted(v)) for v in by.values()]
    return tuple(sorted(out))


def axes_of(collectives) -> tuple[list, dict]:
    """(the mesh :class:`Axis` list in mesh order, partition -> indices of the axes it spans) from the collectives
    of a program."""
    parts = sorted({p for p in (_partition(c) for c in collectives) if p and len(p[0]) > 1},
                   key=lambda p: (len(p[0]), p))
    atoms: list = []
    spans: dict = {}
    for p in parts:
        smaller = [a for a in atoms if len(a[0]) < len(p[0]) and _refines(a, p)]
        found = None
        for r in range(2, len(smaller) + 1):
            for combo in combinations(smaller, r):
                if _product_of(p, list(combo)):
                    found = combo
                    break
            if found:
                break
        if found is None and smaller:
            # p is its known axes times an axis no collective of its own shows: derive that axis
            known = smaller[0]
            for a in smaller[1:]:
                if _product_of(tuple(_join(known, a)), [known, a]):
                    known = tuple(_join(known, a))
            rest = _complement(p, known)
            if rest and len(rest[0]) > 1 and _product_of(p, [known, rest]) and rest not in atoms:
                atoms.append(rest)
                spans[rest] = "derived"
                found = tuple(a for a in smaller if _refines(a, known)) + (rest,)
        if found is None:
            atoms.append(p)
        else:
            spans[p] = found
    order = sorted(atoms, key=lambda a: (-_stride(a), a))
    axes = [Axis(i, len(a[0]), a, _stride(a), derived=spans.get(a) == "derived") for i, a in enumerate(order)]
    index = {a: i for i, a in enumerate(order)}
    by_part = {p: ([index[p]] if p in index else [index[q] for q in spans[p]]) for p in parts}
    return axes, by_part


def _join(a: tuple, b: tuple) -> list:
    """The groups of the product of two partitions: the devices reachable through either's groups."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x
    for g in list(a) + list(b):
        for d in g[1:]:
            parent[find(d)] = find(g[0])
    comps: dict = {}
    for d in {d for g in list(a) + list(b) for d in g}:
        comps.setdefault(find(d), []).append(d)
    return sorted(tuple(sorted(v)) for v in comps.values())


def assign_roles(facts) -> list:
    """The mesh axes of program ``facts`` with their roles and evidence (see the module docstring)."""
    axes, by_part = axes_of(facts.collectives)
    weights = {p.number: p for p in facts.params if p.kind == WEIGHT}
    dots = {d.name: d for d in facts.dots}
    for c in facts.collectives:
        idx = by_part.get(_partition(c), [])
        for i in idx:
            axes[i].collectives[c.kind] = axes[i].collectives.get(c.kind, 0) + 1
            axes[i].spans |= set(idx) - {i}
        for o in c.operands:
            e = classify(c, o, weights, dots)
            if e is None:
                continue
            for i in idx:
                (axes[i].direct if len(idx) == 1 else axes[i].spanning).append(e)
    for a in axes:
        pool = a.direct or a.spanning
        roles = [r for r in ROLES if any(e.role == r for e in pool)]
        a.role = roles[0] if roles else "unknown"
        texts = []
        for r in roles:
            lead = "" if r == a.role else f"also {r}: "
            for kind in dict.fromkeys(e.kind for e in pool if e.role == r):
                mine = [e for e in pool if e.role == r and e.kind == kind]
                more = len({e.collective for e in mine}) - 1
                texts.append(lead + mine[0].text + (f" (and {more} more like it)" if more > 0 else ""))
        if a.direct and a.spanning:
            e = a.spanning[0]
            others = ", ".join(f"axis {j}" for j in sorted(a.spans))
            texts.append(f"with {others}: {e.text}")
        if not a.direct and a.spanning:
            others = ", ".join(f"axis {j}" for j in sorted(a.spans))
            texts.append(f"from collectives spanning this axis with {others} (none over this axis alone)")
        if a.derived:
            texts.append("derived: collectives span it together with another axis, none over it alone")
        if not pool:
            kinds = ", ".join(f"{n} {k}" for k, n in sorted(a.collectives.items()))
            texts.append(f"unknown: its collectives ({kinds or 'none'}) move only scalars or data that says nothing "
                         "about the sharding")
        a.evidence = texts
    return axes
