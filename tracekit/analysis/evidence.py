"""A rule's evidence, summarized into what a finding needs, and the findings made from such summaries.

A rule's evidence rows can be as many as the trace's events (one per gap, per collective execution). A finding
reads only: the row count, the savings summed per device, the ``k`` rows with the largest savings, the hosts, and
the ``sum_/mean_/min_/max_/median_<column>`` aggregates its templates name. :class:`Evidence` holds exactly that,
and two summaries of disjoint rows (two hosts) merge into the summary of their union (:func:`merge`): counts,
sums, minima, maxima and per-device savings exactly; the top ``k`` rows exactly (ties in row order, the hosts taken
in order); a ``median_`` exactly while every row is held (at most ``k``), else it is not known (NaN).

:func:`findings` turns summaries into :class:`~tracekit.analysis.rule_model.Finding` objects, capped and claimed as
:mod:`tracekit.analysis.rules` describes; the single-process run and the pod's reduce both use it.
"""
from __future__ import annotations

import math
import re
from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.analysis.rule_model import DEFAULT_EVIDENCE, SEVERITIES, TIME_COLUMN, Finding
from tracekit.columns import column_numpy, stack
from tracekit.grouping import unique_rows
from tracekit.errors import TraceError
from tracekit.options import DEFAULTS
from tracekit.records import record
from tracekit.units import fmt_time

AGGS = ("sum", "mean", "min", "max", "median")
_AGG_WORD = re.compile(r"\b(?:t_)?(sum|mean|min|max|median)_(\w+)")


@record(frozen=True)
class Evidence:
    """One rule's evidence rows, summarized (see the module docstring)."""

    rule_id: str
    count: int  #: evidence rows
    columns: tuple  #: the evidence frame's columns
    top: pd.DataFrame  #: the rows with the largest savings_ps, largest first (at most ``k``)
    per_device: tuple  #: ((host, device), savings summed) per device, or (("*", "*"), total) without those columns
    has_device: bool  #: the rows have host and device columns
    hosts: frozenset  #: distinct hosts of the rows (empty without a host column)
    aggs: dict = field(default_factory=dict)  #: (agg, column) -> value, for the columns the templates name
    complete: bool = True  #: ``top`` holds every row
    claims: dict = field(default_factory=dict, repr=False, compare=False)  #: (host, device) -> (starts, ends)


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


def agg_columns(rule) -> set:
    """The columns whose aggregates the rule's message, fix or report_if name (``sum_exposed_ps`` -> exposed_ps)."""
    texts = [rule.message, rule.fix, rule.report_if]
    return {m.group(2) for t in texts if t for m in _AGG_WORD.finditer(str(t))}


def _per_device(ev: pd.DataFrame) -> tuple:
    """Savings summed per (host, device), keys as text, in the order a sorted groupby gives (categories by their
    code, other values by value); one ("*", "*") entry without those columns."""
    if {"host", "device"} <= set(ev.columns):
        inv, rows = unique_rows(ev, ["host", "device"])
        tot = np.bincount(inv, weights=column_numpy(ev, "savings_ps", np.float64), minlength=len(rows))
        rank = []
        for col in ("host", "device"):
            s = ev[col]
            rank.append({v: i for i, v in enumerate(s.cat.categories)} if isinstance(s.dtype, pd.CategoricalDtype)
                        else None)
        order = sorted(range(len(rows)), key=lambda i: tuple(
            r[rows[i][j]] if r is not None else rows[i][j] for j, r in enumerate(rank)))
        return tuple(((str(rows[i][0]), str(rows[i][1])), float(tot[i])) for i in order)
    return ((("*", "*"), float(ev["savings_ps"].sum())),)


def summarize(rule, ev: pd.DataFrame, k: int, claims: dict | None = None) -> Evidence:
    """The summary of ``rule``'s evidence rows ``ev`` (with ``savings_ps``, largest first as
    :func:`tracekit.analysis.rules.evaluate` orders them), keeping the top ``k`` rows."""
    top = ev.take(top_rows(column_numpy(ev, "savings_ps"), max(k, 1))).reset_index(drop=True)
    aggs = {}
    for col in agg_columns(rule):
        if col in ev.columns:
            x = pd.to_numeric(ev[col], errors="coerce")
            aggs.update({("sum", col): x.sum(), ("n", col): int(x.notna().sum()), ("min", col): x.min(),
                         ("max", col): x.max(), ("median", col): x.median()})
    return Evidence(rule.id, int(len(ev)), tuple(ev.columns), top, _per_device(ev),
                    {"host", "device"} <= set(ev.columns),
                    frozenset(ev["host"].astype(str).unique()) if "host" in ev.columns else frozenset(),
                    aggs, len(top) == len(ev), claims or {})


