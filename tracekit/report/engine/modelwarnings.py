"""Section ``warnings``: which run of the path was taken, what the loader found odd, whether the hosts were
profiled together and ran the same programs (:mod:`tracekit.analysis.hostcheck`, from each host's profile window
and program names), the hosts left out (``warnings[]``), and the roofline's self-check (``model_warnings[]``: ops
faster than their roofline, trace costs the shapes contradict, a CPU trace away from its machine, a ``--chip``
the trace contradicts)."""
from __future__ import annotations

from tracekit.records import record

NAME = "warnings"
#: with ``--chip``, more than this share of op time priced above its roofline says the chip named is wrong
WRONG_CHIP_SHARE = 0.05


@record(frozen=True)
class Part:
    """One host's part of the model warnings section."""

    loader: tuple  #: the loader's warnings for this host
    groups: tuple  #: :func:`tracekit.model.peaks.warning_groups` of its ops
    disagreements: tuple  #: the roofline join's cost disagreements
    profile_span: tuple | None = None  #: (start, stop) wall-clock ns of the host's profile, where the trace says
    programs: frozenset = frozenset()  #: names of the programs with synchronous op executions on the host


def summarize(hv) -> Part:
    from tracekit.analysis import hostcheck
    from tracekit.model import peaks
    ran = hostcheck.programs_by_host(hv.ops)
    return Part(tuple(hv.trace.warnings), tuple(peaks.warning_groups(hv.ops, hv.chips)), hv.joined.disagreements,
                hv.trace.profile_spans.get(hv.host), frozenset(set().union(*ran.values())) if ran else frozenset())


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import hostcheck
    from tracekit.ingest import badhosts
    from tracekit.ingest.steps import fold_warnings
    from tracekit.model import peaks
    from tracekit.report.envelope import clean
    mw = peaks.finish_warnings([g for p in parts for g in p.groups], float(ctx.totals.op_time_ps), limit=None)
    seen, dis = set(), []
    for p in parts:  # (one per (module, op, stated source): the first host's)
        for d in p.disagreements:
            if (key := (d["module"], d["op"], d.get("stated_source"))) not in seen:
                seen.add(key)
                dis.append(d)
    mw = dis + mw  # author estimates the shapes contradict
    missing = sorted({h for (h, _), c in ctx.chips.items() if c.family == "cpu" and c.notes.startswith("no record")})
    if missing:  # a CPU trace analyzed away from the machine that recorded it: its peaks are not that machine's
        from tracekit.model.calibrate import processor_name
        mw = [{"message": f"CPU trace of host(s) {', '.join(map(str, missing))} has no record of the machine that "
                          "recorded it (<trace>.machine.json, written by `tracekit capture` and the hook): its CPU "
                          f"peaks are this machine's ({processor_name()}), which may not be the one that ran it"}] + mw
    over = min(1.0, sum(w.get("share_of_op_time") or 0.0 for w in mw))  # (async windows: past 1)
    chip = ctx.options.chip
    if chip and over > WRONG_CHIP_SHARE:  # the user named the part, and the trace runs faster than it can
        mw = [{"message": f"model: {over:.0%} of op time ran faster than its roofline on --chip {chip}: "
                          "the chip is probably wrong (see `tracekit chips`)"}] + mw
    left_out = badhosts.notices(ctx.failures, len(ctx.summaries))
    ctx.shared["left_out"] = tuple(left_out)
    loader = fold_warnings([w for p in parts for w in p.loader])  # (as loading several hosts folds them)
    hosts = hostcheck.warnings({h: p.profile_span for h, p in zip(ctx.hosts, parts) if p.profile_span},
                               {h: set(p.programs) for h, p in zip(ctx.hosts, parts)})
    return {"warnings": list(ctx.notes) + list(loader) + hosts + list(left_out) + [w["message"] for w in mw],
            "model_warnings": clean(list(mw))}
