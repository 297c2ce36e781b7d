"""``--fix FINDING|OP``: which op rows a fix touches and how (:class:`tracekit.analysis.replay.changes.RowTimes`).

* an op (``fusion.3`` or ``module/fusion.3``, every execution on every device): at its roofline, never slower than
  measured (a collective: at the model's time on its links; a host-offload copy: its bytes alone on the link);
* a finding (rule id ``TK004`` or name ``low-roofline-efficiency``): the ops its evidence names, by the rule's
  frame:

  ======================================  ====================================================================
  collectives, ``unoverlapped-collective``  overlapped: the collective holds nothing up (perfectly hidden)
  steps (``collective-bound-step``)          overlapped: every collective of the steps it names
  gaps (``device-idle-gaps``)                the gaps removed: the op after each gap starts as soon as it may
  op_stats, ops, other collectives rules     at the roofline, as an op above
  anything else (memory, host, devices)      not replayable: the finding keeps its claimed savings
  ======================================  ====================================================================
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, member_mask
from tracekit.grouping import codes_of, unique_rows

OVERLAP_RULES = frozenset({"unoverlapped-collective", "collective-bound-step"})
ROOFLINE_FRAMES = frozenset({"op_stats", "ops", "collectives"})


def action(rule) -> str | None:
    """'overlap' | 'gaps' | 'roofline' for a rule whose fix the replay can play, else None."""
    if rule.name in OVERLAP_RULES:
        return "overlap"
    if rule.frame == "gaps":
        return "gaps"
    if rule.frame in ROOFLINE_FRAMES:
        return "roofline"
    return None


def _text_at(ops: pd.DataFrame, col: str, rows: np.ndarray) -> np.ndarray:
    """``ops[col].astype(str)`` at ``rows`` only: each distinct value's text, gathered by code."""
    codes, values = codes_of(ops[col], compact=True)
    text = np.asarray([str(v) for v in values] + ["nan"], dtype=object)  # (code -1, missing: as astype(str))
    return text[codes[rows]]


def _rows_in(ops: pd.DataFrame, key: np.ndarray, want: set, texts: tuple) -> np.ndarray:
    """Mask of the rows whose (``texts`` columns as text..., ``key``) tuple is in ``want``: the integer ``key``
    (each tuple's last item) narrows the rows first, so no text column of the whole frame is built (a 1.7 M-row
    MultiIndex of three text columns per finding was the what-if section's peak memory)."""
    n = len(ops)
    out = np.zeros(n, bool)
    if not want or not n:
        return out
    rows = np.flatnonzero(member_mask(key, np.fromiter({w[-1] for w in want}, np.int64)))
    if not len(rows):
        return out
    cols = [_text_at(ops, c, rows) for c in texts] + [key[rows]]
    hit = pd.MultiIndex.from_arrays(cols).isin(list(want))
    out[rows[np.asarray(hit, bool)]] = True
    return out


def evidence_rows(ops: pd.DataFrame, frame: str, ev: pd.DataFrame) -> np.ndarray:
    """Mask of the op rows a finding's evidence ``ev`` (all its rows, from the rule's ``frame``) names."""
    n = len(ops)
    if not len(ev) or not n:
        return np.zeros(n, bool)
    st = column_numpy(ops, "start_ps", np.int64)
    if frame == "gaps":
        end = column_numpy(ev, "start_ps", np.int64) + column_numpy(ev, "duration_ps", np.int64)
        want = set(zip(ev["host"].astype(str), ev["device"].astype(str), end.tolist()))
        return ~column_numpy(ops, "is_async", bool) & _rows_in(ops, st, want, ("host", "device"))
    if frame == "steps":
        from tracekit.analysis.timeline import is_collective
        want = set(zip(ev["host"].astype(str), ev["device"].astype(str), ev["step"].astype(int).tolist()))
        return is_collective(ops) & _rows_in(ops, column_numpy(ops, "step", np.int64), want, ("host", "device"))
    if {"host", "device", "op", "start_ps"} <= set(ev.columns):
        want = set(zip(ev["host"].astype(str), ev["device"].astype(str), ev["op"].astype(str),
                       ev["start_ps"].astype(np.int64).tolist()))
        return _rows_in(ops, st, want, ("host", "device", "op"))
    if "op" in ev.columns:
        if "module" in ev.columns:
            return op_rows(ops, [f"{m}/{o}" for m, o in zip(ev["module"].astype(str), ev["op"].astype(str))])
        return op_rows(ops, ev["op"].astype(str))
    return np.zeros(n, bool)


def op_rows(ops: pd.DataFrame, names) -> np.ndarray:
    """Mask of the rows of the ops named (``op`` or ``module/op``)."""
    names = set(map(str, names))
    if not len(ops):
        return np.zeros(0, bool)
    inv, pairs = unique_rows(ops, ["module", "op"])  # (each distinct op once, not a text per row)
    hit = np.array([o is not None and (str(o) in names or f"{'nan' if m is None else m}/{o}" in names)
                    for m, o in pairs], bool)
    return hit[inv]


def roofline_cap(ops: pd.DataFrame, own_link: np.ndarray) -> np.ndarray:
    """Per row: the time the op takes at its roofline (a host-offload copy: alone on its link); NaN unknown."""
    if "roofline_ps" not in ops:
        return np.where(np.isfinite(own_link), own_link, np.nan)
    r = column_numpy(ops, "roofline_ps")  # (float32 as it is: np.where widens it exactly, no float64 copy first)
    return np.where(np.isfinite(own_link), own_link, r if r.dtype.kind == "f" else r.astype(float))


def gap_ends(frame: str, ev: pd.DataFrame) -> set:
    """(host, device, ps) where each of a gaps finding's gaps ends (a gap between steps ends at the next run)."""
    if frame != "gaps" or not len(ev):
        return set()
    end = (column_numpy(ev, "start_ps", np.int64) + column_numpy(ev, "duration_ps", np.int64)).tolist()
    return set(zip(ev["host"].astype(str), ev["device"].astype(str), end))


def apply(rt, ops: pd.DataFrame, mask: np.ndarray, act: str, own_link: np.ndarray, ends: set | None = None) -> int:
    """Lay fix ``act`` on the rows of ``mask`` in ``rt`` (in place); returns how many rows it touched. ``ends``:
    where the removed gaps end (:func:`gap_ends`)."""
    if act == "overlap":
        from tracekit.analysis.timeline import is_collective
        m = mask & is_collective(ops)
        rt.free |= m
        return int(m.sum())
    if act == "gaps":
        rt.no_gap |= mask
        rt.gap_ends |= ends or set()
        return int(mask.sum())
    cap = roofline_cap(ops, own_link)
    m = mask & np.isfinite(cap)
    rt.cap = np.where(m, np.fmin(rt.cap, cap), rt.cap)
    return int(m.sum())
