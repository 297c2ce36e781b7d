"""Findings' savings from the replay: each finding fixed alone, and all of them together, along the critical path
(instead of adding up, or unioning, what each claims on device time: an op off the critical path wins nothing).

A finding is replayable when its rule's fix is one the replay can play (:func:`tracekit.analysis.replay.fixes.action`:
its ops at their roofline, its collectives overlapped, its gaps removed). Its saving is the measured step (the
median of the slowest device over the replayed steps, start to start) minus the step predicted with that fix; the
findings together: the same with every replayable fix at once. Findings the replay cannot play (memory, host,
straggler) keep their claims and are named.
"""
from __future__ import annotations

import numpy as np

from tracekit.analysis.replay import changes as ch, engine, fixes, result

#: the analysis replays at most this many op executions (the engine's pass is a Python loop), and at most
#: :data:`MAX_FINDINGS` findings one by one (the largest claims first)
MAX_NODES = 50_000
MAX_FINDINGS = 8


def _step(j, r) -> float:
    return result.step_statistic(result.device_steps(j, r), "predicted_ps")[0]


def replay_savings(tr, ops, findings: list, frames, rule_list: list, params: dict) -> dict:
    """The headline's ``replay`` part: ``basis`` ('replay' | 'claims'), ``step_ps`` (measured), ``all_fixed_step_ps``,
    ``savings_ps`` (all together, per step), ``per_finding`` ({rule id: per-step saving}), ``not_replayed`` (rule
    ids), ``steps_replayed``, ``note``. Never raises: a trace the replay cannot take gives basis 'claims'."""
    out = {"basis": "claims", "per_finding": {}, "not_replayed": []}
    by_id = {r.id: r for r in rule_list}
    playable = [(f, by_id[f.rule_id]) for f in findings if f.rule_id in by_id and fixes.action(by_id[f.rule_id])]
    out["not_replayed"] = [f.rule_id for f in findings if (f, by_id.get(f.rule_id)) not in playable]
    if not playable:
        out["note"] = "no finding has a fix the replay can play"
        return out
    try:
        return _replayed(tr, ops, playable, frames, params, out)
    except Exception as e:  # noqa: BLE001 — the analysis goes on with the claims
        return {"basis": "claims", "per_finding": {}, "not_replayed": [f.rule_id for f in findings],
                "note": f"no replay: {type(e).__name__}: {e}"}


def _replayed(tr, ops, playable: list, frames, params: dict, out: dict) -> dict:
    from tracekit.analysis import rules as rules_mod
    from tracekit.analysis.replay import whatif
    s = whatif.setup(tr, ops, MAX_NODES)
    j, ops = s.joined, s.ops  # (the replayed rows only, from here on)
    base = _step(j, s.measured)
    from tracekit.model import roofline
    own = ch.own_link(ops, roofline.device_chips(tr))
    total = ch.RowTimes.unchanged(len(ops))
    per = {}
    for k, (f, rule) in enumerate(playable):
        if k >= MAX_FINDINGS:
            out["not_replayed"].append(f.rule_id)
            continue
        try:
            ev = rules_mod.evidence_rows(rule, frames, params.get(rule.id) or rule.resolve({}))
        except Exception:  # noqa: BLE001
            out["not_replayed"].append(f.rule_id)
            continue
        mask = fixes.evidence_rows(ops, rule.frame, ev)
        one = ch.RowTimes.unchanged(len(ops))
        act = fixes.action(rule)
        ends = fixes.gap_ends(rule.frame, ev)
        fixes.apply(one, ops, mask, act, own, ends)
        fixes.apply(total, ops, mask, act, own, ends)
        per[f.rule_id] = max(int(round(base - _step(j, engine.evaluate(j, **ch.node_times(j, one))))), 0)
    after = _step(j, engine.evaluate(j, **ch.node_times(j, total)))
    out.update({"basis": "replay", "step_ps": int(round(base)), "all_fixed_step_ps": int(round(after)),
                "savings_ps": max(int(round(base - after)), 0), "per_finding": per,
                "steps_replayed": int(len(np.unique(np.concatenate([g.steps_step for g in j.graphs])))),
                "note": f"per step, along the critical path ({s.steps_how})"})
    return out
