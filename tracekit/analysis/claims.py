"""What the findings claim together, and the most any fix could win.

Findings' savings overlap: an exposed collective that also runs far below its roofline is claimed by both
``unoverlapped-collective`` and ``low-roofline-efficiency``; adding them up promises the same seconds twice. Each
finding's claim is laid on the device time its evidence covers (:func:`claim_intervals`) and the claims are
unioned per device (:func:`union_ps`): the headline states that union, beside :func:`above_floor_ps`, the profiled
time above the roofline floor (what is left when every op with a known roofline ran at it and nothing idled).

Where a claim sits inside its evidence is a convention (from the start of each row, in proportion to the row's
share of the finding's savings): the union is exact for claims on the same rows and an upper bound otherwise.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from tracekit.analysis.intervals import merge, union
from tracekit.columns import column_numpy, gather, self_time, spread_mask
from tracekit.grouping import distinct_rows, row_parts, rows_by_text
from tracekit.model import predictions
from tracekit.records import record


def _rows(ev: pd.DataFrame, length: np.ndarray, savings: np.ndarray | None = None,
          keep: np.ndarray | None = None) -> dict:
    """(host, device) -> (starts, ends) of each evidence row's claim: ``savings_ps`` (or ``savings``) from the
    row's start, at most its ``length``; only rows where ``keep``."""
    st = column_numpy(ev, "start_ps", np.int64)
    sav = column_numpy(ev, "savings_ps", np.float64) if savings is None else savings
    sav = np.maximum(np.minimum(np.nan_to_num(sav), length).astype(np.int64), 0)
    out: dict = {}
    for k, idx in rows_by_text(ev, ["host", "device"], keep).items():
        out[k] = (st[idx], st[idx] + sav[idx])
    return out


def _key_text(keys: list[str], tup: tuple):
    """A group key compared as text (program ids as integers); None when a part is missing."""
    if any(v is None for v in tup):
        return None
    return tuple(int(v) if k == "program_id" else str(v) for k, v in zip(keys, tup))


def _spread(ev: pd.DataFrame, ops: pd.DataFrame, keys: list[str]) -> dict:
    """Claims of aggregated evidence (one row per op or per device) spread over the sync op executions they stand
    for: every execution claims the same fraction of its own time, from its start. Works on group codes and on
    the rows of the claimed groups only: no row-sized copy of the frame, no string per row."""
    if ops is None or not len(ev) or not set(keys) <= set(ops.columns):
        return {}
    ev_inv, _, ev_tuples = distinct_rows(ev, keys)
    ev_sav = np.bincount(ev_inv, weights=np.nan_to_num(column_numpy(ev, "savings_ps", np.float64)),
                         minlength=len(ev_tuples))
    claimed: dict = {}
    for tup, v in zip(ev_tuples, ev_sav):
        k = _key_text(keys, tup)
        if k is not None:
            claimed[k] = claimed.get(k, 0.0) + v
    inv, _, tuples = distinct_rows(ops, keys)
    group_keys = [_key_text(keys, tup) for tup in tuples]
    on = np.array([k is not None and k in claimed for k in group_keys], bool)
    if not on.any():
        return {}
    # the sync executions of the claimed groups (async rows weigh nothing)
    rows = np.flatnonzero(spread_mask(on, inv) & ~column_numpy(ops, "is_async", bool))
    if not len(rows):
        return {}
    t = self_time(ops, rows)
    tf = t.astype(np.float64)
    g = gather(inv, rows)
    tot = np.bincount(g, weights=tf, minlength=len(tuples))
    frac = np.zeros(len(tuples))
    for i in np.flatnonzero(on):
        with np.errstate(divide="ignore", invalid="ignore"):
            q = claimed[group_keys[i]] / tot[i]
        frac[i] = 0.0 if np.isnan(q) else min(max(q, 0.0), 1.0)
    f = frac[g]
    hit = f > 0
    if not hit.any():
        return {}
    rows, t, sav = rows[hit], t[hit], tf[hit] * f[hit]
    sav = np.maximum(np.minimum(np.nan_to_num(sav), t).astype(np.int64), 0)
    st = gather(column_numpy(ops, "start_ps", np.int64), rows)
    where = ops[["host", "device"]].take(rows)
    return {k: (st[idx], st[idx] + sav[idx]) for k, idx in rows_by_text(where, ["host", "device"]).items()}


