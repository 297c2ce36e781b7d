"""``tracekit diff BASE NEW``: what got slower between two traces of the same program.

Terms
-----
- **op row**: one HLO op (or, without HLO, one kernel) per side, aggregated over every device and every program
  that shares the module name: ``occurrences``, ``total_ps``, ``mean_ps`` (= total_ps / occurrences, the time of
  one execution), ``opcode`` and ``shape`` (the result shape from the trace's HLO, empty without HLO).
- **matching**: ops are matched by ``(module, op)`` first. Ops left over on both sides are then matched by
  ``(opcode, shape)``: the i-th longest leftover of a given opcode and shape in BASE with the i-th longest in NEW
  (XLA renumbers instructions, ``fusion.3`` -> ``fusion.4``, when an unrelated part of the program changes). What
  is still unmatched is ``added`` (only in NEW) or ``removed`` (only in BASE).
- **change**: each side's per-execution times of an op (self times, every device pooled) are a distribution; a
  matched op is a ``regression`` when (1) the two-sided Mann-Whitney U test of the two distributions
  (:mod:`tracekit.analysis.diffstats`), Holm-corrected over the ops compared, is under ``alpha`` (default 0.01),
  (2) the median grew by at least ``threshold`` (0.1: x1.10) and (3) the change costs at least ``min_time_ps``
  of total time in NEW (``impact_ps``, default 100 µs); an ``improvement`` the same downwards (median / 1.10);
  else ``unchanged``, with the ``reason``. Ops with fewer than 5 executions on either side are never judged
  (``too few executions``). ``change`` is of the means, ``median_change`` of the medians.
- **step time**: the slowest device's step times (the overview's step time: a step is a run of the step
  program on the device, start to start), judged the same way (one Mann-Whitney test of the two sides' step
  times, not in the ops' Holm family; the cost: the medians' change x NEW's steps). Unknown when either side has
  no steps.

The verdict ``failed`` is true when an op or the step time regressed (the CLI then exits 1). Added ops are listed
but do not fail the diff on their own: a new op that costs time also shows in the step time.

Not accounted for: different devices or chips between the sides (times are compared as they are), a shift of
the whole machine between the captures (other load on a shared host: the test sees each trace's own spread
only), and time outside ops (host work shows only through the step time).
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.analysis import diffstats as stats
from tracekit.records import record

DEFAULT_THRESHOLD = 0.1
DEFAULT_MIN_TIME_PS = 100_000_000  # 100 µs of total time in NEW
STATUSES = ("regression", "added", "removed", "improvement", "unchanged")
OP_KEY = ["module", "op"]
_SIDE_COLS = ["occurrences", "total_ps", "mean_ps"]


def op_rows(tr) -> pd.DataFrame:
    """One row per (module, op) of a loaded trace: opcode, shape, occurrences, total_ps, mean_ps."""
    from tracekit.analysis import opstats
    cols = ["module", "op", "opcode", "shape", *_SIDE_COLS]
    if not len(tr.ops):
        return pd.DataFrame(columns=cols)
    st = opstats.op_stats(tr.ops)
    if len(tr.hlo):
        shapes = tr.hlo[["program_id", "name", "shape"]].drop_duplicates(["program_id", "name"])
        st = st.merge(shapes.rename(columns={"name": "op"}).astype({"op": str}), on=["program_id", "op"], how="left")
    else:
        st["shape"] = ""
    st["shape"] = st["shape"].fillna("").astype(str)
    st = st.sort_values(["total_ps", "op"], ascending=[False, True], kind="stable")  # the largest program first
    g = st.groupby(OP_KEY, sort=False, observed=True)
    out = g.agg(opcode=("opcode", "first"), shape=("shape", "first"), occurrences=("occurrences", "sum"),
                total_ps=("total_ps", "sum")).reset_index()
    out["mean_ps"] = out["total_ps"] / out["occurrences"].clip(lower=1)
    return out[cols].sort_values(["total_ps", *OP_KEY], ascending=[False, True, True], kind="stable",
                                 ignore_index=True)


def match_ops(base: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Pair the op rows of two sides (see the module docstring). One row per pair or leftover with ``match``
    (``name`` | ``shape`` | ``base_only`` | ``new_only``), the keys of both sides and ``base_*``/``new_*``
    occurrences, total_ps, mean_ps (NaN on the missing side)."""
    b = base.add_prefix("base_").rename(columns={"base_module": "module", "base_op": "op"})
    n = new.add_prefix("new_").rename(columns={"new_module": "module", "new_op": "op"})
    m = b.merge(n, on=OP_KEY, how="outer", indicator=True)
    by_name = m[m["_merge"] == "both"].assign(match="name", new_module=lambda d: d["module"],
                                              new_op=lambda d: d["op"])
    lb = m[m["_merge"] == "left_only"][list(b.columns)]
    ln = m[m["_merge"] == "right_only"][list(n.columns)].rename(columns={"module": "new_module", "op": "new_op"})
    lb = _rank(lb, "base_", OP_KEY)
    ln = _rank(ln, "new_", ["new_module", "new_op"])
    keyed = (lb["base_shape"] != "") & (lb["base_opcode"] != "")
    pairs = lb[keyed].merge(ln[(ln["new_shape"] != "") & (ln["new_opcode"] != "")],
                            left_on=["base_opcode", "base_shape", "_rank"],
                            right_on=["new_opcode", "new_shape", "_rank"], how="inner")
    pairs = pairs.assign(match="shape")
    only_b = lb[~lb.set_index(OP_KEY).index.isin(pairs.set_index(OP_KEY).index)].assign(match="base_only")
    paired_new = pairs.set_index(["new_module", "new_op"]).index
    only_n = ln[~ln.set_index(["new_module", "new_op"]).index.isin(paired_new)]
    only_n = only_n.assign(match="new_only", module=only_n["new_module"], op=only_n["new_op"])
    out = pd.concat([by_name, pairs, only_b, only_n], ignore_index=True)
    keep = ["module", "op", "new_module", "new_op", "match", "base_opcode", "new_opcode", "base_shape", "new_shape",
            *[f"{s}_{c}" for s in ("base", "new") for c in _SIDE_COLS]]
    for c in keep:
        if c not in out:
            out[c] = np.nan
    return out[keep]


