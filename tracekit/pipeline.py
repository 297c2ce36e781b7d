"""The pipeline, stage by stage: load -> frames -> cost -> roofline -> timeline -> rules -> report.
Each stage is a function of plain data; this module only wires them together."""
from __future__ import annotations

from dataclasses import replace

import pandas as pd

from tracekit.ingest.trace import Trace, load
from tracekit.report import envelope as report_mod


#: with ``--chip``, more than this share of op time priced above its roofline says the chip named is wrong
WRONG_CHIP_SHARE = 0.05


def with_roofline(tr: Trace, chip: str | None = None, topology: str | None = None,
                  cost_table: pd.DataFrame | None = None, *, release_trace_costs: bool = False) -> pd.DataFrame:
    """The ops frame with the roofline columns joined (cost model + chip table; collectives priced on
    ``topology``, ``--topology``, else the trace's own); ``cost_table``: the trace's
    :func:`tracekit.model.identity.costs` when the caller has it already. ``release_trace_costs``: the trace's
    own cost stats leave ``tr.ops`` and the result once they have served (see :func:`tracekit.model.roofline.join`)."""
    from tracekit.model import roofline
    return roofline.join(tr, chip=chip, topology=topology, cost_table=cost_table,
                         release_trace_costs=release_trace_costs)


def interconnect(tr: Trace, ops: pd.DataFrame, chip: str | None = None, topology: str | None = None,
                 limit: int = 50) -> dict:
    """The report's interconnect section: the topology and, per collective op, measured vs predicted
    (:mod:`tracekit.analysis.collectives`)."""
    from tracekit.analysis import collectives
    model, summary, _ = collectives.view(tr, ops, chip, topology)
    topo = model.topology.to_dict()
    topo.pop("devices")
    topo["devices_traced"] = len(model.ids)
    topo["chip"] = getattr(model.chip, "name", "")
    return {"topology": topo, "collectives": report_mod.records(summary.head(limit)),
            "collective_ops": int(len(summary))}


def _memory_guard(fn):
    """A MemoryError anywhere in the analysis becomes the one-line TraceError saying how much memory the trace
    needs and what to do (--jobs, --dask, a bigger machine)."""
    import functools

    @functools.wraps(fn)
    def wrapper(source, *args, **kw):
        try:
            return fn(source, *args, **kw)
        except MemoryError:
            from tracekit.ingest import paths
            raise paths.out_of_memory_for(source, kw.get("run")) from None
    return wrapper


