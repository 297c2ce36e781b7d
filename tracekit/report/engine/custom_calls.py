"""Section ``custom_calls``: custom calls (vendor GEMMs, attention kernels, ...) by share of op time, with how
each was priced (:mod:`tracekit.analysis.customcalls`)."""
from __future__ import annotations

NAME = "custom_calls"


def summarize(hv) -> tuple:
    """:func:`tracekit.analysis.customcalls.parts` of the host's ops."""
    from tracekit.analysis import customcalls
    return customcalls.parts(hv.ops, hv.trace.hlo, hv.cost_table)


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import customcalls
    from tracekit.columns import stack
    from tracekit.report.envelope import clean
    rows = [p[0] for p in parts if len(p[0])]
    merged = (rows[0] if len(rows) == 1 else stack(rows)) if rows else parts[0][0]
    return {"custom_calls": clean(customcalls.finish(merged, sum(int(p[1]) for p in parts),
                                                     any(p[2] for p in parts)))}
