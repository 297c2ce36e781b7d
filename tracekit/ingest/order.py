"""Rows in time order and the windows that hold them, for the loader's joins: :func:`frame_order` /
:func:`sorted_frame` put op rows in (host, device, start) order, :func:`contain` finds the window (module run,
step) of the same device that holds each row's start."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.grouping import codes_of, runs


def contain(ops: pd.DataFrame, windows: pd.DataFrame, value: str, by: str = "device") -> np.ndarray:
    """For each op, ``value`` of the window (same ``by``) that contains the op's start, else -1. One sorted search
    per device."""
    res = np.full(len(ops), -1, dtype=np.int64)
    if not len(ops) or not len(windows):
        return res
    codes, cats = codes_of(ops[by], compact=True)
    t = ops["start_ps"].to_numpy()
    wcodes, wcats = codes_of(windows[by], compact=True)  # (windows matched by name: codes per distinct name)
    wnames = [str(w) for w in wcats]
    per_dev = {}
    for i, d in enumerate(cats):
        js = [j for j, w in enumerate(wnames) if w == str(d)]
        if not js:
            continue
        m = wcodes == js[0] if len(js) == 1 else np.isin(wcodes, js)
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
        k = last_at_or_before(ws, tt)
        kk = np.maximum(k, 0)
        res[sl] = np.where((k >= 0) & (tt < we[kk]), wv[kk], -1)
    return res


def last_at_or_before(ws: np.ndarray, tt: np.ndarray) -> np.ndarray:
    """``searchsorted(ws, tt, "right") - 1``: for each time the last of the sorted starts ``ws`` at or before it
    (-1: none). When the times are sorted too (a device's ops in a sorted frame) the few windows are searched in
    the many times instead, and each time's count of windows is a running sum: O(n) rather than O(n log m)."""
    if len(tt) < 1024 or not bool((tt[1:] >= tt[:-1]).all()):
        return np.searchsorted(ws, tt, side="right") - 1
    first = np.searchsorted(tt, ws, side="left")  # window j starts at or before tt[i] exactly when i >= first[j]
    k = np.cumsum(np.bincount(first, minlength=len(tt) + 1)[:len(tt)])
    k -= 1
    return k


def frame_order(frames: list[pd.DataFrame]) -> np.ndarray | None:
    """Row positions that put the concatenation of ``frames`` in (host, device, start) order (names compared as
    text, as sort_values would), or None when it is in that order already."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    t = np.concatenate([f["start_ps"].to_numpy(np.int64) for f in frames])
    rank = None  # (None: every row ranks 0 so far)
    for col in ("host", "device"):
        values = sorted({str(v) for f in frames for v in (f[col].cat.categories if f[col].dtype == "category"
                                                           else f[col].unique())})
        if len(values) == 1:
            continue  # one value (one host): it orders nothing (a missing value ranks with the first value)
        pos = {v: i for i, v in enumerate(values)}
        parts = []
        for f in frames:
            codes, uniq = codes_of(f[col])
            parts.append(np.append(np.array([pos[str(u)] for u in uniq], np.int64), 0)[codes])
        rank = np.concatenate(parts) if rank is None else rank * (len(values) + 1) + np.concatenate(parts)
    if not len(t):
        return None
    t0, span = int(t.min()), int(t.max()) - int(t.min()) + 1
    if rank is not None and (int(rank.max()) + 1) * span >= 1 << 62:  # no room for one int64 key: sort on two
        same = rank[1:] == rank[:-1]
        if bool(((rank[1:] > rank[:-1]) | (same & (t[1:] >= t[:-1]))).all()):
            return None
        return np.lexsort((t, rank))
    key = t - t0
    if rank is not None:
        key += rank * span
    if bool((key[1:] >= key[:-1]).all()):
        return None
    n0 = len(frames[0])
    # each frame sorted on its own (the op rows nearly are: a TPU's device clock reorders a few), then the rest (the
    # async windows) merged in after equal keys of the first: what a stable sort of the concatenation gives
    oa, ob = stable_order(key[:n0]), stable_order(key[n0:])
    a = key[:n0] if oa is None else key[:n0][oa]
    oa = np.arange(n0) if oa is None else oa
    if n0 == len(key):
        return oa
    ob = np.arange(len(key) - n0) if ob is None else ob
    return _merged(a, key[n0:][ob], oa, n0 + ob)


def stable_order(key: np.ndarray) -> np.ndarray | None:
    """``np.argsort(key, kind="stable")``, or None when ``key`` is in order already. A key out of order in a few
    places (at most an eighth of it) sorts only the elements that some earlier element exceeds and merges them into
    the others, which are in order: a few passes over the key instead of a sort of all of it."""
    if len(key) < 2 or bool((key[1:] >= key[:-1]).all()):
        return None
    bad = np.zeros(len(key), bool)
    bad[1:] = key[1:] < np.maximum.accumulate(key)[:-1]
    if int(np.count_nonzero(bad)) * 8 > len(key):
        return np.argsort(key, kind="stable")
    # every other element is at least each one before it: in order, and ahead of any out-of-order element with its
    # key (that one comes later in the key: an element before it is larger); so each out-of-order element goes
    # after the in-order elements of its key, the out-of-order ones of one key in their order
    good, late = np.flatnonzero(~bad), np.flatnonzero(bad)
    late = late[np.argsort(key[late], kind="stable")]
    return _merged(key[good], key[late], good, late)


def _merged(a: np.ndarray, b: np.ndarray, ia: np.ndarray, ib: np.ndarray) -> np.ndarray:
    """Positions ``ia`` and ``ib`` of the sorted keys ``a`` and ``b`` interleaved in key order, ``a``'s first among
    equal keys."""
    dest = np.searchsorted(a, b, side="right") + np.arange(len(b))
    out = np.empty(len(a) + len(b), np.int64)
    rest = np.ones(len(out), bool)
    rest[dest] = False
    out[dest] = ib
    out[rest] = ia
    return out


def sorted_frame(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops in (host, device, start) order — one gather of the rows, none when already in order."""
    if not len(ops):
        return ops
    order = frame_order([ops])
    if order is None:
        return ops.reset_index(drop=True) if not isinstance(ops.index, pd.RangeIndex) else ops
    return ops.take(order).reset_index(drop=True)
