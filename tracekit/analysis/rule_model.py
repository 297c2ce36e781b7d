"""The rule model: what a rule file holds (:class:`Rule`, :class:`Param`, the fields in :data:`FIELDS`), the
:class:`Finding` a rule yields, and loading/validating rule files. Running rules is :mod:`tracekit.analysis.rules`."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from tracekit.errors import TraceError
from tracekit.analysis.rule_checks import CHECKS

SEVERITIES = ("info", "warning", "error")
#: Frame a rule reads -> the column that is each row's own time (the cap on its savings).
TIME_COLUMN = {"ops": "duration_ps", "op_stats": "total_ps", "collectives": "span_ps", "steps": "step_ps",
               "devices": "span_ps", "gaps": "duration_ps", "host_events": "duration_ps",
               "memory_devices": "span_ps", "memory_programs": "time_ps", "offload": "wait_ps",
               "overview": "step_total_ps"}
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
    #: (host, device) -> (starts, ends): the device time the savings are laid on (tracekit.analysis.claims)
    claims: dict = field(default_factory=dict, repr=False, compare=False)

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
    package = Path(__file__).resolve().parents[1]
    repo = package.parent / "rules"
    return repo if repo.is_dir() and any(repo.glob("*.y*ml")) else package / "builtin_rules"


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
    for option, entries in (("--select", select), ("--ignore", ignore)):
        _check_selection(rules, option, entries)
    if select:
        rules = [r for r in rules if any(_matches(r, s) for s in select)]
    return sorted([r for r in rules if not any(_matches(r, s) for s in ignore)], key=lambda r: r.id)


def _check_selection(rules: list[Rule], option: str, entries) -> None:
    """An entry of --select/--ignore that matches no rule is a typo: running no rules (or all of them) and
    reporting "gate passed" would hide it."""
    for sel in entries:
        if not any(_matches(r, sel) for r in rules):
            ids = ", ".join(sorted(r.id for r in rules))
            raise TraceError(f"{option} {sel!r} matches no rule", hint=f"known rule ids: {ids} (names, groups and "
                             "id prefixes such as TK0 work too; `tracekit rules` lists them)")
