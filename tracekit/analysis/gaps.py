"""Idle gaps per device: each device's window (:func:`tracekit.analysis.timeline.windows`) less its busy time,
cut at every step start and end so that each gap lies wholly inside one step or wholly outside all steps.

A large trace has about one gap for every two op rows, so the gap columns are filled in place, device by device
and a bounded chunk of gaps at a time: per-device frames concatenated at the end held every gap twice, and the
pieces of a whole device held several row-sized temporaries at once (at 15 M events each set the rule frames'
peak in turn).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.analysis.intervals import cut_points, device_index
from tracekit.analysis.timeline import windows
from tracekit.options import DEFAULTS

#: the gaps frame's columns (host, device and kind are categorical when there are gaps)
COLUMNS = {"host": object, "device": object, "start_ps": "int64", "duration_ps": "int64", "kind": object,
           "step": "int64"}
#: gaps cut into pieces per pass: bounds the temporaries (about ten int64 arrays of the pieces) whatever the trace
CHUNK = 1 << 16


def gaps(ops, steps=None, min_gap_ps: int = DEFAULTS.min_gap_ps) -> pd.DataFrame:
    """Idle gaps per device. ``kind`` is ``before_first_op`` (ends at or before the device's first sync op, or
    the device has none), else ``inside_step``, else on a device with steps ``before_first_step`` (ends at or
    before its first step starts: setup), ``after_last_step`` (starts at or after its last step ends) or
    ``between_steps``, and ``between_ops`` on a device without steps. ``step`` is the step containing the gap, -1 outside steps. Gaps shorter than ``min_gap_ps`` (and
    empty ones) are dropped. ``ops``/``steps``: frames or their :class:`~tracekit.analysis.intervals.DeviceIndex`."""
    ix = device_index(ops)
    busy = ix.busy()
    if steps is None:
        steps = pd.DataFrame({"host": [], "device": [], "step": [], "start_ps": [], "duration_ps": []})
    sx = device_index(steps)
    steps = sx.df
    sg = sx.groups()
    ss, se, sn = column_numpy(steps, "start_ps", np.int64), sx.ends(), column_numpy(steps, "step", np.int64)
    none = np.array([], np.int64)
    wins = windows(ix, sx)
    # room for every gap: a device has at most one gap more than its busy intervals, and each step start or end
    # cuts at most one gap in two
    out = _Columns(sum(busy.get(k, (none,))[0].size + 1 + 2 * len(sg.get(k, none)) for k in wins))
    for (h, d), (ws, we) in wins.items():
        ms, me = busy.get((h, d), (none, none))
        a, b = np.r_[ws, me], np.r_[ms, we]  # complement of busy inside the window
        keep = b > a
        a, b = a[keep], b[keep]
        si = sg.get((h, d), none)
        o = np.argsort(ss[si], kind="stable")
        s0, s1, sno = ss[si][o], se[si][o], sn[si][o]
        bnd = cut_points(s0, s1)
        first_op = ms[0] if ms.size else np.iinfo(np.int64).max
        labels = ("before_first_op", "inside_step", "between_steps", "before_first_step", "after_last_step") \
            if s0.size else ("before_first_op", "inside_step", "between_ops")
        first_step, last_end = (int(s0[0]), int(s1.max())) if s0.size else (0, 0)
        for c in range(0, a.size, CHUNK):
            ps, pe, inside, kk = _pieces(a[c:c + CHUNK], b[c:c + CHUNK], bnd, s0, s1, min_gap_ps)
            outside = 2 if not s0.size else np.where(pe <= first_step, 3, np.where(ps >= last_end, 4, 2))
            out.add(h, d, labels, ps, pe, np.where(pe <= first_op, 0, np.where(inside, 1, outside)),
                    np.where(inside, np.r_[sno, -1][kk], -1))
    return out.frame()


def _pieces(a: np.ndarray, b: np.ndarray, bnd: np.ndarray, s0: np.ndarray, s1: np.ndarray, min_gap_ps: int):
    """Gaps ``[a, b)`` (disjoint, in order) cut at the sorted step bounds ``bnd``: each piece's (start, end,
    whether a step holds it, the position of the step that starts last at or before it among ``s0``), less the
    pieces shorter than ``min_gap_ps`` and the empty ones."""
    lo, hi = np.searchsorted(bnd, a, "right"), np.searchsorted(bnd, b, "left")
    n = hi - lo + 1  # pieces per gap
    gi = np.repeat(np.arange(a.size), n)
    pos = np.arange(gi.size) - np.repeat(np.cumsum(n) - n, n)
    bb = np.r_[bnd, 0]
    ps = np.where(pos == 0, a[gi], bb[np.clip(lo[gi] + pos - 1, 0, bnd.size)])
    pe = np.where(pos == n[gi] - 1, b[gi], bb[np.clip(lo[gi] + pos, 0, bnd.size)])
    del gi, pos
    k = np.searchsorted(s0, ps, "right") - 1
    kk = np.maximum(k, 0)
    inside = (k >= 0) & (ps < np.r_[s1, 0][kk])
    keep = (pe - ps > 0) & (pe - ps >= min_gap_ps)
    return ps[keep], pe[keep], inside[keep], kk[keep]


class _Columns:
    """The gap columns, filled in place up to ``at``; categories in first-seen order over the chunks with gaps
    (what concatenating per-device frames gave). Host and device are one value per :meth:`add`: kept as runs and
    spread to the rows once, as the categorical codes, when the frame is made."""

    def __init__(self, cap: int):
        self.cap, self.at = cap, 0
        self.cols = {"start_ps": np.empty(cap, np.int64), "duration_ps": np.empty(cap, np.int64),
                     "step": np.empty(cap, np.int64), "kind": np.empty(cap, np.int8)}
        self.cats: dict = {"host": {}, "device": {}, "kind": {}}
        self.runs: list = []  # (rows, host code, device code) per add

    def add(self, h: str, d: str, labels: tuple, ps, pe, kind_pos, step) -> None:
        m = ps.size
        if not m:
            return
        at = self.at
        if at + m > self.cap:  # (not expected: the room is an upper bound for disjoint busy intervals)
            self.cap = at + m
            self.cols = {c: np.resize(v, self.cap) for c, v in self.cols.items()}
        kinds = self.cats["kind"]
        codes = np.array([kinds.setdefault(v, len(kinds)) for v in labels], np.int8)
        c = self.cols
        self.runs.append((m, self.cats["host"].setdefault(h, len(self.cats["host"])),
                          self.cats["device"].setdefault(d, len(self.cats["device"]))))
        c["start_ps"][at:at + m] = ps
        np.subtract(pe, ps, out=c["duration_ps"][at:at + m])
        c["kind"][at:at + m] = codes[kind_pos]
        c["step"][at:at + m] = step
        self.at = at + m

    def frame(self) -> pd.DataFrame:
        at = self.at
        if not at:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in COLUMNS.items()})
        for v in self.cols.values():  # the unused room goes back to the allocator (shrunk in place: no copy)
            v.resize(at, refcheck=False)  # (safe: no view of these arrays is alive)
        rows = np.array([r[0] for r in self.runs], np.int64)
        for i, c in ((1, "host"), (2, "device")):
            n = len(self.cats[c])
            code = np.int8 if n < 127 else np.int16 if n < 32767 else np.int32
            self.cols[c] = np.repeat(np.array([r[i] for r in self.runs], code), rows)
        return pd.DataFrame({c: (pd.Categorical.from_codes(self.cols[c], list(self.cats[c])) if c in self.cats
                                 else self.cols[c]) for c in COLUMNS}, copy=False)
