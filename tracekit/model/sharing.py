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

from tracekit.columns import column_numpy
from tracekit.grouping import unique_rows
from tracekit.model.cpu_limits import in_cache
from tracekit.schema import Bound


def shared_hosts(ops: pd.DataFrame) -> list:
    """The hosts of ``ops`` whose devices are CPUs (``device_kind`` cpu) and number more than one."""
    if not len(ops) or "device_kind" not in ops or "host" not in ops:
        return []
    dk = ops["device_kind"]
    cats = dk.cat.categories if isinstance(dk.dtype, pd.CategoricalDtype) else pd.unique(dk.astype(str))
    if not any(str(c).lower().startswith("cpu") for c in cats):  # (no CPU device: no look at the rows)
        return []
    _, rows = unique_rows(ops, ["host", "device", "device_kind"])
    kinds = pd.DataFrame(rows, columns=["host", "device", "device_kind"])
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
    start = column_numpy(ops, "start_ps", np.int64)
    dur = column_numpy(ops, "duration_ps", np.int64)
    sync = ~column_numpy(ops, "is_async", bool) if "is_async" in ops else np.ones(n, bool)
    dev = _codes(ops["device"])
    for h in hosts:
        rows = np.flatnonzero(_is(ops["host"], h) & sync & (dur > 0))
        if not len(rows):
            continue
        t, level, area = _busy_count(start[rows], start[rows] + dur[rows], dev[rows])
        s, e = start[rows], start[rows] + dur[rows]
        got = (_area_at(t, level, area, e) - _area_at(t, level, area, s)) / (e - s)
        out[rows] = np.maximum(got, 1.0)
    return out


def _is(col: pd.Series, value) -> np.ndarray:
    """``col == value`` per row, by the categorical's codes when it is one (no string per row)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        cats = [i for i, c in enumerate(col.cat.categories) if str(c) == str(value)]
        return np.isin(col.array.codes, cats) if cats else np.zeros(len(col), bool)
    return col.astype(str).to_numpy() == str(value)


def _codes(col: pd.Series) -> np.ndarray:
    """An integer per row naming its value (the categorical's codes when it is one)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return np.asarray(col.array.codes)
    return pd.factorize(col.astype(str))[0]


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


def host_terms(ops: pd.DataFrame, p: dict, dchips: dict) -> None:
    """The roofline's prediction ``p`` (:func:`tracekit.model.roofline.join`'s per-row arrays) on CPU chips, in
    place: an op whose bytes may sit in the caches takes its memory time at the cache rate
    the trace demonstrates (:func:`tracekit.model.peaks.in_cache`), and virtual devices of one host share its
    cores and memory: each sync op's compute and memory time is its own at the whole host's peak times the
    host's devices in flight with it (:func:`tracekit.model.sharing.concurrency`); roofline and bound follow."""
    n = len(ops)
    factor = concurrency(ops)
    cached = [(k, c) for k, c in dchips.items() if c.family == "cpu" and np.isfinite(c.cache_bw_bytes_per_s)]
    if factor is None and not cached:
        return
    f = np.ones(n) if factor is None else factor
    mem_bw = np.full(n, np.nan)
    if cached:
        nbytes = np.asarray(p["bytes_accessed"], float)
        for (h, d), c in cached:
            m = _is(ops["host"], h) & _is(ops["device"], d)
            m[m] = in_cache(c, nbytes[m])
            mem_bw[m] = c.cache_bw_bytes_per_s
    r = np.flatnonzero(((f > 1.0 + 1e-9) | np.isfinite(mem_bw)) & ~np.asarray(p["host_x"], bool))
    if not len(r):
        return
    for k in ("compute", "memory", "roofline_ps", "best"):
        if isinstance(p[k], np.ndarray) and (not p[k].flags.writeable or p[k].strides == (0,)):  # (read-only)
            p[k] = np.array(p[k])
    fr = f[r]
    mem = p["memory"][r].astype(float)
    bw = mem_bw[r]
    has = np.isfinite(bw)
    mem[has] = np.asarray(p["bytes_accessed"], float)[r][has] / bw[has] * 1e12
    comp, mem = p["compute"][r] * fr, mem * fr
    p["compute"][r], p["memory"][r] = comp, mem
    net = p["network"][r].astype(float)
    best = p["best"][r]
    known = best != Bound.UNKNOWN
    terms = np.vstack([np.nan_to_num(comp, nan=-1.0), np.nan_to_num(mem, nan=-1.0), np.nan_to_num(net, nan=-1.0)])
    top = np.argmax(terms, axis=0)  # (ties: the first, compute before memory before network)
    roof = terms[top, np.arange(len(r))]
    p["roofline_ps"][r] = np.where(known, roof, p["roofline_ps"][r])
    p["best"][r] = np.where(known, top.astype(p["best"].dtype), best)
