"""A what-if question as op times for the replay: every op row gets a ``ratio`` (its new time over its measured
one), a ``target`` (a new time outright) or a ``cap`` (a time it cannot exceed), and :func:`node_times` turns them
into the replay's node work, collective cores, slack and overlapped nodes.

Pricing (``--chip B``, ``--batch-scale K``), per op row with a known roofline on the measured chip A:

    compute' = compute_ps(chip) x flops factor      memory' = memory_ps(chip) x bytes factor
    network' = network_ps(chip) x bytes factor      roofline' = max(compute', memory', network')

``chip`` is B when asked (priced by the roofline stage on B and its topology), else A; the factors are 1 unless
``--batch-scale`` (:mod:`tracekit.analysis.replay.batch`). With ``--keep-efficiency`` (and always when only the
batch changes) an op keeps its measured efficiency: ratio = roofline' / roofline_A. Otherwise every op runs at its
roofline on B: target = roofline'. An op without a known roofline keeps its measured time (scaled by its FLOPs
factor under ``--batch-scale``). A host-offload copy is priced alone on its link (its bytes over the host-link
bandwidth): the replay queues the copies itself.
"""
from __future__ import annotations

from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.analysis.replay.engine import Joined
from tracekit.analysis.replay.graph import OP, WIN
from tracekit.records import record

BOUNDS = ("compute", "memory", "network")


@record
class RowTimes:
    """Per op row of the ops frame: how its time changes (NaN: not by this), and its bound before and after."""

    ratio: np.ndarray
    target: np.ndarray
    cap: np.ndarray
    free: np.ndarray  #: overlapped: holds nothing up
    no_gap: np.ndarray  #: the gap before it is removed
    bound_before: np.ndarray  #: object: compute | memory | network | host_link | unknown
    bound_after: np.ndarray
    notes: list = field(default_factory=list)
    #: (host, device, ps) where a removed gap ended: a step whose next run starts there loses its tail too
    gap_ends: set = field(default_factory=set)

    @classmethod
    def unchanged(cls, n: int, bound=None) -> "RowTimes":
        b = np.full(n, "unknown", object) if bound is None else bound
        return cls(np.ones(n), np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, bool), np.zeros(n, bool), b,
                   b.copy())


def bounds(c, m, net, host_x) -> np.ndarray:
    """argmax of the three terms (ties: compute, then memory), 'unknown' where none is known."""
    stack = np.vstack([np.nan_to_num(c, nan=-1.0), np.nan_to_num(m, nan=-1.0), np.nan_to_num(net, nan=-1.0)])
    arg = np.argmax(stack, axis=0)
    names = np.array(BOUNDS, object)[arg]
    names = np.where(host_x & (arg == 2), "host_link", names)
    return np.where(stack.max(axis=0) <= 0, "unknown", names)


def own_link(ops: pd.DataFrame, dchips: dict) -> np.ndarray:
    """Each host-offload copy's time alone on its link: its bytes over the device's host-link bandwidth."""
    out = np.full(len(ops), np.nan)
    if "is_host_transfer" not in ops:
        return out
    hx = np.flatnonzero(column_numpy(ops, "is_host_transfer", bool) & column_numpy(ops, "is_async", bool))
    if not len(hx):
        return out
    h, d = text_numpy(ops, "host")[hx], text_numpy(ops, "device")[hx]
    bw = np.array([getattr(dchips.get((a, b)), "host_link_bw_bytes_per_s", np.nan) for a, b in zip(h, d)], float)
    nb = column_numpy(ops, "net_bytes", float)[hx]
    out[hx] = np.where(bw > 0, nb / bw * 1e12, np.nan)
    return out


