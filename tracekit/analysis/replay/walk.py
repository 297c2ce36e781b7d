"""The replay's two loops: a topological order of the joined graph's quantities (Kahn's algorithm) and the pass
that computes every node's start and end along it (:func:`tracekit.analysis.replay.engine.evaluate` defines
them). Both run in C (``walkc``, built with the package; ~50x faster: at 1.5 M device events the replay's passes
took 0.7 s of Python) or, where the build had no compiler or ``TRACEKIT_NO_C=1``, in the Python below: the same
rule step for step, so the two give identical arrays (a test holds them equal on the committed traces)."""
from __future__ import annotations

import os
from collections import deque

import numpy as np

try:  # pragma: no cover - depends on the build
    from tracekit.analysis.replay import walkc
except ImportError:  # pragma: no cover
    walkc = None

HAVE_C: bool = walkc is not None and os.environ.get("TRACEKIT_NO_C", "") in ("", "0")
_NEG = -(1 << 62)


def _i64(a) -> np.ndarray:
    return np.ascontiguousarray(a, np.int64)


def order(dep_ptr: np.ndarray, dep: np.ndarray, use_c: bool | None = None) -> np.ndarray:
    """Kahn's order of quantities ``0..len(dep_ptr) - 2`` whose dependents are ``dep[dep_ptr[q]:dep_ptr[q + 1]]``:
    those with no dependency first (ascending), then each dependent when its last dependency is placed (FIFO).
    Raises ValueError on a cycle."""
    dep_ptr, dep = _i64(dep_ptr), _i64(dep)
    nq = len(dep_ptr) - 1
    if HAVE_C if use_c is None else use_c:
        out = np.empty(nq, np.int64)
        placed = walkc.order(dep_ptr, dep, out)
        out = out[:placed]
    else:
        out = np.asarray(_order_py(dep_ptr.tolist(), dep.tolist(), nq), np.int64)
    if len(out) != nq:  # a cycle: only corrupt input makes one (every edge points forward in measured time)
        raise ValueError(f"replay: {nq - len(out)} of {nq} quantities in a dependency cycle")
    return out


def _order_py(ptr: list, dep: list, nq: int) -> list:
    need = [0] * nq
    for d in dep:
        need[d] += 1
    ready = deque(q for q in range(nq) if need[q] == 0)
    out = []
    while ready:
        q = ready.popleft()
        out.append(q)
        for e in range(ptr[q], ptr[q + 1]):
            d = dep[e]
            need[d] -= 1
            if need[d] == 0:
                ready.append(d)
    return out


#: the node arrays :func:`run` reads from the structure (int64 each; ``has_child`` bool)
NODE_FIELDS = ("origin", "kind", "window", "qprev", "parent", "nowait", "after", "tail", "gid", "gexit")


def run(st: dict, work: np.ndarray, slack: np.ndarray, free: np.ndarray, core: np.ndarray, consts: tuple,
        use_c: bool | None = None) -> tuple:
    """(S, E, why_s, why_e) of one pass over ``st["order"]``; ``st``: the structure
    (:func:`tracekit.analysis.replay.engine.structure`: ``order``, ``pptr``/``psrc``/``pkind``, ``gptr``/``gmem``,
    :data:`NODE_FIELDS`, ``has_child``); ``consts``: (END, DONE, WIN)."""
    n = len(st["kind"])
    if HAVE_C if use_c is None else use_c:
        S, E, why_s, why_e = (np.empty(n, np.int64) for _ in range(4))
        walkc.evaluate(_i64(st["order"]), _i64(st["pptr"]), _i64(st["psrc"]), _i64(st["pkind"]),
                       _i64(st["origin"]), _i64(slack), _i64(work), np.ascontiguousarray(free, np.uint8),
                       *(_i64(st[k]) for k in NODE_FIELDS[1:]), np.ascontiguousarray(st["has_child"], np.uint8),
                       _i64(core), _i64(st["gptr"]), _i64(st["gmem"]), tuple(int(c) for c in consts),
                       S, E, why_s, why_e)
        return S, E, why_s, why_e
    return tuple(np.asarray(x, np.int64) for x in _run_py(st, work, slack, free, core, consts))


def _run_py(st: dict, work, slack, free, core, consts) -> tuple:
    END, DONE, WIN = consts
    if "lists" not in st:  # the structure as Python lists, once per structure (a replay evaluates it many times)
        st["lists"] = {k: np.asarray(st[k]).tolist() for k in ("order", "pptr", "psrc", "pkind", "gptr", "gmem",
                                                                "has_child") + NODE_FIELDS}
    L = st["lists"]
    pptr, psrc, pkind, gptr, gmem, has_child = (L[k] for k in ("pptr", "psrc", "pkind", "gptr", "gmem", "has_child"))
    origin, kind, window, qprev, parent, nowait, after, ptail, gid, gexit = (L[k] for k in NODE_FIELDS)
    w, sl = np.asarray(work).tolist(), np.asarray(slack).tolist()
    fr, gcore = np.asarray(free, bool).tolist(), np.asarray(core).tolist()
    n, G = len(kind), len(gcore)
    S, E = [0] * n, [0] * n
    A, who_a = [_NEG] * G, [-1] * G
    why_s, why_e = [-1] * n, [-1] * n
    last_child, last_child_q = [_NEG] * n, [-1] * n
    for q in L["order"]:
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
            for i in gmem[gptr[g]:gptr[g + 1]]:
                if S[i] > best:
                    best, arg = S[i], i
            A[g], who_a[g] = best, arg
    return S, E, why_s, why_e