@_memory_guard
def analyze(source, *, chip: str | None = None, topology: str | None = None, run: str | None = None, rules_dirs=(),
            select=(), ignore=(),
            params: dict | None = None, hidden: float = 0.9, exposed: float = 0.1, min_gap_ps: int = 0,
            fail_on: str = "never", max_bytes=None, max_events=None, ops=None, progress=None,
            model_flops_per_step: float | None = None, left_out=()) -> report_mod.Report:
    """Everything ``tracekit analyze`` does, as a function: a path (or a loaded :class:`Trace`) -> Report.
    ``model_flops_per_step``: the model's FLOPs of one step (all devices), for MFU instead of the trace's count.
    A host of a run folder that cannot be read is left out and named (:mod:`tracekit.ingest.badhosts`);
    ``left_out``: those the caller's own ``load(..., left_out=)`` of ``source`` left out."""
    from tracekit.ingest import paths as load_mod
    from tracekit.analysis import customcalls, rule_cases, rule_checks, rule_model, rules
    from tracekit.analysis import stepstats
    from tracekit.model import identity, roofline
    from tracekit.progress import NULL
    progress = progress or NULL
    # rules first: a refused rule file or a failing case of a user rule stops before the trace is read
    rule_list = rule_cases.check_user_rules(rule_model.load_rules(extra_dirs=rules_dirs, select=select, ignore=ignore))
    resolved = {r.id: r.resolve(rule_model.params_for(r, params)) for r in rule_list}  # bad --param values too
    progress.stage("loading the trace")
    left_out = list(left_out)  # hosts of a run folder that cannot be read: left out, named (tracekit.ingest.badhosts)
    if isinstance(source, Trace):
        tr = source
    else:
        kw = {"max_bytes": max_bytes if max_bytes is not None else load_mod.DEFAULT_MAX_BYTES}
        tr = load(source, run=run, max_events=max_events, left_out=left_out, **kw)
    from tracekit.ingest import badhosts
    notices = tuple(badhosts.notices(left_out, len(tr.hosts)))
    progress.stage("roofline")
    cost_table = identity.costs(tr) if tr.has_hlo else None  # the roofline and the custom-call summary read it
    if ops is None:  # a trace loaded here (ours): its cost stats go once they have served (16 B per row)
        ops = with_roofline(tr, chip, topology, cost_table, release_trace_costs=not isinstance(source, Trace))
    progress.stage("timelines")
    frames = rule_checks.frames_for_rules(ops, tr.steps, tr.host_events, hidden=hidden, exposed=exposed,
                                          min_gap_ps=min_gap_ps, modules=tr.modules)
    step_source = sorted({str(x) for x in tr.steps["step_source"].unique()}) if len(tr.steps) else []
    mem, ov = memory_and_overview(tr, ops, frames.steps, chip, ", ".join(step_source), model_flops_per_step)
    frames = replace(frames, **rule_frames(mem, ov, frames.devices))
    progress.stage("rules")
    findings = rules.run_rules(frames, rule_list, params)
    if not (len(ops) and (~ops["is_async"].to_numpy(bool)).any()):  # no device op executions at all
        findings = [no_device_ops()] + findings
    progress.stage("report")
    from tracekit.model import peaks
    from tracekit.analysis import claims, hostcheck
    dchips = roofline.device_chips(tr, chip)
    model_warnings = peaks.model_warnings(ops, dchips, limit=None)  # every op above its roofline is named
    model_warnings = roofline.cost_disagreements(tr) + model_warnings  # author estimates the shapes contradict
    missing = sorted({h for (h, _), c in dchips.items() if c.family == "cpu" and c.notes.startswith("no record")})
    if missing:  # a CPU trace analyzed away from the machine that recorded it: its peaks are not that machine's
        from tracekit.model.calibrate import processor_name
        model_warnings = [{"message": f"CPU trace of host(s) {', '.join(map(str, missing))} has no record of the "
                                      "machine that recorded it (<trace>.machine.json, written by `tracekit "
                                      "capture` and the hook): its CPU peaks are this machine's "
                                      f"({processor_name()}), which may not be the one that ran it"}] + model_warnings
    over = min(1.0, sum(w.get("share_of_op_time") or 0.0 for w in model_warnings))  # (async windows: past 1)
    if chip and over > WRONG_CHIP_SHARE:  # the user named the part, and the trace runs faster than it can
        model_warnings = [{"message": f"model: {over:.0%} of op time ran faster than its roofline on --chip {chip}: "
                                      "the chip is probably wrong (see `tracekit chips`)"}] + model_warnings
    head = claims.headline(findings, frames.devices, frames.ops)
    custom = customcalls.summary(ops, tr.hlo, cost_table)
    step_stats = stepstats.step_stats(frames.steps, column="step_ps") if len(frames.steps) else pd.DataFrame()
    rep = report_mod.build(report_mod.Analysis(
        inputs=tuple(report_mod.Input(report_mod.display_path(p), h) for p, h in zip(tr.paths, tr.hosts)),
        chips=tuple(roofline.chips_used(tr, chip)), ops=ops, frames=frames, step_stats=step_stats,
        findings=tuple(findings), hlo=tr.hlo,
        params={"hidden": hidden, "exposed": exposed, "min_gap_ps": min_gap_ps, "rules": resolved},
        warnings=tuple(tr.warnings) + tuple(hostcheck.warnings(tr.profile_spans, hostcheck.programs_by_host(ops)))
        + notices + tuple(w["message"] for w in model_warnings),
        step_source=tuple(step_source), fail_on=fail_on, rules=tuple(rule_list), custom_calls=custom, overview=ov,
        memory=mem, interconnect=interconnect(tr, ops, chip, topology), model_warnings=tuple(model_warnings),
        headline=head))
    rep.left_out = notices
    return rep