def _rank(df: pd.DataFrame, prefix: str, names: list[str]) -> pd.DataFrame:
    """Rank within (opcode, shape) by total time, longest first (ties by name): the fallback's pairing order."""
    df = df.sort_values([f"{prefix}total_ps", *names], ascending=[False, True, True], kind="stable").copy()
    df["_rank"] = df.groupby([f"{prefix}opcode", f"{prefix}shape"], sort=False).cumcount() if len(df) else 0
    return df


def op_samples(tr) -> dict:
    """(module, op) -> the per-execution self times (ps) of a loaded trace's sync ops, every device pooled; ops
    without an HLO name under their kernel's name (as :func:`op_rows`)."""
    from tracekit.columns import self_time
    ops = tr.ops
    if not len(ops):
        return {}
    sync = ~column_numpy(ops, "is_async", bool)
    op = text_numpy(ops, "op")
    if "kernel" in ops.columns:
        op = np.where(op == "", text_numpy(ops, "kernel"), op)
    df = pd.DataFrame({"module": text_numpy(ops, "module")[sync], "op": op[sync],
                       "t": self_time(ops)[sync]})
    return {k: g.to_numpy(np.int64) for k, g in df.groupby(["module", "op"], sort=False)["t"]}


def add_tests(m: pd.DataFrame, base_samples: dict, new_samples: dict) -> pd.DataFrame:
    """Add ``base_median_ps``/``new_median_ps`` (of the per-execution times), ``p_value`` (Mann-Whitney U of the
    two sides' executions) and ``p_holm`` (Holm-corrected over the matched ops with at least
    :data:`~tracekit.analysis.diffstats.MIN_EXECUTIONS` executions a side; NaN for the others)."""
    m = m.copy()
    n = len(m)
    med_b, med_n, p = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    for i, r in enumerate(m[["module", "op", "new_module", "new_op", "match"]].itertuples(index=False)):
        if r.match not in ("name", "shape"):
            continue
        a = base_samples.get((str(r.module), str(r.op)), np.empty(0, np.int64))
        b = new_samples.get((str(r.new_module), str(r.new_op)), np.empty(0, np.int64))
        med_b[i] = np.median(a) if len(a) else np.nan
        med_n[i] = np.median(b) if len(b) else np.nan
        if min(len(a), len(b)) >= stats.MIN_EXECUTIONS:
            p[i] = stats.mann_whitney(a, b)
    m["base_median_ps"], m["new_median_ps"], m["p_value"], m["p_holm"] = med_b, med_n, p, stats.holm(p)
    return m


