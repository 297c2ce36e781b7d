"""Map: one host's trace file -> a :class:`HostSummary`, small and mergeable (runs on a worker).

The worker reads and decodes its host's file itself, runs the single-host pipeline (roofline join, timelines,
memory and utilization parts) and keeps only what the pod's reduce (:mod:`tracekit.run.podreduce`) needs:

* per-op-identity sums (:func:`tracekit.analysis.opstats.op_sums`), the op and collective totals;
* per-device rows: busy/idle/span (``devices``), the roofline floor, the overview's device parts, memory peaks;
* per-step per-device rows (the step breakdown) — O(devices × steps);
* the collective executions' rows (start and duration per device: cross-host skew and the pod views);
* the 50 collectives with the most exposed time; for each rule that reads a per-event frame (``ops``,
  ``collectives``, ``gaps``, ``host_events``) its evidence summary (:class:`tracekit.analysis.evidence.Evidence`:
  top k rows by savings, exact counts and totals) and the device time its claims cover;
* the HLO modules as serialized protos (one copy per distinct module reaches the driver) and the source lines.

Nothing of size O(events) leaves the worker except the collective executions (O(collective executions)).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.report.envelope import Totals

#: frames with a row per event: rules reading them run on the worker, per host
WORKER_FRAMES = frozenset({"ops", "collectives", "gaps", "host_events"})
SOURCE_COLUMNS = ["program_id", "name", "source_file", "source_line", "op_name"]  #: what the top ops table shows of the HLO
TOP_COLLECTIVES = 50  #: the envelope's collectives table
#: the ops columns the collective executions read (tracekit.analysis.collectives.executions)
COLLECTIVE_COLUMNS = ("host", "device", "module", "program_id", "op", "opcode", "category", "kernel", "step",
                      "start_ps", "duration_ps", "is_async", "network_ps", "net_level")


@dataclass(frozen=True)
class Options:
    """What every worker needs to analyze its host the way the single-process pipeline would."""

    max_bytes: int | None = None
    max_events: int | None = None
    chip: str | None = None
    topology: str | None = None
    host_order: tuple = ()  #: every host of the pod, in order (GPU device ids count the hosts before)
    rules_dirs: tuple = ()  #: rule folders beside the built-in ones (readable on every worker)
    select: tuple = ()
    ignore: tuple = ()
    params: tuple = ()  #: ((rule id or name, ((param, value), ...)), ...): the --param overrides
    hidden: float = 0.9
    exposed: float = 0.1
    min_gap_ps: int = 0
    max_evidence: int = 10


@dataclass(frozen=True)
class Module:
    """An HLO module on the wire: the proto (and its buffer assignment) serialized."""

    name: str
    program_id: int
    blob: bytes
    buffers: bytes | None = None


@dataclass(frozen=True)
class HostSummary:
    """One host, summarized (see the module docstring). Frozen; frames are the host's own rows."""

    host: str
    path: str
    warnings: tuple
    totals: Totals
    op_sums: pd.DataFrame  #: tracekit.analysis.opstats.op_sums
    devices: pd.DataFrame  #: tracekit.analysis.timeline.device_summary
    steps: pd.DataFrame  #: the step breakdown (rule frame ``steps``)
    collectives_top: pd.DataFrame  #: the TOP_COLLECTIVES rows with the most exposed time
    collective_rows: pd.DataFrame  #: the ops rows of collective executions (COLLECTIVE_COLUMNS)
    evidence: tuple  #: (rule id, Evidence) for the rules that read a per-event frame and found rows
    nonempty: frozenset  #: the per-event frames this host has rows in
    claims: tuple  #: ((host, device), ps covered by the union of every local rule's claims)
    floor: tuple  #: ((host, device), sync op time at the roofline floor)
    overview_parts: pd.DataFrame  #: tracekit.analysis.overview.device_parts
    device_chips: dict  #: (host, device) -> Chip
    chips: tuple  #: ChipUse of this host (device names without the host)
    memory: object  #: tracekit.analysis.memory.MemoryView of this host (offload times not yet added)
    custom_calls: tuple  #: tracekit.analysis.customcalls.parts
    warning_groups: tuple  #: tracekit.model.peaks.warning_groups
    hlo_source: pd.DataFrame  #: SOURCE_COLUMNS (one row per instruction)
    hlo_present: bool
    modules: tuple  #: Module per HLO module
    trace_devices: pd.DataFrame  #: the trace's devices frame
    device_stats: dict = field(default_factory=dict)
    step_source: tuple = ()
    seconds: float = 0.0  #: wall time the worker spent on this host
    profile_span: tuple | None = None  #: (start, stop) wall-clock ns of this host's profile, where the trace says


