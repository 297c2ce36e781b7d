"""Rows in time order and the windows that hold them, for the loader's joins: :func:`frame_order` /
:func:`sorted_frame` put op rows in (host, device, start) order, :func:`with_copies` adds copies of some rows (the
async windows paired from their ``-start`` ops) in that order, :func:`contain` finds the window (module run, step)
of the same device that holds each row's start."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, concat_categorical, concat_frames, filled, gather, held_once
from tracekit.grouping import codes_of, runs


def contain(ops: pd.DataFrame, windows: pd.DataFrame, value: str, by: str = "device") -> np.ndarray:
    """For each op, ``value`` of the window (same ``by``) that contains the op's start, else -1. One sorted search
    per device."""
    res = np.full(len(ops), -1, dtype=np.int64)
    if not len(ops) or not len(windows):
        return res
    codes, cats = codes_of(ops[by], compact=True)
    t = column_numpy(ops, "start_ps")
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
        ws0 = column_numpy(windows, "start_ps")[m]
        order = np.argsort(ws0, kind="stable")
        ws = ws0[order]
        per_dev[i] = (ws, ws + column_numpy(windows, "duration_ps")[m][order],
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
    text, as sort_values would), or None when it is in that order already: a stable sort of one int64 key (the rank
    of host and device, then the start), worked out in place in one row-sized array (and the rank's)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return None
    n = sum(len(f) for f in frames)
    key = np.concatenate([column_numpy(f, "start_ps", np.int64) for f in frames])  # (a fresh array: changed in place)
    rank = None  # (None: every row ranks 0 so far)
    for col in ("host", "device"):
        values = sorted({str(v) for f in frames for v in (f[col].cat.categories if f[col].dtype == "category"
                                                           else f[col].unique())})
        if len(values) == 1:
            continue  # one value (one host): it orders nothing (a missing value ranks with the first value)
        pos = {v: i for i, v in enumerate(values)}
        part, at = np.empty(n, np.int64), 0
        for f in frames:
            codes, uniq = codes_of(f[col])
            # each distinct value's rank; a missing value (code -1: the entry appended last) ranks 0
            np.take(np.append(np.array([pos[str(u)] for u in uniq], np.int64), 0), codes, out=part[at:at + len(f)],
                    mode="wrap")
            at += len(f)
        if rank is None:
            rank = part
        else:
            rank *= len(values) + 1
            rank += part
        del part
    t0, span = int(key.min()), int(key.max()) - int(key.min()) + 1
    if rank is not None and (int(rank.max()) + 1) * span >= 1 << 62:  # no room for one int64 key: sort on two
        same = rank[1:] == rank[:-1]
        if bool(((rank[1:] > rank[:-1]) | (same & (key[1:] >= key[:-1]))).all()):
            return None
        return np.lexsort((key, rank))
    key -= t0
    if rank is not None:
        rank *= span
        key += rank
        del rank
    if bool((key[1:] >= key[:-1]).all()):
        return None
    # NumPy's stable sort of int64 is a timsort: the op rows (in order but for the few a TPU's device clock
    # reorders) and the async windows after them are a few long runs, merged in a few passes
    return np.argsort(key, kind="stable")


def sorted_frame(ops: pd.DataFrame) -> pd.DataFrame:
    """Ops in (host, device, start) order — one gather of the rows, none when already in order."""
    if not len(ops):
        return ops
    order = frame_order([ops])
    if order is None:
        return ops.reset_index(drop=True) if not isinstance(ops.index, pd.RangeIndex) else ops
    return ops.take(order).reset_index(drop=True)


def with_copies(frames: list, rows: np.ndarray, replaced: dict) -> pd.DataFrame:
    """The frame ``frames[0]`` with copies of its rows ``rows`` added (each copy the row as it is, but for the
    columns of ``replaced``: name -> the copies' own values), all in (host, device, start) order: what
    ``concat_frames([df, copies], order=frame_order([df, copies]))`` gives, without making the copies. Each column
    is one gather from the frame's own column through the copies' source rows (a column stored once stays once),
    and only the replaced ones are concatenated. The caller hands the frame over (``frames`` is emptied; it keeps
    no other reference): each column of the frame is let go once its column of the result is made."""
    df = frames.pop()
    frames.clear()
    n = len(df)
    rows = np.asarray(rows, np.int64)
    keys = pd.DataFrame({c: replaced[c] if c in replaced else df[c].to_numpy()[rows]
                         if isinstance(df[c].dtype, np.dtype) else df[c].array.take(rows)
                         for c in ("start_ps", "host", "device")}, copy=False)
    order = frame_order([df, keys])
    del keys
    src = np.concatenate([np.arange(n, dtype=np.int64), rows]) if order is None else order.astype(np.int64)
    copy = src >= n
    src[copy] = gather(rows, src[copy] - n)  # (each position of the result: the frame's row it comes from)
    del copy
    cols = {c: df[c] for c in df.columns.tolist()}
    del df
    data = {}
    for c in list(cols):
        s = cols.pop(c)
        if c in replaced:  # (the copies' own values: concatenated and sorted as concat_frames does)
            out = concat_frames([pd.DataFrame({c: s}, copy=False), pd.DataFrame({c: replaced[c]}, copy=False)],
                                order=order)[c]
            out = out.array if isinstance(out.dtype, pd.CategoricalDtype) else out.to_numpy()
        elif isinstance(s.dtype, pd.CategoricalDtype):
            out = concat_categorical([s], [n], src)
        elif isinstance(s.dtype, np.dtype) and s.dtype.kind in "biuf":
            a = s.to_numpy()
            out = filled(len(src), a[0], a.dtype) if held_once(a) else gather(a, src)
        else:  # (text or objects: as concat_frames joins them)
            out = concat_frames([pd.DataFrame({c: s}, copy=False),
                                 pd.DataFrame({c: s.iloc[rows].reset_index(drop=True)}, copy=False)],
                                order=order)[c].array
        del s
        data[c] = out
    return pd.DataFrame(data, copy=False)
