"""The one ``Report`` every renderer reads: plain, JSON-ready data built from the pipeline's frames.

The JSON envelope (``schema: tracekit.report/1``) is documented in ``docs/report-format.md``; keys are stable,
values are plain numbers/strings, times are integer picoseconds, and the same input gives the same bytes (no
timestamps, no absolute paths beyond what the user typed, sorted keys).
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.version import __version__
from tracekit.analysis.stepstats import closed_steps
from tracekit.columns import self_time
from tracekit.model.peaks import peak_notes
from tracekit.report import sourcepath

SCHEMA = "tracekit.report/1"
SEVERITIES = ("info", "warning", "error")
TOP_OPS = 25
ROOFLINE_POINTS = 200
STEP_ROWS = 512  #: per-step rows kept in the envelope; ``device_steps`` aggregates all of them


def clean(v):
    """JSON-safe scalar: NaN/inf -> None, numpy -> Python, floats rounded to 6 significant digits (stable)."""
    t = type(v)
    if t is str or t is int or v is None:  # the common cases first (the checks below return them unchanged)
        return v
    if t is float:
        return _clean_float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (float, np.floating)):
        return _clean_float(float(v), _WHOLE_BELOW.get(type(v), 2**53))
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if isinstance(v, (int, str)):
        return v
    if v is pd.NA:
        return None
    return str(v)


#: below this magnitude an integral float is written as an int; float32 (the roofline's predictions) is integral
#: everywhere above 2**24 without being exact, so there it is rounded like any other float
_WHOLE_BELOW = {np.float32: 2**24, np.float16: 2**11}


def _clean_float(f: float, whole_below: int = 2**53):
    if not math.isfinite(f):
        return None
    if f == int(f) and abs(f) < whole_below:
        return int(f)
    return float(f"{f:.6g}")


def _clean_column(s: pd.Series) -> list:
    """:func:`clean` of every value of ``s``, as iterating it gives them; NumPy integer, bool and float columns
    without a Python call per value where the result is known (ints and bools as they are; floats: None when not
    finite, an int when integral, else 6 significant digits)."""
    dt = s.dtype
    kind = dt.kind if isinstance(dt, np.dtype) else ""
    if kind and kind in "iub":
        return s.to_numpy().tolist()
    if kind == "f":
        f = s.to_numpy().astype(np.float64, copy=False)
        fin = np.isfinite(f)
        whole = fin & (np.trunc(np.where(fin, f, 0.0)) == f) & \
            (np.abs(np.where(fin, f, 0.0)) < _WHOLE_BELOW.get(dt.type, 2**53))
        if whole.all():
            return f.astype(np.int64).tolist()
        code = np.where(fin, np.where(whole, 1, 2), 0).tolist()
        ints = np.where(whole, f, 0.0).astype(np.int64).tolist()
        return [None if k == 0 else i if k == 1 else float(f"{x:.6g}")
                for k, i, x in zip(code, ints, f.tolist())]
    return [clean(v) for v in s]


def records(df: pd.DataFrame, columns: list[str] | None = None) -> list[dict]:
    """One dict per row of ``df`` (``columns`` of it when given, in that order), every value :func:`clean`."""
    cols = [c for c in (columns or list(df.columns)) if c in df.columns]
    if df.columns.has_duplicates:  # a name that selects several columns: the last one's value wins, as before
        return [{c: clean(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]
    if not len(df):
        return []
    values = [_clean_column(df[c]) for c in cols]
    return [dict(zip(cols, row)) for row in zip(*values)]


@dataclass
class Report:
    """What ``tracekit analyze`` found. ``data`` is the JSON envelope; helpers read parts of it. In a notebook it
    shows as the HTML report (``_repr_html_``); ``findings_frame()`` and ``ops_frame()`` give DataFrames.
    ``rules``: the rules that ran (:class:`tracekit.analysis.rule_model.Rule`), for renderers that describe them
    (SARIF); empty for a report read back from its JSON."""

    data: dict = field(default_factory=dict)
    rules: tuple = ()
    #: every op aggregated (the ``op_stats`` frame) when the report was built here; not part of the JSON
    op_table: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    #: one line per host of the run left out of the analysis (tracekit.ingest.badhosts.notice); not part of the
    #: JSON (the same lines are in its warnings)
    left_out: tuple = field(default=(), repr=False, compare=False)

    def __repr__(self) -> str:
        from tracekit.report import notebook
        return notebook.report_repr(self.data)

    def _repr_html_(self) -> str:
        from tracekit.report import notebook
        return notebook.report_html(self.data)

    def findings_frame(self) -> pd.DataFrame:
        """One row per finding: rule_id, name, severity, savings_ps, claimed_ps, share, evidence_count, message,
        fix (largest savings first)."""
        from tracekit.report import notebook
        return notebook.findings_frame(self.data)

    def ops_frame(self) -> pd.DataFrame:
        """One row per op (module, op) with time, shares and roofline columns: every op when the report was
        built in this process, else the report's top ops."""
        if self.op_table is not None:
            return self.op_table.reset_index(drop=True)
        return pd.DataFrame(self.data.get("top_ops") or [], columns=OP_COLUMNS)

    @property
    def findings(self) -> list[dict]:
        return self.data.get("findings", [])

    def worst_severity(self) -> str | None:
        sev = [f["severity"] for f in self.findings]
        return max(sev, key=SEVERITIES.index) if sev else None

    def fails(self, fail_on: str) -> bool:
        """True when a finding reaches ``fail_on`` (``never`` never fails)."""
        if fail_on == "never":
            return False
        return any(SEVERITIES.index(f["severity"]) >= SEVERITIES.index(fail_on) for f in self.findings)

    def to_json(self) -> str:
        from tracekit.report import jsontext
        return jsontext.dumps(self.data) + "\n"


