"""Section ``ops``: every op aggregated over the pod (``top_ops[]``, the roofline chart, ``Report.ops_frame()``)
and the totals the summary reads (sync op time and executions, time by bound, collectives and their exposed
time). What the trace measured inside its kernels (TPU ``_counters_``, Mosaic pipeline stages:
``Trace.kernel_profile``, a row per profiled (device, program, op)) travels in each host's part; the reduce joins
the hosts' rows to the merged op statistics (:func:`tracekit.analysis.kernelprof.annotate`), the same arithmetic
on one host as on many."""
from __future__ import annotations

from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.records import record

NAME = "ops"
TOP_OPS = 25
ROOFLINE_POINTS = 200
#: what the top ops table shows of the HLO
SOURCE_COLUMNS = ["program_id", "name", "source_file", "source_line", "op_name"]


@record(frozen=True)
class Totals:
    """What the summary reads of every op and every collective: sync op time and executions, op time by
    ``bound_by``, hosts with ops, collective executions and their exposed time. Totals of disjoint hosts add up."""

    op_time_ps: int = 0
    op_executions: int = 0
    time_by_bound_ps: dict = field(default_factory=dict)
    hosts: int = 0
    collectives: int = 0
    collective_exposed_ps: int = 0
    coverage: tuple = ()  #: per device (host, device, op time, covered op time): tracekit.analysis.coverage.parts


def totals(ops: pd.DataFrame, coll: pd.DataFrame) -> Totals:
    """The :class:`Totals` of an ops frame and its collectives frame."""
    from tracekit.analysis import coverage
    from tracekit.columns import self_time
    sync_m = ~column_numpy(ops, "is_async", bool) if len(ops) else np.zeros(0, bool)
    dur = self_time(ops) if len(ops) else np.zeros(0, np.int64)
    by_bound = {}
    if "bound_by" in ops and len(ops):  # (sums in place, per category: no row-sized copy of the times)
        codes = ops["bound_by"].array.codes
        for i, c in enumerate(ops["bound_by"].cat.categories):
            if v := int(dur.sum(where=sync_m & (codes == i))):
                by_bound[str(c)] = v
    return Totals(int(dur.sum(where=sync_m)), int(sync_m.sum()), by_bound,
                  int(ops["host"].nunique()) if len(ops) else 0, int(len(coll)),
                  int(coll["exposed_ps"].sum()) if len(coll) else 0, coverage.parts(ops))


def _add(parts: list) -> Totals:
    bound: dict = {}
    for t in parts:
        for k, v in t.time_by_bound_ps.items():
            bound[k] = bound.get(k, 0) + v
    return Totals(sum(t.op_time_ps for t in parts), sum(t.op_executions for t in parts), bound,
                  sum(t.hosts for t in parts), sum(t.collectives for t in parts),
                  sum(t.collective_exposed_ps for t in parts), tuple(c for t in parts for c in t.coverage))


@record(frozen=True)
class Part:
    """One host's part of the ops section."""

    totals: Totals
    sums: pd.DataFrame  #: :func:`tracekit.analysis.opstats.op_sums`
    busy_ps: int  #: the host's sync op self time
    source: pd.DataFrame  #: :data:`SOURCE_COLUMNS` of the host's ops' HLO instructions
    hlo_present: bool
    kernel_profile: pd.DataFrame | None = None  #: the host's ``Trace.kernel_profile`` (schema.KERNEL_PROFILE)


def summarize(hv) -> Part:
    from tracekit.analysis import opstats
    sums, busy = hv.op_sums if hv.op_sums is not None else opstats.op_sums(hv.ops)
    h = hv.trace.hlo
    if len(h) and len(sums):
        src = h[SOURCE_COLUMNS].drop_duplicates(["program_id", "name"])
        keys = pd.MultiIndex.from_arrays([sums["program_id"].astype(np.uint64), sums["op"].astype(str)])
        src = src[pd.MultiIndex.from_arrays([src["program_id"].astype(np.uint64),
                                             src["name"].astype(str)]).isin(keys)].reset_index(drop=True)
    else:
        src = pd.DataFrame(columns=SOURCE_COLUMNS)
    return Part(totals(hv.ops, hv.frames.collectives), sums, int(busy), src, bool(len(h)), hv.trace.kernel_profile)


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import kernelprof, opstats
    from tracekit.ingest.kernelprof import combine
    from tracekit.columns import stack
    from tracekit.report import sourcepath
    from tracekit.report.envelope import OP_COLUMNS, clean, records, unplotted
    ctx.totals = _add([p.totals for p in parts])
    busy = sum(p.busy_ps for p in parts)
    dev = ctx.devices
    stats = opstats.finish(opstats.merge_sums([p.sums for p in parts]), busy,
                           float(dev["span_ps"].sum()) if len(dev) else np.nan)
    stats = kernelprof.annotate(stats, combine([p.kernel_profile for p in parts]))  # MXU counters, Mosaic stages
    ctx.op_stats = ctx.frames["op_stats"] = stats
    ctx.shared["hlo_present"] = any(p.hlo_present for p in parts)
    srcs = [p.source for p in parts if len(p.source)]
    hlo = stack(srcs).drop_duplicates(["program_id", "name"]) if len(srcs) > 1 else \
        (srcs[0] if srcs else pd.DataFrame(columns=SOURCE_COLUMNS))
    top = stats.head(TOP_OPS).copy()
    if len(hlo) and len(top):
        top = top.merge(hlo.rename(columns={"name": "op"}).astype({"op": str}), on=["program_id", "op"], how="left")
        top["op_name"] = top["op_name"].fillna("").astype(str)  # the JAX name stack, e.g. jit(f)/transpose(jvp())/dot
        short = sourcepath.shortener(top["source_file"])  # relative to the project or site-packages
        top["source"] = [f"{short[f]}:{int(n)}" if isinstance(f, str) and f else ""
                         for f, n in zip(top["source_file"], top["source_line"].fillna(0))]
    pts = stats[(stats["flops"] > 0) & (stats["bytes_accessed"] > 0)].head(ROOFLINE_POINTS) \
        if "flops" in stats else stats.iloc[:0]
    points = [{"module": r["module"], "op": r["op"], "bound_by": r["bound_by"], "dtype": r["dtype"],
               "total_ps": r["total_ps"], "intensity_flops_per_byte": r["flops"] / r["bytes_accessed"],
               "achieved_flops_per_s": r["flops"] / (r["total_ps"] / 1e12) if r["total_ps"] else None}
              for r in records(pts)]
    ctx.shared["kernel_trust"] = kernelprof.trust(top)  # (measured in the kernel: counters, pipeline stages)
    return {"top_ops": records(top, OP_COLUMNS),
            "roofline": {"points": clean(points), "roofs": ctx.shared["chip_entries"],
                         "unplotted": unplotted(stats, len(points))}}
