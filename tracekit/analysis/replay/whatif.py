"""``tracekit whatif``: replay the measured steps with a change and say what the step would take.

:func:`whatif` answers one :class:`Request` with the ``whatif`` object (JSON-ready): ``measured_step_ps`` (the
median step of the slowest device over the replayed steps, start to start), ``predicted_step_ps`` (the same
statistic of the replay with the change), ``replayed_step_ps`` (the replay fed the measured times: equal to the
measured step unless the trace breaks its own constraints), ``changes`` (what was asked), ``critical_path`` (the
chain that sets the predicted median step's end, in time order: each op with its time and the gap before it),
``bound_changes`` (ops whose roofline bound changes), ``assumptions`` (every one the answer rests on).
"""
from __future__ import annotations

from dataclasses import field
from pathlib import Path

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.analysis.replay import changes as ch, engine, fixes, inputs
from tracekit.errors import TraceError
from tracekit.model import predictions
from tracekit.records import record

#: critical-path entries kept in the object (the longest first when there are more)
PATH_ROWS = 400


@record(frozen=True)
class Request:
    """What a what-if asks for: another chip or topology, another batch, fixes played, ops made faster."""

    chip: str | None = None  #: a chip name (``tracekit chips``) or a CPU machine record (``*.machine.json``)
    topology: str | None = None
    keep_efficiency: bool = False
    batch_scale: float | None = None
    batch_size: int | None = None
    fix: tuple = ()
    speedup: tuple = ()  #: ((op or module/op, K), ...): those ops K times faster
    max_nodes: int = inputs.MAX_NODES

    def asked(self) -> dict:
        out = {}
        if self.chip:
            out["chip"] = self.chip
            out["efficiency"] = "measured, carried over" if self.keep_efficiency else "every op at its roofline"
        if self.topology:
            out["topology"] = self.topology
            out.setdefault("efficiency", "measured, carried over")
        if self.batch_scale:
            out["batch_scale"] = self.batch_scale
        if self.fix:
            out["fix"] = list(self.fix)
        if self.speedup:
            out["speedup"] = [f"{o}={k:g}" for o, k in self.speedup]
        return out


@record
class Setup:
    """What every replay of one trace shares (built once: :func:`setup`)."""

    tr: object
    ops: pd.DataFrame  #: the replayed op rows (graph nodes' ``rows`` are positions in it), roofline joined
    joined: engine.Joined
    steps_how: str
    measured: engine.Result
    assumptions: list = field(default_factory=list)
    full: pd.DataFrame | None = None  #: every op row (the rules' frames read the whole timeline)
    rows: np.ndarray | None = None  #: the replayed rows' positions in ``full``

    def take(self, frame: pd.DataFrame) -> pd.DataFrame:
        """The replayed rows of a frame row-aligned with ``full`` (the ops priced on another chip)."""
        return frame.take(self.rows).reset_index(drop=True)


def setup(tr, ops: pd.DataFrame | None = None, max_nodes: int = inputs.MAX_NODES, topology: str | None = None,
          model=None, columns: tuple | None = None):
    """The measured replay of ``tr`` (``ops``: its ops with the roofline columns, when the caller has them;
    ``model``: the collective model they were priced on; ``columns``: the only columns of the replayed rows the
    caller reads, None: all)."""
    from tracekit.model import roofline
    if ops is None:
        ops = roofline.join(tr, topology=topology)
    nums, how = inputs.choose_steps(tr.steps, len(ops), max_nodes)
    if not nums:
        raise TraceError(f"nothing to replay: {how}", hint="a replay needs at least one step with a next start "
                         "(a run of the step program followed by another)")
    gs = inputs.graphs(tr, ops, nums, topology=topology, model=model)
    rows = np.concatenate([g.rows for g in gs]) if gs else np.zeros(0, np.int64)
    at = 0
    for g in gs:  # from here on, rows of the replayed part only
        g.rows = np.arange(at, at + len(g.rows), dtype=np.int64)
        at += len(g.rows)
    j = engine.join(gs)
    if not len(j.start):
        raise TraceError("nothing to replay: the chosen steps hold no op executions")
    taken = ops if columns is None else ops[[c for c in (*columns, *predictions.COLUMNS) if c in ops.columns]]
    taken = predictions.materialized(taken.take(rows).reset_index(drop=True), columns or predictions.PER_IDENTITY)
    return Setup(tr, taken, j, how, engine.evaluate(j),
                 _base_assumptions(tr, j, how), ops, rows)


