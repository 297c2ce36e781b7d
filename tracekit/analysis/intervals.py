"""Interval algebra and the per-device groupings the timeline stages share.

* :func:`merge` / :func:`covered`: the union of intervals as sorted disjoint runs, and how much of each query
  interval that union covers (``np.searchsorted`` over the runs plus a prefix sum of their lengths);
* :func:`frame_order` / :func:`sorted_frame`: rows in (host, device, start) order, and :func:`contain`: the
  window (module run, step) of the same device that holds each row's start;
* :func:`_groups`, :func:`_busy`, :func:`_ends`: a frame's row positions per (host, device), the merged busy
  intervals of each device's sync ops, and each row's end, computed once per frame and cached while the frame
  is alive (the rule frames are built on threads: a second caller waits for the first).
"""
from __future__ import annotations

import threading
import weakref

import numpy as np
import pandas as pd

from tracekit.columns import codes_of, group_index, runs

KEYS = ["host", "device"]


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals ``[start, end)`` as sorted disjoint ``(starts, ends)``; touching intervals merge."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    if start.size == 0:
        return start[:0], end[:0]
    o = np.argsort(start, kind="stable")
    s, e = start[o], end[o]
    run = np.maximum.accumulate(e)
    first = np.flatnonzero(np.r_[True, s[1:] > run[:-1]])
    last = np.r_[first[1:] - 1, s.size - 1]
    return s[first], run[last]


