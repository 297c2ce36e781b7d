"""The replay: the hosts' step graphs (:mod:`tracekit.analysis.replay.graph`) joined at their collectives and
evaluated with measured or changed op times (the reduce side).

Times (every node's start S and end E):

* S = the latest predecessor time (a predecessor's end, or a window's ``-start`` start) + ``slack``; without
  predecessors, the step's start + ``slack``.
* E of an op = S + work; of a parent = its last child's E + ``tail``; of a window = max(S, E of the copy ahead of
  it on the link) + work; of a ``-done`` = max(S + ``nowait``, E of its window + ``after``).
* A collective instance (the same op's k-th execution in the step on the devices of one replica group, on every
  host) ends on each participant at ``A + core + exit``: A is the last participant's arrival (its S), ``core``
  the measured time from the last arrival to the first end (what the transfer took once everyone was there) and
  ``exit`` each participant's measured lag behind that first end. Hosts' clocks differ: each host's offset is the
  median, over the instances it shares with the first host, of the difference of their first ends (participants
  finish together), as the pod view aligns them (:mod:`tracekit.run.podviews`).

A device's step = its nodes' last E + the measured tail to the next run's start - the step's start. Fed the
measured times, every S and E is the measured one, so the replay reproduces each step exactly (up to the
constraints the measurement itself breaks, which count in :attr:`Result.clipped`).

The evaluation is a topological pass (Kahn's algorithm) over 2 quantities per node and 1 per collective instance:
a loop in C (:mod:`tracekit.analysis.replay.walk`, with the same loop in Python where the build had no compiler)
bounded by the chosen steps' nodes (thousands per step; the steps replayed are capped by the caller,
:func:`tracekit.analysis.replay.whatif.choose_steps`). Everything around it (dependency lists, collective instances,
offsets, the steps' results) is vectorized.
"""
from __future__ import annotations

from dataclasses import field

import numpy as np

from tracekit.analysis.replay import walk
from tracekit.analysis.replay.graph import DONE, END, WIN, HostGraph
from tracekit.records import record

_NEG = -(1 << 62)


@record
class Joined:
    """The hosts' graphs as one (global node index = the host's offset + its local index)."""

    graphs: list
    base: np.ndarray  #: first global index of each host
    offset: np.ndarray  #: per host: its clock minus the first host's (ps)
    start: np.ndarray  #: aligned measured times
    end: np.ndarray
    gid: np.ndarray  #: collective instance of each node (-1)
    g_core: np.ndarray
    g_exit: np.ndarray  #: per node: its measured lag behind the instance's first end
    g_members: list
    alignment_ps: float | None
    cache: dict = field(default_factory=dict, repr=False)  #: what :func:`evaluate` works out once

    def host_of(self, i: int) -> int:
        return int(np.searchsorted(self.base, i, "right") - 1)


def _cat(graphs: list, name: str, dtype=None) -> np.ndarray:
    parts = [getattr(g, name) for g in graphs]
    return np.concatenate(parts).astype(dtype) if parts and dtype else (np.concatenate(parts) if parts else
                                                                        np.zeros(0, dtype or np.int64))


def join(graphs: list[HostGraph]) -> Joined:
    """Join the hosts' graphs at their collectives (nodes of equal ``group`` keys, on every host)."""
    base = np.cumsum([0] + [len(g) for g in graphs])[:-1].astype(np.int64)
    keys, nodes, hosts = [], [], []
    for h, g in enumerate(graphs):
        for i in np.flatnonzero(np.array([k is not None for k in g.group], bool)).tolist():
            keys.append(g.group[i])
            nodes.append(base[h] + i)
            hosts.append(h)
    start, end = _cat(graphs, "start", np.int64), _cat(graphs, "end", np.int64)
    offset = np.zeros(len(graphs), np.int64)
    alignment = None
    if len(graphs) > 1 and keys:
        offset, alignment = _offsets(keys, np.asarray(nodes), np.asarray(hosts), end, len(graphs))
    host_of = np.repeat(np.arange(len(graphs)), [len(g) for g in graphs])
    start = start - offset[host_of]
    end = end - offset[host_of]
    n = len(start)
    gid = np.full(n, -1, np.int64)
    g_core, members = [], []
    g_exit = np.zeros(n, np.int64)
    if keys:
        codes, uniq = _factorize(keys)
        nodes = np.asarray(nodes, np.int64)
        order = np.argsort(codes, kind="stable")
        cut = np.r_[0, np.flatnonzero(np.diff(codes[order])) + 1, len(order)]
        for a, b in zip(cut[:-1], cut[1:]):
            m = nodes[order[a:b]]
            if len(m) < 2:
                continue
            arrive = start[m].max()
            core = end[m].min() - arrive
            if core < 0:  # someone left before the last one came: not a barrier, each keeps its own time
                continue
            gid[m] = len(members)
            members.append(m)
            g_core.append(core)
            g_exit[m] = end[m] - arrive - core
    return Joined(graphs, base, offset, start, end, gid, np.asarray(g_core, np.int64), g_exit, members, alignment)


