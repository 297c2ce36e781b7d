"""Rules as data: load rule files, run them over the analysis frames, return findings sorted by savings.

A rule is one YAML file (``rules/TK001-unoverlapped-collective.yaml``). It names the frame it reads and selects
*evidence rows* from it, either with one vectorized pandas expression (``where``, run by ``DataFrame.query`` with
the rule's parameters available as ``@name``) or with a registered Python check (``check``, see
:mod:`tracekit.rule_checks`). ``savings`` is an expression giving the estimated time saved per evidence row, in
ps. The fields are listed in :data:`FIELDS`; ``docs/rules.md`` is generated from the files by
:mod:`tracekit.rulesdoc`.

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

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from tracekit.columns import unique_rows
from tracekit.errors import TraceError
from tracekit.rule_checks import CHECKS, HOST_EVENTS, frames_for_rules  # noqa: F401  (re-exported)

SEVERITIES = ("info", "warning", "error")
#: Frame a rule reads -> the column that is each row's own time (the cap on its savings).
TIME_COLUMN = {"ops": "duration_ps", "op_stats": "total_ps", "collectives": "span_ps", "steps": "step_ps",
               "devices": "span_ps", "gaps": "duration_ps", "host_events": "duration_ps"}
FRAMES = tuple(TIME_COLUMN)
#: field -> (required, meaning)
FIELDS = {
    "id": (True, "stable code, e.g. TK001"),
    "name": (True, "kebab-case name of the anti-pattern"),
    "severity": (True, "info | warning | error"),
    "groups": (True, "list of groups the rule belongs to (select/ignore by group)"),
    "frame": (True, "frame it reads: " + " | ".join(FRAMES)),
    "summary": (True, "what it detects, one sentence"),
    "params": (False, "name -> {default, min, max, doc}"),
    "needs": (False, "other frames that must be present and non-empty"),
    "derive": (False, "name -> expression: columns added to the frame before `where`"),
    "where": (False, "pandas query over the frame's columns selecting evidence rows (or `check`)"),
    "check": (False, "name of a registered Python check returning evidence rows (or `where`)"),
    "savings": (True, "expression: estimated savings in ps per evidence row"),
    "time": (False, "column capping each row's savings (default: the frame's own duration column)"),
    "report_if": (False, "expression over the finding's aggregates (count, share, sum_COLUMN, max_COLUMN, ...)"),
    "evidence": (False, "columns shown as evidence"),
    "message": (True, "what is wrong: str.format template over the finding's aggregates"),
    "fix": (True, "what to do: str.format template"),
    "why": (True, "why it matters"),
    "references": (True, "list of links"),
    "cases": (True, "pass: / fail: lists of {rows, frames, params, expect}"),
}
_ID = re.compile(r"^[A-Z]{2,}\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_DEFAULT_EVIDENCE = ["host", "device", "module", "op", "opcode", "kernel", "name", "step", "start_ps"]


@dataclass(frozen=True)
class Param:
    default: Any
    min: float | None = None
    max: float | None = None
    doc: str = ""

    def coerce(self, value: Any, where: str) -> Any:
        """``value`` converted to the default's type and checked against min/max."""
        try:
            if isinstance(self.default, bool):
                value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
            elif isinstance(self.default, int):
                value = int(float(value))
            elif isinstance(self.default, float):
                value = float(value)
            else:
                value = str(value)
        except (TypeError, ValueError):
            raise TraceError(f"bad value {value!r}", where, f"expected a {type(self.default).__name__}") from None
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise TraceError(f"value {value!r} out of range [{self.min}, {self.max}]", where)
        return value


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: str
    groups: tuple
    frame: str
    summary: str
    savings: str
    message: str
    fix: str
    why: str
    references: tuple
    cases: dict
    params: dict = field(default_factory=dict)
    needs: tuple = ()
    derive: dict = field(default_factory=dict)
    where: str | None = None
    check: str | None = None
    time: str | None = None
    report_if: str | None = None
    evidence: tuple = ()
    path: str = ""

    def resolve(self, override: dict | None = None) -> dict:
        """Parameter values: defaults updated with ``override`` (validated)."""
        override = override or {}
        unknown = set(override) - set(self.params)
        if unknown:
            raise TraceError(f"unknown parameter {sorted(unknown)[0]!r} for rule {self.id} ({self.name})",
                             hint=f"known: {', '.join(self.params) or 'none'}")
        return {k: p.coerce(override[k], f"{self.id}.{k}") if k in override else p.default
                for k, p in self.params.items()}


@dataclass
class Finding:
    rule_id: str
    name: str
    severity: str
    message: str
    fix: str
    params: dict
    evidence: pd.DataFrame  #: the top evidence rows by savings (``max_evidence``), with a savings_ps column
    evidence_count: int  #: all evidence rows
    savings_ps: int  #: standalone estimate (see the module docstring)
    claimed_ps: int  #: the part not already claimed by a finding with larger savings
    share: float  #: savings_ps / profiled time (NaN when unknown)
    profiled_ps: float
    groups: tuple = ()
    why: str = ""

    def to_dict(self) -> dict:
        """JSON-ready: plain Python values, NaN as None."""
        return {"rule_id": self.rule_id, "name": self.name, "severity": self.severity, "message": self.message,
                "fix": self.fix, "params": dict(self.params),
                "evidence": json.loads(self.evidence.to_json(orient="records", double_precision=15)),
                "evidence_count": self.evidence_count, "savings_ps": self.savings_ps, "claimed_ps": self.claimed_ps,
                "share": None if math.isnan(self.share) else self.share, "groups": list(self.groups)}