def _base_assumptions(tr, j: engine.Joined, how: str) -> list:
    kinds = sorted({str(s) for s in tr.ops["source"].unique()}) if len(tr.ops) else []
    out = [f"steps replayed: {how}; a step is a device run of the step program, start to start",
           "each op starts after the latest of its predecessors (the op before it on its stream, the ops producing "
           "its operands) plus the gap measured before it; gaps (launch, host waits, idle) are kept as measured",
           "a device's next run starts as long after its last op as measured (the host's dispatch is unchanged)"]
    if "cpu_thunk" in kinds:
        out.append("XLA:CPU: a device's thunks form one stream (any pool thread may run them); ops that overlapped "
                   "when measured stay independent unless their operands say otherwise; devices share the cores, "
                   "which the replay does not model")
    if any(len(m) for m in j.g_members):
        out.append(f"{len(j.g_members)} collective instance(s) wait for their last participant, then take the "
                   "measured time from the last arrival to the first end (or the new price); each participant's "
                   "measured lag behind that first end is kept")
    est: dict = {}
    for g in j.graphs:
        for k, v in g.estimated.items():
            est[k] = est.get(k, 0) + v
    if est:
        out.append(f"{sum(est.values())} async window(s) whose -done did not wait end at an estimate (the trace "
                   "only bounds them by the -done's start): " + ", ".join(f"{v} by {k}" for k, v in sorted(est.items())))
    if len(j.graphs) > 1:
        al = j.alignment_ps
        out.append("host clocks aligned on shared collectives' ends" + (f" (residual {al / 1e6:.1f} us)" if al
                                                                         is not None else " (none shared: unaligned)"))
    return out


def _record(tr, chip: str):
    """For ``--chip`` a CPU machine record (``*.machine.json``): (the record's chip on every device, the measured
    side's chips as detected, unraised: calibration against calibration, a note); None for a table part."""
    from tracekit.model import machine, roofline
    p = Path(chip)
    if not chip.endswith(machine.SUFFIX):
        return None
    if not p.is_file():
        raise TraceError("machine record not found", chip)
    fake = p.with_name(p.name[: -len(machine.SUFFIX)] + ".xplane.pb")
    c, note = machine.cpu_chip_for(str(fake))
    if c is None:
        raise TraceError("not a machine record", chip, "give a `*.machine.json` written by `tracekit capture`")
    base = roofline.base_chips(tr)
    return {k: c for k in base}, base, f"CPU machine record {p} ({note})"


def _rule(selector: str, rules: list):
    s = selector.strip().lower()
    return next((r for r in rules if r.id.lower() == s or r.name.lower() == s), None)


def row_times(s: Setup, req: Request) -> tuple[ch.RowTimes, list, pd.DataFrame]:
    """(row times, assumptions, the ops priced on the target chip) for ``req``."""
    from tracekit.analysis.replay import batch
    from tracekit.model import roofline
    tr, notes = s.tr, []
    ops_a, ops_x, chips_a = s.ops, None, roofline.device_chips(tr)
    chips_x = None
    if req.chip or req.topology:
        rec = _record(tr, req.chip) if req.chip else None
        if rec:
            x_chips, chips_a, note = rec
            ops_a = s.take(roofline.joined(tr, dchips=chips_a).ops)
            notes.append(f"--chip {note}; the measured side priced with the record beside the trace (calibration "
                         "against calibration, neither raised to the trace's demonstrated rates)")
            jx = roofline.joined(tr, topology=req.topology, dchips=x_chips)
        else:
            jx = roofline.joined(tr, req.chip, req.topology)
        ops_x, chips_x = s.take(jx.ops), jx.chips
        notes.append("ops re-priced on " + ", ".join(sorted({c.name for c in chips_x.values()})) +
                     (f" over topology {req.topology}" if req.topology else "") + " through the roofline; " +
                     ("each op keeps its measured efficiency (time x roofline on B / roofline measured)"
                      if req.keep_efficiency or not req.chip else "each op at its roofline on it (a lower bound; --keep-efficiency "
                                                  "carries the measured efficiency over)"))
    ff = bf = None
    if req.batch_scale:
        from tracekit.ingest.steps import main_program
        bsize, how = batch.batch_size(tr.hlo_modules, main_program(tr.modules), req.batch_size)
        if bsize is None:
            raise TraceError(f"--batch-scale: {how}")
        ff, bf = batch.row_factors(s.ops, batch.scale_factors(tr.hlo_modules, req.batch_scale, bsize))
        share = float(np.average(ff > 1, weights=column_numpy(s.ops, "duration_ps", float))) if len(ff) else 0.0
        notes.append(f"--batch-scale {req.batch_scale:g}: batch size {bsize} ({how}); an op whose operand or result "
                     f"shapes hold that dimension does {req.batch_scale:g}x the FLOPs and moves {req.batch_scale:g}x "
                     f"the bytes of those arrays ({share:.0%} of op time); the others (weight-shaped) are kept; a "
                     "batch-proportional op keeps its measured efficiency")
    if ops_x is not None or ff is not None:
        rt = ch.price(ops_a, ops_x, chips_a, chips_x, req.keep_efficiency or not req.chip, ff, bf)
        unknown = rt.notes.pop() if rt.notes else 0
        if unknown:
            notes.append(f"{unknown} op execution(s) without a known roofline keep their measured time"
                         + (" (x the batch factor)" if ff is not None else ""))
    else:
        rt = ch.RowTimes.unchanged(len(s.ops), ch.bounds(*(s.ops[c].to_numpy(float) for c in (
            "compute_ps", "memory_ps", "network_ps")), column_numpy(s.ops, "is_host_transfer", bool)))
    for name, k in req.speedup:
        mask = fixes.op_rows(s.ops, [name])
        if not mask.any():
            raise TraceError(f"--speedup {name}={k:g}: no op of that name", hint="see `tracekit ops` for the names")
        rt.ratio = np.where(mask, rt.ratio / k, rt.ratio)
        rt.target = np.where(mask, rt.target / k, rt.target)
        notes.append(f"--speedup {name}={k:g}: its {int(mask.sum())} execution(s) {k:g}x faster")
    if req.fix:
        notes += apply_fixes(s, rt, req.fix, ops_x if ops_x is not None else s.ops, chips_x or chips_a)
    return rt, notes, ops_x if ops_x is not None else s.ops


