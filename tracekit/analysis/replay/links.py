"""Async windows in the replay graph: which window each ``-done`` waits for, and host-offload copies queued on
their direction of the host link (see :mod:`tracekit.analysis.replay.graph`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.grouping import cat_apply, codes_of

OP, WIN, DONE = 0, 1, 2


def _node_of(rows: np.ndarray, frame_rows: np.ndarray) -> np.ndarray:
    """Node index of each frame row (-1: not a node); ``rows`` maps node -> frame row."""
    if not len(rows):
        return np.full(len(frame_rows), -1, np.int64)
    o = np.argsort(rows, kind="stable")
    pos = np.searchsorted(rows[o], frame_rows)
    pos = np.minimum(pos, len(rows) - 1)
    hit = rows[o][pos] == frame_rows
    return np.where(hit, o[pos], -1)


#: a -done shorter than this did not wait for its window (a TPU -done that finds its copy complete takes ns)
DONE_WAIT_PS = 1_000_000


def done_windows(ops: pd.DataFrame, rows: np.ndarray, kind: np.ndarray, start: np.ndarray, end: np.ndarray,
                 d2s: dict) -> tuple[np.ndarray, np.ndarray]:
    """(the window node of each ``-done`` node (-1 elsewhere), whether it waited: it took at least
    :data:`DONE_WAIT_PS`)."""
    from tracekit.model.execution import pair_done_windows
    n = len(rows)
    window = np.full(n, -1, np.int64)
    if not n or not (kind == WIN).any():
        return window, np.zeros(n, bool)
    mask = np.zeros(len(ops), bool)
    sync_rows = rows[kind == OP]
    mask[sync_rows] = cat_apply(ops["op"], lambda o: "-done" in str(o))[sync_rows]  # (once per distinct name)
    if not mask.any():
        return window, np.zeros(n, bool)
    d_rows, w_rows = pair_done_windows(ops, mask, d2s)
    d_node, w_node = _node_of(rows, d_rows), _node_of(rows, w_rows)
    ok = (d_node >= 0) & (w_node >= 0)
    window[d_node[ok]] = w_node[ok]
    return window, (window >= 0) & (end - start >= DONE_WAIT_PS)


def window_ends(ops: pd.DataFrame, rows: np.ndarray, start: np.ndarray, end: np.ndarray, window: np.ndarray,
                waited: np.ndarray) -> tuple[np.ndarray, dict]:
    """(the windows' ends as the replay takes them, how many windows took each estimate). A trace's async window
    ends with its ``-done``. When the -done waited, that is when the transfer (or collective) finished. When it
    did not, the window had finished before the -done started, at a time the trace does not give; it is taken to
    end ``start + estimate`` (never after the -done's start), the estimate being the first known of:

    1. ``same op``: the median duration of the windows of the same op on the device whose -done waited;
    2. ``link rate`` (host-offload copies): its bytes at the rate the device's waited copies that found the link
       free measured (their bytes over their time);
    3. ``roofline``: its predicted time;
    4. ``-done start``: the latest it can have ended (an upper bound: the ops it overlapped stay under it).
    """
    end = end.copy()
    counts: dict = {}
    d = np.flatnonzero((window >= 0) & ~waited)
    if not len(d):
        return end, counts
    w = window[d]
    n = len(rows)
    is_w = np.zeros(n, bool)
    is_w[window[window >= 0]] = True
    waited_w = np.zeros(n, bool)
    waited_w[window[(window >= 0) & waited]] = True
    dev = codes_of(ops["device"])[0][rows]
    ident = codes_of(ops["op"])[0][rows] * (int(dev.max(initial=0)) + 1) + dev
    dur = (end - start).astype(float)
    est = np.full(len(w), np.nan)
    how = np.full(len(w), "-done start", object)
    # 1. the same op's waited windows
    med = pd.Series(dur[waited_w]).groupby(ident[waited_w]).median() if waited_w.any() else pd.Series(dtype=float)
    v = med.reindex(ident[w]).to_numpy(float)
    take = np.isnan(est) & np.isfinite(v)
    est[take], how[take] = v[take], "same op"
    # 2. host-offload copies: the device's link rate
    if {"is_host_transfer", "net_bytes"} <= set(ops.columns):
        hx = column_numpy(ops, "is_host_transfer", bool)[rows] & is_w
        nb = column_numpy(ops, "net_bytes", float)[rows]
        x = np.flatnonzero(hx)
        x = x[np.lexsort((start[x], dev[x]))]
        reach = np.full(len(x), np.iinfo(np.int64).min)
        for a, b in _runs(dev[x]):
            reach[a + 1:b] = np.maximum.accumulate(end[x[a:b - 1]])
        alone = np.zeros(n, bool)
        alone[x[start[x] >= reach]] = True  # no other copy of the device in flight when it started
        ok = alone & waited_w & (nb > 0)
        rate = pd.Series(dur[ok] / nb[ok]).groupby(dev[ok]).median() if ok.any() else pd.Series(dtype=float)
        v = rate.reindex(dev[w]).to_numpy(float) * nb[w]
        take = np.isnan(est) & hx[w] & np.isfinite(v) & (nb[w] > 0)
        est[take], how[take] = v[take], "link rate"
    # 3. the roofline
    if "roofline_ps" in ops.columns:
        v = column_numpy(ops, "roofline_ps")[rows][w].astype(float)  # (the rows' values only, then as floats)
        take = np.isnan(est) & np.isfinite(v) & (v > 0)
        est[take], how[take] = v[take], "roofline"
    new = np.where(np.isfinite(est), start[w] + np.nan_to_num(est), start[d]).astype(np.int64)
    end[w] = np.minimum(np.minimum(end[w], start[d]), new)
    for k in np.unique(how).tolist():
        counts[k] = int((how == k).sum())
    return end, counts


def _runs(codes: np.ndarray) -> list:
    """(start, stop) of each run of equal codes."""
    cut = np.r_[0, np.flatnonzero(codes[1:] != codes[:-1]) + 1, len(codes)]
    return list(zip(cut[:-1].tolist(), cut[1:].tolist()))


def done_times(window: np.ndarray, waited: np.ndarray, start: np.ndarray, end: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """(``nowait``, ``after``) of each -done node (``end``: windows' ends as :func:`window_ends` takes them). A
    -done whose window had ended before it started keeps its own duration (``nowait``) and ends no earlier than
    its window (``after`` 0); one that waited ends ``after`` = its end minus the window's end after it."""
    n = len(window)
    nowait, after = np.zeros(n, np.int64), np.zeros(n, np.int64)
    d = np.flatnonzero(window >= 0)
    w = window[d]
    late = end[w] > start[d]
    nowait[d] = np.where(late, 0, end[d] - start[d])
    after[d] = np.where(late, end[d] - end[w], 0)
    return nowait, after


def link_queue(ops: pd.DataFrame, rows: np.ndarray, kind: np.ndarray, start: np.ndarray, end: np.ndarray,
               slot: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the copy before each host-offload window in its queue (-1), each window's own time). A queue is one
    direction of one device's host link in one step; copies are served in the order they started: a copy's own
    time is its end minus the later of its start and the previous copy's end (Lindley's recursion read backwards).
    A copy that ended before the one ahead of it did is not queued behind it (its own time is its window)."""
    n = len(rows)
    qprev = np.full(n, -1, np.int64)
    own = np.where(kind == WIN, end - start, 0).astype(np.int64)
    if "is_host_transfer" not in ops.columns or not n:
        return qprev, own
    host_x = column_numpy(ops, "is_host_transfer", bool)[rows] & (kind == WIN)
    if host_x.sum() < 2:
        return qprev, own
    to_host = column_numpy(ops, "to_host", bool)[rows] if "to_host" in ops.columns else np.zeros(n, bool)
    idx = np.flatnonzero(host_x)
    q = slot[idx] * 2 + to_host[idx]
    o = np.lexsort((idx, start[idx], q))  # (node order is start order already)
    idx, q = idx[o], q[o]
    same = np.r_[False, q[1:] == q[:-1]]
    prev = np.r_[-1, idx[:-1]]
    ordered = same & (end[np.maximum(prev, 0)] <= end[idx])
    qprev[idx[ordered]] = prev[ordered]
    ready = np.where(ordered, np.maximum(start[idx], end[np.maximum(prev, 0)]), start[idx])
    own[idx] = end[idx] - ready
    return qprev, own
