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
- **change**: ``new mean_ps / base mean_ps - 1``. A matched op is a ``regression`` when change >= ``threshold``
  *and* its mean grew by at least ``min_time_ps``; an ``improvement`` when change <= -``threshold`` and its mean
  shrank by at least ``min_time_ps``; else ``unchanged``.
- **step time**: the median of the slowest device's step times (the overview's step time: a step is a run of the
  step program on the device, start to start; the median: one slow first step should not fail a comparison),
  judged with the same two thresholds; the mean (of the same device's steps) is shown too.
  Unknown when either side has no steps.

The verdict ``failed`` is true when an op or the step time regressed (the CLI then exits 1). Added ops are listed
but do not fail the diff on their own: a new op that costs time also shows in the step time.

Not accounted for: different devices or chips between the sides (times are compared as they are), run-to-run
noise beyond the thresholds, and time outside ops (host work shows only through the step time).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

DEFAULT_THRESHOLD = 0.1
DEFAULT_MIN_TIME_PS = 1_000_000  # 1 µs
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


def classify(m: pd.DataFrame, threshold: float, min_time_ps: float) -> pd.DataFrame:
    """Add ``change`` (relative change of mean_ps), ``delta_mean_ps``, ``impact_ps`` and ``status``, sorted by
    status then by the size of the impact. ``impact_ps`` is what the change costs in NEW: delta_mean_ps x NEW's
    occurrences for a matched op, NEW's total for an added op, minus BASE's total for a removed one."""
    m = m.copy()
    m["delta_mean_ps"] = m["new_mean_ps"] - m["base_mean_ps"]
    m["impact_ps"] = (m["delta_mean_ps"] * m["new_occurrences"]).fillna(m["new_total_ps"]).fillna(-m["base_total_ps"])
    m["change"] = m["new_mean_ps"] / m["base_mean_ps"].where(m["base_mean_ps"] > 0) - 1
    status = np.full(len(m), "unchanged", dtype=object)
    status[((m["change"] >= threshold) & (m["delta_mean_ps"] >= min_time_ps)).to_numpy()] = "regression"
    status[((m["change"] <= -threshold) & (-m["delta_mean_ps"] >= min_time_ps)).to_numpy()] = "improvement"
    status[(m["match"] == "new_only").to_numpy()] = "added"
    status[(m["match"] == "base_only").to_numpy()] = "removed"
    m["status"] = status
    order = {s: i for i, s in enumerate(STATUSES)}
    m["_o"] = m["status"].map(order)
    m["_a"] = -m["impact_ps"].abs()
    m = m.sort_values(["_o", "_a", "module", "op"], kind="stable", ignore_index=True)
    return m.drop(columns=["_o", "_a"])


def step_summary(tr) -> dict:
    """Mean and median step time of the slowest device (as the overview's step time: each step a run of the step
    program, start to start), with the step count, the rows over every device and the sources."""
    s = tr.steps
    if not len(s):
        return {"steps": 0, "rows": 0, "mean_ps": None, "median_ps": None, "step_source": []}
    from tracekit.analysis.overview import slowest_device_steps
    d = slowest_device_steps(s, "duration_ps")[0]
    return {"steps": int(s["step"].nunique()), "rows": int(len(s)), "mean_ps": float(d.mean()),
            "median_ps": float(d.median()), "step_source": sorted(set(s["step_source"].astype(str)))}


@dataclass(frozen=True)
class Comparison:
    """What :func:`compare` found, before any rendering: ``ops`` one row per matched pair or leftover op (see
    :func:`classify`), ``step_time`` the step-time comparison (``base``/``new`` as :func:`step_summary`,
    ``change``, ``delta_median_ps``, ``status``), the thresholds used and the paths of both sides. The report
    package turns it into the ``tracekit.diff/1`` envelope (:func:`tracekit.report.diff.build`)."""

    ops: pd.DataFrame
    step_time: dict
    threshold: float
    min_time_ps: int
    base_paths: tuple
    new_paths: tuple

    @property
    def failed(self) -> bool:
        """An op or the step time regressed."""
        return bool((self.ops["status"] == "regression").any()) or self.step_time["status"] == "regression"


def compare(base, new, *, threshold: float = DEFAULT_THRESHOLD, min_time_ps: int = DEFAULT_MIN_TIME_PS,
            run: str | None = None) -> Comparison:
    """Load (paths) or take (:class:`tracekit.Trace`) both sides and compare them."""
    from tracekit.ingest.trace import Trace, load
    trs = [x if isinstance(x, Trace) else load(x, run=run) for x in (base, new)]
    m = classify(match_ops(op_rows(trs[0]), op_rows(trs[1])), threshold, min_time_ps)
    sb, sn = step_summary(trs[0]), step_summary(trs[1])
    step = {"base": sb, "new": sn, "change": None, "delta_median_ps": None, "status": "unknown"}
    if sb["median_ps"] and sn["median_ps"]:
        delta = sn["median_ps"] - sb["median_ps"]
        ch = sn["median_ps"] / sb["median_ps"] - 1
        st = "regression" if ch >= threshold and delta >= min_time_ps else \
            "improvement" if ch <= -threshold and -delta >= min_time_ps else "unchanged"
        step.update({"change": ch, "delta_median_ps": delta, "status": st})
    return Comparison(ops=m, step_time=step, threshold=threshold, min_time_ps=min_time_ps,
                      base_paths=tuple(trs[0].paths), new_paths=tuple(trs[1].paths))
