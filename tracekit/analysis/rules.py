"""Rules as data: load rule files, run them over the analysis frames, return findings sorted by savings.

A rule is one YAML file (``rules/TK001-unoverlapped-collective.yaml``). It names the frame it reads and selects
*evidence rows* from it, either with one vectorized expression (``where``, in the safe grammar of
:mod:`tracekit.analysis.rule_expr`, with the rule's parameters available as ``@name``) or with a registered Python
check (``check``, see :mod:`tracekit.analysis.rule_checks`). ``savings`` is an expression giving the estimated time
saved per evidence row, in ps. The fields are listed in :data:`FIELDS`; ``docs/rules.md`` is generated from the files by
:mod:`tracekit.report.rulesdoc`.

Savings, and how overlapping claims are handled
-----------------------------------------------
1. Per row: the ``savings`` value is clipped to ``[0, row time]``, where the row time is the rule's ``time``
   column (by default the frame's own duration, :data:`TIME_COLUMN`). NaN counts as 0.
2. Per finding: when the evidence has ``host`` and ``device`` columns and the ``devices`` frame gives the device's
   ``span_ps``, the sum over a device is capped at that span; the finding's total is capped at the profiled time
   (the sum of ``span_ps`` over devices). ``savings_ps`` is this standalone estimate: what fixing this one finding
   could save, as device time summed over devices; ``share`` = savings_ps / profiled time.
3. Across findings: rows of different rules can claim the same time (an exposed collective is also part of a
   collective-bound step). Findings are taken in decreasing ``savings_ps`` and each ``claimed_ps`` may only use
   the device time (and total profiled time) not yet claimed by an earlier finding, so ``sum(claimed_ps)`` never
   exceeds the profiled time. Without a ``devices`` frame nothing caps beyond step 1 and ``share`` is NaN.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from tracekit.columns import unique_rows
from tracekit.errors import TraceError
from tracekit.units import fmt_time
from tracekit.analysis.rule_checks import CHECKS
from tracekit.analysis.claims import claim_intervals
from tracekit.analysis.rule_model import DEFAULT_EVIDENCE, SEVERITIES, TIME_COLUMN, Finding, Rule, params_for
from tracekit.analysis.rule_expr import ExprError

# ------------------------------------------------------------------------------------------------------- running
class _Values(dict):
    """Template values: fixed keys, ``sum_/mean_/min_/max_/median_<column>`` of the evidence, ``top_<column>`` of
    the evidence row with the largest savings, and ``t_`` in front of any of those for the value formatted as a
    duration (``{t_sum_exposed_ps}`` -> ``1.5 ms``)."""

    def __init__(self, evidence: pd.DataFrame, base: dict):
        super().__init__(base)
        self.ev = evidence

    def __missing__(self, key: str):
        if key.startswith("t_"):
            return fmt_time(self[key[2:]])
        if key.startswith("top_") and key[4:] in self["top"]:
            return self["top"][key[4:]]
        agg, _, col = key.partition("_")
        if agg in ("sum", "mean", "min", "max", "median") and col in self.ev.columns:
            return getattr(pd.to_numeric(self.ev[col], errors="coerce"), agg)()
        raise KeyError(key)


def applicable(rule: Rule, frames: dict) -> str | None:
    """Why ``rule`` cannot run on ``frames`` (a missing or empty frame), or None when it can."""
    for name in (rule.frame, *rule.needs):
        if frames.get(name) is None or len(frames[name]) == 0:
            return f"frame {name!r} missing or empty"
    return None


def evaluate(rule: Rule, frames: dict, params: dict) -> pd.DataFrame:
    """The evidence rows of ``rule`` with a ``savings_ps`` column (clipped to [0, row time]), largest savings
    first (ties in frame order)."""
    ev = _evidence(rule, frames, params)
    return ev.take(top_rows(ev["savings_ps"].to_numpy(), len(ev))).reset_index(drop=True) if len(ev) else ev


def top_rows(savings: np.ndarray, k: int) -> np.ndarray:
    """Positions of the ``k`` largest savings, largest first, ties in row order (what a stable descending sort
    gives), without sorting every row when ``k`` is small."""
    n = len(savings)
    k = min(k, n)
    if k <= 0:
        return np.zeros(0, np.int64)
    if k < n // 4:
        kth = np.partition(savings, n - k)[n - k]  # the k-th largest value
        cand = np.nonzero(savings >= kth)[0]  # every row at or above it (ties included), in row order
    else:
        cand = np.arange(n)
    return cand[np.argsort(-savings[cand], kind="stable")][:k]


def _evidence(rule: Rule, frames: dict, params: dict) -> pd.DataFrame:
    """:func:`evaluate` before the sort: the evidence rows in frame order."""
    df = _narrow(rule, frames[rule.frame])
    for name in rule.derive:
        df = df.assign(**{name: rule.exprs[f"derive.{name}"].evaluate(df, params)})
    if rule.check:
        ev = CHECKS[rule.check]({**frames, rule.frame: df}, params)
    else:
        ev = df.loc[_mask(rule.exprs["where"].evaluate(df, params), df)]
    ev = ev.reset_index(drop=True)
    if ev.empty:
        return ev.assign(savings_ps=pd.Series(dtype="float64"))
    sav = rule.exprs["savings"].evaluate(ev, params)
    sav = np.broadcast_to(np.asarray(sav, dtype="float64"), (len(ev),))
    cap = ev[rule.time or TIME_COLUMN[rule.frame]].to_numpy("float64")
    ev["savings_ps"] = np.nan_to_num(np.clip(sav, 0, np.nan_to_num(cap, nan=0.0)), nan=0.0)
    return ev


def _mask(value, df: pd.DataFrame):
    """``where``'s value as a row selection: a boolean per row (missing counts as false) or one boolean."""
    if isinstance(value, (bool, np.bool_)):
        return np.full(len(df), bool(value))
    if isinstance(value, pd.Series) and value.dtype == "boolean":
        return value.fillna(False).astype(bool)
    if isinstance(value, pd.Series) and value.dtype == bool:
        return value
    raise ExprError(f"`where` must be true or false per row, got {getattr(value, 'dtype', type(value).__name__)}")


