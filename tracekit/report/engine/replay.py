"""Section ``replay``: the findings' savings replayed along the critical path (issue 36) — ``summary.savings_basis``,
``summary.replay_savings`` and each replayed finding's ``replay_savings_ps``.

Per host (:func:`tracekit.analysis.replay.savings.host_part`): the host's steps replayed as measured, with each of
the host's own replayable findings fixed alone, and with all of them at once; only each device's median step per
scenario leaves the worker. Once (:func:`tracekit.analysis.replay.savings.merge`): the slowest device of the run per
scenario, for the report's findings. One host: exactly what one process replays. A pod: the same code, each host
fixing the findings its own evidence makes (see the savings module); ``Options.replay`` off: the claims only.
"""
from __future__ import annotations

NAME = "replay"


def summarize(hv):
    """:class:`tracekit.analysis.replay.savings.HostReplay` of the host (None when ``Options.replay`` is off)."""
    if not hv.options.replay:
        return None
    from tracekit.analysis import hostrules
    from tracekit.analysis.replay import savings
    return savings.host_part(hv, hostrules.rule_items(hv.options))


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis.replay import savings
    from tracekit.report.envelope import clean
    if any(p is None for p in parts):
        rep = {"basis": "claims", "per_finding": {}, "not_replayed": [f.rule_id for f in ctx.findings],
               "note": "not replayed (Options.replay off: --no-replay)"}
    else:
        ov = getattr(ctx, "overview", None)
        floor = (getattr(ov, "roofline", None) or {}).get("possible_step_ps")
        rep = savings.merge(parts, ctx.findings, [r for r, _ in ctx.rules], floor_ps=floor)
    ctx.headline["replay"] = rep
    per = rep.get("per_finding", {})
    found = ctx.shared.get("findings", [])
    return {"findings": [clean({**d, "replay_savings_ps": per[d["rule_id"]]}) if d.get("rule_id") in per else d
                         for d in found]}
