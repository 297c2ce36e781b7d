"""Step-time statistics: which steps have a known step time (:func:`closed_steps`) and their per-device statistics
(:func:`step_stats`). A step is a run of the step program on the device, start to start
(:mod:`tracekit.ingest.steps`); a device's last run has no next start (``open_end``) and no step time."""
from __future__ import annotations


import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.analysis.intervals import KEYS
from tracekit.grouping import group_index, rows_by_text
from tracekit.records import record


def closed_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The rows whose step time is known: a device's ``open_end`` step (its last run of the step program, which
    has no next start) is left out where the device has other steps."""
    if "open_end" not in steps.columns or not steps["open_end"].any():
        return steps
    dev, first = group_index(steps, KEYS)  # (integer codes per device: no text per row)
    closed = ~column_numpy(steps, "open_end", bool)
    has_closed = np.bincount(dev[closed], minlength=len(first))[dev] > 0
    return steps[closed | ~has_closed]


def step_stats(steps: pd.DataFrame, column: str = "duration_ps") -> pd.DataFrame:
    """Per device step-time statistics of ``column`` (``duration_ps`` of the steps frame or ``step_ps`` of
    :func:`step_breakdown`) over its :func:`closed_steps`: steps, mean_ps, median_ps, p90_ps (linear
    interpolation), min_ps, max_ps, std_ps (population, ddof=0)."""
    steps = closed_steps(steps)
    if not exact_sums(steps[column]):  # (floats, missing values, sums past 2**53: pandas itself)
        g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str)).groupby(KEYS)[column]
        return g.agg(steps="size", mean_ps="mean", median_ps="median", p90_ps=lambda s: s.quantile(0.9),
                     min_ps="min", max_ps="max", std_ps=lambda s: s.std(ddof=0)).reset_index()
    # integer step times (every trace's): each device's statistics from its sorted times, without a pandas
    # group per device; sums of picosecond integers are exact in float64 below 2**53 ps (2.5 hours per device)
    v = steps[column].to_numpy(np.int64)
    keys, stats = [], []
    for k, rows in device_rows(steps):
        f = v[rows].astype(np.float64)  # (in frame order: the deviations are summed in pandas' order)
        mean = f.sum() / len(f)
        keys.append(k)
        stats.append((len(f), mean, float(np.median(f)), float(np.quantile(v[rows], 0.9)), v[rows].min(),
                      v[rows].max(), float(np.sqrt(((mean - f) ** 2).sum() / len(f)))))
    cols = ["steps", "mean_ps", "median_ps", "p90_ps", "min_ps", "max_ps", "std_ps"]
    types = [np.int64, np.float64, np.float64, np.float64, v.dtype, v.dtype, np.float64]
    out = {"host": [k[0] for k in keys], "device": [k[1] for k in keys]}
    out.update({c: np.array([s[i] for s in stats], dt) for i, (c, dt) in enumerate(zip(cols, types))})
    return pd.DataFrame(out)


def exact_sums(col: pd.Series) -> bool:
    """Whether ``col`` holds integers whose sums (any subset, in any order) are exact in float64: their absolute
    values add up to less than 2**53 (2.5 hours of picoseconds). Then the statistics worked out on arrays equal
    pandas' to the bit, whatever order each adds in; past it pandas' own (compensated) sums are taken."""
    if col.dtype.kind not in "iu":
        return False
    v = col.to_numpy()
    return not len(v) or float(np.abs(v.astype(np.float64)).sum()) < 2.0 ** 53 * (1 - 1e-9)


def device_rows(steps: pd.DataFrame) -> list:
    """((host, device) as text, its rows) per device of ``steps``, in text order (a row without a host or
    device name is in none, as a groupby leaves it out)."""
    out = rows_by_text(steps, ["host", "device"])
    return [(k, out[k]) for k in sorted(out)]


@record(frozen=True)
class StepSummary:
    """What the reduce reads of a steps breakdown (:func:`tracekit.analysis.timeline.step_breakdown`) beyond its
    per-device rows: the distinct step numbers, the slowest device's step times (the device with the largest
    median step time over its :func:`closed_steps`, then the largest mean, then the first in (host, device) text
    order) and every time column summed. Summaries of disjoint devices merge (:func:`merge`) into their union's."""

    runs: np.ndarray  #: the distinct step numbers as runs of consecutive numbers: [first, last + 1) per row
    rows: int  #: step rows (devices x steps)
    slowest: tuple | None  #: (median, mean, host, device, its step times' statistics) or None without steps
    sums: dict  #: time column (``*_ps``) -> its sum over every row

    @property
    def steps(self) -> int:
        """How many distinct step numbers."""
        return int((self.runs[:, 1] - self.runs[:, 0]).sum()) if len(self.runs) else 0