def _factorize(keys: list) -> tuple[np.ndarray, list]:
    table: dict = {}
    codes = np.fromiter((table.setdefault(k, len(table)) for k in keys), np.int64, len(keys))
    return codes, list(table)


def _offsets(keys, nodes, hosts, end, n_hosts) -> tuple[np.ndarray, float | None]:
    """Each host's clock minus the first host's: the median over shared instances of the difference of the
    hosts' first ends; and the median absolute residual after the shift."""
    first: dict = {}
    for k, i, h in zip(keys, nodes.tolist(), hosts.tolist()):
        cur = first.setdefault(k, {})
        cur[h] = min(cur.get(h, 1 << 62), int(end[i]))
    off = np.zeros(n_hosts, np.int64)
    resid = []
    for h in range(1, n_hosts):
        d = [v[h] - v[0] for v in first.values() if 0 in v and h in v]
        if d:
            off[h] = int(np.median(d))
            resid += [abs(x - off[h]) for x in d]
    return off, (float(np.median(resid)) if resid else None)


@record
class Result:
    """One evaluation: per node S, E (aligned clock), what bound each, and per (host, slot) the step time."""

    S: np.ndarray
    E: np.ndarray
    why_s: np.ndarray  #: the quantity that set S (-1: the step's start)
    why_e: np.ndarray  #: the quantity that set E
    step_ps: list  #: per host: predicted step time of each of its slots
    clipped: int  #: nodes the measurement itself puts earlier than its constraints allow (reproduction error)


def structure(j: Joined) -> dict:
    """The joined graph's node arrays (global indices) and one topological order of its quantities (q = 2i: node
    i's S, 2i + 1: its E, 2n + g: instance g's last arrival), worked out once per :class:`Joined` (Kahn's algorithm
    over every dependency, :func:`tracekit.analysis.replay.walk.order`: an evaluation that drops some, an
    overlapped collective, can still follow it)."""
    if "structure" in j.cache:
        return j.cache["structure"]
    gs = j.graphs
    n = len(j.start)
    base = j.base
    z = np.zeros(0, np.int64)

    def shift(name):  # a host's node links as global indices (-1 stays -1)
        parts = [np.where(getattr(g, name) >= 0, getattr(g, name) + b, -1) for g, b in zip(gs, base)]
        return np.concatenate(parts).astype(np.int64) if parts else z
    st = {"kind": _cat(gs, "kind", np.int64), "window": shift("window"), "qprev": shift("qprev"),
          "parent": shift("parent")}
    for k in ("nowait", "after", "tail"):
        st[k] = _cat(gs, k, np.int64)
    st["psrc"] = np.concatenate([g.pred_src + b for g, b in zip(gs, base)]).astype(np.int64) if gs else z
    st["pkind"] = np.concatenate([g.pred_kind for g in gs]).astype(np.int64) if gs else z
    counts = np.concatenate([np.diff(g.pred_ptr) for g in gs]).astype(np.int64) if gs else z
    st["pptr"] = np.r_[0, np.cumsum(counts)].astype(np.int64)
    st["origin"] = np.concatenate([g.steps_start[g.slot] - j.offset[h] for h, g in enumerate(gs)]).astype(
        np.int64) if gs else z
    st["gid"], st["gexit"] = j.gid.astype(np.int64), j.g_exit.astype(np.int64)
    sizes = np.asarray([len(m) for m in j.g_members], np.int64)
    st["gptr"] = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    st["gmem"] = np.concatenate(j.g_members).astype(np.int64) if len(j.g_members) else z
    st["has_child"] = np.zeros(n, bool)
    st["has_child"][st["parent"][st["parent"] >= 0]] = True
    G = len(j.g_members)
    src, dst, key = edges(st, n, G, counts)
    # dependents of each quantity in the order they were appended (node by node, then instance by instance)
    by = np.argsort(src * (8 * (n + G) + 8) + key, kind="stable")
    dep_ptr = np.r_[0, np.cumsum(np.bincount(src, minlength=2 * n + G))].astype(np.int64)
    st["order"] = walk.order(dep_ptr, dst[by])
    j.cache["structure"] = st
    return st