def merge(parts: list, k: int) -> Evidence | None:
    """The summary of the union of disjoint evidence summaries of one rule (``parts`` in row order: hosts in
    order); None when there is none."""
    parts = [p for p in parts if p is not None and p.count]
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    rows = stack([p.top for p in parts])
    top = rows.take(top_rows(column_numpy(rows, "savings_ps"), max(k, 1))).reset_index(drop=True)
    per: dict = {}
    for p in parts:
        for key, v in p.per_device:
            per[key] = per.get(key, 0.0) + v
    complete = all(p.complete for p in parts) and len(rows) <= max(k, 1)
    aggs: dict = {}
    for key in parts[0].aggs:
        vals = [p.aggs[key] for p in parts if key in p.aggs]
        how = key[0]
        if how in ("sum", "n"):
            aggs[key] = sum(vals[1:], vals[0])
        elif how in ("min", "max"):
            ok = [v for v in vals if v == v]
            aggs[key] = (min if how == "min" else max)(ok) if ok else math.nan
        elif how == "median":
            aggs[key] = pd.to_numeric(rows[key[1]], errors="coerce").median() if complete else math.nan
    return Evidence(parts[0].rule_id, sum(p.count for p in parts), parts[0].columns, top, tuple(per.items()),
                    parts[0].has_device, frozenset().union(*(p.hosts for p in parts)), aggs, complete,
                    {kk: v for p in parts for kk, v in p.claims.items()})


class Values(dict):
    """Template values: fixed keys, ``sum_/mean_/min_/max_/median_<column>`` of the evidence, ``top_<column>`` of
    the evidence row with the largest savings, and ``t_`` in front of any of those for the value formatted as a
    duration (``{t_sum_exposed_ps}`` -> ``1.5 ms``)."""

    def __init__(self, ev: Evidence, base: dict):
        super().__init__(base)
        self.ev = ev

    def __missing__(self, key: str):
        if key.startswith("t_"):
            return fmt_time(self[key[2:]])
        if key.startswith("top_") and key[4:] in self["top"]:
            return self["top"][key[4:]]
        agg, _, col = key.partition("_")
        if agg in AGGS and col in self.ev.columns:
            if agg == "mean":
                n = self.ev.aggs.get(("n", col), 0)
                return self.ev.aggs[("sum", col)] / n if n else math.nan
            if (agg, col) in self.ev.aggs:
                return self.ev.aggs[(agg, col)]
        raise KeyError(key)


def findings(items: list, span: dict, profiled: float, max_evidence: int = DEFAULTS.max_evidence) -> list:
    """Findings from ``items`` [(rule, resolved params, :class:`Evidence` or None)]: each summary's savings
    capped per device at its span (``span``: (host, device) -> ps) and in total at ``profiled``, report_if and
    the templates evaluated, then sorted by savings and claimed greedily (see :mod:`tracekit.analysis.rules`)."""
    pending = []
    for rule, params, ev in items:
        if ev is None or not ev.count:
            continue
        per_dev = {key: min(v, span.get(key, math.inf)) for key, v in ev.per_device}
        savings = min(float(sum(per_dev.values())), profiled)
        if rule.claims_time and round(savings) <= 0:  # a claim that rounds to 0 ps is no finding
            continue
        share = savings / profiled if 0 < profiled < math.inf else math.nan
        top = ev.top
        values = Values(ev, {**params, "count": ev.count, "savings_ps": savings, "savings": fmt_time(savings),
                             "share": share, "profiled_ps": profiled, "top": top.iloc[0].to_dict(),
                             "devices": len(per_dev) if ev.has_device else 0, "hosts": len(ev.hosts)})
        if rule.report_if and not bool(np.asarray(rule.exprs["report_if"].evaluate(values, params)).ravel()[0]):
            continue
        cols = [c for c in (rule.evidence or DEFAULT_EVIDENCE + [rule.time or TIME_COLUMN[rule.frame]])
                if c in ev.columns and c != "savings_ps"]
        try:
            message, fix = rule.message.format_map(values), rule.fix.format_map(values)
        except (KeyError, IndexError, ValueError) as e:
            raise TraceError(f"bad message or fix template ({e!r})", rule.path) from None
        pending.append((Finding(rule.id, rule.name, rule.severity, message, fix, params,
                                top[cols + ["savings_ps"]].head(max_evidence), ev.count, int(round(savings)), 0,
                                share, profiled, rule.groups, rule.why, claims=ev.claims,
                                indicative=bool("indicative" in top.columns and top["indicative"].astype(bool).all())),
                        per_dev))
    # (indicative findings after the others: an estimate's savings must not outrank a measured problem)
    pending.sort(key=lambda fp: (fp[0].indicative, -fp[0].savings_ps, SEVERITIES.index(fp[0].severity) * -1,
                                 fp[0].rule_id))
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


def spans(devices: pd.DataFrame | None) -> tuple[dict, float]:
    """((host, device) -> span_ps, profiled time) of a devices frame; ({}, inf) without one."""
    if devices is not None and len(devices) and "span_ps" in devices.columns:
        span = dict(zip(zip(devices["host"].astype(str), devices["device"].astype(str)),
                        devices["span_ps"].astype(float)))
        return span, float(sum(span.values()))
    return {}, math.inf