def covered(ms: np.ndarray, me: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of ``[a, b)`` covered by the merged union ``(ms, me)`` (from :func:`merge`), for arrays a, b."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if ms.size == 0:
        return np.zeros(a.shape, np.int64)
    length = me - ms
    prefix = np.r_[0, np.cumsum(length)]

    def upto(t):  # covered length of (-inf, t)
        k = np.searchsorted(ms, t, side="right") - 1
        kk = np.maximum(k, 0)
        return np.where(k >= 0, prefix[kk] + np.clip(t - ms[kk], 0, length[kk]), 0)

    return np.maximum(upto(np.maximum(a, b)) - upto(a), 0)


_GROUPS_CACHE: dict = {}
_CACHE_LOCK = threading.Lock()  # guards the two dicts (the rule frames are built on threads)
_KEY_LOCKS: dict = {}


def _cached(kind: str, df: pd.DataFrame, compute):
    """``compute(df)`` once per (kind, frame) while that frame is alive; a second thread asking for the same
    result waits for the first instead of computing it again."""
    key = (kind, id(df))

    def hit():
        h = _GROUPS_CACHE.get(key)
        return h[2] if h is not None and h[0]() is df and h[1] == len(df) else None
    with _CACHE_LOCK:
        out = hit()
        if out is not None:
            return out
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:
        with _CACHE_LOCK:
            out = hit()
        if out is None:
            out = compute(df)
            with _CACHE_LOCK:
                if len(_GROUPS_CACHE) > 32:
                    _GROUPS_CACHE.clear()
                    _KEY_LOCKS.clear()
                _GROUPS_CACHE[key] = (weakref.ref(df), len(df), out)
    return out


def _groups(df: pd.DataFrame) -> dict:
    """(host, device) -> row positions (sorted by key); keys are plain strings whatever the dtype of the columns.
    The same frame is grouped by several stages: the result is cached while that frame is alive."""
    if df.empty:
        return {}
    return _cached("groups", df, _compute_groups)


def _compute_groups(df: pd.DataFrame) -> dict:
    inv, first = group_index(df, KEYS)
    if len(inv) < 2 or bool((inv[1:] >= inv[:-1]).all()):
        order = np.arange(len(inv))  # rows already grouped (the ops frame is sorted by host, device, start)
    else:
        order = np.argsort(inv, kind="stable")
    bounds = np.cumsum(np.bincount(inv, minlength=len(first)))
    keys = [(str(df[KEYS[0]].iat[i]), str(df[KEYS[1]].iat[i])) for i in first]
    out = {}
    for g in sorted(range(len(first)), key=lambda g: keys[g]):
        out[keys[g]] = order[(bounds[g - 1] if g else 0):bounds[g]]
    return out


def _busy(ops: pd.DataFrame) -> dict:
    """(host, device) -> merged busy intervals (starts, ends) of the device's sync ops; cached like _groups."""
    if ops.empty:
        return {}
    return _cached("busy", ops, _compute_busy)


def _compute_busy(ops: pd.DataFrame) -> dict:
    groups = _groups(ops)
    sync = _sync(ops)
    st, en = ops["start_ps"].to_numpy(np.int64), _ends(ops)
    out = {}
    for key, idx in groups.items():
        si = idx[sync[idx]]
        out[key] = merge(st[si], en[si])
    return out




def _ends(df: pd.DataFrame) -> np.ndarray:
    """start + duration per row (cached per frame: several stages read it; callers must not modify it)."""
    if len(df) < 1 << 16:
        return df["start_ps"].to_numpy(np.int64) + df["duration_ps"].to_numpy(np.int64)
    out = _cached("ends", df, lambda d: d["start_ps"].to_numpy(np.int64) + d["duration_ps"].to_numpy(np.int64))
    out.flags.writeable = False
    return out


def _sync(ops: pd.DataFrame) -> np.ndarray:
    return ~ops["is_async"].to_numpy(bool)


def _cut_points(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """Sorted distinct step starts and ends. Steps of one device rarely overlap: then start, end, start, end...
    interleaved is already in order and only equal neighbours need dropping (no sort)."""
    both = np.empty(2 * len(s0), np.int64)
    both[0::2], both[1::2] = s0, s1
    if len(both) and bool((both[1:] >= both[:-1]).all()):
        return both[np.r_[True, both[1:] != both[:-1]]]
    return np.unique(both)


def _view(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a[idx]`` for sorted distinct row positions; a view (no copy) when they are contiguous."""
    if len(idx) and int(idx[-1]) - int(idx[0]) + 1 == len(idx):
        return a[int(idx[0]):int(idx[-1]) + 1]
    return a[idx]


# ------------------------------------------------------------------------------------------- ordering, windows
def contain(ops: pd.DataFrame, windows: pd.DataFrame, value: str, by: str = "device") -> np.ndarray:
    """For each op, ``value`` of the window (same ``by``) that contains the op's start, else -1. One sorted search
    per device."""
    res = np.full(len(ops), -1, dtype=np.int64)
    if not len(ops) or not len(windows):
        return res
    codes, cats = codes_of(ops[by])
    t = ops["start_ps"].to_numpy()
    wdev = windows[by].astype(str).to_numpy()
    per_dev = {}
    for i, d in enumerate(cats):
        m = wdev == str(d)
        if not m.any():
            continue
        ws0 = windows["start_ps"].to_numpy()[m]
        order = np.argsort(ws0, kind="stable")
        ws = ws0[order]
        per_dev[i] = (ws, ws + windows["duration_ps"].to_numpy()[m][order],
                      windows[value].to_numpy()[m][order].astype(np.int64))
    # ops sorted by device: each device is one run (a slice); unsorted frames just give more, shorter runs
    for i, sl in runs(codes):
        if i not in per_dev:
            continue
        ws, we, wv = per_dev[i]
        tt = t[sl]
        k = np.searchsorted(ws, tt, side="right") - 1
        kk = np.maximum(k, 0)
        res[sl] = np.where((k >= 0) & (tt < we[kk]), wv[kk], -1)
    return res


def frame_order(frames: list[pd.DataFrame]) -> np.ndarray | None:
    """Row positions that put the concatenation of ``frames`` in (host, device, start) order (names compared as
    text, as sort_values would), or None when it is in that order already."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    t = np.concatenate([f["start_ps"].to_numpy(np.int64) for f in frames])
    rank = np.zeros(len(t), np.int64)
    for col in ("host", "device"):
        values = sorted({str(v) for f in frames for v in (f[col].cat.categories if f[col].dtype == "category"
                                                           else f[col].unique())})
        pos = {v: i for i, v in enumerate(values)}
        parts = []
        for f in frames:
            codes, uniq = codes_of(f[col])
            parts.append(np.append(np.array([pos[str(u)] for u in uniq], np.int64), 0)[codes])
        rank = rank * (len(values) + 1) + np.concatenate(parts)
    if not len(t):
        return None
    t0, span = int(t.min()), int(t.max()) - int(t.min()) + 1
    if (int(rank.max()) + 1) * span >= 1 << 62:  # no room for one int64 key: sort on two
        same = rank[1:] == rank[:-1]
        if bool(((rank[1:] > rank[:-1]) | (same & (t[1:] >= t[:-1]))).all()):
            return None
        return np.lexsort((t, rank))
    key = rank * span + (t - t0)
    if bool((key[1:] >= key[:-1]).all()):
        return None
    n0 = len(frames[0])
    a, b = key[:n0], key[n0:]
    if not len(b) or not bool((a[1:] >= a[:-1]).all()):
        return np.argsort(key, kind="stable")
    # the first frame (the op rows) is in order already: sort the rest (the async windows), merge them in after
    # equal keys of the first (what a stable sort of the concatenation gives)
    ob = np.argsort(b, kind="stable")
    dest = np.searchsorted(a, b[ob], side="right") + np.arange(len(b))
    out = np.empty(len(key), np.int64)
    rest = np.ones(len(key), bool)
    rest[dest] = False
    out[dest] = n0 + ob
    out[rest] = np.arange(n0)
    return out


def sorted_frame(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops in (host, device, start) order — one gather of the rows, none when already in order."""
    if not len(ops):
        return ops
    order = frame_order([ops])
    if order is None:
        return ops.reset_index(drop=True) if not isinstance(ops.index, pd.RangeIndex) else ops
    return ops.take(order).reset_index(drop=True)
