"""Section ``findings``: every rule's findings, and the headline (what they claim together; the profiled time
above the roofline floor).

Rules on a frame with a row per event (:data:`tracekit.analysis.hostrules.HOST_FRAMES`) ran on each host's worker
(:func:`tracekit.analysis.hostrules.evaluate`); their hosts' evidence summaries merge here. Rules on the pod-wide
frames (op statistics, devices, memory, overview) run here on the merged frames (a one-host run's host evaluated
them on the same rows already: its evidence rows are taken where the frames are equal,
:func:`tracekit.analysis.hostrules.pod_rows`). The claims of every rule with
evidence on a host came as :class:`tracekit.analysis.claims.Atoms`: the findings' union is taken over the rules
that became findings — on one host exactly the union of their claims; on a pod, a rule on a pod-wide frame claims,
on each host, what that host's own evidence for it laid there. A finding whose rule laid no claim on any host
(host events, memory, overview) adds its claimed time."""
from __future__ import annotations

import math

import pandas as pd

NAME = "findings"
#: the finding a trace without device op executions gets: nothing was analyzed, so no gate may pass
NO_DEVICE_OPS = "TK000"


def summarize(hv):
    """:class:`tracekit.analysis.hostrules.HostRules` of the host's frames (the evidence of the rules whose fix the
    replay plays is left in ``hv.shared`` for the replay section, which reads it again)."""
    from tracekit.analysis import hostrules
    from tracekit.analysis.replay import fixes
    kept = hv.shared.setdefault("evidence", {}) if hv.options.replay else None
    return hostrules.evaluate(hv.frames, hostrules.rule_items(hv.options), hv.options.max_evidence,
                              keep=fixes.action, kept=kept, one_host=len(hv.hosts) <= 1)


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import claims, evidence, rules
    from tracekit.analysis.hostrules import HOST_FRAMES, pod_rows
    from tracekit.report.envelope import clean
    k = ctx.options.max_evidence
    nonempty = set().union(*(p.nonempty for p in parts))
    frames = ctx.frames
    pod, same = (parts[0].pod if len(parts) == 1 else None), {}  # (one host: its rows of the pod-wide rules)
    items = []
    for rule, params in ctx.rules:
        need = (rule.frame, *rule.needs)
        if any(n not in nonempty if n in HOST_FRAMES else (frames.get(n) is None or not len(frames[n]))
               for n in need):
            continue
        if rule.frame in HOST_FRAMES:
            ev = evidence.merge([dict(p.evidence).get(rule.id) for p in parts], k)
        else:
            rows = pod_rows(pod, rule, frames, same)
            try:
                rows = rules.evidence_rows(rule, frames, params) if rows is None else rows
            except (KeyError, AttributeError, TypeError, ValueError, ArithmeticError) as e:
                raise rules.failed(rule, e) from None
            ev = evidence.summarize(rule, rows, k) if len(rows) else None
        items.append((rule, params, ev))
    found = evidence.findings(items, ctx.span, ctx.profiled, k)
    if not ctx.totals.op_executions:  # no device op executions at all
        found = [no_device_ops()] + found
    ctx.findings = found
    # the headline: the union of the findings' claims per device, then the claimed time of those that laid none
    fired = {f.rule_id for f in found}
    laid = set().union(*(p.claims.with_claims for p in parts))
    span = {key: int(v) for key, v in ctx.span.items()}
    union = claims.atoms_union([p.claims for p in parts], fired & laid, span)
    union += sum(int(f.claimed_ps) for f in found if f.rule_id not in laid)
    profiled = sum(span.values())
    floors = [p.floor for p in parts if p.floor is not None]
    floor = {key: v for f in floors for key, v in f.items()} if floors else None
    ctx.headline = {"claims_union_ps": int(min(union, profiled) if profiled else union),
                    "above_roofline_floor_ps": claims.above_floor(floor, ctx.devices)}
    claim = {r.id for r, _ in ctx.rules if r.claims_time}  # (memory and utilization rules, and TK000, claim none)
    out = []
    for f in found:
        d = f.to_dict()
        d.setdefault("claims_time", d.get("rule_id") in claim)
        out.append(clean(d))
    ctx.shared["findings"] = out  # (the replay section adds each replayed finding's saving)
    return {"findings": out}


def no_device_ops():
    """An error-severity finding for a trace with no device op executions (any ``--fail-on`` trips on it)."""
    from tracekit.analysis.rule_model import Finding
    return Finding(
        NO_DEVICE_OPS, "no-device-ops", "error",
        "the trace holds no device op executions, so nothing was analyzed: the capture window held no device work, "
        "the profiler recorded only host events, or the device planes are missing",
        "capture while the jitted program runs (after a warm-up step, around a few steps), and check with "
        "`tracekit info` that the device planes and their op lines are there",
        {}, pd.DataFrame(), 0, 0, 0, math.nan, 0.0, ("capture",),
        "An empty capture is not a healthy program: a CI gate must not pass on it.")