def summarize(path: str, host: str, opt: Options) -> HostSummary:
    """The :class:`HostSummary` of one host file (a local path or a URL fsspec reads). Raises what loading raises
    (:class:`tracekit.errors.TraceError` for a bad file)."""
    import time

    from tracekit import pipeline
    from tracekit.analysis import customcalls, memory, overview, rule_checks
    from tracekit.ingest import paths, trace
    from tracekit.model import identity, peaks, roofline
    from tracekit.report import envelope
    t0 = time.perf_counter()
    warnings: list[str] = []
    mb = opt.max_bytes if opt.max_bytes is not None else paths.DEFAULT_MAX_BYTES
    frames = trace.load_host(paths.HostFile(host, path), warnings, max_bytes=mb, max_events=opt.max_events)
    tr = trace.combine([frames], warnings)
    del frames
    tr.paths = [str(path)]
    if opt.host_order:
        tr.hosts = list(opt.host_order)  # GPU device ids count the hosts before this one
    cost_table = identity.costs(tr) if tr.has_hlo else None
    dchips = roofline.device_chips(tr, opt.chip)
    ops = pipeline.with_roofline(tr, opt.chip, opt.topology, cost_table)
    tr.hosts = [host]
    fr = rule_checks.frames_for_rules(ops, tr.steps, tr.host_events, hidden=opt.hidden, exposed=opt.exposed,
                                      min_gap_ps=opt.min_gap_ps, modules=tr.modules)
    local = {"ops": fr.ops, "collectives": fr.collectives, "gaps": fr.gaps, "steps": fr.steps,
             "devices": fr.devices}
    if fr.host_events is not None:
        local["host_events"] = fr.host_events
    evidence, claims = _rules(opt, local)
    sums, _busy = _op_sums(ops)
    coll = fr.collectives
    mem = memory.build(tr, opt.chip)
    chips_used = tuple(roofline.chips_used(tr, opt.chip))
    step_source = tuple(sorted({str(x) for x in tr.steps["step_source"].unique()})) if len(tr.steps) else ()
    hlo_src = tr.hlo[SOURCE_COLUMNS].drop_duplicates(["program_id", "name"]) \
        if len(tr.hlo) else pd.DataFrame(columns=SOURCE_COLUMNS)
    mods = tuple(Module(m.name, m.program_id, m.proto.SerializeToString(),
                        m.buffers.SerializeToString() if m.buffers is not None else None) for m in tr.hlo_modules)
    return HostSummary(
        host=host, path=str(path), warnings=tuple(tr.warnings), totals=envelope.totals(ops, coll), op_sums=sums,
        devices=fr.devices.drop(columns=["busy_ps_z"], errors="ignore"), steps=fr.steps,
        collectives_top=coll.sort_values("exposed_ps", ascending=False, kind="stable").head(TOP_COLLECTIVES)
        .reset_index(drop=True), collective_rows=_collective_rows(ops), evidence=evidence,
        nonempty=frozenset(k for k in WORKER_FRAMES if local.get(k) is not None and len(local[k])), claims=claims,
        floor=_floor(ops), overview_parts=overview.device_parts(ops, fr.steps, dchips), device_chips=dict(dchips),
        chips=chips_used, memory=mem, custom_calls=customcalls.parts(ops, tr.hlo, cost_table),
        warning_groups=tuple(peaks.warning_groups(ops, dchips)), hlo_source=hlo_src.reset_index(drop=True),
        hlo_present=bool(len(tr.hlo)), modules=mods, trace_devices=tr.devices, device_stats=dict(tr.device_stats),
        step_source=step_source, seconds=time.perf_counter() - t0, profile_span=tr.profile_spans.get(host))


