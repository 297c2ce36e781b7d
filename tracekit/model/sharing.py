"""How many virtual devices share a host's peak while an op runs.

XLA:CPU's virtual devices (``--xla_force_host_platform_device_count``) are one host's cores and memory: an op on
one of them while three others also run has a quarter of the host, not all of it. :func:`concurrency` gives, per
op execution, the time-weighted mean number of that host's devices with an op in flight during the execution (the
execution's own device included, so never below 1): the roofline divides the host's peak by it
(:func:`tracekit.model.roofline.join`), and a rate the trace demonstrates for the host is the op's own rate times
it (:func:`tracekit.model.peaks.raise_estimates`). Only hosts whose devices are all CPUs and that have more than one
device are shared; every other row gets 1.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def shared_hosts(ops: pd.DataFrame) -> list:
    """The hosts of ``ops`` whose devices are CPUs (``device_kind`` cpu) and number more than one."""
    if not len(ops) or "device_kind" not in ops or "host" not in ops:
        return []
    kinds = ops[["host", "device", "device_kind"]].drop_duplicates()
    out = []
    for h, g in kinds.groupby(kinds["host"].astype(str), sort=True, observed=True):
        if g["device"].nunique() > 1 and g["device_kind"].astype(str).str.lower().str.startswith("cpu").all():
            out.append(h)
    return out


def concurrency(ops: pd.DataFrame) -> np.ndarray | None:
    """Per row of ``ops``, the time-weighted mean number of its host's devices with a synchronous op in flight
    over the row's [start, start + duration) (see the module docstring); None when no host is shared. Rows of
    hosts that are not shared, async rows and rows without a duration get 1."""
    hosts = shared_hosts(ops)
    if not hosts:
        return None
    n = len(ops)
    out = np.ones(n)
    host = ops["host"].astype(str).to_numpy()
    start = ops["start_ps"].to_numpy(np.int64)
    dur = ops["duration_ps"].to_numpy(np.int64)
    sync = ~ops["is_async"].to_numpy(bool) if "is_async" in ops else np.ones(n, bool)
    dev = ops["device"].astype(str).to_numpy()
    for h in hosts:
        rows = np.flatnonzero((host == h) & sync & (dur > 0))
        if not len(rows):
            continue
        t, level, area = _busy_count(start[rows], start[rows] + dur[rows], dev[rows])
        s, e = start[rows], start[rows] + dur[rows]
        got = (_area_at(t, level, area, e) - _area_at(t, level, area, s)) / (e - s)
        out[rows] = np.maximum(got, 1.0)
    return out


def _busy_count(s: np.ndarray, e: np.ndarray, dev: np.ndarray):
    """The step function "devices busy" of intervals [s, e) per device (each device's intervals merged first):
    breakpoints ``t``, the level from each breakpoint on, and the area up to each breakpoint."""
    bounds_s, bounds_e = [], []
    for d in np.unique(dev):
        m = dev == d
        ds, de = s[m], e[m]
        o = np.argsort(ds, kind="stable")
        ds, de = ds[o], np.maximum.accumulate(de[o])
        new = np.ones(len(ds), bool)
        new[1:] = ds[1:] > de[:-1]  # a gap before it: a new merged interval starts here
        idx = np.flatnonzero(new)
        bounds_s.append(ds[idx])
        bounds_e.append(np.append(de[idx[1:] - 1], de[-1]))
    ms, me = np.concatenate(bounds_s), np.concatenate(bounds_e)
    t = np.concatenate([ms, me])
    step = np.concatenate([np.ones(len(ms), np.int64), -np.ones(len(me), np.int64)])
    o = np.argsort(t, kind="stable")
    t, step = t[o], step[o]
    t, first = np.unique(t, return_index=True)
    level = np.add.reduceat(step, first).cumsum()
    area = np.zeros(len(t))
    area[1:] = np.cumsum(level[:-1] * np.diff(t).astype(float))
    return t, level, area


def _area_at(t: np.ndarray, level: np.ndarray, area: np.ndarray, x: np.ndarray) -> np.ndarray:
    """The area under the step function up to each ``x``."""
    j = np.searchsorted(t, x, side="right") - 1
    jc = np.clip(j, 0, len(t) - 1)
    got = area[jc] + level[jc] * (x - t[jc]).astype(float)
    return np.where(j < 0, 0.0, got)
