"""The pod's Report from its hosts' summaries: the reduce (:mod:`tracekit.run.podreduce`) laid into the
:class:`tracekit.report.envelope.Analysis` the single-process pipeline builds, plus the ``pod`` section
(:mod:`tracekit.run.podviews`)."""
from __future__ import annotations

import pandas as pd

from tracekit.run import podreduce as rd


def report(summaries: list, failures: list, files: list, resolved: list, opt, *, fail_on: str = "never",
           model_flops_per_step: float | None = None, notes: tuple = ()):
    """The Report of the analyzed hosts (``summaries``, in host order); ``failures`` [(host, path, reason)]
    become warnings; ``resolved``: [(rule, resolved params)] of every rule; ``opt``: the map's Options."""
    from tracekit import pipeline
    from tracekit.analysis import evidence, hostcheck, memory, overview
    from tracekit.analysis import stepstats
    from tracekit.analysis.rule_checks import RuleFrames, overlap_advice
    from tracekit.model import roofline
    from tracekit.report import envelope
    from tracekit.run import podviews
    from tracekit.ingest import badhosts
    from tracekit.ingest.steps import fold_warnings
    hosts = [s.host for s in summaries]
    tot = rd.totals([s.totals for s in summaries])
    devices = rd.devices_frame(summaries)
    steps = rd.steps_frame(summaries)
    span, profiled = evidence.spans(devices)
    stats = rd.op_stats(summaries, tot.op_time_ps, float(devices["span_ps"].sum()) if len(devices) else float("nan"))
    coll = rd.collectives_top(summaries, rd_top())
    if len(coll) and "overlap_advice" not in coll.columns:
        coll["overlap_advice"] = overlap_advice(coll)
    dchips: dict = {}
    for s in summaries:
        dchips.update(s.device_chips)
    source = rd.step_source(summaries)
    ov = overview.finish(steps, rd_parts(summaries), step_source=", ".join(source),
                         model_flops_per_step=model_flops_per_step)
    mem = memory.with_offload_time(rd.memory_view(summaries), ov.devices)
    frames = RuleFrames(ops=pd.DataFrame(), op_stats=stats, collectives=coll, steps=steps, devices=devices,
                        gaps=pd.DataFrame(), **memory.rule_frames(mem, ov.devices, devices))
    findings, driver_rules = rd.findings(summaries, resolved, dict(frames), span, profiled, opt.max_evidence)
    if not tot.op_executions:
        findings = [pipeline.no_device_ops()] + findings
    warnings = list(notes) + fold_warnings([w for s in summaries for w in s.warnings])  # (as trace.combine folds them)
    warnings += hostcheck.warnings(*hostcheck.of_summaries(summaries))  # (the in-process pipeline's call too)
    left_out = badhosts.notices(failures, len(summaries))
    warnings += left_out
    mw = rd.model_warnings(summaries, dchips, tot.op_time_ps)
    skel = rd.skeleton(summaries, hosts)
    roofline.remember_device_chips(skel, opt.chip, dchips)
    crow = rd.collective_rows(summaries)
    crow_ops = crow if len(crow) else _no_ops()
    inter = pipeline.interconnect(skel, crow_ops, opt.chip, opt.topology)
    step_stats = stepstats.step_stats(steps, column="step_ps") if len(steps) else pd.DataFrame()
    rep = envelope.build(envelope.Analysis(
        inputs=tuple(envelope.Input(envelope.display_path(s.path), s.host) for s in summaries),
        chips=rd.chips_used(summaries), ops=pd.DataFrame(), frames=frames, step_stats=step_stats,
        findings=tuple(findings), hlo=skel.hlo,
        params={"hidden": opt.hidden, "exposed": opt.exposed, "min_gap_ps": opt.min_gap_ps,
                "rules": {r.id: p for r, p in resolved}},
        warnings=tuple(warnings) + tuple(w["message"] for w in mw), step_source=source, fail_on=fail_on,
        rules=tuple(r for r, _ in resolved), custom_calls=rd.custom_calls(summaries), overview=ov, memory=mem,
        interconnect=inter, model_warnings=tuple(mw), headline=rd.headline(findings, driver_rules, summaries,
                                                                            devices),
        totals=tot))
    rep.data["pod"] = podviews.section(summaries, steps, crow, skel, dchips, opt, failures)
    rep.left_out = tuple(left_out)
    return rep


def rd_top() -> int:
    from tracekit.run.podmap import TOP_COLLECTIVES
    return TOP_COLLECTIVES


def rd_parts(summaries: list) -> pd.DataFrame:
    parts = [s.overview_parts for s in summaries if len(s.overview_parts)]
    if not parts:
        return summaries[0].overview_parts
    return pd.concat(parts, ignore_index=True).sort_values(["host", "device"], kind="stable", ignore_index=True)


def _no_ops() -> pd.DataFrame:
    from tracekit import schema
    return schema.empty(schema.OPS)
