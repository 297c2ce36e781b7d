"""Section ``steps``: per device step statistics (``step_stats[]``), per device step totals (``device_steps[]``)
and the first step rows (``steps[]``). Each host reduces its own steps to per-device rows on its worker (a
device's statistics are its own): what reaches the driver is O(devices) per host plus the first rows, and the
:class:`tracekit.analysis.stepstats.StepSummary` the overview reads."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

NAME = "steps"
STEP_ROWS = 512  #: per-step rows kept in the envelope; ``device_steps`` aggregates all of them


@dataclass(frozen=True)
class Part:
    first: pd.DataFrame  #: the first :data:`STEP_ROWS` rows in (step, host, device) order
    device_steps: pd.DataFrame  #: :func:`device_steps`
    step_stats: pd.DataFrame  #: :func:`tracekit.analysis.stepstats.step_stats` of ``step_ps``
    summary: object  #: :class:`tracekit.analysis.stepstats.StepSummary`
    source: tuple  #: where the steps came from


def summarize(hv) -> Part:
    from tracekit.analysis import stepstats
    st = hv.frames.steps
    stats = stepstats.step_stats(st, column="step_ps") if len(st) else pd.DataFrame()
    return Part(first_steps(st, STEP_ROWS) if len(st) else st, device_steps(st), stats, hv.step_summary,
                hv.step_source)


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import stepstats
    from tracekit.columns import concat_frames
    from tracekit.report.envelope import records
    ctx.step_summary = stepstats.merge([p.summary for p in parts])
    ctx.step_source = tuple(sorted({x for p in parts for x in p.source}))
    heads = [p.first for p in parts if len(p.first)]
    first = (heads[0] if len(heads) == 1 else first_steps(_levels(concat_frames(heads)), STEP_ROWS)) if heads else None
    stats = _cat([p.step_stats for p in parts], ["host", "device"])
    dsteps = _cat([p.device_steps for p in parts], ["host", "device"], fill_levels=True)
    return {"step_stats": records(stats), "device_steps": records(dsteps),
            "steps": records(first) if first is not None else []}


def _cat(frames: list, keys: list, fill_levels: bool = False) -> pd.DataFrame:
    """The hosts' per-device rows in (host, device) text order (one host's: as they are)."""
    rows = [f for f in frames if len(f)]
    if len(rows) <= 1:
        return rows[0] if rows else (frames[0] if frames else pd.DataFrame())
    out = pd.concat(rows, ignore_index=True)
    return (_levels(out) if fill_levels else out).sort_values(keys, kind="stable", ignore_index=True)


def _levels(df: pd.DataFrame) -> pd.DataFrame:
    """Exposed collective time per level (``collective_exposed_<level>_ps``) 0 where a host has no such level."""
    lv = [c for c in df.columns if c.startswith("collective_exposed_") and c != "collective_exposed_ps"]
    if lv:
        df[lv] = df[lv].fillna(0).astype("int64")
    return df


def first_steps(steps: pd.DataFrame, k: int) -> pd.DataFrame:
    """The first ``k`` rows in (step, host, device) order (stable), sorting only the rows that can be among them."""
    if len(steps) > 4 * k:
        st = steps["step"].to_numpy()
        kth = np.partition(st, k - 1)[k - 1]  # the k-th smallest step number: later steps cannot be in the head
        steps = steps[st <= kth]
    return steps.sort_values(["step", "host", "device"], kind="stable").head(k)


def device_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Per device, every step summed: steps, step time mean/median/max (of the steps with a step time: not a
    device's ``open_end`` last run), and the breakdown totals (every step)."""
    from tracekit.analysis.stepstats import closed_steps
    cols = ["compute_ps", "collective_exposed_ps", "collective_hidden_ps", "wait_ps", "idle_ps",
            *(c for c in steps.columns if c.startswith("collective_exposed_") and c != "collective_exposed_ps"),
            "compute_bound_ps", "memory_bound_ps", "compute_other_ps", "offload_wait_ps", "async_wait_ps",
            "host_idle_ps", "launch_idle_ps", "other_idle_ps"]
    if not len(steps):
        return pd.DataFrame(columns=["host", "device", "steps", "step_ps_mean", "step_ps_median", "step_ps_max",
                                     "step_ps_sum", *cols])
    g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str)).groupby(
        ["host", "device"], sort=True)
    out = g["step_ps"].agg(steps="size", step_ps_sum="sum")
    closed = closed_steps(steps)
    times = closed.assign(host=closed["host"].astype(str), device=closed["device"].astype(str)).groupby(
        ["host", "device"], sort=True)["step_ps"].agg(step_ps_mean="mean", step_ps_median="median", step_ps_max="max")
    out = out.join(times)[["steps", "step_ps_mean", "step_ps_median", "step_ps_max", "step_ps_sum"]]
    return out.join(g[[c for c in cols if c in steps.columns]].sum()).reset_index()