def summary(steps: pd.DataFrame, column: str = "step_ps") -> StepSummary:
    """The :class:`StepSummary` of a steps breakdown (one host's, or any set of devices')."""
    if steps is None or not len(steps):
        return StepSummary(np.zeros((0, 2), np.int64), 0, None, {})
    closed = closed_steps(steps)
    if exact_sums(closed[column]):  # (integer step times: see step_stats)
        v = closed[column].to_numpy(np.int64)
        per = [(float(np.median(f)), f.sum() / len(f), k, f) for k, rows in device_rows(closed)
               for f in [v[rows].astype(np.float64)]]
        median, mean, key, f = min(per, key=lambda x: (-x[0], -x[1]))  # (the first of equals, in text order)
        stats = {"timed_steps": int(len(f)), "mean_ps": float(mean), "p50_ps": float(np.quantile(f, 0.5)),
                 "p90_ps": float(np.quantile(f, 0.9)), "min_ps": float(f.min()), "max_ps": float(f.max())}
        slow = (median, float(mean), str(key[0]), str(key[1]), stats)
    else:
        host, dev = text_numpy(closed, "host"), text_numpy(closed, "device")
        g = closed[column].groupby([host, dev], sort=True)
        rank = pd.DataFrame({"median": g.median(), "mean": g.mean()})
        key = rank.sort_values(["median", "mean"], ascending=False, kind="stable").index[0]
        t = pd.Series(closed[column][(host == key[0]) & (dev == key[1])].astype("float64").to_numpy())
        stats = {"timed_steps": int(len(t)), "mean_ps": float(t.mean()), "p50_ps": float(t.quantile(0.5)),
                 "p90_ps": float(t.quantile(0.9)), "min_ps": float(t.min()), "max_ps": float(t.max())}
        slow = (float(rank.loc[key, "median"]), float(rank.loc[key, "mean"]), str(key[0]), str(key[1]), stats)
    sums = {c: int(steps[c].sum()) for c in steps.columns
            if c.endswith("_ps") and steps[c].dtype.kind in "iu" and c != "start_ps"}
    return StepSummary(_runs(np.unique(column_numpy(steps, "step", np.int64))), int(len(steps)), slow, sums)


def _runs(sorted_unique: np.ndarray) -> np.ndarray:
    """Runs of consecutive numbers of a sorted distinct array, as [first, last + 1) rows."""
    if not len(sorted_unique):
        return np.zeros((0, 2), np.int64)
    cut = np.flatnonzero(np.diff(sorted_unique) != 1) + 1
    starts = sorted_unique[np.r_[0, cut]]
    ends = sorted_unique[np.r_[cut - 1, len(sorted_unique) - 1]] + 1
    return np.stack([starts, ends], axis=1)


def merge(parts: list) -> StepSummary:
    """The :class:`StepSummary` of the union of disjoint summaries (in host order)."""
    parts = [p for p in parts if p is not None]
    if len(parts) == 1:
        return parts[0]
    slow = [p.slowest for p in parts if p.slowest is not None]
    best = min(slow, key=lambda s: (-s[0], -s[1], s[2], s[3])) if slow else None
    sums: dict = {}
    for p in parts:
        for k, v in p.sums.items():
            sums[k] = sums.get(k, 0) + v
    from tracekit.analysis.intervals import merge as merge_runs
    runs = np.concatenate([p.runs for p in parts]) if parts else np.zeros((0, 2), np.int64)
    order = np.argsort(runs[:, 0], kind="stable")
    s, e = merge_runs(runs[order, 0], runs[order, 1])
    return StepSummary(np.stack([s, e], axis=1), sum(p.rows for p in parts), best, sums)