_IDENT = re.compile(r"[A-Za-z_]\w*")
_AGG_PREFIX = re.compile(r"^(?:t_)?(?:top_|(?:sum|mean|min|max|median)_)?")


def _narrow(rule: Rule, df: pd.DataFrame) -> pd.DataFrame:
    """Only the columns the rule can touch (where, savings, derive, report_if, templates, evidence, time): on a
    large frame the evidence rows then copy a few columns instead of all of them. Python checks see everything."""
    if rule.check or len(df.columns) <= 12:
        return df
    texts = [rule.where, rule.savings, rule.report_if, rule.message, rule.fix, *rule.derive.values()]
    names = {_AGG_PREFIX.sub("", w) for t in texts if t for w in _IDENT.findall(str(t))}
    names |= set(rule.evidence or ()) | {"host", "device", rule.time or TIME_COLUMN.get(rule.frame, "")}
    names |= {"start_ps", "span_ps", "duration_ps", "step_ps", "module", "program_id", "op"}  # where claims sit
    cols = [c for c in df.columns if c in names]
    return df[cols] if len(cols) < len(df.columns) else df


def _per_device(ev: pd.DataFrame) -> pd.Series:
    """Savings summed per (host, device), keys as text, sorted; one ("*", "*") entry without those columns."""
    if {"host", "device"} <= set(ev.columns):
        inv, rows = unique_rows(ev, ["host", "device"])
        tot = np.bincount(inv, weights=ev["savings_ps"].to_numpy(np.float64), minlength=len(rows))
        # in the order a sorted groupby gives: categories by their code, other values by value
        rank = []
        for col in ("host", "device"):
            s = ev[col]
            rank.append({v: i for i, v in enumerate(s.cat.categories)} if isinstance(s.dtype, pd.CategoricalDtype)
                        else None)
        order = sorted(range(len(rows)), key=lambda i: tuple(
            r[rows[i][j]] if r is not None else rows[i][j] for j, r in enumerate(rank)))
        return pd.Series(tot[order], index=pd.MultiIndex.from_tuples(
            [(str(rows[i][0]), str(rows[i][1])) for i in order]))
    return pd.Series({("*", "*"): ev["savings_ps"].sum()})


def _report(rule: Rule, values: _Values, params: dict) -> bool:
    """Evaluate ``report_if`` over the finding's aggregates."""
    ok = rule.exprs["report_if"].evaluate(values, params)
    return bool(np.asarray(ok).ravel()[0])