# ------------------------------------------------------------------------------------------------------- loading
def builtin_rules_dir() -> Path:
    """The repository's ``rules/`` next to the package (source or editable install), else the copy shipped
    inside the package as ``tracekit/builtin_rules`` (wheel)."""
    here = Path(__file__).resolve().parent
    repo = here.parent / "rules"
    return repo if repo.is_dir() and any(repo.glob("*.y*ml")) else here / "builtin_rules"


def parse_rule(doc: dict, path: str = "<rule>") -> Rule:
    """A :class:`Rule` from one parsed YAML document, validated; raises :class:`TraceError`."""
    if not isinstance(doc, dict):
        raise TraceError("a rule file must hold a mapping", path)
    unknown = set(doc) - set(FIELDS)
    missing = [k for k, (req, _) in FIELDS.items() if req and k not in doc]
    if unknown or missing:
        raise TraceError(f"unknown fields {sorted(unknown)}" if unknown else f"missing fields {missing}", path)
    if not _ID.match(str(doc["id"])) or not _NAME.match(str(doc["name"])):
        raise TraceError(f"bad id {doc['id']!r} or name {doc['name']!r}", path, "id like TK001, name kebab-case")
    if doc["severity"] not in SEVERITIES or doc["frame"] not in FRAMES:
        raise TraceError(f"bad severity {doc['severity']!r} or frame {doc['frame']!r}", path)
    if ("where" in doc) == ("check" in doc):
        raise TraceError("a rule needs exactly one of `where` and `check`", path)
    if "check" in doc and doc["check"] not in CHECKS:
        raise TraceError(f"unknown check {doc['check']!r}", path, f"registered: {', '.join(sorted(CHECKS))}")
    params = {}
    for k, v in (doc.get("params") or {}).items():
        if not isinstance(v, dict) or "default" not in v:
            raise TraceError(f"parameter {k!r} needs a default", path)
        params[k] = Param(v["default"], v.get("min"), v.get("max"), str(v.get("doc", "")).strip())
        params[k].coerce(v["default"], f"{path}: {k}")
    cases = doc["cases"] or {}
    if set(cases) - {"pass", "fail"}:
        raise TraceError("cases may only have `pass` and `fail`", path)
    return Rule(
        id=doc["id"], name=doc["name"], severity=doc["severity"], groups=tuple(doc["groups"]), frame=doc["frame"],
        summary=str(doc["summary"]).strip(), savings=str(doc["savings"]), message=str(doc["message"]).strip(),
        fix=str(doc["fix"]).strip(), why=str(doc["why"]).strip(), references=tuple(doc["references"] or ()),
        cases={k: list(v or []) for k, v in cases.items()}, params=params, needs=tuple(doc.get("needs") or ()),
        derive=dict(doc.get("derive") or {}), where=doc.get("where"), check=doc.get("check"), time=doc.get("time"),
        report_if=doc.get("report_if"), evidence=tuple(doc.get("evidence") or ()), path=path)


def _matches(rule: Rule, sel: str) -> bool:
    return sel in (rule.id, rule.name) or sel in rule.groups or (sel.isupper() and rule.id.startswith(sel))


