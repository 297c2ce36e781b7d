"""Per-op aggregation of the ``ops`` frame, the one place it is done: one row per (module, program, op) over every
device, with occurrences, total/mean time, shares, and the roofline columns summed over executions. Ops with no
HLO name (non-XLA kernels, runtime copies) are grouped by kernel name. The CLI's ``ops`` table and the rules'
``op_stats`` frame are both this."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import timeline as tl
from tracekit.columns import cat_from, group_index, unique_rows

DOT_DIMS = ("dot_m", "dot_n", "dot_k")
_ROOF_SUMS = ("flops", "bytes_accessed", "net_bytes", "compute_ps", "memory_ps", "network_ps", "roofline_ps")
SORT_KEYS = ("total", "mean", "count", "share", "headroom", "efficiency", "flops", "name")
_SORT_COL = {"total": "total_ps", "mean": "mean_ps", "count": "occurrences", "share": "busy_share",
             "headroom": "headroom_ps", "efficiency": "efficiency", "flops": "flops", "name": "op"}


def chip_f32_slower(device_kind: pd.Series) -> np.ndarray:
    """True where the chip runs bf16 matmuls faster than f32 (TPUs, GPUs with tensor/matrix cores); False for
    CPUs and unknown chips."""
    s = device_kind.astype(str).str.lower()
    return (s.str.contains(r"tpu|nvidia|tesla|[abhvl]\d{2,3}\b|gfx9|mi\d{3}|radeon|instinct|amd", regex=True)
            & ~s.str.contains("cpu", regex=False)).to_numpy(bool)


def op_stats(ops: pd.DataFrame, profiled_ps: float = np.nan) -> pd.DataFrame:
    """Sync ops aggregated per (module, program_id, op) over every device: opcode, category, kernel, device_kind,
    dtype, occurrences, devices, total_ps, mean_ps, share (total_ps / ``profiled_ps``, the sum of the device
    spans), busy_share (total_ps / total sync op time), the roofline columns summed over executions (flops,
    bytes_accessed, net_bytes, compute_ps, memory_ps, network_ps, roofline_ps; headroom_ps sums max(0, headroom)),
    bound_by (argmax of the summed compute/memory/network times; host_link for host-offload copies), efficiency
    (roofline_ps / total_ps), intensity_flops_per_byte, cost_source, is_matmul, is_collective, is_data_shuffle,
    chip_f32_slower, dot_m, dot_n, dot_k. Sorted by total_ps, largest first."""
    need = ["host", "device", "module", "program_id", "op", "kernel", "duration_ps", "opcode", "category",
            "device_kind", "dtype", "cost_source", "unknown_reason", "is_host_transfer", *DOT_DIMS, *_ROOF_SUMS,
            "headroom_ps"]
    sync = ops[[c for c in need if c in ops.columns]][~ops["is_async"].to_numpy(bool)]  # copy only what is read
    linv, lrows = unique_rows(sync, ["op", "kernel"])
    label = cat_from([o if o else (k or "") for o, k in lrows], linv)
    keyed = pd.DataFrame({"module": sync["module"].array, "program_id": sync["program_id"].to_numpy(), "op": label})
    gi, first = group_index(keyed, ["module", "program_id", "op"])  # one pass of NumPy per aggregate below
    ng = len(first)
    dur = sync["duration_ps"].to_numpy(np.int64)
    out = keyed.iloc[first].reset_index(drop=True)
    for c in ["opcode", "category", "kernel", "device_kind", "dtype", "cost_source", "unknown_reason", *DOT_DIMS]:
        out[c] = sync[c].array[first] if c in sync.columns else (-1 if c in DOT_DIMS else "")
    flags = {"is_matmul": tl.is_matmul(sync), "is_collective": tl.is_collective(sync),
             "is_data_shuffle": tl.is_data_shuffle(sync)}
    for c, v in flags.items():
        out[c] = v[first]
    hx = sync["is_host_transfer"].to_numpy(bool) if "is_host_transfer" in sync else np.zeros(len(sync), bool)
    out["is_host_transfer"] = np.bincount(gi, weights=hx, minlength=ng) > 0
    out["occurrences"] = np.bincount(gi, minlength=ng).astype(np.int64)
    dev, _ = group_index(sync, ["host", "device"])
    pair = np.unique(gi * (int(dev.max(initial=0)) + 1) + dev)
    out["devices"] = np.bincount(pair // (int(dev.max(initial=0)) + 1), minlength=ng).astype(np.int64)
    out["total_ps"] = np.bincount(gi, weights=dur, minlength=ng).round().astype(np.int64)
    for c in (*_ROOF_SUMS, "headroom_ps"):
        if c not in sync.columns:
            out[c] = np.nan
            continue
        v = sync[c].to_numpy(np.float64)
        if c == "headroom_ps":
            v = np.clip(v, 0, None)
        ok = ~np.isnan(v)
        tot = np.bincount(gi, weights=np.where(ok, v, 0.0), minlength=ng)
        out[c] = np.where(np.bincount(gi, weights=ok, minlength=ng) > 0, tot, np.nan)  # sum with min_count=1
    out["mean_ps"] = out["total_ps"] / out["occurrences"]
    out["share"] = out["total_ps"] / profiled_ps
    out["busy_share"] = out["total_ps"] / max(int(dur.sum()), 1)
    out["efficiency"] = out["roofline_ps"] / out["total_ps"].where(out["total_ps"] > 0)
    out["intensity_flops_per_byte"] = out["flops"] / out["bytes_accessed"].where(out["bytes_accessed"] > 0)
    parts = out[["compute_ps", "memory_ps", "network_ps"]].fillna(-1).to_numpy()
    bound = np.array(["compute", "memory", "network"], dtype=object)[parts.argmax(axis=1)] if len(out) else \
        np.array([], dtype=object)
    bound[out["is_host_transfer"].to_numpy(bool)] = "host_link"
    bound[(out["roofline_ps"].isna() | (out["roofline_ps"] <= 0)).to_numpy()] = "unknown"
    out["bound_by"] = bound
    out["chip_f32_slower"] = chip_f32_slower(out["device_kind"])
    for c in ("opcode", "category", "kernel", "device_kind", "dtype", "bound_by", "cost_source", "unknown_reason"):
        out[c] = out[c].astype(str)
    return out.sort_values(["total_ps", "op"], ascending=[False, True], kind="stable", ignore_index=True)


def op_table(ops: pd.DataFrame, sort: str = "total") -> pd.DataFrame:
    """:func:`op_stats` sorted for display (``sort`` is one of :data:`SORT_KEYS`)."""
    g = op_stats(ops)
    col = _SORT_COL.get(sort, "total_ps")
    return g.sort_values([col, "op"], ascending=[col == "op", True], kind="stable", ignore_index=True)
