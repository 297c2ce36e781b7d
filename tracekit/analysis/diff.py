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
- **step time**: the median of the steps frame's ``duration_ps`` over every (device, step) of a side (the median:
  one slow first step should not fail a comparison), judged with the same two thresholds; the mean is shown too.
  Unknown when either side has no steps.

The verdict ``failed`` is true when an op or the step time regressed (the CLI then exits 1). Added ops are listed
but do not fail the diff on their own: a new op that costs time also shows in the step time.

Not accounted for: different devices or chips between the sides (times are compared as they are), run-to-run
noise beyond the thresholds, and time outside ops (host work shows only through the step time).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from tracekit.report.envelope import _clean
from tracekit.units import fmt_pct, fmt_time

SCHEMA = "tracekit.diff/1"
DEFAULT_THRESHOLD = 0.1
DEFAULT_MIN_TIME_PS = 1_000_000  # 1 µs
STATUSES = ("regression", "added", "removed", "improvement", "unchanged")
OP_KEY = ["module", "op"]
_SIDE_COLS = ["occurrences", "total_ps", "mean_ps"]


@dataclass
class Diff:
    """What ``tracekit diff`` found. ``data`` is the JSON envelope (``schema: tracekit.diff/1``)."""

    data: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.data.get("failed"))

    def to_json(self) -> str:
        return json.dumps(self.data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


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
    """Mean and median step time over every (device, step) of a trace, with the step count and sources."""
    s = tr.steps
    if not len(s):
        return {"steps": 0, "rows": 0, "mean_ps": None, "median_ps": None, "step_source": []}
    d = s["duration_ps"].astype("float64")
    return _clean({"steps": int(s["step"].nunique()), "rows": int(len(s)), "mean_ps": float(d.mean()),
                   "median_ps": float(d.median()), "step_source": sorted(set(s["step_source"].astype(str)))})


def compare(base, new, *, threshold: float = DEFAULT_THRESHOLD, min_time_ps: int = DEFAULT_MIN_TIME_PS,
            run: str | None = None) -> Diff:
    """Load (paths) or take (:class:`tracekit.Trace`) both sides and compare them."""
    from tracekit.pipeline import _display_path
    from tracekit.report.envelope import _version
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
        step.update(_clean({"change": ch, "delta_median_ps": delta, "status": st}))
    counts = {s: int((m["status"] == s).sum()) for s in STATUSES}
    counts.update({f"matched_by_{k}": int((m["match"] == k).sum()) for k in ("name", "shape")})
    rows = [{k: _clean(v) for k, v in r.items()} for r in m.to_dict("records")]
    for r in rows:  # NaN on a missing side reads as null; keys of the other side's name only when they differ
        if r["new_op"] is None or (r["new_module"] == r["module"] and r["new_op"] == r["op"]):
            r.pop("new_module"), r.pop("new_op")
    data = {
        "schema": SCHEMA,
        "tool": {"name": "tracekit", "version": _version()},
        "inputs": {"base": [_display_path(p) for p in trs[0].paths], "new": [_display_path(p) for p in trs[1].paths]},
        "params": _clean({"threshold": threshold, "min_time_ps": min_time_ps}),
        "step_time": step,
        "summary": counts,
        "ops": rows,
        "failed": counts["regression"] > 0 or step["status"] == "regression",
        "units": {"*_ps": "picoseconds", "change": "fraction (new / base - 1)"},
    }
    return Diff(data)


# ------------------------------------------------------------------------------------------------------ rendering
FORMATS = ("text", "json", "markdown")


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        from tracekit.errors import TraceError
        raise TraceError(f"`tracekit diff` cannot write {fmt}", hint="use text, json or markdown (.txt .json .md)")
    return fmt


def render(diff: Diff, fmt: str, *, top: int = 20, **_) -> str:
    check_format(fmt)
    if fmt == "json":
        return diff.to_json()
    if fmt == "text":
        return render_text(diff, top=top)
    from tracekit.report.render.markdown import render_diff
    return render_diff(diff.data, top=top)


def op_cells(r: dict) -> list[str]:
    """Display cells for an op row: op, module, match, occurrences, base mean, new mean, change, delta total."""
    name = r["op"] if "new_op" not in r else f"{r['op']} → {r['new_op']}"
    occ = f"{_int(r.get('base_occurrences'))} → {_int(r.get('new_occurrences'))}"
    return [name, r["module"], r["match"], occ, fmt_time(r.get("base_mean_ps")), fmt_time(r.get("new_mean_ps")),
            _signed_pct(r.get("change")), _signed_time(r.get("impact_ps"))]


OP_HEADERS = ["op", "module", "matched by", "n (base → new)", "mean base", "mean new", "change", "impact"]


def _int(x) -> str:
    return "—" if x is None else f"{int(x):,}"


def _signed_pct(x) -> str:
    return "—" if x is None else ("+" if x > 0 else "") + fmt_pct(x)  # fmt_pct writes the minus sign


def _signed_time(x) -> str:
    return "—" if x is None else ("+" if x > 0 else "-" if x < 0 else "") + fmt_time(abs(x))


def headline(d: dict) -> list[str]:
    """The lines every diff rendering starts with (plain text, no markup)."""
    s, st, p = d["summary"], d["step_time"], d["params"]
    out = [f"base: {', '.join(d['inputs']['base'])}", f"new:  {', '.join(d['inputs']['new'])}",
           f"thresholds: change >= {fmt_pct(p['threshold'])} and >= {fmt_time(p['min_time_ps'])} per execution"]
    if st["status"] == "unknown":
        out.append("step time: unknown (no steps on " + ("either side" if not st["base"]["steps"] and
                                                           not st["new"]["steps"] else "one side") + ")")
    else:
        out.append(f"step time (median): {fmt_time(st['base']['median_ps'])} → {fmt_time(st['new']['median_ps'])} "
                   f"({_signed_pct(st['change'])}; mean {fmt_time(st['base']['mean_ps'])} → "
                   f"{fmt_time(st['new']['mean_ps'])}): {st['status']}")
    out.append(f"ops: {s['regression']} regressed, {s['improvement']} improved, {s['added']} added, "
               f"{s['removed']} removed, {s['unchanged']} unchanged (matched {s['matched_by_name']} by name, "
               f"{s['matched_by_shape']} by opcode and shape)")
    return out


def verdict(d: dict) -> str:
    if not d["failed"]:
        return "passed: no regression"
    parts = [f"{d['summary']['regression']} op(s) regressed"] if d["summary"]["regression"] else []
    parts += ["the step time regressed"] if d["step_time"]["status"] == "regression" else []
    return "FAILED: " + " and ".join(parts)


TITLES = {"regression": "Regressions", "added": "Added (only in NEW)", "removed": "Removed (only in BASE)",
          "improvement": "Improvements"}


def render_text(diff: Diff, *, top: int = 20) -> str:
    from tracekit.report.render.text import _table
    from tracekit.report.termsafe import safe_tree
    d = safe_tree(diff.data)  # names from the traces, printed on a terminal
    out = [f"tracekit {d['tool']['version']} diff", *headline(d)]
    for status in STATUSES[:-1]:
        rows = [r for r in d["ops"] if r["status"] == status]
        if rows:
            out += ["", f"{TITLES[status]}: {len(rows)}"]
            out += _table(OP_HEADERS, [[c[:60] for c in op_cells(r)] for r in rows[:top]], right={4, 5, 6, 7})
            if len(rows) > top:
                out.append(f"… and {len(rows) - top} more")
    out += ["", verdict(d)]
    return "\n".join(out) + "\n"