def price(ops_a: pd.DataFrame, ops_b: pd.DataFrame | None, chips_a: dict, chips_b: dict | None,
          keep_efficiency: bool, flops_f: np.ndarray | None = None, bytes_f: np.ndarray | None = None) -> RowTimes:
    """Row times for a chip change (``ops_b``: the same rows priced on B, with ``chips_b``) and/or a batch
    scaling (``flops_f``/``bytes_f`` per row). See the module docstring."""
    n = len(ops_a)
    host_x = column_numpy(ops_a, "is_host_transfer", bool) if "is_host_transfer" in ops_a else np.zeros(n, bool)
    win = column_numpy(ops_a, "is_async", bool)
    terms = {}
    for tag, o, ch in (("a", ops_a, chips_a), ("x", ops_b if ops_b is not None else ops_a, chips_b or chips_a)):
        c, m = column_numpy(o, "compute_ps", float), column_numpy(o, "memory_ps", float)
        net = column_numpy(o, "network_ps", float).copy()
        own = own_link(o, ch)
        net = np.where(host_x & win & np.isfinite(own), own, net)
        terms[tag] = (c, m, net)
    ff = np.ones(n) if flops_f is None else flops_f
    bf = np.ones(n) if bytes_f is None else bytes_f
    ca, ma, na = terms["a"]
    cx, mx, nx = terms["x"]
    cx, mx, nx = cx * ff, mx * bf, nx * bf
    with np.errstate(invalid="ignore"):
        ra = np.fmax(np.fmax(ca, ma), na)
        rx = np.fmax(np.fmax(cx, mx), nx)
    known = np.isfinite(ra) & (ra > 0) & np.isfinite(rx)
    rt = RowTimes.unchanged(n, bounds(ca, ma, na, host_x))
    rt.bound_after = bounds(cx, mx, nx, host_x)
    batch_only = ops_b is None
    if keep_efficiency or batch_only:
        with np.errstate(divide="ignore", invalid="ignore"):
            rt.ratio = np.where(known, rx / np.where(known, ra, 1.0), ff)
    else:
        rt.target = np.where(np.isfinite(rx) & (rx > 0), rx, np.nan)
        rt.ratio = np.where(np.isnan(rt.target), ff, 1.0)
    rt.notes.append(int((~known & ~_is_marker(ops_a)).sum()))
    return rt


def _is_marker(ops: pd.DataFrame) -> np.ndarray:
    """-start/-done rows (their time is their window's business)."""
    op = text_numpy(ops, "opcode")
    sync = ~column_numpy(ops, "is_async", bool)
    return sync & np.array([o.endswith(("-start", "-done")) for o in op], bool)


def node_times(j: Joined, rt: RowTimes) -> dict:
    """The engine's keyword arguments (``work``, ``core``, ``slack``, ``free``, ``tail``) for the row times ``rt``."""
    rows = np.concatenate([g.rows for g in j.graphs]) if j.graphs else np.zeros(0, np.int64)
    kind = np.concatenate([g.kind for g in j.graphs]).astype(np.int64) if j.graphs else np.zeros(0, np.int64)
    work = np.concatenate([g.work for g in j.graphs]).astype(float) if j.graphs else np.zeros(0)
    slack = np.concatenate([g.slack for g in j.graphs]) if j.graphs else np.zeros(0, np.int64)
    ratio, target, cap = rt.ratio[rows], rt.target[rows], rt.cap[rows]
    new = np.where(np.isfinite(target), target, work * np.nan_to_num(ratio, nan=1.0))
    new = np.where(np.isfinite(cap), np.minimum(new, cap), new)
    changes = (kind == OP) | (kind == WIN)
    work_new = np.where(changes, new, work)
    core = j.g_core.astype(float).copy()
    for g, m in enumerate(j.g_members):
        t = target[m]
        c = float(np.nanmax(t)) if np.isfinite(t).any() else core[g] * float(np.nanmedian(ratio[m]))
        cp = cap[m]
        if np.isfinite(cp).any():
            c = min(c, float(np.nanmax(cp)))
        core[g] = c
    free = rt.free[rows]
    slack_new = np.where(rt.no_gap[rows], 0, slack)
    tails = None
    if rt.gap_ends:  # a removed gap between steps: the next run starts as soon as the step's last op ends
        tails = [np.where([(g.host, g.devices[d], int(t)) in rt.gap_ends for d, t in zip(g.steps_dev, g.steps_next)],
                          0, g.steps_tail).astype(np.int64) for g in j.graphs]
    return {"work": np.round(work_new).astype(np.int64), "core": np.round(core).astype(np.int64),
            "slack": slack_new.astype(np.int64), "free": free, "tail": tails}