def claim_intervals(frame: str, ev: pd.DataFrame, frames: dict, time: str | None = None) -> dict:
    """(host, device) -> (starts, ends) where a finding on ``frame`` with evidence rows ``ev`` (with
    ``savings_ps``) claims device time. Host-only evidence (host events) claims no device time: {}.
    ``time``: the rule's ``time`` column (a ``serving`` row claims its program's runs with ``run_total_ps``, else
    the idle gaps between them)."""
    if frame == "serving" and len(ev) and "savings_ps" in ev:
        if time == "run_total_ps":
            return _spread(ev, frames.get("ops"), ["host", "device", "module", "program_id"])
        return _serving_gaps(ev, frames.get("gaps"))
    if not len(ev) or "savings_ps" not in ev or not {"host", "device"} <= set(ev.columns):
        if frame == "op_stats" and len(ev) and "op" in ev:
            return _spread(ev, frames.get("ops"), [k for k in ("module", "program_id", "op") if k in ev.columns])
        return {}
    if frame == "devices":
        return _spread(ev, frames.get("ops"), ["host", "device"])
    if "start_ps" not in ev:
        return {}
    for col in ("span_ps", "duration_ps", "step_ps"):
        if col in ev:
            return _rows(ev, ev[col].to_numpy(np.int64))
    return _rows(ev, np.full(len(ev), np.iinfo(np.int64).max))


