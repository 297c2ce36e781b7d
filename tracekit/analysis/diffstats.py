"""The statistics of ``tracekit diff``: is a change bigger than the run-to-run spread the two traces show?

Each op executes many times on each side, so each side gives a distribution of per-execution times (self times,
every device's executions pooled); the step time likewise gives one step time per step (the slowest device's).
Two distributions are compared with a two-sided **Mann-Whitney U test** (normal approximation with continuity and
tie correction: exact enough from :data:`MIN_EXECUTIONS` executions a side), and the p-values of the ops compared
are **Holm-corrected** (family-wise error rate ``alpha`` over all of them). A change counts only when it is
significant *and* its effect is at least the minimum effect (:mod:`tracekit.analysis.diff`).
"""
from __future__ import annotations

import math

import numpy as np

DEFAULT_ALPHA = 0.01
MIN_EXECUTIONS = 5  #: fewer executions than this on either side: never called changed ("too few executions")
TEST_NAME = "two-sided Mann-Whitney U (normal approximation, tie- and continuity-corrected), Holm-corrected"


def ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based; ties share the mean of their ranks) and the sizes of the tie groups."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    sizes = np.diff(np.r_[starts, len(xs)])
    avg = starts + (sizes + 1) / 2.0  # the mean of ranks starts+1 .. starts+size
    r = np.empty(len(x), float)
    r[order] = np.repeat(avg, sizes)
    return r, sizes


def mann_whitney(a, b) -> float:
    """Two-sided p-value of the Mann-Whitney U test of samples ``a`` and ``b`` (normal approximation, tie and
    continuity correction). 1.0 when either is empty or every value is the same."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    n1, n2 = len(a), len(b)
    if not n1 or not n2:
        return 1.0
    r, ties = ranks(np.concatenate([a, b]))
    n = n1 + n2
    u = r[:n1].sum() - n1 * (n1 + 1) / 2.0
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - float((ties ** 3 - ties).sum()) / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = max(abs(u - mu) - 0.5, 0.0) / math.sqrt(var)
    return float(min(1.0, math.erfc(z / math.sqrt(2.0))))


def holm(p) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as ``p``; NaN stays NaN and is not counted)."""
    p = np.asarray(p, float)
    out = np.full(len(p), np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if not m:
        return out
    order = ok[np.argsort(p[ok], kind="mergesort")]
    adj = np.minimum(1.0, np.maximum.accumulate(p[order] * (m - np.arange(m))))
    out[order] = adj
    return out