def load_rules(extra_dirs=(), select=(), ignore=()) -> list[Rule]:
    """Built-in rules plus every ``*.yaml``/``*.yml`` in ``extra_dirs``, sorted by id. ``select`` keeps rules
    matching any entry, ``ignore`` drops them; an entry is a rule id, an id prefix in capitals (``TK0``), a name,
    or a group. Duplicate ids or names raise :class:`TraceError`."""
    rules, seen = [], {}
    for d in (builtin_rules_dir(), *map(Path, extra_dirs)):
        if not d.is_dir():
            raise TraceError("rules directory not found", str(d))
        for p in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
            try:
                doc = yaml.load(p.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
            except yaml.YAMLError as e:
                raise TraceError(f"not valid YAML ({str(e).splitlines()[0]})", str(p)) from None
            r = parse_rule(doc, str(p))
            for key in (r.id, r.name):
                if key in seen:
                    raise TraceError(f"duplicate rule {key!r} (also in {seen[key]})", str(p))
                seen[key] = str(p)
            rules.append(r)
    if select:
        rules = [r for r in rules if any(_matches(r, s) for s in select)]
    return sorted([r for r in rules if not any(_matches(r, s) for s in ignore)], key=lambda r: r.id)


# ------------------------------------------------------------------------------------------------------- running
def fmt_ps(ps: float) -> str:
    """A duration in ps as text with a unit: ``1.50 ms``."""
    if ps is None or (isinstance(ps, float) and math.isnan(ps)):
        return "?"
    for unit, scale in (("s", 1e12), ("ms", 1e9), ("us", 1e6), ("ns", 1e3)):
        if abs(ps) >= scale:
            return f"{ps / scale:.3g} {unit}"
    return f"{ps:.0f} ps"


class _Values(dict):
    """Template values: fixed keys, ``sum_/mean_/min_/max_/median_<column>`` of the evidence, ``top_<column>`` of
    the evidence row with the largest savings, and ``t_`` in front of any of those for the value formatted as a
    duration (``{t_sum_exposed_ps}`` -> ``1.5 ms``)."""

    def __init__(self, evidence: pd.DataFrame, base: dict):
        super().__init__(base)
        self.ev = evidence

    def __missing__(self, key: str):
        if key.startswith("t_"):
            return fmt_ps(self[key[2:]])
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
    for name, expr in rule.derive.items():
        df = df.assign(**{name: df.eval(expr, local_dict=params, engine="python")})
    if rule.check:
        ev = CHECKS[rule.check]({**frames, rule.frame: df}, params)
    else:
        ev = df.query(rule.where, local_dict=params, engine="python")
    ev = ev.reset_index(drop=True)
    if ev.empty:
        return ev.assign(savings_ps=pd.Series(dtype="float64"))
    sav = ev.eval(rule.savings, local_dict=params, engine="python")
    sav = np.broadcast_to(np.asarray(sav, dtype="float64"), (len(ev),))
    cap = ev[rule.time or TIME_COLUMN[rule.frame]].to_numpy("float64")
    ev["savings_ps"] = np.nan_to_num(np.clip(sav, 0, np.nan_to_num(cap, nan=0.0)), nan=0.0)
    return ev


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
    """Evaluate ``report_if`` on a one-row frame of the aggregates the expression names."""
    names = {}
    bare = re.sub(r"'[^']*'|\"[^\"]*\"", "", rule.report_if)
    for n in set(re.findall(r"(?<![@\w.])([A-Za-z_]\w*)", bare)) - {"and", "or", "not", "in", "True", "False"}:
        try:
            names[n] = [values[n]]
        except KeyError:
            raise TraceError(f"report_if names unknown value {n!r}", rule.path) from None
    ok = pd.DataFrame(names, index=[0]).eval(rule.report_if, local_dict=params, engine="python")
    return bool(np.asarray(ok).ravel()[0])


def run_rules(frames: dict, rules: list, params_override: dict | None = None, *, max_evidence: int = 10) -> list:
    """Run ``rules`` over ``frames`` (name -> DataFrame, as :func:`frames_for_rules` builds). ``params_override``
    maps a rule id or name to {param: value}. Rules whose frames are missing or empty are skipped (see
    :func:`applicable`). Returns findings sorted by savings, largest first."""
    params_override = dict(params_override or {})
    known = {k for r in rules for k in (r.id, r.name)}
    if set(params_override) - known:
        raise TraceError(f"parameters given for unknown rule {sorted(set(params_override) - known)[0]!r}")
    devs = frames.get("devices")
    if devs is not None and len(devs) and "span_ps" in devs.columns:
        span = dict(zip(zip(devs["host"].astype(str), devs["device"].astype(str)), devs["span_ps"].astype(float)))
        profiled = float(sum(span.values()))
    else:
        span, profiled = {}, math.inf
    pending = []
    todo = [(rule, rule.resolve({**params_override.get(rule.name, {}), **params_override.get(rule.id, {})}))
            for rule in rules]
    todo = [(rule, params) for rule, params in todo if not applicable(rule, frames)]

    def run_one(item):
        rule, params = item
        try:
            return _evidence(rule, frames, params), None
        except (KeyError, NameError, AttributeError, TypeError, ValueError, SyntaxError) as e:
            return None, e
    # the rules are independent pure functions of the frames: NumPy's row selections and sorts release the GIL,
    # so a second core helps (TRACEKIT_THREADS=1: one after the other); results are taken in rule order
    from concurrent.futures import ThreadPoolExecutor

    from tracekit.wire import default_threads
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
        values = _Values(ev, {**params, "count": len(ev), "savings_ps": savings, "savings": fmt_ps(savings),
                              "share": share, "profiled_ps": profiled, "top": top.iloc[0].to_dict(),
                              "devices": len(per_dev) if {"host", "device"} <= set(ev.columns) else 0,
                              "hosts": ev["host"].nunique() if "host" in ev.columns else 0})
        if rule.report_if and not _report(rule, values, params):
            continue
        cols = [c for c in (rule.evidence or _DEFAULT_EVIDENCE + [rule.time or TIME_COLUMN[rule.frame]])
                if c in ev.columns and c != "savings_ps"]
        try:
            message, fix = rule.message.format_map(values), rule.fix.format_map(values)
        except (KeyError, IndexError, ValueError) as e:
            raise TraceError(f"bad message or fix template ({e!r})", rule.path) from None
        pending.append((Finding(rule.id, rule.name, rule.severity, message, fix, params,
                                top[cols + ["savings_ps"]].head(max_evidence), len(ev), int(round(savings)), 0,
                                share, profiled, rule.groups, rule.why), per_dev))
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
