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
a Python loop bounded by the chosen steps' nodes (thousands per step; the steps replayed are capped by the
caller, :func:`tracekit.analysis.replay.whatif.choose_steps`). Everything around it (dependency lists, collective
instances, offsets, the steps' results) is vectorized.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from tracekit.analysis.replay.graph import DONE, END, WIN, HostGraph

_NEG = -(1 << 62)


@dataclass
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


@dataclass
class Result:
    """One evaluation: per node S, E (aligned clock), what bound each, and per (host, slot) the step time."""

    S: np.ndarray
    E: np.ndarray
    why_s: np.ndarray  #: the quantity that set S (-1: the step's start)
    why_e: np.ndarray  #: the quantity that set E
    step_ps: list  #: per host: predicted step time of each of its slots
    clipped: int  #: nodes the measurement itself puts earlier than its constraints allow (reproduction error)


def _structure(j: Joined) -> dict:
    """The joined graph as Python lists, and one topological order of its quantities (q = 2i: node i's S, 2i + 1:
    its E, 2n + g: instance g's last arrival), worked out once per :class:`Joined` (Kahn's algorithm over every
    dependency: an evaluation that drops some, an overlapped collective, can still follow it)."""
    if "structure" in j.cache:
        return j.cache["structure"]
    gs = j.graphs
    n = len(j.start)
    base = j.base

    def shift(name):  # a host's node links as global indices (-1 stays -1)
        parts = [np.where(getattr(g, name) >= 0, getattr(g, name) + b, -1) for g, b in zip(gs, base)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)
    st = {"kind": _cat(gs, "kind", np.int64).tolist(), "window": shift("window").tolist(),
          "qprev": shift("qprev").tolist(), "parent": shift("parent").tolist()}
    for k in ("nowait", "after", "tail"):
        st[k] = _cat(gs, k, np.int64).tolist()
    st["psrc"] = np.concatenate([g.pred_src + b for g, b in zip(gs, base)]).tolist() if gs else []
    st["pkind"] = np.concatenate([g.pred_kind for g in gs]).tolist() if gs else []
    counts = np.concatenate([np.diff(g.pred_ptr) for g in gs]) if gs else np.zeros(0, np.int64)
    st["pptr"] = np.r_[0, np.cumsum(counts)].tolist()
    st["origin"] = np.concatenate([g.steps_start[g.slot] - j.offset[h] for h, g in enumerate(gs)]).tolist() \
        if gs else []
    st["gid"], st["gexit"] = j.gid.tolist(), j.g_exit.tolist()
    kind, window, qprev, parent = st["kind"], st["window"], st["qprev"], st["parent"]
    psrc, pkind, pptr, gid = st["psrc"], st["pkind"], st["pptr"], st["gid"]
    G = len(j.g_members)
    nq = 2 * n + G
    deps_of = [[] for _ in range(nq)]  # dependents of each quantity
    need = [0] * nq
    for i in range(n):
        for e in range(pptr[i], pptr[i + 1]):
            deps_of[2 * psrc[e] + (1 if pkind[e] == END else 0)].append(2 * i)
            need[2 * i] += 1
        qe = 2 * i + 1
        deps_of[2 * i].append(qe)
        need[qe] += 1
        if gid[i] >= 0:
            deps_of[2 * n + gid[i]].append(qe)
            need[qe] += 1
        if kind[i] == DONE and window[i] >= 0:
            deps_of[2 * window[i] + 1].append(qe)
            need[qe] += 1
        if kind[i] == WIN and qprev[i] >= 0:
            deps_of[2 * qprev[i] + 1].append(qe)
            need[qe] += 1
        if parent[i] >= 0:
            deps_of[qe].append(2 * parent[i] + 1)
            need[2 * parent[i] + 1] += 1
    for g, m in enumerate(j.g_members):
        for i in m.tolist():
            deps_of[2 * i].append(2 * n + g)
            need[2 * n + g] += 1
    ready = deque(q for q in range(nq) if need[q] == 0)
    order = []
    while ready:
        q = ready.popleft()
        order.append(q)
        for d in deps_of[q]:
            need[d] -= 1
            if need[d] == 0:
                ready.append(d)
    if len(order) != nq:  # a cycle: only corrupt input makes one (every edge points forward in measured time)
        raise ValueError(f"replay: {nq - len(order)} of {nq} quantities in a dependency cycle")
    st["order"] = order
    has_child = [False] * n
    for i in range(n):
        if parent[i] >= 0:
            has_child[parent[i]] = True
    st["has_child"] = has_child
    j.cache["structure"] = st
    return st


def evaluate(j: Joined, work: np.ndarray | None = None, core: np.ndarray | None = None,
             slack: np.ndarray | None = None, free: np.ndarray | None = None, tail: list | None = None) -> Result:
    """Replay with the nodes' ``work`` (global; None: measured), the instances' ``core`` (None: measured),
    ``slack`` (None: measured), ``free`` nodes (an overlapped collective: it holds nothing up, E = S) and each
    host's steps' ``tail`` to the next run (None: measured). One pass over :func:`_structure`'s order."""
    gs = j.graphs
    n = len(j.start)
    st = _structure(j)
    kind, window, qprev, parent = st["kind"], st["window"], st["qprev"], st["parent"]
    nowait, after, ptail = st["nowait"], st["after"], st["tail"]
    psrc, pkind, pptr, origin = st["psrc"], st["pkind"], st["pptr"], st["origin"]
    gid, gexit, has_child = st["gid"], st["gexit"], st["has_child"]
    w = (_cat(gs, "work", np.int64) if work is None else work).tolist()
    sl = (_cat(gs, "slack", np.int64) if slack is None else slack).tolist()
    fr = np.zeros(n, bool).tolist() if free is None else np.asarray(free, bool).tolist()
    gcore = (j.g_core if core is None else core).tolist()
    base = j.base
    G = len(j.g_members)
    S = [0] * n
    E = [0] * n
    A = [_NEG] * G
    who_a = [-1] * G
    why_s = [-1] * n
    why_e = [-1] * n
    last_child = [_NEG] * n
    last_child_q = [-1] * n
    for q in st["order"]:
        if q < 2 * n:
            i = q >> 1
            if q & 1 == 0:  # S
                best, arg = _NEG, -1
                for e in range(pptr[i], pptr[i + 1]):
                    s = psrc[e]
                    t = E[s] if pkind[e] == END else S[s]
                    if t > best:
                        best, arg = t, (2 * s + 1 if pkind[e] == END else 2 * s)
                if arg < 0:
                    best = origin[i]
                S[i] = best + sl[i]
                why_s[i] = arg
            else:  # E
                s_i = S[i]
                k = kind[i]
                if fr[i]:
                    e_i, arg = s_i, 2 * i
                elif gid[i] >= 0:
                    g = gid[i]
                    e_i, arg = A[g] + gcore[g] + gexit[i], 2 * who_a[g]
                elif has_child[i]:
                    e_i, arg = max(last_child[i] + ptail[i], s_i), last_child_q[i]
                elif k == DONE and window[i] >= 0:
                    a, b = s_i + nowait[i], E[window[i]] + after[i]
                    e_i, arg = (a, 2 * i) if a >= b else (b, 2 * window[i] + 1)
                elif k == WIN and qprev[i] >= 0 and E[qprev[i]] > s_i:
                    e_i, arg = E[qprev[i]] + w[i], 2 * qprev[i] + 1
                else:
                    e_i, arg = s_i + w[i], 2 * i
                E[i] = e_i
                why_e[i] = arg
                p = parent[i]
                if p >= 0 and e_i > last_child[p]:
                    last_child[p], last_child_q[p] = e_i, q
        else:
            g = q - 2 * n
            best, arg = _NEG, -1
            for i in j.g_members[g].tolist():
                if S[i] > best:
                    best, arg = S[i], i
            A[g], who_a[g] = best, arg
    S_a, E_a = np.asarray(S, np.int64), np.asarray(E, np.int64)
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
    return Result(S_a, E_a, np.asarray(why_s, np.int64), np.asarray(why_e, np.int64), steps, clipped)


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
