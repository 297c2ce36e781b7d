"""Interval algebra and the per-device groupings the timeline stages share.

* :func:`merge` / :func:`covered`: the union of intervals as sorted disjoint runs, and how much of each query
  interval that union covers (``np.searchsorted`` over the runs plus a prefix sum of their lengths);
* :class:`DeviceIndex`: a frame's row positions per (host, device), each row's end, and the merged busy intervals
  of each device's sync ops, computed once and shared by every stage the caller hands the index to (no global
  cache: what it holds goes when the caller drops it).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, stored
from tracekit.grouping import group_index, unique

KEYS = ["host", "device"]


def merge(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals ``[start, end)`` as sorted disjoint ``(starts, ends)``; touching intervals merge. Rows
    already in start order (a device's rows of the sorted ops frame) are not sorted again."""
    start, end = np.asarray(start, np.int64), np.asarray(end, np.int64)
    if start.size == 0:
        return start[:0], end[:0]
    if start.size > 1 and not bool((start[1:] >= start[:-1]).all()):
        o = np.argsort(start, kind="stable")
        start, end = start[o], end[o]
    run = np.maximum.accumulate(end)
    brk = start[1:] > run[:-1]  # a new run starts at the next row
    ms = np.empty(int(np.count_nonzero(brk)) + 1, np.int64)
    ms[0], ms[1:] = start[0], start[1:][brk]
    me = np.empty_like(ms)
    me[:-1], me[-1] = run[:-1][brk], run[-1]
    return ms, me


def union(*merged) -> tuple[np.ndarray, np.ndarray]:
    """The union of interval sets each given merged (:func:`merge`), merged: the same union as merging all
    their intervals at once, from far fewer rows."""
    merged = [m for m in merged if m[0].size]
    if len(merged) <= 1:
        return merged[0] if merged else (np.zeros(0, np.int64), np.zeros(0, np.int64))
    return merge(np.concatenate([m[0] for m in merged]), np.concatenate([m[1] for m in merged]))


def covered(ms: np.ndarray, me: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Length of ``[a, b)`` covered by the merged union ``(ms, me)`` (from :func:`merge`), for arrays a, b."""
    a, b = np.asarray(a, np.int64), np.asarray(b, np.int64)
    if ms.size == 0:
        return np.zeros(a.shape, np.int64)
    length = me - ms
    prefix = np.r_[0, np.cumsum(length)]

    def upto(t):  # covered length of (-inf, t)
        k = np.searchsorted(ms, t, side="right") - 1
        kk = np.maximum(k, 0)
        return np.where(k >= 0, prefix[kk] + np.clip(t - ms[kk], 0, length[kk]), 0)

    return np.maximum(upto(np.maximum(a, b)) - upto(a), 0)


class DeviceIndex:
    """One frame's rows by device, worked out on first use and kept only as long as this object (the caller
    passes it to every stage that reads the same frame, then drops it): :meth:`groups` the row positions of each
    (host, device), :meth:`ends` each row's end, :meth:`busy` the merged busy intervals of each device's sync ops
    (an ops frame)."""

    def __init__(self, df: pd.DataFrame):
        self.df = df
        self._parts: dict = {}

    def _once(self, key: str, compute):
        if key not in self._parts:
            self._parts[key] = compute()
        return self._parts[key]

    def groups(self) -> Mapping:
        """(host, device) -> row positions (sorted by key); keys are plain strings whatever the columns' dtype. A
        frame grouped already (sorted by device) gives :class:`RowRanges`: each read makes its positions anew."""
        return {} if self.df.empty else self._once("groups", lambda: _groups(self.df))

    def ends(self) -> np.ndarray:
        """start + duration per row (read-only: shared by every reader)."""
        def compute():
            out = column_numpy(self.df, "start_ps", np.int64) + column_numpy(self.df, "duration_ps", np.int64)
            out.flags.writeable = False
            return out
        return self._once("ends", compute)

    def ends_at(self, idx: np.ndarray) -> np.ndarray:
        """start + duration of the rows ``idx`` (sorted distinct positions, e.g. a group's): a new array each call,
        so an index read group by group holds no row-sized ends (the ops frame's index: 8 B per row)."""
        st, du = column_numpy(self.df, "start_ps", np.int64), column_numpy(self.df, "duration_ps", np.int64)
        return rows_view(st, idx) + rows_view(du, idx)

    def busy(self) -> dict:
        """(host, device) -> merged busy intervals (starts, ends) of the device's sync ops."""
        return {} if self.df.empty else self._once("busy", self._busy)

    def _busy(self) -> dict:
        sync, st = sync_rows(self.df), column_numpy(self.df, "start_ps", np.int64)
        out = {}
        for key, idx in self.groups().items():
            si = idx[sync[idx]]
            out[key] = merge(st[si], self.ends_at(si))
        return out


def device_index(x) -> DeviceIndex:
    """``x`` as a :class:`DeviceIndex`: itself when it is one (its parts are shared), else a new one of the frame."""
    return x if isinstance(x, DeviceIndex) else DeviceIndex(x)


def _groups(df: pd.DataFrame) -> Mapping:
    inv, first = group_index(df, KEYS)
    bounds = np.r_[0, np.cumsum(np.bincount(inv, minlength=len(first)))]
    a, b = (stored(df, k) for k in KEYS)  # (a value of each group's first row, read from the arrays)
    keys = [(str(a[i]), str(b[i])) for i in first]
    spans = {keys[g]: (int(bounds[g]), int(bounds[g + 1])) for g in sorted(range(len(first)), key=lambda g: keys[g])}
    if len(inv) < 2 or bool((inv[1:] >= inv[:-1]).all()):
        return RowRanges(spans)  # rows already grouped (the ops frame is sorted by host, device, start)
    order = np.argsort(inv, kind="stable")
    return {k: order[a:b] for k, (a, b) in spans.items()}


class RowRanges(Mapping):
    """(host, device) -> row positions, for a frame whose groups are contiguous: each group's positions are made
    when read (``np.arange``) and freed by the reader, so the index holds no row-sized array for them (8 B per row
    of a frame of millions of rows, at the rule frames' peak)."""

    def __init__(self, spans: dict):
        self._spans = spans

    def __getitem__(self, key) -> np.ndarray:
        a, b = self._spans[key]
        return np.arange(a, b)

    def __iter__(self):
        return iter(self._spans)

    def __len__(self) -> int:
        return len(self._spans)


def sync_rows(ops: pd.DataFrame) -> np.ndarray:
    """True for the rows the device executes (not async windows)."""
    return ~column_numpy(ops, "is_async", bool)


def cut_points(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """Sorted distinct step starts and ends. Steps of one device rarely overlap: then start, end, start, end...
    interleaved is already in order and only equal neighbours need dropping (no sort)."""
    both = np.empty(2 * len(s0), np.int64)
    both[0::2], both[1::2] = s0, s1
    if len(both) and bool((both[1:] >= both[:-1]).all()):
        return both[np.r_[True, both[1:] != both[:-1]]]
    return unique(both)


def rows_view(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a[idx]`` for sorted distinct row positions; a view (no copy) when they are contiguous."""
    if len(idx) and int(idx[-1]) - int(idx[0]) + 1 == len(idx):
        return a[int(idx[0]):int(idx[-1]) + 1]
    return a[idx]
