"""Section ``devices``: per device busy/idle/span (``devices[]``), with ``busy_ps_z`` across the pod's devices of
the same kind; the spans cap every finding's savings."""
from __future__ import annotations

import pandas as pd

NAME = "devices"


def summarize(hv) -> pd.DataFrame:
    """The host's rows of :func:`tracekit.analysis.timeline.device_summary`."""
    return hv.frames.devices.drop(columns=["busy_ps_z"], errors="ignore")


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import evidence
    from tracekit.analysis.outliers import modified_z
    from tracekit.report.envelope import records
    from tracekit.columns import stack
    rows = [p for p in parts if len(p)]
    dev = stack(rows) if len(rows) > 1 else (rows[0].copy() if rows else parts[0].iloc[:0].copy())
    dev = dev.sort_values(["host", "device"], kind="stable", ignore_index=True)
    dev["busy_ps_z"] = dev.groupby("device_kind")["busy_ps"].transform(
        lambda s: modified_z(s).to_numpy()) if len(dev) else pd.Series(dtype="float64")
    ctx.devices = ctx.frames["devices"] = dev
    ctx.span, ctx.profiled = evidence.spans(dev)
    return {"devices": records(dev)}
