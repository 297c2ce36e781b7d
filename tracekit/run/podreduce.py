"""Reduce: the hosts' :class:`~tracekit.run.podmap.HostSummary` objects -> the one Report of the pod.

The driver holds only what the summaries hold (O(hosts × devices × steps + distinct ops + collective
executions)); it merges them and builds the same :class:`tracekit.report.envelope.Analysis` the single-process
pipeline builds. Per-device frames (devices, steps, the overview's and memory's device rows) concatenate; op
statistics, totals, custom calls and model warnings add up; rules that read a per-event frame merge their
hosts' evidence summaries; the rules on pod-wide frames (op_stats, devices, steps, memory, overview) run here on
the merged frames; the interconnect section runs the collective model of the whole pod over the collective
executions. What may differ from the single-process report is listed in the README ("Pods").
"""
from __future__ import annotations

import pandas as pd

from tracekit.report.envelope import Totals
from tracekit.run.podmap import SOURCE_COLUMNS


def _cat(frames: list) -> pd.DataFrame:
    from tracekit.columns import concat_frames
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return pd.DataFrame()
    return concat_frames(frames).reset_index(drop=True)


def totals(parts: list) -> Totals:
    bound: dict = {}
    for t in parts:
        for k, v in t.time_by_bound_ps.items():
            bound[k] = bound.get(k, 0) + v
    return Totals(sum(t.op_time_ps for t in parts), sum(t.op_executions for t in parts), bound,
                  sum(t.hosts for t in parts), sum(t.collectives for t in parts),
                  sum(t.collective_exposed_ps for t in parts))


def devices_frame(summaries: list) -> pd.DataFrame:
    """The pod's devices frame: the hosts' rows, sorted, with busy_ps_z across devices of the same kind."""
    from tracekit.analysis import timeline as tl
    dev = pd.concat([s.devices for s in summaries if len(s.devices)], ignore_index=True) \
        if any(len(s.devices) for s in summaries) else summaries[0].devices.iloc[:0].copy()
    dev = dev.sort_values(["host", "device"], kind="stable", ignore_index=True)
    dev["busy_ps_z"] = dev.groupby("device_kind")["busy_ps"].transform(
        lambda s: tl.modified_z(s).to_numpy()) if len(dev) else pd.Series(dtype="float64")
    return dev


def steps_frame(summaries: list) -> pd.DataFrame:
    parts = [s.steps for s in summaries if len(s.steps)]
    if not parts:
        return summaries[0].steps
    st = pd.concat(parts, ignore_index=True)
    lv = [c for c in st.columns if c.startswith("collective_exposed_") and c != "collective_exposed_ps"]
    st[lv] = st[lv].fillna(0).astype("int64")
    return st.sort_values(["host", "device", "start_ps"], kind="stable", ignore_index=True)


def chips_used(summaries: list) -> tuple:
    """The chips of the pod, in device order; a chip's numbers are those of its first device."""
    from tracekit.model.roofline import ChipUse
    first: dict = {}
    devs: dict = {}
    for s in summaries:
        for use in s.chips:
            first.setdefault(use.chip.name, use.chip)
            devs.setdefault(use.chip.name, []).extend(f"{s.host}/{d}" for d in use.devices)
    return tuple(ChipUse(first[n], tuple(d)) for n, d in devs.items())


