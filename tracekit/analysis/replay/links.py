"""Async windows in the replay graph: which window each ``-done`` waits for, and host-offload copies queued on
their direction of the host link (see :mod:`tracekit.analysis.replay.graph`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

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


def done_windows(ops: pd.DataFrame, rows: np.ndarray, kind: np.ndarray, start: np.ndarray, end: np.ndarray,
                 d2s: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(window node of each ``-done`` node (-1 elsewhere), ``nowait``, ``after``). A -done whose window had ended
    before it started keeps its own duration (``nowait``) and ends no earlier than its window (``after`` 0); one
    that waited ends ``after`` = its end minus the window's end after the window (``nowait`` 0)."""
    from tracekit.model.execution import pair_done_windows
    n = len(rows)
    window = np.full(n, -1, np.int64)
    nowait = np.zeros(n, np.int64)
    after = np.zeros(n, np.int64)
    if not n or not (kind == WIN).any():
        return window, nowait, after
    opn = ops["op"].astype(str).to_numpy()
    mask = np.zeros(len(ops), bool)
    sync_rows = rows[kind == OP]
    mask[sync_rows] = [("-done" in o) for o in opn[sync_rows]]
    if not mask.any():
        return window, nowait, after
    d_rows, w_rows = pair_done_windows(ops, mask, d2s)
    d_node, w_node = _node_of(rows, d_rows), _node_of(rows, w_rows)
    ok = (d_node >= 0) & (w_node >= 0)
    d_node, w_node = d_node[ok], w_node[ok]
    window[d_node] = w_node
    waited = end[w_node] > start[d_node]
    nowait[d_node] = np.where(waited, 0, end[d_node] - start[d_node])
    after[d_node] = np.where(waited, end[d_node] - end[w_node], 0)
    return window, nowait, after


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
    host_x = ops["is_host_transfer"].to_numpy(bool)[rows] & (kind == WIN)
    if host_x.sum() < 2:
        return qprev, own
    to_host = ops["to_host"].to_numpy(bool)[rows] if "to_host" in ops.columns else np.zeros(n, bool)
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
