"""Roofline coverage, defined once.

An op execution is **covered** when its FLOPs (a declared zero counts) and its bytes are both known and it has a
finite predicted (roofline) time. **Coverage** = covered op time / op time, where op time is the synchronous ops'
self time (async windows excluded: their time overlaps the ops beside them; a loop whose body ops are traced counts
only its own time). It is worked out per device and overall; the per-device figures keep a device that only copies
from diluting one that computes. ``summary.roofline_coverage`` (and ``roofline_coverage_by_device``), the text
report's "roofline known for" line, the overview's ``roofline_known_share`` and the tests all use these functions.

Per-device parts of disjoint sets of devices (a pod's hosts) concatenate: :func:`summarize` adds them up.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, self_time
from tracekit.grouping import distinct_rows, int_sums
from tracekit.model import predictions
from tracekit.units import fmt_pct

#: one device's part: (host, device, op time ps, covered op time ps)
PART_FIELDS = ("host", "device", "op_time_ps", "covered_ps")


def covered(ops: pd.DataFrame) -> np.ndarray:
    """Per row: FLOPs and bytes known (not NaN; 0 is known) and a finite roofline time."""
    if not len(ops) or not predictions.has(ops, "roofline_ps"):
        return np.zeros(len(ops), bool)
    r = predictions.values(ops, "roofline_ps")  # (the float32 predictions as they are: no float64 copy)
    ok = np.isfinite(r if r.dtype.kind == "f" else r.astype(np.float64))
    for col in ("flops", "bytes_accessed"):
        if predictions.has(ops, col):
            ok &= ~np.isnan(predictions.values(ops, col).astype(np.float64, copy=False))
    return ok


def parts(ops: pd.DataFrame) -> tuple:
    """Per device with synchronous ops: (host, device, op_time_ps, covered_ps), in host, device order."""
    if not len(ops):
        return ()
    sync = ~column_numpy(ops, "is_async", bool)
    t = self_time(ops)
    # group codes and exact per-group sums (no text copy of the host and device columns: two 1.7 M-row object
    # arrays and pandas' groupby over them were the analysis' peak memory at 1.2 M op executions)
    keys = [c for c in ("host", "device") if c in ops.columns]
    inv, _, tuples = distinct_rows(ops, keys)
    inv = np.asarray(inv)
    n = len(tuples)
    op_t = int_sums(inv[sync], t[sync], n)
    m = sync & covered(ops)
    cov_t = int_sums(inv[m], t[m], n)
    ran = np.bincount(inv[sync], minlength=n) > 0
    out = []
    for g in np.flatnonzero(ran):
        v = dict(zip(keys, tuples[g]))
        out.append((str(v.get("host", "")), str(v.get("device", "")), int(op_t[g]), int(cov_t[g])))
    return tuple(sorted(out))


def share(ops: pd.DataFrame, rows: np.ndarray | None = None) -> float:
    """Covered share of the self time of ``rows`` (a boolean mask; default: the synchronous ops); NaN without time."""
    if not len(ops):
        return float("nan")
    m = ~column_numpy(ops, "is_async", bool) if rows is None else np.asarray(rows, bool)
    t = self_time(ops).astype(np.float64)
    total = t.sum(where=m)
    return float(t.sum(where=m & covered(ops)) / total) if total > 0 else float("nan")


def summarize(device_parts) -> dict:
    """``{"overall": covered / op time (0.0 without op time), "devices": [{host, device, op_time_ps, covered_ps,
    coverage}]}`` from :func:`parts` of one or more disjoint sets of devices."""
    merged: dict = {}
    for host, dev, t, c in device_parts:
        a = merged.setdefault((str(host), str(dev)), [0, 0])
        a[0] += int(t)
        a[1] += int(c)
    devices = [{"host": h, "device": d, "op_time_ps": t, "covered_ps": c, "coverage": c / t if t else None}
               for (h, d), (t, c) in sorted(merged.items())]
    total = sum(x["op_time_ps"] for x in devices)
    return {"overall": sum(x["covered_ps"] for x in devices) / total if total else 0.0, "devices": devices}


def spread(summary: dict) -> str:
    """'' when every device's coverage is within a percent of the others', else the lowest and highest with their
    devices, e.g. 'per device 41.2% (GPU:1) to 100.0% (GPU:0)' (what the overall figure averages away)."""
    devs = [d for d in summary.get("devices") or [] if d.get("coverage") is not None]
    if len(devs) < 2:
        return ""
    lo = min(devs, key=lambda d: d["coverage"])
    hi = max(devs, key=lambda d: d["coverage"])
    if hi["coverage"] - lo["coverage"] < 0.01:
        return ""
    hosts = len({d["host"] for d in devs}) > 1

    def name(d):
        return f"{d['host']}/{d['device']}" if hosts else d["device"]
    return f"per device {fmt_pct(lo['coverage'])} ({name(lo)}) to {fmt_pct(hi['coverage'])} ({name(hi)})"
