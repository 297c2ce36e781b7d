"""Step-time statistics: which steps have a known step time (:func:`closed_steps`) and their per-device statistics
(:func:`step_stats`). A step is a run of the step program on the device, start to start
(:mod:`tracekit.ingest.steps`); a device's last run has no next start (``open_end``) and no step time."""
from __future__ import annotations

import pandas as pd

from tracekit.analysis.intervals import KEYS


def closed_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The rows whose step time is known: a device's ``open_end`` step (its last run of the step program, which
    has no next start) is left out where the device has other steps."""
    if "open_end" not in steps.columns or not steps["open_end"].any():
        return steps
    dev = steps["host"].astype(str) + "\0" + steps["device"].astype(str)
    closed = ~steps["open_end"].to_numpy(bool)
    has_closed = dev.map(dev[closed].value_counts()).fillna(0).to_numpy() > 0
    return steps[closed | ~has_closed]


def step_stats(steps: pd.DataFrame, column: str = "duration_ps") -> pd.DataFrame:
    """Per device step-time statistics of ``column`` (``duration_ps`` of the steps frame or ``step_ps`` of
    :func:`step_breakdown`) over its :func:`closed_steps`: steps, mean_ps, median_ps, p90_ps (linear
    interpolation), min_ps, max_ps, std_ps (population, ddof=0)."""
    steps = closed_steps(steps)
    g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str)).groupby(KEYS)[column]
    return g.agg(steps="size", mean_ps="mean", median_ps="median", p90_ps=lambda s: s.quantile(0.9),
                 min_ps="min", max_ps="max", std_ps=lambda s: s.std(ddof=0)).reset_index()