OP_COLUMNS = ["module", "program_id", "op", "opcode", "category", "occurrences", "devices", "total_ps", "mean_ps",
              "busy_share", "flops", "bytes_accessed", "net_bytes", "intensity_flops_per_byte", "compute_ps",
              "memory_ps", "network_ps", "roofline_ps", "bound_by", "efficiency", "headroom_ps", "dtype",
              "compute_dtype", "cost_source", "unknown_reason", "source_file", "source_line", "op_name", "source",
              "hosts"]


@dataclass(frozen=True)
class Input:
    """A trace file the analysis read, as the report names it."""

    path: str
    host: str


@dataclass(frozen=True)
class Analysis:
    """What the report is built from: the results of the stages before it, gathered by the pipeline."""

    inputs: tuple  #: :class:`Input` per trace file
    chips: tuple  #: :class:`tracekit.model.roofline.ChipUse` per chip
    ops: pd.DataFrame  #: the ops frame with the roofline columns
    frames: Mapping  #: the timeline stage's frames (:class:`tracekit.analysis.rule_checks.RuleFrames`)
    step_stats: pd.DataFrame  #: per device step-time statistics
    findings: tuple  #: :class:`tracekit.analysis.rule_model.Finding`, sorted by savings
    hlo: pd.DataFrame  #: the trace's HLO instructions (source lines of the top ops)
    params: dict  #: the thresholds used (timeline and every rule's resolved parameters)
    warnings: tuple  #: what the loader found odd
    step_source: tuple  #: where the steps came from
    fail_on: str  #: the severity that fails the gate
    rules: tuple = ()  #: the rules that ran (:class:`tracekit.analysis.rule_model.Rule`)
    custom_calls: dict | None = None  #: custom calls by share of op time (:func:`tracekit.analysis.customcalls.summary`)
    overview: object = None  #: the utilization headline (:func:`tracekit.analysis.overview.build`)
    memory: object = None  #: the memory view (:func:`tracekit.analysis.memory.build`)
    interconnect: dict | None = None  #: topology and collectives measured vs predicted (:func:`tracekit.pipeline.interconnect`)
    model_warnings: tuple = ()  #: ops faster than their roofline (:func:`tracekit.model.peaks.model_warnings`)
    headline: dict | None = None  #: the findings' union of claims and the roofline floor (:mod:`tracekit.analysis.claims`)
    totals: Totals | None = None  #: the ops' and collectives' totals when ``ops`` does not hold every op (a pod)