def apply_fixes(s: Setup, rt: ch.RowTimes, selectors, priced: pd.DataFrame, chips: dict) -> list:
    """Lay every ``--fix`` selector on ``rt``; the assumptions they add."""
    from tracekit.analysis import rule_checks, rule_model, rules as rules_mod
    all_rules = rule_model.load_rules()
    own = ch.own_link(priced, chips)
    notes, frames = [], None
    for sel in selectors:
        rule = _rule(sel, all_rules)
        if rule is None:
            mask = fixes.op_rows(s.ops, [sel])
            if not mask.any():
                raise TraceError(f"--fix {sel!r}: no finding (rule id or name) and no op of that name",
                                 hint="name a rule (`tracekit rules`) or an op (`tracekit ops`), e.g. fusion.3 or "
                                      "jit_step/fusion.3")
            n = fixes.apply(rt, priced, mask, "roofline", own)
            notes.append(f"--fix {sel}: its {n} execution(s) at their roofline (never slower than measured)")
            continue
        act = fixes.action(rule)
        if act is None:
            notes.append(f"--fix {sel}: {rule.id} {rule.name} reads frame {rule.frame!r}, which the replay cannot "
                         "play: ignored")
            continue
        if frames is None:
            frames = rule_checks.frames_for_rules(s.full, s.tr.steps, s.tr.host_events, modules=s.tr.modules)
        if rule.frame not in frames or not len(frames[rule.frame]):
            notes.append(f"--fix {sel}: no {rule.frame!r} rows in this trace: nothing to fix")
            continue
        ev = rules_mod.evidence_rows(rule, frames, rule.resolve({}))
        mask = fixes.evidence_rows(s.ops, rule.frame, ev)
        n = fixes.apply(rt, priced, mask, act, own, fixes.gap_ends(rule.frame, ev))
        what = {"overlap": "overlapped (perfectly hidden: they hold nothing up, their data is not waited for)",
                "gaps": "the gaps before them removed", "roofline": "at their roofline"}[act]
        notes.append(f"--fix {rule.id} ({rule.name}): {len(ev)} evidence row(s), {n} op execution(s) {what}")
    return notes


def whatif(tr, req: Request, s: Setup | None = None) -> dict:
    """The ``whatif`` object for ``req`` (module docstring); ``s``: a :func:`setup` of ``tr`` to reuse."""
    from tracekit.analysis.replay import result
    s = s or setup(tr, max_nodes=req.max_nodes)
    j = s.joined
    notes = list(s.assumptions)
    asked = req.asked()
    if asked:
        rt, more, _ = row_times(s, req)
        notes += more
        kw = ch.node_times(j, rt)
        r = engine.evaluate(j, **kw)
    else:
        rt, kw, r = None, None, s.measured
        notes.append("no change asked: the trace replayed as measured")
    ds = result.device_steps(j, r).assign(replayed_ps=result.device_steps(j, s.measured)["predicted_ps"])
    measured, mkey = result.step_statistic(ds, "measured_ps")
    replayed, _ = result.step_statistic(ds, "replayed_ps")
    predicted, pkey = result.step_statistic(ds, "predicted_ps")
    h, slot = result.median_slot(ds, pkey, "predicted_ps")
    path, summary = result.critical_path(j, r, h, slot, s.ops, PATH_ROWS)
    work0 = np.concatenate([g.work for g in j.graphs])
    bounds = result.bound_changes(j, rt, work0, kw["work"], s.ops) if rt is not None else []
    if bounds and (req.keep_efficiency or not req.chip):
        notes.append(f"{len(bounds)} op(s) change bound and carry their measured efficiency over to the new bound "
                     "(a guess: an op's efficiency against one roofline term says little about another)")
    return {"measured_step_ps": int(round(measured)), "predicted_step_ps": int(round(predicted)),
            "replayed_step_ps": int(round(replayed)),
            "speedup": measured / predicted if predicted > 0 else None,
            "slowest_device": {"measured": "/".join(mkey) if len(j.graphs) > 1 else mkey[1],
                               "predicted": "/".join(pkey) if len(j.graphs) > 1 else pkey[1]},
            "steps_replayed": int(ds["step"].nunique()), "devices": int(ds.groupby(["host", "device"]).ngroups),
            "op_executions": int(len(j.start)), "reproduction_errors": int(s.measured.clipped),
            "changes": asked, "critical_path": path, "critical_path_summary": summary,
            "critical_path_step": int(j.graphs[h].steps_step[slot]), "bound_changes": bounds,
            "assumptions": notes}