def memory_and_overview(tr: Trace, ops: pd.DataFrame, steps: pd.DataFrame, chip: str | None = None,
                        step_source: str = "", model_flops_per_step: float | None = None):
    """The memory view (:mod:`tracekit.analysis.memory`) and the utilization headline
    (:mod:`tracekit.analysis.overview`), with each offloading program's measured wait and host-link roofline."""
    from tracekit.analysis import memory, overview
    from tracekit.model import roofline
    mem = memory.build(tr, chip)
    ov = overview.build(ops, steps, roofline.device_chips(tr, chip), step_source=step_source,
                        model_flops_per_step=model_flops_per_step)
    return memory.with_offload_time(mem, ov.devices), ov


def rule_frames(mem, ov, devices: pd.DataFrame) -> dict:
    """The frames the memory and utilization rules read: ``memory_devices``, ``memory_programs``, ``offload``,
    ``overview`` (see docs/rules.md)."""
    from tracekit.analysis import memory
    return memory.rule_frames(mem, ov.devices, devices)


#: The finding a trace without device op executions gets: nothing was analyzed, so no gate may pass.
NO_DEVICE_OPS = "TK000"


def no_device_ops():
    """An error-severity finding for a trace with no device op executions (any ``--fail-on`` trips on it)."""
    import math

    from tracekit.analysis.rule_model import Finding
    return Finding(
        NO_DEVICE_OPS, "no-device-ops", "error",
        "the trace holds no device op executions, so nothing was analyzed: the capture window held no device work, "
        "the profiler recorded only host events, or the device planes are missing",
        "capture while the jitted program runs (after a warm-up step, around a few steps), and check with "
        "`tracekit info` that the device planes and their op lines are there",
        {}, pd.DataFrame(), 0, 0, 0, math.nan, 0.0, ("capture",),
        "An empty capture is not a healthy program: a CI gate must not pass on it.")


def export(source, out, *, chip: str | None = None, run: str | None = None, steps: tuple[int, int] | None = None,
           devices=(), rules_dirs=(), max_bytes=None, max_events=None):
    """``tracekit export``: the trace with its roofline, steps, gaps and findings as Chrome/Perfetto JSON
    (:mod:`tracekit.report.export`); ``steps`` (A, B) and ``devices`` restrict it to a window."""
    from tracekit.analysis import rule_cases, rule_checks, rule_model, rules
    from tracekit.ingest import hlo
    from tracekit.ingest import paths as load_mod
    from tracekit.report import export as export_mod
    rule_list = rule_cases.check_user_rules(rule_model.load_rules(extra_dirs=rules_dirs))
    tr = source if isinstance(source, Trace) else load(
        source, run=run, max_bytes=max_bytes if max_bytes is not None else load_mod.DEFAULT_MAX_BYTES,
        max_events=max_events)
    devices = tuple(devices or ())
    export_mod.check_devices(tr.ops, devices)
    window = export_mod.step_window(tr.steps, steps, devices)
    ops = with_roofline(tr, chip)
    frames = rule_checks.frames_for_rules(ops, tr.steps, tr.host_events)
    findings = rules.run_rules(frames, rule_list)
    d2s = hlo.done_to_start(tr.hlo) if len(tr.hlo) else {}
    return export_mod.write(out, ops, frames, findings, d2s, window=window, devices=devices)