def judge(ratio: float, delta_total: float, n_min: int, p_holm: float, *, threshold: float, min_time_ps: float,
          alpha: float | None) -> tuple[str, str]:
    """(status, reason) of one change: ``ratio`` new / base (medians), ``delta_total`` what it costs in NEW
    (ps), ``n_min`` the executions of the smaller side, ``p_holm`` its corrected p-value (``alpha`` None: no test,
    the effect alone decides)."""
    if alpha is not None and n_min < stats.MIN_EXECUTIONS:
        return "unchanged", "too few executions"
    if ratio is None or not np.isfinite(ratio):
        return "unchanged", "no time on the base side"
    up = ratio - 1 >= threshold and delta_total >= min_time_ps
    down = 1 - ratio >= threshold / (1 + threshold) and -delta_total >= min_time_ps  # the inverse of +threshold
    if not (up or down):
        return "unchanged", "below the minimum effect"
    if alpha is not None and not p_holm < alpha:
        return "unchanged", "within the run-to-run spread"
    return ("regression" if up else "improvement"), "significant" if alpha is not None else "effect (no test)"


def classify(m: pd.DataFrame, threshold: float, min_time_ps: float, alpha: float | None = None) -> pd.DataFrame:
    """Add ``change`` (relative change of mean_ps), ``delta_mean_ps``, ``impact_ps``, ``status`` and ``reason``,
    sorted by status then by the size of the impact. ``impact_ps`` is what the change costs in NEW: delta_mean_ps x
    NEW's occurrences for a matched op, NEW's total for an added op, minus BASE's total for a removed one.
    With the columns of :func:`add_tests` and an ``alpha``, a matched op is a regression (improvement) when its
    median per-execution time grew (shrank) by at least ``threshold``, ``|impact_ps| >= min_time_ps`` and the
    Holm-corrected p-value is under ``alpha``; never with fewer than MIN_EXECUTIONS executions a side. Without
    them (``alpha`` None) the means and the two thresholds alone decide."""
    m = m.copy()
    m["delta_mean_ps"] = m["new_mean_ps"] - m["base_mean_ps"]
    m["impact_ps"] = (m["delta_mean_ps"] * m["new_occurrences"]).fillna(m["new_total_ps"]).fillna(-m["base_total_ps"])
    m["change"] = m["new_mean_ps"] / m["base_mean_ps"].where(m["base_mean_ps"] > 0) - 1
    tested = alpha is not None and "p_holm" in m.columns
    if tested:
        ratio = (m["new_median_ps"] / m["base_median_ps"].where(m["base_median_ps"] > 0)).to_numpy(float)
        m["median_change"] = ratio - 1
    else:
        ratio = (m["change"] + 1).to_numpy(float)
    nmin = np.fmin(column_numpy(m, "base_occurrences", float), column_numpy(m, "new_occurrences", float))
    ph = column_numpy(m, "p_holm", float) if tested else np.full(len(m), np.nan)
    judged = [judge(ratio[i], m["impact_ps"].iat[i], nmin[i], ph[i], threshold=threshold, min_time_ps=min_time_ps,
                    alpha=alpha if tested else None) for i in range(len(m))]
    status = np.array([j[0] for j in judged] or [], dtype=object)
    reason = np.array([j[1] for j in judged] or [], dtype=object)
    status[(m["match"] == "new_only").to_numpy()] = "added"
    status[(m["match"] == "base_only").to_numpy()] = "removed"
    reason[(m["match"] == "new_only").to_numpy()] = "only in NEW"
    reason[(m["match"] == "base_only").to_numpy()] = "only in BASE"
    m["status"], m["reason"] = status, reason
    order = {s: i for i, s in enumerate(STATUSES)}
    m["_o"] = m["status"].map(order)
    m["_a"] = -m["impact_ps"].abs()
    m = m.sort_values(["_o", "_a", "module", "op"], kind="stable", ignore_index=True)
    return m.drop(columns=["_o", "_a"])


def step_times(tr) -> np.ndarray:
    """The slowest device's step times (ps; the overview's step time), empty without steps."""
    if not len(tr.steps):
        return np.empty(0)
    from tracekit.analysis.overview import slowest_device_steps
    return slowest_device_steps(tr.steps, "duration_ps")[0].to_numpy(float)


def step_summary(tr) -> dict:
    """Mean and median step time of the slowest device (as the overview's step time: each step a run of the step
    program, start to start), with the step count, the rows over every device and the sources."""
    s = tr.steps
    if not len(s):
        return {"steps": 0, "rows": 0, "mean_ps": None, "median_ps": None, "step_source": []}
    d = step_times(tr)
    return {"steps": int(s["step"].nunique()), "rows": int(len(s)), "mean_ps": float(d.mean()),
            "median_ps": float(np.median(d)), "step_source": sorted(set(s["step_source"].astype(str)))}