def memory_view(summaries: list):
    """The pod's memory view: programs, buffers, curves and offload of every distinct program (first host that
    has it), device peaks and allocators of every host."""
    from tracekit.analysis.memory import MemoryView
    views = [s.memory for s in summaries]
    every = pd.concat([v.programs for v in views], ignore_index=True)
    key = ["module", "program_id", "memory_space"]
    progs = every.drop_duplicates(key, ignore_index=True)
    if "executions" in every.columns and len(every):  # a program's runs in the window: on every host together
        runs = every.groupby(key, sort=False, observed=True)["executions"].sum()
        progs["executions"] = runs.reindex(pd.MultiIndex.from_frame(progs[key])).to_numpy()
    if "hosts" in every.columns and len(every):  # the hosts a program ran on: every host's, together
        ran = every.groupby(key, sort=False, observed=True)["hosts"].agg(
            lambda s: ",".join(sorted({h for x in s for h in str(x).split(",") if h})))
        progs["hosts"] = list(ran.reindex(pd.MultiIndex.from_frame(progs[key])))
    bufs = pd.concat([v.buffers for v in views], ignore_index=True)
    bufs = bufs.drop_duplicates([c for c in ("module", "program_id", "instruction", "allocation", "kind")
                                 if c in bufs.columns]).sort_values("size_bytes", ascending=False, kind="stable",
                                                                    ignore_index=True)
    curves, timeline = {}, {}
    for v in views:
        for k, c in v.curves.items():
            curves.setdefault(k, c)
        timeline.update(v.timeline)

    def cat(name, keys=None):
        fs = [getattr(v, name) for v in views if getattr(v, name) is not None and len(getattr(v, name))]
        if not fs:
            return next((getattr(v, name) for v in views if getattr(v, name) is not None), None)
        out = pd.concat(fs, ignore_index=True)
        return out.drop_duplicates(keys, ignore_index=True) if keys else out
    caps = [v.capacity_bytes for v in views if v.capacity_bytes == v.capacity_bytes]
    srcs = sorted({x for v in views for x in v.capacity_source.split("; ") if x})
    return MemoryView(programs=progs, buffers=bufs, curves=curves, devices=cat("devices"),
                      offload=cat("offload", ["module", "program_id"]), allocators=cat("allocators"),
                      timeline=timeline, capacity_bytes=min(caps) if caps else float("nan"),
                      capacity_source="; ".join(srcs))


def skeleton(summaries: list, hosts: list):
    """A Trace without events: the pod's devices, HLO modules (one per distinct module) and device stats, for
    the collective model of the whole pod."""
    from tracekit import schema
    from tracekit.ingest import hlo
    from tracekit.ingest.trace import Trace
    from tracekit.proto import hlo_pb2
    seen, mods = set(), []
    for s in summaries:
        for m in s.modules:
            if (m.name, m.program_id) not in seen:
                seen.add((m.name, m.program_id))
                mods.append(hlo.Module(m.name, m.program_id, hlo_pb2.HloModuleProto.FromString(m.blob),
                                       None if m.buffers is None else hlo_pb2.BufferAssignmentProto.FromString(
                                           m.buffers)))
    src = [s.hlo_source for s in summaries if len(s.hlo_source)]
    h = pd.concat(src, ignore_index=True).drop_duplicates(["program_id", "name"], ignore_index=True) if src else \
        pd.DataFrame(columns=SOURCE_COLUMNS)
    dstats: dict = {}
    for s in summaries:
        dstats.update(s.device_stats)
    empty = {k: schema.empty(v) for k, v in (("ops", schema.OPS), ("modules", schema.MODULES),
                                              ("steps", schema.STEPS), ("lines", schema.LINES),
                                              ("host_events", schema.HOST_EVENTS))}
    tr = Trace(hlo=h, devices=pd.concat([s.trace_devices for s in summaries], ignore_index=True),
               hlo_modules=mods, device_stats=dstats, hosts=list(hosts), **empty)
    return tr


def headline(findings: list, driver_rules: set, summaries: list, devices: pd.DataFrame) -> dict:
    """The headline: claims of the per-event rules unioned per device on the workers (every local rule with
    evidence), the pod-wide findings' claimed time added; the roofline floor from the hosts' per-device floors."""
    span = {(str(h), str(d)): int(s) for h, d, s in zip(devices["host"], devices["device"], devices["span_ps"])} \
        if len(devices) else {}
    fired = {f.rule_id for f in findings}
    union = 0
    for s in summaries:
        if not any(rid in fired for rid, _ in s.evidence):
            continue
        for k, ps in s.claims:
            union += min(int(ps), int(span.get(k, ps)))
    union += sum(int(f.claimed_ps) for f in findings if f.rule_id in driver_rules)
    profiled = sum(span.values())
    floor = {k: v for s in summaries for k, v in s.floor}
    above = None
    if any(s.floor for s in summaries) and len(devices):
        total = 0.0
        for h, d, sp in zip(devices["host"].astype(str), devices["device"].astype(str), devices["span_ps"]):
            total += max(float(sp) - float(floor.get((h, d), 0.0)), 0.0)
        above = int(round(total))
    return {"claims_union_ps": int(min(union, profiled) if profiled else union), "above_roofline_floor_ps": above}