@dataclass(frozen=True)
class Totals:
    """What the summary reads of every op and every collective: sync op time and executions, op time by
    ``bound_by``, hosts with ops, collective executions and their exposed time. Totals of disjoint hosts add up."""

    op_time_ps: int = 0
    op_executions: int = 0
    time_by_bound_ps: dict = field(default_factory=dict)
    hosts: int = 0
    collectives: int = 0
    collective_exposed_ps: int = 0


def totals(ops: pd.DataFrame, coll: pd.DataFrame) -> Totals:
    """The :class:`Totals` of an ops frame and its collectives frame."""
    sync_m = ~ops["is_async"].to_numpy(bool) if len(ops) else np.zeros(0, bool)
    dur = self_time(ops) if len(ops) else np.zeros(0, np.int64)
    by_bound = {}
    if "bound_by" in ops and len(ops):  # (sums in place, per category: no row-sized copy of the times)
        codes = ops["bound_by"].array.codes
        for i, c in enumerate(ops["bound_by"].cat.categories):
            if v := int(dur.sum(where=sync_m & (codes == i))):
                by_bound[str(c)] = v
    return Totals(int(dur.sum(where=sync_m)), int(sync_m.sum()), by_bound, int(ops["host"].nunique()) if len(ops) else 0,
                  int(len(coll)), int(coll["exposed_ps"].sum()) if len(coll) else 0)


def chip_entry(use) -> dict:
    """A chip of the analysis as the envelope's ``chips[]`` holds it."""
    c = use.chip
    ridge = (c.ridge_flops_per_byte("bf16") if c.hbm_bw_bytes_per_s else None)
    return clean({
        "name": c.name, "family": c.family, "vendor": c.vendor, "estimated": c.estimated, "devices": list(use.devices),
        "peak_flops_per_s": {k: v for k, v in sorted(c.peak_flops_per_s.items())},
        "hbm_bw_bytes_per_s": c.hbm_bw_bytes_per_s, "link_bw_bytes_per_s": c.link_bw_bytes_per_s,
        "egress_bw_bytes_per_s": c.egress_bw_bytes_per_s, "host_link_bw_bytes_per_s": c.host_link_bw_bytes_per_s,
        "ridge_bf16_flops_per_byte": ridge, "sources": dict(sorted(c.sources.items())), "exact": c.exact,
        "trace_reported": dict(sorted(c.trace_reported.items())), "raised": dict(sorted(c.raised.items())),
        "limits": dict(sorted(c.limits.items())), "peak_notes": peak_notes(c)})


