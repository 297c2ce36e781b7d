"""The reduce: the hosts' summaries -> the one :class:`tracekit.report.envelope.Report` (the only module that
builds a report's sections; each section's merge is its module's ``reduce``, run in
:data:`tracekit.report.engine.SECTIONS` order).

The JSON envelope (``schema: tracekit.report/1``) is documented in ``docs/report-format.md``; keys are stable,
values are plain numbers/strings, times are integer picoseconds, and the same input gives the same bytes (no
timestamps, no absolute paths beyond what the user typed, sorted keys).
"""
from __future__ import annotations

from tracekit.options import Options
from tracekit.report.engine.context import Reduction
from tracekit.report.engine.steps import STEP_ROWS

SCHEMA = "tracekit.report/1"


def report(summaries: list, failures: list, rules: list, options: Options, *, files: int | None = None,
           notes: tuple = ()):
    """The Report of the analyzed hosts' :class:`~tracekit.report.engine.context.HostSummary` (in host order).
    ``failures``: (host, path, reason) of the hosts left out (named in the warnings); ``rules``: [(rule, resolved
    params)] of every rule; ``files``: host files of the run (default: analyzed + left out); ``notes``: the
    driver's own warnings, first (which run or sub-folder of the path was taken: ingest/locate.choose)."""
    from tracekit.analysis import coverage
    from tracekit.report import engine, invariants, trust
    from tracekit.report.envelope import Report, clean, display_path, version
    ctx = Reduction(summaries=list(summaries), failures=list(failures), options=options, rules=list(rules),
                    files=files if files is not None else len(summaries) + len(failures),
                    hosts=[s.host for s in summaries], notes=tuple(notes))
    data: dict = {}
    for section in engine.sections():
        data.update(section.reduce(ctx.parts(section.NAME), ctx))
    dev, tot, ss = ctx.devices, ctx.totals, ctx.step_summary
    span = int(dev["span_ps"].sum()) if len(dev) else 0
    busy = int(dev["busy_ps"].sum()) if len(dev) else 0
    by_bound = dict(sorted(tot.time_by_bound_ps.items()))
    cover = coverage.summarize(tot.coverage)  # (one definition: tracekit.analysis.coverage)
    resolved = {r.id: p for r, p in ctx.rules}
    data.update({
        "schema": SCHEMA,
        "tool": {"name": "tracekit", "version": version()},
        "inputs": [{"path": display_path(s.path), "host": s.host} for s in ctx.summaries],
        "summary": clean({
            "hosts": tot.hosts, "devices": int(len(dev)), "steps": ss.steps, "step_rows": ss.rows,
            "step_rows_in_report": int(min(ss.rows, STEP_ROWS)), "step_source": list(ctx.step_source),
            "profiled_ps": span, "busy_ps": busy, "idle_ps": span - busy, "op_time_ps": tot.op_time_ps,
            "op_executions": tot.op_executions,
            "roofline_coverage": cover["overall"], "roofline_coverage_by_device": cover["devices"],
            "time_by_bound_ps": {k: int(v) for k, v in by_bound.items()},
            "collectives": tot.collectives, "collective_exposed_ps": tot.collective_exposed_ps,
            "hlo_present": bool(ctx.shared["hlo_present"]), "findings": len(data["findings"]),
            "claimed_savings_ps": ctx.headline["claims_union_ps"],
            "above_roofline_floor_ps": ctx.headline["above_roofline_floor_ps"],
            "savings_basis": ctx.headline["replay"]["basis"], "replay_savings": ctx.headline["replay"]}),
        "params": clean({"hidden": options.hidden, "exposed": options.exposed, "min_gap_ps": options.min_gap_ps,
                         "rules": resolved}),
        "gate": {"fail_on": options.fail_on, "failed": False},
        "units": {"*_ps": "picoseconds", "*_bytes": "bytes", "flops": "floating-point operations",
                  "*_per_s": "per second", "efficiency": "roofline_ps / measured time", "share": "fraction",
                  "mxu_util": "fraction of the matrix units' cycles (mxu_util_source)",
                  "dma_wait_share": "fraction of the Mosaic pipeline's wait + body time spent waiting on DMAs"},
        "provenance": PROVENANCE,
    })
    rule_objs = tuple(r for r, _ in ctx.rules)
    trust.annotate(data, rule_objs)
    data["top_ops_trust"].update(ctx.shared.get("kernel_trust") or {})
    rep = Report(data, rules=rule_objs, op_table=ctx.op_stats)
    data["gate"]["failed"] = rep.fails(options.fail_on)
    rep = invariants.self_checked(rep)
    rep.left_out = ctx.shared.get("left_out", ())
    return rep


PROVENANCE = {
    "time": "trace events (TPU: device clock stat device_duration_ps; GPU: kernel events; CPU: thunk events)",
    "flops_bytes": "cost_source per op: 'trace' (the trace's own flops/bytes_accessed stats), 'hlo' "
                   "(tracekit's HLO cost model), 'model:<name>' (a custom-call cost model; its "
                   "assumptions under custom_calls.models; 'model:runtime_copy': a GPU runtime copy priced "
                   "from its size and direction), 'unknown' (with unknown_reason)",
    "peaks": "chips[].sources: 'trace: <stat>', 'table: <citation>', 'calibration: ...' or 'estimate: ...'",
    "collectives": "interconnect.collectives: predicted_ps from the topology-aware collective model (chip "
                   "table links, interconnect.topology.source), measured from trace events; skew = wait for "
                   "the last participant; algbw = size_bytes / transfer_ps, busbw per nccl-tests",
}