def _op_sums(ops: pd.DataFrame):
    from tracekit.analysis import opstats
    return opstats.op_sums(ops)


def _rules(opt: Options, frames: dict) -> tuple[tuple, tuple]:
    """Evidence summaries of the per-event rules on this host, and per device the time their claims cover
    together."""
    from tracekit.analysis import claims as claims_mod
    from tracekit.analysis import evidence, rules
    out, per_dev = [], {}
    for rule, params in worker_rules(opt):
        if rules.applicable(rule, frames):
            continue
        try:
            ev = rules.evidence_rows(rule, frames, params)
        except (KeyError, AttributeError, TypeError, ValueError, ArithmeticError) as e:
            raise rules.failed(rule, e) from None
        if ev.empty:
            continue
        for k, iv in claims_mod.claim_intervals(rule.frame, ev, frames).items():
            per_dev.setdefault(k, []).append({k: iv})
        out.append((rule.id, evidence.summarize(rule, ev, opt.max_evidence)))
    covered = tuple((k, claims_mod.union_ps(v)) for k, v in sorted(per_dev.items()))
    return tuple(out), covered


_RULES: dict = {}


def worker_rules(opt: Options) -> list:
    """(rule, resolved params) of the rules that read a per-event frame, loaded here (once per process): rule
    objects hold compiled expressions, which do not travel between processes; their files do."""
    key = (opt.rules_dirs, opt.select, opt.ignore, opt.params)
    if key not in _RULES:
        from tracekit.analysis import rule_model
        params = {k: dict(v) for k, v in opt.params}
        rules = rule_model.load_rules(extra_dirs=opt.rules_dirs, select=opt.select, ignore=opt.ignore)
        _RULES[key] = [(r, r.resolve(rule_model.params_for(r, params))) for r in rules if r.frame in WORKER_FRAMES]
    return _RULES[key]


def _floor(ops: pd.DataFrame) -> tuple:
    """Per device: its sync ops' time at their roofline (measured self time where the roofline is unknown)."""
    from tracekit.columns import self_time
    if "roofline_ps" not in ops or not len(ops):
        return ()
    sync = ops[~ops["is_async"].to_numpy(bool)]
    roof = sync["roofline_ps"].to_numpy(np.float64)
    t = self_time(sync).astype(np.float64)
    floor = np.where(np.isnan(roof), t, np.minimum(roof, t))
    per = pd.Series(floor).groupby([sync["host"].astype(str).to_numpy(), sync["device"].astype(str).to_numpy()]).sum()
    return tuple(((str(h), str(d)), float(v)) for (h, d), v in per.items())


def _collective_rows(ops: pd.DataFrame) -> pd.DataFrame:
    """The rows :func:`tracekit.analysis.collectives.executions` reads: collectives and send/recv, no markers."""
    from tracekit.analysis import timeline as tl
    from tracekit.grouping import cat_apply
    if not len(ops):
        return ops[[c for c in COLLECTIVE_COLUMNS if c in ops.columns]]
    m = (tl.is_collective(ops) | cat_apply(ops["opcode"], lambda v: str(v).lower() in ("send", "recv"))) \
        & ~tl.is_async_marker(ops)
    return ops.loc[m, [c for c in COLLECTIVE_COLUMNS if c in ops.columns]].reset_index(drop=True)
