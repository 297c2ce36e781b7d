"""Findings' savings from the replay: each finding fixed alone, and all of them together, along the critical path
(instead of adding up, or unioning, what each claims on device time: an op off the critical path wins nothing).

A finding is replayable when its rule's fix is one the replay can play (:func:`tracekit.analysis.replay.fixes.action`:
its ops at their roofline, its collectives overlapped, its gaps removed). Its saving is the measured step (the
median step of the slowest device over the replayed steps, start to start) minus the step predicted with that fix;
the findings together: the same with every replayable fix at once. Findings the replay cannot play (memory, host,
straggler) keep their claims and are named.

The replay needs a host's every op execution, so it runs where the host is (the engine's map,
:func:`host_part`, section :mod:`tracekit.report.engine.replay`); only each device's median step per scenario leaves
the worker, and :func:`merge` takes the slowest device of the run once. Which fixes a host plays is decided on the
host: the fixes of the findings its own evidence makes (the rules evaluated on its frames, their findings as one
process makes them on that host alone; the first :data:`MAX_FINDINGS` replayable ones). On one host that is exactly
the report's findings; on a pod, a finding of the pod that is not one of a host's own is not fixed on that host.
"""
from __future__ import annotations


import numpy as np

from tracekit.analysis.replay import changes as ch, engine, fixes
from tracekit.grouping import runs
from tracekit.records import record

#: the analysis replays at most this many op executions per host (its graph is built and walked node by node),
#: and at most :data:`MAX_FINDINGS` findings one by one (the largest claims first)
MAX_NODES = 50_000
MAX_FINDINGS = 8
#: the columns of the replayed rows the fixes read (own link times, evidence rows, roofline caps, collectives)
COLUMNS = ("host", "device", "module", "op", "opcode", "category", "kernel", "start_ps", "duration_ps", "step",
           "is_async", "is_host_transfer", "net_bytes", "roofline_ps")


@record(frozen=True)
class HostReplay:
    """One host's replays: per device, the median replayed step of each scenario (O(devices x findings))."""

    host: str
    devices: tuple = ()  #: the host's replayed devices
    base: np.ndarray | None = None  #: per device: the median step, replayed as measured (ps)
    alone: tuple = ()  #: (rule id, per-device medians with that finding's fix alone) in the host's finding order
    together: np.ndarray | None = None  #: per device: the median with every fix in ``alone`` at once
    steps: np.ndarray | None = None  #: the step numbers replayed
    how: str = ""  #: how the steps were chosen
    error: str | None = None  #: why this host was not replayed (a replay it could not take)
    replayed: bool = False  #: whether it was replayed at all (a one-host trace without a fix to play is not)


def _medians(j, r) -> tuple[tuple, np.ndarray]:
    """(devices, the median predicted step of each), devices in (host, device) text order: what pandas' groupby
    median of :func:`tracekit.analysis.replay.result.device_steps` gives (NaN steps left out), read from the graphs'
    arrays (a scenario's medians are taken once per finding replayed)."""
    by: dict = {}
    for h, g in enumerate(j.graphs):
        pred = np.asarray(r.step_ps[h], np.float64)
        devs = [str(d) for d in g.devices]
        for d, rows in runs(np.asarray(g.steps_dev)):
            by.setdefault((str(g.host), devs[d]), []).append(pred[rows])
    keys = sorted(by)
    med = np.empty(len(keys))
    for i, k in enumerate(keys):
        v = np.concatenate(by[k])
        v = v[~np.isnan(v)]
        med[i] = np.median(v) if len(v) else np.nan
    return tuple(d for _, d in keys), med


def _own_findings(hv, items: list) -> list:
    """[(rule, params, evidence rows)] of the replayable rules that make findings on this host alone, in the order
    :func:`tracekit.analysis.evidence.findings` puts them."""
    from tracekit.analysis import evidence, rules
    k = hv.options.max_evidence
    span, profiled = evidence.spans(hv.frames.devices)
    rows, summaries = {}, []
    kept = hv.shared.pop("evidence", None)  # (the findings section's, when it ran before on this host)
    for rule, params in items:
        if fixes.action(rule) is None or rules.applicable(rule, hv.frames):
            continue
        if kept is not None:
            ev, summary = kept.get(rule.id, (None, None))
        else:
            try:
                ev, summary = rules.evidence_rows(rule, hv.frames, params), None
            except (KeyError, AttributeError, TypeError, ValueError, ArithmeticError):
                continue  # (the findings section names the failing rule)
        if ev is not None and len(ev):
            rows[rule.id] = (rule, params, ev)
            summaries.append((rule, params, summary if summary is not None else evidence.summarize(rule, ev, k)))
    return [rows[f.rule_id] for f in evidence.findings(summaries, span, profiled, k)]


