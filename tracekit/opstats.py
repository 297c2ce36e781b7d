"""Per-op aggregation of the ``ops`` frame: one row per (module, op) with occurrences, total/mean time and share
of device time, plus roofline columns when present."""
from __future__ import annotations

import numpy as np
import pandas as pd

SORT_KEYS = ("total", "mean", "count", "share", "headroom", "efficiency", "flops", "name")
_SORT_COL = {"total": "total_ps", "mean": "mean_ps", "count": "occurrences", "share": "share",
             "headroom": "headroom_ps", "efficiency": "efficiency", "flops": "flops", "name": "op"}


def op_table(ops: pd.DataFrame, sort: str = "total") -> pd.DataFrame:
    """Aggregate synchronous op executions per (module, op); ops with no HLO name are grouped by kernel."""
    d = ops[~ops["is_async"]]
    if not len(d):
        return pd.DataFrame(columns=["module", "op", "opcode", "category", "occurrences", "total_ps", "mean_ps",
                                     "share"])
    label = d["op"].astype(str)
    label = label.where(label != "", d["kernel"].astype(str))
    d = d.assign(_label=label.to_numpy(), _module=d["module"].astype(str).to_numpy())
    total_time = float(d["duration_ps"].sum())
    agg = {"opcode": ("opcode", "first"), "category": ("category", "first"),
           "occurrences": ("duration_ps", "size"), "total_ps": ("duration_ps", "sum"),
           "devices": ("device", "nunique")}
    for c in ("flops", "bytes_accessed", "net_bytes", "roofline_ps", "headroom_ps"):
        if c in d.columns:
            agg[c] = (c, "sum")
    for c in ("bound_by", "cost_source", "dtype"):
        if c in d.columns:
            agg[c] = (c, "first")
    g = d.groupby(["_module", "_label"], observed=True, sort=False).agg(**agg).reset_index()
    g = g.rename(columns={"_module": "module", "_label": "op"})
    g["mean_ps"] = (g["total_ps"] / g["occurrences"]).round().astype(np.int64)
    g["share"] = g["total_ps"] / total_time if total_time else 0.0
    if "roofline_ps" in g.columns:
        g["efficiency"] = g["roofline_ps"] / g["total_ps"].where(g["total_ps"] > 0)
        g["intensity_flops_per_byte"] = g["flops"] / g["bytes_accessed"].where(g["bytes_accessed"] > 0)
    for c in ("opcode", "category"):
        g[c] = g[c].astype(str)
    col = _SORT_COL.get(sort, "total_ps")
    return g.sort_values([col, "op"], ascending=[col == "op", True], kind="stable", ignore_index=True)
