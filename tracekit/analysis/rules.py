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

import functools
import re

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, numbers_or_series, take_rows, text_numpy
from tracekit.errors import TraceError
from tracekit.options import DEFAULTS
from tracekit.analysis import evidence
from tracekit.analysis.evidence import top_rows
from tracekit.analysis.rule_checks import CHECKS
from tracekit.analysis.claims import claim_intervals
from tracekit.analysis.rule_model import TIME_COLUMN, Rule, params_for
from tracekit.analysis.rule_expr import ExprError

# ------------------------------------------------------------------------------------------------------- running
def applicable(rule: Rule, frames: dict) -> str | None:
    """Why ``rule`` cannot run on ``frames`` (a missing or empty frame), or None when it can."""
    for name in (rule.frame, *rule.needs):
        if frames.get(name) is None or len(frames[name]) == 0:
            return f"frame {name!r} missing or empty"
    return None


def evaluate(rule: Rule, frames: dict, params: dict) -> pd.DataFrame:
    """The evidence rows of ``rule`` with a ``savings_ps`` column (clipped to [0, row time]), largest savings
    first (ties in frame order)."""
    ev = evidence_rows(rule, frames, params)
    return ev.take(top_rows(column_numpy(ev, "savings_ps"), len(ev))).reset_index(drop=True) if len(ev) else ev


def evidence_rows(rule: Rule, frames: dict, params: dict) -> pd.DataFrame:
    """:func:`evaluate` before the sort: the evidence rows in frame order."""
    df = frames[rule.frame]
    keep = _narrow(rule, df)
    ours = workload_rows(rule, frames, df)
    # a narrowed frame (``keep``) is never copied whole: ``where`` and ``derive`` read their columns by name
    # (element-wise), the derived columns beside the frame (a derived column named as one of the frame's takes its
    # place, as assign would); the rows are selected first, then the kept columns
    aside = keep is not None and df.columns.is_unique
    if not aside and ours is not None:
        df, ours = df[ours], None
    derived: dict = {}
    for name in rule.derive:
        v = rule.exprs[f"derive.{name}"].evaluate(_Beside(df, derived) if aside else df, params)
        if aside:
            derived[name] = (v if v.index is df.index else v.reindex(df.index)) if isinstance(v, pd.Series) else \
                pd.Series(v, index=df.index)
        else:
            df = df.assign(**{name: v})
    if rule.check:
        ev = CHECKS[rule.check]({**frames, rule.frame: df}, params)
    else:
        hit = np.asarray(_mask(rule.exprs["where"].evaluate(_Beside(df, derived) if aside else df, params), df), bool)
        rows = np.flatnonzero(hit if ours is None else hit & ours)
        if keep is None:
            ev = df.iloc[rows]
        elif aside:  # (derived columns after the kept ones, in their order, as they were added)
            ev = take_rows(df, keep, rows, derived)
        else:
            ev = df.loc[df.index[rows], keep + [n for n in rule.derive if n not in keep]]
    if rule.rank and len(ev) > 1:  # rows of equal savings: the largest ``rank`` first (stable: frame order after)
        ev = ev.sort_values(rule.rank, ascending=False, kind="stable")
    ev = ev.reset_index(drop=True)
    if ev.empty:
        return ev.assign(savings_ps=np.empty(0, "float64"))
    sav = rule.exprs["savings"].evaluate(ev, params)
    sav = np.broadcast_to(np.asarray(sav, dtype="float64"), (len(ev),))
    cap = ev[rule.time or TIME_COLUMN[rule.frame]].to_numpy("float64")
    ev["savings_ps"] = np.nan_to_num(np.clip(sav, 0, np.nan_to_num(cap, nan=0.0)), nan=0.0)
    return ev


def for_workload(rule: Rule, frames: dict, df: pd.DataFrame) -> pd.DataFrame:
    """``df`` without the rows a ``workload: training`` rule must not read: those of the programs the ``serving``
    frame holds (by module and program id, or module), or every row of a frame without a program column when any
    program serves (its steps and devices are the serving programs')."""
    ours = workload_rows(rule, frames, df)
    return df if ours is None else df[ours]


