"""Section ``overview``: the utilization headline (step time, MFU, bandwidths, the roofline's possible step,
the step breakdown) from each device's parts and the steps' summary."""
from __future__ import annotations

import pandas as pd

NAME = "overview"


def summarize(hv) -> pd.DataFrame:
    """:func:`tracekit.analysis.overview.device_parts` of the host's devices."""
    return hv.overview_parts


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import overview
    from tracekit.report.envelope import clean
    from tracekit.columns import stack
    rows = [p for p in parts if len(p)]
    dev = parts[0] if not rows else rows[0] if len(rows) == 1 else \
        stack(rows).sort_values(["host", "device"], kind="stable", ignore_index=True)
    ov = overview.finish(ctx.step_summary, dev, step_source=", ".join(ctx.step_source),
                         model_flops_per_step=ctx.options.model_flops_per_step,
                         model_flops=ctx.shared.get("model_flops"))  # (--model: the parallelism section's count)
    ctx.overview = ov
    return {"overview": clean(ov.to_dict())}
