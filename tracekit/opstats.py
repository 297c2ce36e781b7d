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
    for c in ("flops", "bytes_accessed", "net_bytes", "compute_ps", "memory_ps", "network_ps", "roofline_ps",
              "headroom_ps"):
        if c in d.columns:
            agg[c] = (c, lambda s: s.sum(min_count=1))
    for c in ("cost_source", "dtype", "unknown_reason"):
        if c in d.columns:
            agg[c] = (c, "first")
    g = d.groupby(["_module", "program_id", "_label"], observed=True, sort=False).agg(**agg).reset_index()
    g = g.rename(columns={"_module": "module", "_label": "op"})
    if "roofline_ps" in g.columns:
        parts = g[["compute_ps", "memory_ps", "network_ps"]].fillna(-1).to_numpy()
        bound = np.array(["compute", "memory", "network"], dtype=object)[parts.argmax(axis=1)]
        if "is_host_transfer" in d.columns:
            hx = d.groupby(["_module", "program_id", "_label"], observed=True, sort=False)["is_host_transfer"].any()
            bound[hx.to_numpy()] = "host_link"
        bound[g["roofline_ps"].isna().to_numpy() | (g["roofline_ps"] <= 0).to_numpy()] = "unknown"
        g["bound_by"] = bound
    g["mean_ps"] = (g["total_ps"] / g["occurrences"]).round().astype(np.int64)
    g["share"] = g["total_ps"] / total_time if total_time else 0.0
    if "roofline_ps" in g.columns:
        g["efficiency"] = g["roofline_ps"] / g["total_ps"].where(g["total_ps"] > 0)
        g["intensity_flops_per_byte"] = g["flops"] / g["bytes_accessed"].where(g["bytes_accessed"] > 0)
    for c in ("opcode", "category"):
        g[c] = g[c].astype(str)
    col = _SORT_COL.get(sort, "total_ps")
    return g.sort_values([col, "op"], ascending=[col == "op", True], kind="stable", ignore_index=True)