def build(a: Analysis) -> Report:
    """The report of an analysis."""
    ops, hlo, findings, fail_on = a.ops, a.hlo, a.findings, a.fail_on
    op_stats, devices, steps, coll = a.frames["op_stats"], a.frames["devices"], a.frames["steps"], a.frames["collectives"]
    step_stats, overview, memory = a.step_stats, a.overview, a.memory
    interconnect, model_warnings, headline = a.interconnect, a.model_warnings, a.headline
    chips = [chip_entry(u) for u in a.chips]
    tot = a.totals if a.totals is not None else totals(ops, coll)
    op_time = tot.op_time_ps
    span = int(devices["span_ps"].sum()) if len(devices) else 0
    busy = int(devices["busy_ps"].sum()) if len(devices) else 0
    by_bound = dict(sorted(tot.time_by_bound_ps.items()))
    known = sum(v for c, v in by_bound.items() if c != "unknown")
    coverage = known / op_time if op_time and by_bound else 0.0
    top = op_stats.head(TOP_OPS).copy()
    if len(hlo) and len(top):
        src = hlo[["program_id", "name", "source_file", "source_line", "op_name"]].drop_duplicates(["program_id", "name"])
        top = top.merge(src.rename(columns={"name": "op"}).astype({"op": str}), on=["program_id", "op"], how="left")
        top["op_name"] = top["op_name"].fillna("").astype(str)  # the JAX name stack, e.g. jit(f)/transpose(jvp())/dot
        short = sourcepath.shortener(top["source_file"])  # relative to the project or site-packages
        top["source"] = [f"{short[f]}:{int(n)}" if isinstance(f, str) and f else ""
                         for f, n in zip(top["source_file"], top["source_line"].fillna(0))]
    pts = op_stats[(op_stats["flops"] > 0) & (op_stats["bytes_accessed"] > 0)].head(ROOFLINE_POINTS) \
        if "flops" in op_stats else op_stats.iloc[:0]
    points = [{"module": r["module"], "op": r["op"], "bound_by": r["bound_by"], "dtype": r["dtype"],
               "total_ps": r["total_ps"], "intensity_flops_per_byte": r["flops"] / r["bytes_accessed"],
               "achieved_flops_per_s": r["flops"] / (r["total_ps"] / 1e12) if r["total_ps"] else None}
              for r in records(pts)]
    finding_dicts = []
    # the rules that claim device time (the memory and utilization rules, and TK000, claim none: savings "0")
    claim = {r.id for r in a.rules if r.claims_time}
    for f in findings:
        d = f.to_dict() if hasattr(f, "to_dict") else dict(f)
        d.setdefault("claims_time", d.get("rule_id") in claim)
        finding_dicts.append(clean(d))
    # what the findings claim together is the union of their claims on device time, not their sum (two findings
    # may claim the same seconds); the sum of the greedy per-finding claims is the fallback without a headline
    total_claimed = (headline or {}).get("claims_union_ps")
    if total_claimed is None:
        total_claimed = int(sum(f.get("claimed_ps") or 0 for f in finding_dicts))
    data = {
        "schema": SCHEMA,
        "tool": {"name": "tracekit", "version": version()},
        "inputs": [{"path": i.path, "host": i.host} for i in a.inputs],
        "chips": chips,
        "overview": clean(overview.to_dict()) if overview is not None else {},
        "memory": memory_section(memory) if memory is not None else {},
        "summary": clean({
            "hosts": tot.hosts,
            "devices": int(len(devices)),
            "steps": int(steps["step"].nunique()) if len(steps) else 0,
            "step_rows": int(len(steps)), "step_rows_in_report": int(min(len(steps), STEP_ROWS)),
            "step_source": list(a.step_source),
            "profiled_ps": span, "busy_ps": busy, "idle_ps": span - busy, "op_time_ps": op_time,
            "op_executions": tot.op_executions,
            "roofline_coverage": coverage,
            "time_by_bound_ps": {k: int(v) for k, v in by_bound.items()},
            "collectives": tot.collectives,
            "collective_exposed_ps": tot.collective_exposed_ps,
            "hlo_present": bool(len(hlo)),
            "findings": len(finding_dicts),
            "claimed_savings_ps": total_claimed,
            "above_roofline_floor_ps": (headline or {}).get("above_roofline_floor_ps"),
        }),
        "devices": records(devices),
        "step_stats": records(step_stats),
        "device_steps": records(_device_steps(steps)),
        "steps": records(_first_steps(steps, STEP_ROWS))
        if len(steps) else [],
        "top_ops": records(top, OP_COLUMNS),
        "roofline": {"points": clean(points), "roofs": chips, "unplotted": unplotted(op_stats, len(points))},
        "collectives": records(coll.sort_values("exposed_ps", ascending=False, kind="stable").head(50)) if len(coll) else [],
        "interconnect": interconnect or {"topology": {}, "collectives": [], "collective_ops": 0},
        "findings": finding_dicts,
        "custom_calls": clean(a.custom_calls or {"op_time_ps": op_time, "custom_call_ps": 0, "unknown_ps": 0,
                                                 "targets": [], "models": {}}),
        "params": clean(a.params),
        "gate": {"fail_on": fail_on, "failed": False},
        "warnings": list(a.warnings),
        "model_warnings": clean(list(model_warnings or [])),
        "units": {"*_ps": "picoseconds", "*_bytes": "bytes", "flops": "floating-point operations",
                  "*_per_s": "per second", "efficiency": "roofline_ps / measured time", "share": "fraction"},
        "provenance": {
            "time": "trace events (TPU: device clock stat device_duration_ps; GPU: kernel events; CPU: thunk events)",
            "flops_bytes": "cost_source per op: 'trace' (the trace's own flops/bytes_accessed stats), 'hlo' "
                           "(tracekit's HLO cost model), 'model:<name>' (a custom-call cost model; its "
                           "assumptions under custom_calls.models), 'unknown' (with unknown_reason)",
            "peaks": "chips[].sources: 'trace: <stat>', 'table: <citation>', 'calibration: ...' or 'estimate: ...'",
            "collectives": "interconnect.collectives: predicted_ps from the topology-aware collective model (chip "
                           "table links, interconnect.topology.source), measured from trace events; skew = wait for "
                           "the last participant; algbw = size_bytes / transfer_ps, busbw per nccl-tests",
        },
    }
    from tracekit.report import invariants, trust
    trust.annotate(data, a.rules)
    rep = Report(data, rules=tuple(a.rules), op_table=op_stats)
    data["gate"]["failed"] = rep.fails(fail_on)
    return invariants.self_checked(rep)


