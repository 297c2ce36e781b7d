"""The async windows of ops whose trace has no ``Async XLA Ops`` rows for their device: each ``*-start`` op paired with
the first ``*-done`` that completes it (:func:`paired_starts`), and the windows' own columns (:func:`window_columns`;
every other column of a window is its ``-start`` row's) or, for a trace that has such rows on some devices, the
windows as frames of their own (:func:`window_frames`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.columns import column_numpy, with_columns
from tracekit.grouping import cat_apply, unique, unique_rows
from tracekit.ingest import hlo


def window_frames(ops: pd.DataFrame, asyncs: pd.DataFrame, paired: tuple | None) -> list[pd.DataFrame]:
    """Async windows: the trace's own ``Async XLA Ops`` rows for devices that have them, else each ``*-start`` op
    paired with the first ``*-done`` that completes it (by the HLO, else by name) at or after it on the same
    device (``paired``: :func:`paired_starts`). A tie in time pairs the start with the done (a zero-length copy).
    Returns the frames of windows (the caller concatenates them with the ops once)."""
    if paired is None:
        return [asyncs]
    own = window_columns(ops, *paired)
    win = ops[[c for c in ops.columns if c not in own]].iloc[paired[0]]
    win = with_columns(win.reset_index(drop=True), own)
    return [asyncs, schema.conform(win, schema.OPS)]


def window_columns(ops: pd.DataFrame, rows: np.ndarray, ends: np.ndarray) -> dict:
    """The columns of the windows paired from the ``-start`` rows ``rows`` (ending at ``ends``) that are their own:
    every other column of a window is its ``-start`` row's."""
    n = len(rows)
    return {"duration_ps": ends - column_numpy(ops, "start_ps")[rows], "is_async": np.ones(n, bool),
            "source": pd.Categorical.from_codes(np.zeros(n, np.int8), categories=["async_pair"]),
            "line": pd.Categorical.from_codes(np.zeros(n, np.int8), categories=["XLA Ops"])}


def paired_starts(ops: pd.DataFrame, asyncs: pd.DataFrame, h: pd.DataFrame) -> tuple | None:
    """(rows of the ``*-start`` ops that a ``*-done`` completes, in row order; the end of each one's window) for
    :func:`window_frames`, or None when no start is paired."""
    have = {str(d) for d in asyncs["device"].unique()} if len(asyncs) else set()
    base = cat_apply(ops["source"], lambda v: v == "xla_ops").astype(bool) & \
        ~cat_apply(ops["device"], lambda v: v in have).astype(bool)
    s_idx = np.nonzero(base & cat_apply(ops["opcode"], lambda v: str(v).endswith("-start")).astype(bool))[0]
    d_idx = np.nonzero(base & cat_apply(ops["opcode"], lambda v: str(v).endswith("-done")).astype(bool))[0]
    if not len(s_idx) or not len(d_idx):
        return None
    done_to_start = hlo.done_to_start(h) if len(h) else {}
    names: dict = {}
    key_cols = ops[["device", "program_id", "op"]]  # a narrow view: the row selections below copy three columns
    sinv, srows = unique_rows(key_cols.iloc[s_idx], ["device", "program_id", "op"])
    skey = np.array([names.setdefault((d, int(p), o), len(names)) for d, p, o in srows], np.int64)[sinv]
    dinv, drows = unique_rows(key_cols.iloc[d_idx], ["device", "program_id", "op"])
    dkey = np.array([names.get((d, int(p), done_to_start.get((int(p), o), (o or "").replace("-done", "-start", 1))), -1)
                     for d, p, o in drows], np.int64)[dinv]
    t = column_numpy(ops, "start_ps")
    st, dt = t[s_idx], t[d_idx]
    de = dt + column_numpy(ops, "duration_ps")[d_idx]  # (the ends of the -done rows only)
    keep_s, keep_end = [], []
    dorder = np.lexsort((dt, dkey))
    dk_sorted = dkey[dorder]
    for k in unique(skey):
        rows = np.nonzero(skey == k)[0]
        lo, hi = np.searchsorted(dk_sorted, k, "left"), np.searchsorted(dk_sorted, k, "right")
        if lo == hi:
            continue
        grp = dorder[lo:hi]
        pos = np.searchsorted(dt[grp], st[rows], "left")
        ok = pos < len(grp)
        keep_s.append(rows[ok])
        keep_end.append(de[grp[pos[ok]]])
    if not keep_s:
        return None
    rows = np.concatenate(keep_s)
    order = np.argsort(rows, kind="stable")
    return s_idx[rows[order]], np.concatenate(keep_end)[order]