def host_part(hv, items: list) -> HostReplay:
    """The replays of one host (a :class:`tracekit.analysis.hostview.HostView`); ``items``: [(rule, resolved
    params)] of every rule. Never raises: a host the replay cannot take says why in ``error``."""
    own = _own_findings(hv, items)
    if not own and len(hv.hosts) <= 1:
        return HostReplay(hv.host)  # (nothing to fix: a pod's host still gives its measured replay)
    try:
        return _replayed(hv, own[:MAX_FINDINGS])
    except Exception as e:  # noqa: BLE001 — the analysis goes on with the claims
        return HostReplay(hv.host, error=f"{type(e).__name__}: {e}", replayed=True)


def _replayed(hv, own: list) -> HostReplay:
    from tracekit.analysis.replay import whatif
    s = whatif.setup(hv.trace, hv.ops, MAX_NODES, model=hv.joined.model, columns=COLUMNS)
    j, ops = s.joined, s.ops  # (the replayed rows only, from here on)
    devices, base = _medians(j, s.measured)
    link = ch.own_link(ops, hv.chips)
    total = ch.RowTimes.unchanged(len(ops))
    alone = []
    for rule, _, ev in own:
        mask = fixes.evidence_rows(ops, rule.frame, ev)
        one = ch.RowTimes.unchanged(len(ops))
        act, ends = fixes.action(rule), fixes.gap_ends(rule.frame, ev)
        fixes.apply(one, ops, mask, act, link, ends)
        fixes.apply(total, ops, mask, act, link, ends)
        alone.append((rule.id, _medians(j, engine.evaluate(j, **ch.node_times(j, one)))[1]))
    together = _medians(j, engine.evaluate(j, **ch.node_times(j, total)))[1] if alone else base
    steps = np.unique(np.concatenate([g.steps_step for g in j.graphs])).astype(np.int64)
    return HostReplay(hv.host, devices, base, tuple(alone), together, steps, s.steps_how, replayed=True)


def merge(parts: list, findings: list, rule_list: list, floor_ps: float | None = None) -> dict:
    """The summary's ``replay``: ``basis`` ('replay' | 'claims'), ``step_ps`` (the replayed measured step),
    ``all_fixed_step_ps``, ``savings_ps`` (all together, per step), ``per_finding`` ({rule id: per-step saving}),
    ``not_replayed`` (rule ids), ``steps_replayed``, ``note``. ``parts``: every host's :class:`HostReplay`, in host
    order; ``findings``: the report's; ``rule_list``: every rule; ``floor_ps``: the roofline's possible step (the
    overview's lower bound, which counts what the replay does not model: virtual CPU devices sharing the host's
    cores): a replayed step below it is held at it, and the note says so."""
    by_id = {r.id: r for r in rule_list}
    playable = [f.rule_id for f in findings if f.rule_id in by_id and fixes.action(by_id[f.rule_id])]
    out = {"basis": "claims", "per_finding": {}, "not_replayed": [f.rule_id for f in findings
                                                                  if f.rule_id not in playable]}
    if not playable:
        out["note"] = "no finding has a fix the replay can play"
        return out
    bad = [p for p in parts if p.error or not p.replayed]
    if bad:
        why = bad[0].error or "no replay"
        return {"basis": "claims", "per_finding": {}, "not_replayed": [f.rule_id for f in findings],
                "note": f"no replay: {why}" if len(parts) == 1 else f"no replay of host {bad[0].host}: {why}"}

    def slowest(scenario) -> float:
        return float(max(np.max(scenario(p)) if len(p.devices) else -np.inf for p in parts))

    base = slowest(lambda p: p.base)
    floor = float(floor_ps) if floor_ps is not None and np.isfinite(floor_ps) and floor_ps > 0 else 0.0
    floor = min(floor, base)  # (a floor above the measured step says nothing about a fix)
    per = {}
    for rid in playable:
        if not any(rid == a for p in parts for a, _ in p.alone):
            out["not_replayed"].append(rid)
            continue
        step = max(slowest(lambda p: dict(p.alone).get(rid, p.base)), floor)
        per[rid] = max(int(round(base - step)), 0)
    raw_after = slowest(lambda p: p.together)
    after = max(raw_after, floor)
    hows = list(dict.fromkeys(p.how for p in parts))
    how = hows[0] if len(hows) == 1 else "; ".join(f"{p.host}: {p.how}" for p in parts)
    out.update({"basis": "replay", "step_ps": int(round(base)), "all_fixed_step_ps": int(round(after)),
                "savings_ps": max(int(round(base - after)), 0), "per_finding": per,
                "steps_replayed": int(len(np.unique(np.concatenate([p.steps for p in parts])))),
                "note": f"per step, along the critical path ({how})"
                + (f"; the replay reached {raw_after / 1e9:.3g} ms, below the roofline's possible step, and is held "
                   f"at it ({after / 1e9:.3g} ms: the lower bound counts what the replay does not model, such as "
                   "devices sharing a host's cores)" if raw_after < floor else "")})
    return out