MEMORY_BUFFERS = 20  #: largest buffers kept in the envelope
MEMORY_CURVES = 4  #: heap-simulator curves kept (the programs with the largest live peaks)
MEMORY_ALLOCATORS = 16  #: allocator timelines kept


def memory_section(mv) -> dict:
    """The memory view (:class:`tracekit.analysis.memory.MemoryView`) as JSON-ready data."""
    progs = mv.programs[mv.programs["footprint_bytes"] > 0] if len(mv.programs) else mv.programs
    peaks = progs[progs["memory_space"] == "device"].sort_values(["live_peak_bytes", "module"],
                                                                 ascending=[False, True])
    keep = [(m, int(p)) for m, p in zip(peaks["module"], peaks["program_id"])][:MEMORY_CURVES]
    curves = []
    for m, p in keep:
        c = next((v for (mm, pp), v in sorted(mv.curves.items(), key=lambda kv: (kv[0][0], int(kv[0][1])))
                  if mm == m and int(pp) == p), None)
        if c is not None:
            curves.append({"module": m, "program_id": p, "memory_space": "device",
                           "points": [[int(a), int(b), str(n)] for a, n, b in zip(c["seq"], c["instruction"],
                                                                                   c["live_bytes"])]})
    timeline = []
    for (h, a), c in sorted(mv.timeline.items())[:MEMORY_ALLOCATORS]:
        timeline.append({"host": h, "allocator": a,
                         "points": [[int(t), float(b)] for t, b in zip(c["start_ps"], c["bytes_in_use"])]})
    return clean({
        "capacity_bytes": mv.capacity_bytes, "capacity_source": mv.capacity_source,
        "programs": records(progs.sort_values(["memory_space", "footprint_bytes", "module"],
                                              ascending=[True, False, True])),
        "buffers": records(mv.buffers.head(MEMORY_BUFFERS)),
        "devices": records(mv.devices) if mv.devices is not None else [],
        "offload": records(mv.offload) if mv.offload is not None else [],
        "curves": curves,
        "allocators": records(mv.allocators) if mv.allocators is not None else [],
        "timeline": timeline,
    })