def edges(st: dict, n: int, G: int, counts: np.ndarray) -> tuple:
    """Every dependency as (source quantity, dependent quantity, append key): per node i its predecessors' edges
    into S (key 8i), S -> E (8i + 1), its instance's arrival -> E (8i + 2), a -done's window -> E (8i + 3), a
    queued window's copy ahead -> E (8i + 4), E -> its parent's E (8i + 5); then per instance g each member's S ->
    the arrival (key 8(n + g))."""
    i = np.arange(n, dtype=np.int64)
    kind, window, qprev, parent, gid = st["kind"], st["window"], st["qprev"], st["parent"], st["gid"]
    pi = np.repeat(i, counts)
    parts = [(2 * st["psrc"] + (st["pkind"] == END), 2 * pi, 8 * pi), (2 * i, 2 * i + 1, 8 * i + 1)]
    m = gid >= 0
    parts.append((2 * n + gid[m], 2 * i[m] + 1, 8 * i[m] + 2))
    m = (kind == DONE) & (window >= 0)
    parts.append((2 * window[m] + 1, 2 * i[m] + 1, 8 * i[m] + 3))
    m = (kind == WIN) & (qprev >= 0)
    parts.append((2 * qprev[m] + 1, 2 * i[m] + 1, 8 * i[m] + 4))
    m = parent >= 0
    parts.append((2 * i[m] + 1, 2 * parent[m] + 1, 8 * i[m] + 5))
    g = np.repeat(np.arange(G, dtype=np.int64), np.diff(st["gptr"]))
    parts.append((2 * st["gmem"], 2 * n + g, 8 * (n + g)))
    return tuple(np.concatenate([p[k] for p in parts]).astype(np.int64) for k in range(3))


def evaluate(j: Joined, work: np.ndarray | None = None, core: np.ndarray | None = None,
             slack: np.ndarray | None = None, free: np.ndarray | None = None, tail: list | None = None) -> Result:
    """Replay with the nodes' ``work`` (global; None: measured), the instances' ``core`` (None: measured),
    ``slack`` (None: measured), ``free`` nodes (an overlapped collective: it holds nothing up, E = S) and each
    host's steps' ``tail`` to the next run (None: measured). One pass over :func:`structure`'s order
    (:func:`tracekit.analysis.replay.walk.run`)."""
    gs = j.graphs
    n = len(j.start)
    st = structure(j)
    w = _cat(gs, "work", np.int64) if work is None else work
    sl = _cat(gs, "slack", np.int64) if slack is None else slack
    fr = np.zeros(n, bool) if free is None else np.asarray(free, bool)
    S_a, E_a, why_s, why_e = walk.run(st, w, sl, fr, j.g_core if core is None else core, (END, DONE, WIN))
    base = j.base
    steps, clipped = [], 0
    for h, g in enumerate(gs):
        b = base[h]
        e = E_a[b:b + len(g)] + j.offset[h]
        last = np.full(len(g.steps_start), _NEG, np.int64)
        if len(g):
            np.maximum.at(last, g.slot, e)
        t = g.steps_tail if tail is None else tail[h]
        pred = np.where(last > _NEG, last + t, g.steps_next) - g.steps_start
        steps.append(pred)
    if work is None and slack is None and core is None and free is None and tail is None:
        clipped = int(((S_a != j.start) | (E_a != j.end)).sum())
    return Result(S_a, E_a, why_s, why_e, steps, clipped)


def critical_path(j: Joined, r: Result, host: int, slot: int) -> list[tuple[int, str]]:
    """The chain that set one step's end, in time order: (node, 'run' | 'wait'): 'run' where the node's own time
    is on the path, 'wait' where the path passed through its start only (a window's ``-start``, a collective's
    last arrival)."""
    g = j.graphs[host]
    b = j.base[host]
    mine = np.flatnonzero(g.slot == slot)
    if not len(mine):
        return []
    i = int(b + mine[np.argmax(r.E[b + mine])])
    q = 2 * i + 1
    out: list = []
    seen = set()
    while q >= 0 and q not in seen and len(out) < 100_000:
        seen.add(q)
        node = q >> 1
        if q & 1:
            out.append((node, "run"))
            q = int(r.why_e[node])
        else:
            if not out or out[-1][0] != node:
                out.append((node, "wait"))
            q = int(r.why_s[node])
    out.reverse()
    return out