def _serving_gaps(ev: pd.DataFrame, gaps: pd.DataFrame | None) -> dict:
    """Claims of ``serving`` rows on the idle between steps inside the program's span (``first_run_ps`` +
    ``span_ps``) on its device: the gaps in time order, until the row's savings are used up."""
    if gaps is None or not len(gaps) or not {"first_run_ps", "span_ps"} <= set(ev.columns):
        return {}
    g = gaps[gaps["kind"].astype(str).isin(["between_steps", "inside_step"])]
    out: dict = {}
    for r in ev.itertuples(index=False):
        left = int(max(0.0, float(np.nan_to_num(r.savings_ps))))
        on = g[(g["host"].astype(str) == str(r.host)) & (g["device"].astype(str) == str(r.device))
               & (g["start_ps"] >= r.first_run_ps) & (g["start_ps"] < r.first_run_ps + r.span_ps)]
        on = on.sort_values("start_ps", kind="stable")
        st, en = [], []
        for s0, d in zip(column_numpy(on, "start_ps", np.int64), column_numpy(on, "duration_ps", np.int64)):
            if left <= 0:
                break
            take = int(min(d, left))
            st.append(s0)
            en.append(s0 + take)
            left -= take
        if st:
            k = (str(r.host), str(r.device))
            a, b = out.get(k, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
            out[k] = (np.r_[a, np.array(st, np.int64)], np.r_[b, np.array(en, np.int64)])
    return out


def union_ps(claims: list[dict], span: dict | None = None) -> int:
    """Total device time the claims cover together: per (host, device) the union of every claim's intervals,
    at most that device's profiled span (``span``: (host, device) -> ps)."""
    per: dict = {}
    for c in claims:
        for k, (s, e) in c.items():
            per.setdefault(k, []).append((s, e))
    total = 0
    for k, parts in per.items():
        # each claim merged on its own first (a claim's intervals are mostly in order already), then their union:
        # no concatenation of every claim's raw intervals (millions per device on a large trace)
        ms, me = union(*(merge(s[e > s], e[e > s]) for s, e in parts))
        if not len(ms):
            continue
        u = int((me - ms).sum())
        total += min(u, int(span.get(k, u))) if span else u
    return total


def above_floor_ps(ops: pd.DataFrame, devices: pd.DataFrame) -> int | None:
    """Profiled time above the roofline floor: per device its span minus the time its sync ops would take at
    their rooflines (ops without a known roofline count at their measured self time: no fix is promised for
    them), summed. None without roofline columns."""
    return above_floor(floor_per_device(ops), devices)


def floor_per_device(ops: pd.DataFrame) -> dict | None:
    """(host, device) -> the time its sync ops would take at their rooflines (their self time where the roofline
    is unknown): the floors of disjoint devices merge by union. None without roofline columns."""
    if not predictions.has(ops, "roofline_ps"):
        return None
    sync = ~column_numpy(ops, "is_async", bool)
    roof = predictions.values(ops, "roofline_ps")  # (float32; each device's part is summed in float64 below)
    t = self_time(ops)
    per = {}
    for k, ix in row_parts(ops, ["host", "device"]).items():  # (a device's rows: a slice of a sorted frame)
        s = sync[ix]
        r, ti = roof[ix][s], t[ix][s].astype(np.float64)
        per[k] = float(np.fmin(r, ti, out=ti).sum())  # (the roofline, or the self time where it is unknown)
    return per


def above_floor(per: dict | None, devices: pd.DataFrame) -> int | None:
    """:func:`above_floor_ps` from the devices' floors (:func:`floor_per_device`) and the devices frame."""
    if per is None or not len(devices):
        return None
    total = 0.0
    for h, d, span in zip(devices["host"].astype(str), devices["device"].astype(str), devices["span_ps"]):
        total += max(float(span) - per.get((h, d), 0.0), 0.0)
    return int(round(total))


def headline(findings: list, devices: pd.DataFrame, ops: pd.DataFrame) -> dict:
    """``claims_union_ps`` (what the findings claim together: the union of their claims on device time, plus
    the claims of findings that sit on no device's time, at most the profiled time) and
    ``above_roofline_floor_ps`` (:func:`above_floor_ps`)."""
    span = {(str(h), str(d)): int(s) for h, d, s in zip(devices["host"], devices["device"], devices["span_ps"])} \
        if len(devices) else {}
    with_time = [f.claims for f in findings if getattr(f, "claims", None)]
    rest = sum(int(f.claimed_ps) for f in findings if not getattr(f, "claims", None))
    union = union_ps(with_time, span) + rest
    profiled = sum(span.values())
    return {"claims_union_ps": int(min(union, profiled) if profiled else union),
            "above_roofline_floor_ps": above_floor_ps(ops, devices)}


@record(frozen=True)
class Atoms:
    """The claims of several rules on one host's devices, in a form the reduce unions for any set of rules:
    per device, each stretch of time labelled by the set of rules that claim it (a mask), the stretches of one
    label summed. The union of the claims of rules ``F`` on a device is the sum over labels that meet ``F``: what
    :func:`union_ps` gives for those rules' claims, whichever rules the pod's findings turn out to be."""

    rules: tuple  #: rule ids, in mask column order
    with_claims: frozenset  #: rules whose claims are not empty (a device's zero-length claim counts)
    devices: dict  #: (host, device) -> (masks: bool [labels, rules], summed ps per label: int64 [labels])


def atoms(claims: dict) -> Atoms:
    """:class:`Atoms` of ``claims``: rule id -> :func:`claim_intervals` of its evidence."""
    rules = tuple(sorted(r for r, c in claims.items() if c))
    per: dict = {}
    for i, r in enumerate(rules):
        for k, (s, e) in claims[r].items():
            per.setdefault(k, []).append((i, *merge(s[e > s], e[e > s])))
    out = {}
    for k, parts in per.items():
        pts = np.unique(np.concatenate([x for _, ms, me in parts for x in (ms, me)]))
        if len(pts) < 2:
            out[k] = (np.zeros((0, len(rules)), bool), np.zeros(0, np.int64))
            continue
        lo, length = pts[:-1], np.diff(pts).astype(np.int64)
        code = np.zeros(len(lo), np.int64) if len(rules) <= 62 else None
        cover = None if code is not None else np.zeros((len(lo), len(rules)), bool)
        for i, ms, me in parts:
            if not len(ms):  # (this rule's claims on the device have no length)
                continue
            j = np.searchsorted(ms, lo, "right") - 1
            on = (j >= 0) & (me[np.maximum(j, 0)] > lo)
            if code is not None:
                code[on] |= np.int64(1) << i
            else:
                cover[:, i] |= on
        if code is not None:
            labels, inv = np.unique(code, return_inverse=True)
            masks = ((labels[:, None] >> np.arange(len(rules))) & 1).astype(bool)
        else:
            masks, inv = np.unique(cover, axis=0, return_inverse=True)
        sums = np.zeros(len(masks), np.int64)
        np.add.at(sums, inv.ravel(), length)
        keep = masks.any(axis=1)
        out[k] = (masks[keep], sums[keep])
    return Atoms(rules, frozenset(rules), out)


def atoms_union(parts: list, rules: set, span: dict) -> int:
    """The union of the claims of ``rules`` over the devices of every host's :class:`Atoms` (``parts``), each device
    at most its span (``span``: (host, device) -> ps), as :func:`union_ps` of those rules' claims gives it."""
    total = 0
    for a in parts:
        cols = [i for i, r in enumerate(a.rules) if r in rules]
        if not cols:
            continue
        for k, (masks, sums) in a.devices.items():
            u = int(sums[masks[:, cols].any(axis=1)].sum()) if len(sums) else 0
            if u:
                total += min(u, int(span.get(k, u))) if span else u
    return total
