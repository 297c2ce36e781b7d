"""Per-op aggregation of the ``ops`` frame, the one place it is done: one row per (module, program, op) over every
device, with occurrences, total/mean time, shares, and the roofline columns summed over executions. Ops with no
HLO name (non-XLA kernels, runtime copies) are grouped by kernel name. The CLI's ``ops`` table and the rules'
``op_stats`` frame are both this."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.analysis import timeline as tl
from tracekit.columns import column_numpy, self_time, stack, with_columns
from tracekit.grouping import cat_from, group_index, row_parts, unique, unique_rows
from tracekit.model import predictions
from tracekit.schema import Bound, labels

DOT_DIMS = ("dot_m", "dot_n", "dot_k")
_ROOF_SUMS = ("flops", "bytes_accessed", "net_bytes", "compute_ps", "memory_ps", "network_ps", "roofline_ps")
SORT_KEYS = ("total", "mean", "count", "share", "headroom", "efficiency", "flops", "name")
_SORT_COL = {"total": "total_ps", "mean": "mean_ps", "count": "occurrences", "share": "busy_share",
             "headroom": "headroom_ps", "efficiency": "efficiency", "flops": "flops", "name": "op"}


def chip_f32_slower(device_kind: pd.Series) -> np.ndarray:
    """True where the chip runs bf16 matmuls faster than f32 (TPUs, GPUs with tensor/matrix cores); False for
    CPUs and unknown chips."""
    kinds, inv = np.unique(device_kind.astype(str).to_numpy(), return_inverse=True)  # (a few chips: each once)
    fast = [bool(_F32_SLOWER.search(k.lower())) and "cpu" not in k.lower() for k in kinds.tolist()]
    return np.array(fast, bool)[inv.reshape(-1)]


_F32_SLOWER = re.compile(r"tpu|nvidia|tesla|[abhvl]\d{2,3}\b|gfx9|mi\d{3}|radeon|instinct|amd")


def op_stats(ops: pd.DataFrame, profiled_ps: float = np.nan) -> pd.DataFrame:
    """Sync ops aggregated per (module, program_id, op) over every device: opcode, category, kernel, device_kind,
    dtype, occurrences, devices, total_ps, mean_ps, share (total_ps / ``profiled_ps``, the sum of the device
    spans), busy_share (total_ps / total sync op time; times are self times: a loop's nested body events count once), the roofline columns summed over executions (flops,
    bytes_accessed, net_bytes, compute_ps, memory_ps, network_ps, roofline_ps; headroom_ps sums max(0, headroom)),
    bound_by (argmax of the summed compute/memory/network times; host_link for host-offload copies), efficiency
    (roofline_ps / total_ps), intensity_flops_per_byte, cost_source, is_matmul, is_collective, is_data_shuffle,
    chip_f32_slower, dot_m, dot_n, dot_k. Sorted by total_ps, largest first."""
    sums, busy = _sums(ops)
    return finish(sums, busy, profiled_ps)


def _sums(ops: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(:func:`op_sums`, the total sync self time)."""
    # group ids over every row (async rows in a group of their own, dropped below): the aggregates read the
    # frame's columns in place, no row selection is copied
    sync = ~column_numpy(ops, "is_async", bool)
    n = len(ops)
    kernel = ops["kernel"] if "kernel" in ops.columns else pd.Series(pd.Categorical.from_codes(np.zeros(n, np.int8), [""]))
    linv, lrows = unique_rows(pd.DataFrame({"op": ops["op"].array, "kernel": kernel.array}, copy=False),
                              ["op", "kernel"])
    label = cat_from([o if o else (k or "") for o, k in lrows], linv)
    keyed = pd.DataFrame({"module": ops["module"].array, "program_id": column_numpy(ops, "program_id"), "op": label,
                          "sync": sync}, copy=False)
    gi, first = group_index(keyed, ["sync", "module", "program_id", "op"])
    real = sync[first]  # the groups of sync rows, in first-seen order
    keep = np.nonzero(real)[0]
    ng_all = len(first)
    first = first[keep]
    ng = len(first)
    out = keyed[["module", "program_id", "op"]].iloc[first].reset_index(drop=True)
    del keyed, linv, label  # (row-sized codes: freed before the sums below)

    rows_per_group = np.bincount(gi, minlength=ng_all)

    def gsum(w=None):  # per kept group sum of ``w`` (count when None) over every row
        return rows_per_group[keep] if w is None else group_sums(gi, w, ng_all, counts=rows_per_group)[0][keep]
    for c in ["opcode", "category", "kernel", "device_kind", "dtype", "compute_dtype", "cost_source", "unknown_reason",
              *DOT_DIMS]:
        out[c] = ops[c].array[first] if c in ops.columns else (-1 if c in DOT_DIMS else "")
    at_first = ops.iloc[first]
    flags = {"is_matmul": tl.is_matmul(at_first), "is_collective": tl.is_collective(at_first),
             "is_data_shuffle": tl.is_data_shuffle(at_first)}
    for c, v in flags.items():
        out[c] = v
    hx = column_numpy(ops, "is_host_transfer", bool) if "is_host_transfer" in ops else np.zeros(n, bool)
    out["is_host_transfer"] = gsum(hx) > 0 if hx.any() else np.zeros(ng, bool)
    out["occurrences"] = gsum().astype(np.int64)
    # devices per group: one count per device's rows (a slice of the sorted frame: no row-sized temporary)
    devices = np.zeros(ng_all, np.int64)
    on_host: dict = {}  # host -> which groups ran on it
    for (h, _d), ix in row_parts(ops, ["host", "device"]).items():
        h = str(h)
        g = gi[ix]
        if ng_all <= 4 * len(g) + 1024:
            seen = np.bincount(g, minlength=ng_all) > 0
        else:  # few rows, many groups
            seen = np.zeros(ng_all, bool)
            seen[unique(g)] = True
        devices += seen
        on_host[h] = on_host[h] | seen if h in on_host else seen
        del g
    out["devices"] = devices[keep]
    out["hosts"] = _hosts_per_group(on_host, keep)
    dur = self_time(ops)  # nested events (XLA:CPU loop bodies) are not counted twice
    out["total_ps"] = gsum(dur).round().astype(np.int64)  # (a kept group holds sync rows only)
    for c in (*_ROOF_SUMS, "headroom_ps"):
        if not predictions.has(ops, c):
            out[c] = np.nan
            continue
        tot, cnt = group_sums(gi, predictions.values(ops, c), ng_all, positive=c == "headroom_ps",
                              counts=rows_per_group)
        out[c] = np.where(cnt[keep] > 0, tot[keep], np.nan)  # sum with min_count=1
    return out, int(dur.sum()) - int(dur[~sync].sum())  # (async rows are few: no copy of the sync rows)


