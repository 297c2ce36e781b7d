"""Section ``steps``: per device step statistics (``step_stats[]``), per device step totals (``device_steps[]``)
and the first step rows (``steps[]``). Each host reduces its own steps to per-device rows on its worker (a
device's statistics are its own): what reaches the driver is O(devices) per host plus the first rows, and the
:class:`tracekit.analysis.stepstats.StepSummary` the overview reads."""
from __future__ import annotations


import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.records import record

NAME = "steps"
STEP_ROWS = 512  #: per-step rows kept in the envelope; ``device_steps`` aggregates all of them


@record(frozen=True)
class Part:
    """One host's part of the steps section."""

    first: pd.DataFrame  #: the first :data:`STEP_ROWS` rows in (step, host, device) order
    first_step: np.ndarray  #: their step numbers
    device_steps: list  #: :func:`device_steps` rows, as the report holds them
    step_stats: list  #: :func:`tracekit.analysis.stepstats.step_stats` rows of ``step_ps``
    summary: object  #: :class:`tracekit.analysis.stepstats.StepSummary`
    source: tuple  #: where the steps came from


def summarize(hv) -> Part:
    from tracekit.analysis import stepstats
    from tracekit.report.envelope import records
    st = hv.frames.steps
    stats = records(stepstats.step_stats(st, column="step_ps")) if len(st) else []
    first = first_steps(st, STEP_ROWS) if len(st) else st
    return Part(first, column_numpy(first, "step", np.int64) if len(first) else np.zeros(0, np.int64),
                records(device_steps(st)), stats, hv.step_summary, hv.step_source)


def reduce(parts: list, ctx) -> dict:
    """The rows of every host: per-device rows in (host, device) order, the first step rows in (step, host,
    device) order; a level of exposed collective time one host has none of is 0 there."""
    from tracekit.analysis import stepstats
    from tracekit.report.envelope import rows_of
    ctx.step_summary = stepstats.merge([p.summary for p in parts])
    ctx.step_source = tuple(sorted({x for p in parts for x in p.source}))
    if len(parts) == 1:
        (p,) = parts
        return {"step_stats": p.step_stats, "device_steps": p.device_steps, "steps": rows_of([p.first])}
    key = lambda r: (r["host"], r["device"])  # noqa: E731
    step = np.concatenate([p.first_step for p in parts])
    host = np.concatenate([np.full(len(p.first), i) for i, p in enumerate(parts)])
    pos = np.concatenate([np.arange(len(p.first)) for p in parts])
    take = np.lexsort((pos, host, step))[:STEP_ROWS]
    first = rows_of([p.first for p in parts], host[take], pos[take])
    return {"step_stats": sorted((r for p in parts for r in p.step_stats), key=key),
            "device_steps": _levels(sorted((r for p in parts for r in p.device_steps), key=key)),
            "steps": _levels(first)}


def _levels(rows: list) -> list:
    """Exposed collective time per level (``collective_exposed_<level>_ps``) 0 where a host has no such level."""
    lv = {k for r in rows for k in r if k.startswith("collective_exposed_") and k != "collective_exposed_ps"}
    return [{**{k: 0 for k in lv}, **r} for r in rows] if lv else rows


def first_steps(steps: pd.DataFrame, k: int) -> pd.DataFrame:
    """The first ``k`` rows in (step, host, device) order (stable), sorting only the rows that can be among them."""
    if len(steps) > 4 * k:
        st = column_numpy(steps, "step")
        kth = np.partition(st, k - 1)[k - 1]  # the k-th smallest step number: later steps cannot be in the head
        steps = steps[st <= kth]
    return steps.sort_values(["step", "host", "device"], kind="stable").head(k)


def device_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """Per device, every step summed: steps, step time mean/median/max (of the steps with a step time: not a
    device's ``open_end`` last run), and the breakdown totals (every step)."""
    from tracekit.analysis.stepstats import closed_steps, exact_sums
    cols = ["compute_ps", "collective_exposed_ps", "collective_hidden_ps", "wait_ps", "idle_ps",
            *(c for c in steps.columns if c.startswith("collective_exposed_") and c != "collective_exposed_ps"),
            "compute_bound_ps", "memory_bound_ps", "compute_other_ps", "offload_wait_ps", "async_wait_ps",
            "host_idle_ps", "launch_idle_ps", "other_idle_ps"]
    if not len(steps):
        return pd.DataFrame(columns=["host", "device", "steps", "step_ps_mean", "step_ps_median", "step_ps_max",
                                     "step_ps_sum", *cols])
    present = [c for c in cols if c in steps.columns]
    closed = closed_steps(steps)
    if exact_sums(closed["step_ps"]) and all(steps[c].dtype.kind in "iu" for c in present):  # (integer ps)
        return _device_sums(steps, closed, present)
    g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str)).groupby(
        ["host", "device"], sort=True)
    out = g["step_ps"].agg(steps="size", step_ps_sum="sum")
    times = closed.assign(host=closed["host"].astype(str), device=closed["device"].astype(str)).groupby(
        ["host", "device"], sort=True)["step_ps"].agg(step_ps_mean="mean", step_ps_median="median", step_ps_max="max")
    out = out.join(times)[["steps", "step_ps_mean", "step_ps_median", "step_ps_max", "step_ps_sum"]]
    return out.join(g[present].sum()).reset_index()


def _device_sums(steps: pd.DataFrame, closed: pd.DataFrame, cols: list) -> pd.DataFrame:
    """:func:`device_steps` of integer columns, a device's rows at a time (sums exact; the step time's mean of its
    closed steps exact: :func:`tracekit.analysis.stepstats.exact_sums`), instead of two groupbys and two joins."""
    from tracekit.analysis.stepstats import device_rows
    step = column_numpy(steps, "step_ps", np.int64)
    sums = {c: steps[c].to_numpy(np.int64) for c in cols}
    done = column_numpy(closed, "step_ps", np.int64)
    timed = dict(device_rows(closed))  # (every device has rows there: closed_steps keeps a device's only run)
    out: dict = {c: [] for c in ("host", "device", "steps", "step_ps_mean", "step_ps_median", "step_ps_max",
                                 "step_ps_sum", *cols)}
    for (h, d), rows in device_rows(steps):
        t = done[timed[(h, d)]]
        f = t.astype(np.float64)
        for c, v in (("host", h), ("device", d), ("steps", len(rows)), ("step_ps_mean", f.sum() / len(f)),
                     ("step_ps_median", np.median(f)), ("step_ps_max", t.max()), ("step_ps_sum", step[rows].sum())):
            out[c].append(v)
        for c in cols:
            out[c].append(sums[c][rows].sum())
    types = {"steps": np.int64, "step_ps_mean": np.float64, "step_ps_median": np.float64, "step_ps_max": np.int64}
    return pd.DataFrame({c: np.array(v, types.get(c, np.int64)) if c not in ("host", "device") else v
                         for c, v in out.items()})