def run_rules(frames: dict, rules: list, params_override: dict | None = None, *, max_evidence: int = 10) -> list:
    """Run ``rules`` over ``frames`` (name -> DataFrame, as :func:`tracekit.analysis.rule_checks.frames_for_rules` builds). ``params_override``
    maps a rule id or name to {param: value}. Rules whose frames are missing or empty are skipped (see
    :func:`applicable`). Returns findings sorted by savings, largest first."""
    params_override = dict(params_override or {})
    known = {k.casefold() for r in rules for k in (r.id, r.name)}
    unknown = sorted(k for k in params_override if str(k).casefold() not in known)
    if unknown:
        raise TraceError(f"parameters given for unknown rule {unknown[0]!r}")
    devs = frames.get("devices")
    if devs is not None and len(devs) and "span_ps" in devs.columns:
        span = dict(zip(zip(devs["host"].astype(str), devs["device"].astype(str)), devs["span_ps"].astype(float)))
        profiled = float(sum(span.values()))
    else:
        span, profiled = {}, math.inf
    pending = []
    todo = [(rule, rule.resolve(params_for(rule, params_override))) for rule in rules]
    todo = [(rule, params) for rule, params in todo if not applicable(rule, frames)]

    def run_one(item):
        rule, params = item
        try:
            return _evidence(rule, frames, params), None
        except (KeyError, AttributeError, TypeError, ValueError, ArithmeticError) as e:  # ExprError is a ValueError
            return None, e
    # the rules are independent pure functions of the frames: NumPy's row selections and sorts release the GIL,
    # so a second core helps (TRACEKIT_THREADS=1: one after the other); results are taken in rule order
    from concurrent.futures import ThreadPoolExecutor

    from tracekit.threads import default_threads
    with ThreadPoolExecutor(max_workers=max(1, min(2, default_threads()))) as pool:
        results = list(pool.map(run_one, todo))
    for (rule, params), (ev, err) in zip(todo, results):
        if err is not None:
            raise TraceError(f"rule {rule.id} ({rule.name}) failed on frame {rule.frame!r}: {err}", rule.path,
                             "check the column names its where/savings/derive use") from None
        if ev.empty:
            continue
        per_dev = _per_device(ev)
        per_dev = pd.Series([min(v, span.get(k, math.inf)) for k, v in per_dev.items()], index=per_dev.index)
        savings = min(float(per_dev.sum()), profiled)
        share = savings / profiled if 0 < profiled < math.inf else math.nan
        # the evidence shown: the rows with the largest savings (the rest only feed counts and aggregates)
        top = ev.take(top_rows(ev["savings_ps"].to_numpy(), max(max_evidence, 1))).reset_index(drop=True)
        values = _Values(ev, {**params, "count": len(ev), "savings_ps": savings, "savings": fmt_time(savings),
                              "share": share, "profiled_ps": profiled, "top": top.iloc[0].to_dict(),
                              "devices": len(per_dev) if {"host", "device"} <= set(ev.columns) else 0,
                              "hosts": ev["host"].nunique() if "host" in ev.columns else 0})
        if rule.report_if and not _report(rule, values, params):
            continue
        cols = [c for c in (rule.evidence or DEFAULT_EVIDENCE + [rule.time or TIME_COLUMN[rule.frame]])
                if c in ev.columns and c != "savings_ps"]
        try:
            message, fix = rule.message.format_map(values), rule.fix.format_map(values)
        except (KeyError, IndexError, ValueError) as e:
            raise TraceError(f"bad message or fix template ({e!r})", rule.path) from None
        pending.append((Finding(rule.id, rule.name, rule.severity, message, fix, params,
                                top[cols + ["savings_ps"]].head(max_evidence), len(ev), int(round(savings)), 0,
                                share, profiled, rule.groups, rule.why,
                                claims=claim_intervals(rule.frame, ev, frames)), per_dev))
    pending.sort(key=lambda fp: (-fp[0].savings_ps, SEVERITIES.index(fp[0].severity) * -1, fp[0].rule_id))
    used, total_used = {}, 0.0
    for f, per_dev in pending:  # greedy: larger findings claim device time first
        want = {k: max(0.0, min(v, span.get(k, math.inf) - used.get(k, 0.0))) for k, v in per_dev.items()}
        total = sum(want.values())
        scale = min(1.0, (profiled - total_used) / total) if total > 0 else 0.0
        for k, v in want.items():
            used[k] = used.get(k, 0.0) + v * scale
        total_used += total * scale
        f.claimed_ps = int(math.floor(total * scale))
    return [f for f, _ in pending]