def compare_steps(tb: np.ndarray, tn: np.ndarray, sb: dict, sn: dict, *, threshold: float, min_time_ps: float,
                  alpha: float) -> dict:
    """The step-time comparison: the medians' change, the Mann-Whitney p-value of the two sides' step times (one
    test, not part of the ops' Holm family) and the verdict of :func:`judge` (the cost in NEW: the change of the
    median x NEW's steps)."""
    step = {"base": sb, "new": sn, "change": None, "delta_median_ps": None, "p_value": None, "status": "unknown",
            "reason": "no steps on " + ("either side" if not len(tb) and not len(tn) else "one side")}
    if len(tb) and len(tn) and sb["median_ps"]:
        delta = sn["median_ps"] - sb["median_ps"]
        ratio = sn["median_ps"] / sb["median_ps"]
        p = stats.mann_whitney(tb, tn) if min(len(tb), len(tn)) >= stats.MIN_EXECUTIONS else None
        st, why = judge(ratio, delta * len(tn), min(len(tb), len(tn)), np.nan if p is None else p,
                        threshold=threshold, min_time_ps=min_time_ps, alpha=alpha)
        step.update({"change": ratio - 1, "delta_median_ps": delta, "p_value": p, "status": st, "reason": why})
    return step


@record(frozen=True)
class Comparison:
    """What :func:`compare` found, before any rendering: ``ops`` one row per matched pair or leftover op (see
    :func:`classify`), ``step_time`` the step-time comparison (:func:`compare_steps`), the parameters used and
    the paths of both sides. The report package turns it into the ``tracekit.diff/1`` envelope
    (:func:`tracekit.report.diff.build`)."""

    ops: pd.DataFrame
    step_time: dict
    threshold: float
    min_time_ps: int
    base_paths: tuple
    new_paths: tuple
    alpha: float = stats.DEFAULT_ALPHA

    @property
    def failed(self) -> bool:
        """An op or the step time regressed."""
        return bool((self.ops["status"] == "regression").any()) or self.step_time["status"] == "regression"

    @property
    def params(self) -> dict:
        """The test and the minimum effect, as the envelope's ``params`` states them."""
        return {"test": stats.TEST_NAME, "alpha": self.alpha, "min_executions": stats.MIN_EXECUTIONS,
                "threshold": self.threshold, "min_time_ps": self.min_time_ps,
                "min_effect": f"median per-execution time x {1 + self.threshold:g} (or / {1 + self.threshold:g}) "
                              f"and a change of the total time in NEW of at least min_time_ps"}


def compare_traces(tb, tn, *, threshold: float = DEFAULT_THRESHOLD, min_time_ps: int = DEFAULT_MIN_TIME_PS,
                   alpha: float = stats.DEFAULT_ALPHA, ops_b: pd.DataFrame | None = None,
                   ops_n: pd.DataFrame | None = None) -> Comparison:
    """Compare two loaded traces. ``ops_b``/``ops_n``: an ops frame to use instead of a side's own (the same
    columns; e.g. a copy with one op's times scaled)."""
    sides = []
    for tr, ops in ((tb, ops_b), (tn, ops_n)):
        view = tr if ops is None else _OpsView(ops, tr.hlo)
        sides.append((op_rows(view), op_samples(view)))
    m = add_tests(match_ops(sides[0][0], sides[1][0]), sides[0][1], sides[1][1])
    m = classify(m, threshold, min_time_ps, alpha)
    step = compare_steps(step_times(tb), step_times(tn), step_summary(tb), step_summary(tn), threshold=threshold,
                         min_time_ps=min_time_ps, alpha=alpha)
    return Comparison(ops=m, step_time=step, threshold=threshold, min_time_ps=min_time_ps,
                      base_paths=tuple(tb.paths), new_paths=tuple(tn.paths), alpha=alpha)


@record(frozen=True)
class _OpsView:
    ops: pd.DataFrame
    hlo: pd.DataFrame


def compare(base, new, *, threshold: float = DEFAULT_THRESHOLD, min_time_ps: int = DEFAULT_MIN_TIME_PS,
            alpha: float = stats.DEFAULT_ALPHA, run: str | None = None) -> Comparison:
    """Load (paths) or take (:class:`tracekit.Trace`) both sides and compare them."""
    from tracekit.ingest.trace import Trace, load
    trs = [x if isinstance(x, Trace) else load(x, run=run) for x in (base, new)]
    return compare_traces(trs[0], trs[1], threshold=threshold, min_time_ps=min_time_ps, alpha=alpha)