def workload_rows(rule: Rule, frames: dict, df: pd.DataFrame) -> np.ndarray | None:
    """The rows of ``df`` :func:`for_workload` keeps, as a boolean per row; None: every row."""
    sv = frames.get("serving")
    if rule.workload != "training" or sv is None or not len(sv) or not len(df):
        return None
    if "module" not in df.columns:
        return np.zeros(len(df), bool)
    mods = text_numpy(df, "module")
    if "program_id" in df.columns:
        keys = set(zip(sv["module"].astype(str), column_numpy(sv, "program_id").astype(np.uint64).tolist()))
        pids = column_numpy(df, "program_id").astype(np.uint64).tolist()
        serving = np.fromiter(((m, int(p)) in keys for m, p in zip(mods, pids)), bool, len(df))
    else:
        serving = np.isin(mods, sv["module"].astype(str).unique())
    return ~serving


class _Beside:
    """A frame's columns and the derived columns beside it, by name (what an expression reads)."""

    def __init__(self, df: pd.DataFrame, derived: dict):
        self.df, self.derived, self.index = df, derived, df.index

    def __getitem__(self, name):
        if name in self.derived:
            return self.derived[name]
        return numbers_or_series(self.df, name)


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


@functools.lru_cache(maxsize=1024)
def _names_in(texts: tuple) -> frozenset:
    """The column names the expressions and templates ``texts`` can read (an aggregate's prefix taken off)."""
    return frozenset(_AGG_PREFIX.sub("", w) for t in texts for w in _IDENT.findall(t))


def _narrow(rule: Rule, df: pd.DataFrame) -> list | None:
    """The columns of ``df`` the rule can touch (where, savings, derive, report_if, templates, evidence, time), in
    frame order, or None for all of them: on a large frame the evidence rows then copy a few columns instead of
    all of them. Python checks see everything."""
    if rule.check or len(df.columns) <= 12:
        return None
    texts = (rule.where, rule.savings, rule.report_if, rule.message, rule.fix, *rule.derive.values())
    names = set(_names_in(tuple(str(t) for t in texts if t)))
    names |= set(rule.evidence or ()) | {"host", "device", rule.time or TIME_COLUMN.get(rule.frame, "")}
    names |= {rule.rank} if rule.rank else set()
    names |= {"start_ps", "span_ps", "duration_ps", "step_ps", "module", "program_id", "op"}  # where claims sit
    cols = [c for c in df.columns.tolist() if c in names]
    return cols if len(cols) < len(df.columns) else None


def run_rules(frames: dict, rules: list, params_override: dict | None = None, *,
              max_evidence: int = DEFAULTS.max_evidence) -> list:
    """Run ``rules`` over ``frames`` (name -> DataFrame, as :func:`tracekit.analysis.rule_checks.frames_for_rules` builds). ``params_override``
    maps a rule id or name to {param: value}. Rules whose frames are missing or empty are skipped (see
    :func:`applicable`). Returns findings sorted by savings, largest first."""
    params_override = check_params(rules, params_override)
    span, profiled = evidence.spans(frames.get("devices"))
    todo = [(rule, rule.resolve(params_for(rule, params_override))) for rule in rules]
    todo = [(rule, params) for rule, params in todo if not applicable(rule, frames)]

    # one rule after the other: a rule takes milliseconds even at millions of rows (its frame is built already),
    # and a thread pool measured no faster at 1.5 M events while holding every rule's evidence at once; each
    # rule's evidence is summarized, and freed, before the next rule runs
    items = []
    for rule, params in todo:
        try:
            ev = evidence_rows(rule, frames, params)
        except (KeyError, AttributeError, TypeError, ValueError, ArithmeticError) as e:  # ExprError: a ValueError
            raise failed(rule, e) from None
        if ev.empty:
            continue
        items.append((rule, params, evidence.summarize(rule, ev, max_evidence,
                                                       claims=claim_intervals(rule.frame, ev, frames, rule.time))))
    return evidence.findings(items, span, profiled, max_evidence)


def check_params(rules: list, params_override: dict | None) -> dict:
    """``params_override`` as a dict, refused (TraceError) when it names a rule that is not in ``rules``."""
    params_override = dict(params_override or {})
    known = {k.casefold() for r in rules for k in (r.id, r.name)}
    unknown = sorted(k for k in params_override if str(k).casefold() not in known)
    if unknown:
        raise TraceError(f"parameters given for unknown rule {unknown[0]!r}")
    return params_override


def failed(rule: Rule, err: Exception) -> TraceError:
    """The one-line error of a rule whose expressions failed on its frame."""
    return TraceError(f"rule {rule.id} ({rule.name}) failed on frame {rule.frame!r}: {err}", rule.path,
                      "check the column names its where/savings/derive use")