def unplotted(op_stats: pd.DataFrame, plotted: int) -> list[dict]:
    """The ops the roofline chart leaves out, by reason: ops, total_ps, share of op time, the largest op."""
    if not len(op_stats) or "flops" not in op_stats:
        return []
    t = op_stats["total_ps"].to_numpy(float)
    total = t.sum()
    f, b = op_stats["flops"].to_numpy(float), op_stats["bytes_accessed"].to_numpy(float)
    unknown = np.isnan(f) | np.isnan(b)
    nof = ~unknown & (f <= 0)
    nob = ~unknown & ~nof & (b <= 0)
    drawable = ~(unknown | nof | nob)
    rank = np.cumsum(drawable)
    beyond = drawable & (rank > plotted)
    out = []
    for reason, m in (("with no FLOPs (copies, host transfers, data movement)", nof),
                      ("with an unknown cost (see unknown_reason)", unknown),
                      ("with FLOPs but no bytes", nob), (f"beyond the {plotted} largest plotted", beyond)):
        if m.any():
            i = int(np.flatnonzero(m)[np.argmax(t[m])])
            out.append({"reason": reason, "ops": int(m.sum()), "total_ps": int(t[m].sum()),
                        "share": clean(t[m].sum() / total) if total else None,
                        "largest": str(op_stats["op"].iloc[i])})
    return out


def _first_steps(steps: pd.DataFrame, k: int) -> pd.DataFrame:
    """The first ``k`` rows in (step, host, device) order (stable), sorting only the rows that can be among them."""
    if len(steps) > 4 * k:
        st = steps["step"].to_numpy()
        kth = np.partition(st, k - 1)[k - 1]  # the k-th smallest step number: later steps cannot be in the head
        steps = steps[st <= kth]
    return steps.sort_values(["step", "host", "device"], kind="stable").head(k)


def _device_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Per device, every step summed: steps, step time mean/median/max (of the steps with a step time: not a
    device's ``open_end`` last run), and the breakdown totals (every step)."""
    cols = ["compute_ps", "collective_exposed_ps", "collective_hidden_ps", "wait_ps", "idle_ps",
            *(c for c in steps.columns if c.startswith("collective_exposed_") and c != "collective_exposed_ps"),
            "compute_bound_ps", "memory_bound_ps", "compute_other_ps", "offload_wait_ps", "async_wait_ps",
            "host_idle_ps", "launch_idle_ps", "other_idle_ps"]
    if not len(steps):
        return pd.DataFrame(columns=["host", "device", "steps", "step_ps_mean", "step_ps_median", "step_ps_max",
                                     "step_ps_sum", *cols])
    g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str)).groupby(
        ["host", "device"], sort=True)
    out = g["step_ps"].agg(steps="size", step_ps_sum="sum")
    closed = closed_steps(steps)
    times = closed.assign(host=closed["host"].astype(str), device=closed["device"].astype(str)).groupby(
        ["host", "device"], sort=True)["step_ps"].agg(step_ps_mean="mean", step_ps_median="median", step_ps_max="max")
    out = out.join(times)[["steps", "step_ps_mean", "step_ps_median", "step_ps_max", "step_ps_sum"]]
    return out.join(g[[c for c in cols if c in steps.columns]].sum()).reset_index()


def version() -> str:
    """tracekit's version, as every envelope states it."""
    return __version__


def display_path(p: str) -> str:
    """A path as a report shows it: relative to the working directory when it is inside it (stable across
    machines), else as given; URLs as given."""
    if "://" in p:
        return p
    try:
        rel = os.path.relpath(p)
        return rel if not rel.startswith("..") else p
    except ValueError:
        return p