def _hosts_per_group(on_host: dict, keep: np.ndarray) -> list[str]:
    """Per kept group, the hosts it ran on, sorted and comma-separated (from host -> bool per group)."""
    names = sorted(map(str, on_host))
    if not names or not len(keep):
        return [""] * len(keep)
    m = np.stack([on_host[h][keep] for h in names], axis=1)  # groups x hosts
    pats, inv = np.unique(m, axis=0, return_inverse=True)
    labels_ = [",".join(h for h, on in zip(names, p) if on) for p in pats]
    return [labels_[i] for i in np.asarray(inv).reshape(-1)]


#: rows per pass of :func:`group_sums`: temporaries of a few MB instead of a column's size
SUM_CHUNK = 1 << 18


def group_sums(gi: np.ndarray, v: np.ndarray, n_groups: int, *, positive: bool = False,
               counts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per group (``gi``: each row's group): the sum of ``v``'s non-NaN values (``positive``: of max(v, 0)) and
    how many rows have one. Added chunk by chunk in row order, so the sums are bit for bit those of one
    ``np.bincount`` over the rows, without its row-sized float64 temporaries (a cast, a NaN-free copy).
    ``counts``: the rows per group (``np.bincount(gi)``), when the caller has it already (it is not copied)."""
    tot = np.zeros(n_groups)
    missing = np.zeros(n_groups, np.int64)  # rows without a value, per group (counted where a chunk has any)
    for a in range(0, len(v), SUM_CHUNK):
        x = np.asarray(v[a:a + SUM_CHUNK], np.float64)
        g = gi[a:a + SUM_CHUNK]
        ok = ~np.isnan(x)
        if not ok.all():
            missing += np.bincount(g[~ok], minlength=n_groups)
            x, g = x[ok], g[ok]
        if positive:
            x = np.maximum(x, 0.0)
        np.add.at(tot, g, x)
    return tot, (np.bincount(gi, minlength=n_groups) if counts is None else counts) - missing


#: the per-op columns :func:`op_sums` gives: identity, first-seen attributes, then sums over executions
SUM_COLUMNS = ("occurrences", "devices", "total_ps", *_ROOF_SUMS, "headroom_ps")
KEY_COLUMNS = ("module", "program_id", "op")


def op_sums(ops: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The sums :func:`op_stats` is made of, one row per (module, program_id, op) in first-seen order: the
    first execution's attributes, ``is_host_transfer`` (any execution), and :data:`SUM_COLUMNS` (NaN where no
    execution has the value), and the total sync self time of every op. Sums of disjoint sets of devices merge
    with :func:`merge_sums`."""
    return _sums(ops)


def merge_sums(parts: list) -> pd.DataFrame:
    """:func:`op_sums` of the union of disjoint sets of devices from their op sums (``parts`` in row order):
    attributes of the first part with the op, counts and times summed (``devices`` too: the sets are
    disjoint), ``is_host_transfer`` if any."""
    parts = [p for p in parts if p is not None and len(p)]
    if not parts:
        return _sums(pd.DataFrame({c: [] for c in ("module", "program_id", "op", "is_async", "host", "device",
                                                   "start_ps", "duration_ps")}).astype(
            {"is_async": bool, "start_ps": "int64", "duration_ps": "int64"}))[0]
    if len(parts) == 1:
        return parts[0]
    allp = stack(parts)
    gi, first = group_index(allp, list(KEY_COLUMNS))
    out = allp.iloc[first].reset_index(drop=True)
    n = len(first)
    for c in SUM_COLUMNS:
        v = allp[c].to_numpy(np.float64)
        ok = ~np.isnan(v)
        tot = np.bincount(gi, weights=np.where(ok, v, 0.0), minlength=n)
        if c in ("occurrences", "devices", "total_ps"):
            out[c] = tot.round().astype(np.int64)
        else:
            out[c] = np.where(np.bincount(gi, weights=ok, minlength=n) > 0, tot, np.nan)
    out["is_host_transfer"] = np.bincount(gi, weights=column_numpy(allp, "is_host_transfer", bool), minlength=n) > 0
    if "hosts" in allp.columns:  # the parts' hosts, together
        hosts: list = [set() for _ in range(n)]
        for g, hs in zip(gi.tolist(), allp["hosts"]):
            hosts[g].update(h for h in str(hs).split(",") if h)
        out["hosts"] = [",".join(sorted(h)) for h in hosts]
    return out


def finish(out: pd.DataFrame, busy_ps: int, profiled_ps: float = np.nan) -> pd.DataFrame:
    """:func:`op_stats` from :func:`op_sums` (``busy_ps``: the total sync self time of every op, ``profiled_ps``:
    the sum of the device spans): means, shares, efficiency, intensity, bound_by, sorted by total time. (The
    columns are worked out on arrays and added at once: the table is small, and each pandas column operation
    costs more than its arithmetic.)"""
    tot, occ = column_numpy(out, "total_ps"), column_numpy(out, "occurrences")
    roof, nbytes = column_numpy(out, "roofline_ps"), column_numpy(out, "bytes_accessed")
    with np.errstate(divide="ignore", invalid="ignore"):
        new = {"mean_ps": tot / occ, "share": tot / profiled_ps, "busy_share": tot / max(int(busy_ps), 1),
               "efficiency": roof / np.where(tot > 0, tot, np.nan),
               "intensity_flops_per_byte": column_numpy(out, "flops") / np.where(nbytes > 0, nbytes, np.nan)}
    parts = np.column_stack([np.where(np.isnan(v), -1, v) for v in
                             (out[c].to_numpy() for c in ("compute_ps", "memory_ps", "network_ps"))])
    names = np.array(labels(Bound), dtype=object)
    bound = names[parts.argmax(axis=1)] if len(out) else np.array([], dtype=object)  # compute, memory, network
    bound[column_numpy(out, "is_host_transfer", bool)] = names[Bound.HOST_LINK]
    bound[np.isnan(roof)] = names[Bound.UNKNOWN]  # 0: known, and nothing a perfect op would take
    new["bound_by"] = bound
    new["chip_f32_slower"] = chip_f32_slower(out["device_kind"])
    for c in ("opcode", "category", "kernel", "device_kind", "dtype", "compute_dtype", "cost_source",
              "unknown_reason"):
        new[c] = out[c].astype(str)
    out = with_columns(out, new)
    return out.sort_values(["total_ps", "op"], ascending=[False, True], kind="stable", ignore_index=True)


def op_table(ops: pd.DataFrame, sort: str = "total") -> pd.DataFrame:
    """:func:`op_stats` sorted for display (``sort`` is one of :data:`SORT_KEYS`)."""
    g = op_stats(ops)
    col = _SORT_COL.get(sort, "total_ps")
    return g.sort_values([col, "op"], ascending=[col == "op", True], kind="stable", ignore_index=True)


def with_names(table: pd.DataFrame, hlo: pd.DataFrame) -> pd.DataFrame:
    """``table`` (one row per module, program_id, op) with ``op_name`` (the JAX name stack from the instruction's
    metadata) and ``source`` (``file:line``) from the ``hlo`` frame; empty strings where the trace has no HLO."""
    cols = [c for c in ("program_id", "name", "op_name", "source_file", "source_line") if c in hlo.columns]
    if len(cols) < 5 or not len(table):
        return table.assign(op_name="", source="")
    h = hlo[cols].drop_duplicates(["program_id", "name"]).rename(columns={"name": "op"})
    m = table[["program_id", "op"]].merge(h, on=["program_id", "op"], how="left")
    name = m["op_name"].fillna("").astype(str).to_numpy()
    f, ln = m["source_file"].fillna("").astype(str), m["source_line"].fillna(0).astype("int64")
    src = [f"{a}:{b}" if a else "" for a, b in zip(f, ln)]
    return table.assign(op_name=name, source=src)