def findings(summaries: list, rule_items: list, frames: dict, span: dict, profiled: float, max_evidence: int):
    """Findings of every rule: per-event rules from the hosts' merged evidence, the others evaluated on the
    merged frames. ``rule_items``: [(rule, resolved params)] in rule order."""
    from tracekit.analysis import evidence, rules
    from tracekit.run.podmap import WORKER_FRAMES
    nonempty = set().union(*(s.nonempty for s in summaries))
    items, driver = [], set()
    for rule, params in rule_items:
        need = (rule.frame, *rule.needs)
        if any(n not in nonempty if n in WORKER_FRAMES else (frames.get(n) is None or not len(frames[n]))
               for n in need):
            continue
        if rule.frame in WORKER_FRAMES:
            ev = evidence.merge([dict(s.evidence).get(rule.id) for s in summaries], max_evidence)
        else:
            driver.add(rule.id)
            try:
                rows = rules.evidence_rows(rule, frames, params)
            except (KeyError, AttributeError, TypeError, ValueError, ArithmeticError) as e:
                raise rules.failed(rule, e) from None
            ev = evidence.summarize(rule, rows, max_evidence) if len(rows) else None
        items.append((rule, params, ev))
    return evidence.findings(items, span, profiled, max_evidence), driver


def custom_calls(summaries: list) -> dict:
    from tracekit.analysis import customcalls
    rows = [s.custom_calls[0] for s in summaries if len(s.custom_calls[0])]
    return customcalls.finish(pd.concat(rows, ignore_index=True) if rows else summaries[0].custom_calls[0],
                              sum(int(s.custom_calls[1]) for s in summaries),
                              any(s.custom_calls[2] for s in summaries))


def model_warnings(summaries: list, dchips: dict, op_time: int) -> list:
    from tracekit.model import peaks
    out = peaks.finish_warnings([g for s in summaries for g in s.warning_groups], float(op_time), limit=None)
    missing = sorted({h for (h, _), c in dchips.items() if c.family == "cpu" and c.notes.startswith("no record")})
    if missing:
        from tracekit.model.calibrate import processor_name
        out = [{"message": f"CPU trace of host(s) {', '.join(map(str, missing))} has no record of the machine that "
                           "recorded it (<trace>.machine.json, written by `tracekit capture` and the hook): its CPU "
                           f"peaks are this machine's ({processor_name()}), which may not be the one that ran it"}] + out
    return out


def step_source(summaries: list) -> tuple:
    return tuple(sorted({x for s in summaries for x in s.step_source}))


def op_stats(summaries: list, busy_ps: int, profiled: float) -> pd.DataFrame:
    from tracekit.analysis import opstats
    return opstats.finish(opstats.merge_sums([s.op_sums for s in summaries]), busy_ps, profiled)


def collectives_top(summaries: list, k: int) -> pd.DataFrame:
    c = _cat([s.collectives_top for s in summaries])
    if not len(c):
        return next((s.collectives_top for s in summaries), pd.DataFrame())
    return c.sort_values("exposed_ps", ascending=False, kind="stable").head(k).reset_index(drop=True)


def collective_rows(summaries: list) -> pd.DataFrame:
    return _cat([s.collective_rows for s in summaries])


__all__ = ["totals", "devices_frame", "steps_frame", "chips_used", "memory_view", "skeleton", "headline",
           "findings", "custom_calls", "model_warnings", "op_stats", "collectives_top", "collective_rows"]
