"""The rule model: what a rule file holds (:class:`Rule`, :class:`Param`, the fields in :data:`FIELDS`), the
:class:`Finding` a rule yields, and loading/validating rule files. Running rules is :mod:`tracekit.analysis.rules`.

Loading checks everything that can be checked without data: the fields, the parameters (kind and bounds), every
expression against the grammar of :mod:`tracekit.analysis.rule_expr` and the columns the rule's frame declares
(:data:`tracekit.analysis.rule_schema.RULE_FRAMES`), the message/fix templates against the values a finding provides, and the
shape of the cases (those two in :mod:`tracekit.analysis.rule_fields`). The rule format has a version
(:data:`RULE_FORMAT`); a file without ``version:`` is format 1 (expressions were pandas query/eval), read with the
current grammar, and told how to update when refused.
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import field
from pathlib import Path
from typing import Any

import pandas as pd

from tracekit import artefacts
from tracekit.errors import TraceError
from tracekit.analysis import rule_schema
from tracekit.analysis.rule_checks import CHECKS, check_columns
from tracekit.analysis.rule_expr import ExprError, compile_expr, grammar_summary
from tracekit.analysis.rule_fields import Refused, check_cases, check_template, value_names
from tracekit.analysis.rule_safety import RegexError, compile_regex
from tracekit.records import record
from tracekit.units import parse_quantity

#: The rule file format this tracekit reads and writes. 2: expressions in tracekit's own grammar, case names,
#: parameter kinds, ``example``; 1 (no ``version:``): pandas query/eval expressions.
RULE_FORMAT = 2

SEVERITIES = ("info", "warning", "error")
#: Frame a rule reads -> the column that is each row's own time (the cap on its savings).
TIME_COLUMN = {"ops": "duration_ps", "op_stats": "total_ps", "collectives": "span_ps", "steps": "step_ps",
               "devices": "span_ps", "gaps": "duration_ps", "host_events": "duration_ps",
               "memory_devices": "span_ps", "memory_programs": "time_ps", "offload": "wait_ps",
               "overview": "step_total_ps", "parallel_axes": "time_ps",
               "serving": "step_total_ps"}
FRAMES = tuple(TIME_COLUMN)
#: parameter kind -> meaning (what ``--param RULE.PARAM=VALUE`` accepts)
PARAM_KINDS = {"duration": "time in ps; accepts units: 10ms, 250us, 250µs, 2s, 100ns",
               "fraction": "a share: 0.05 or 5%", "bytes": "bytes; accepts 64MiB, 1.5GB, 4KiB",
               "count": "a whole number (1e3 is fine)", "number": "any number, e.g. 3.5 or 1.5e9",
               "text": "text", "regex": "a regular expression", "bool": "true/false"}
#: field -> (required, meaning)
FIELDS = {
    "version": (False, f"rule format version ({RULE_FORMAT}; a file without it is format 1)"),
    "id": (True, "stable code, e.g. TK001"),
    "name": (True, "kebab-case name of the anti-pattern"),
    "severity": (True, "info | warning | error"),
    "groups": (True, "list of groups the rule belongs to (select/ignore by group)"),
    "frame": (True, "frame it reads: " + " | ".join(FRAMES)),
    "summary": (True, "what it detects, one sentence"),
    "params": (False, "name -> {default, kind, min, max, doc}; kind: " + " | ".join(PARAM_KINDS)),
    "needs": (False, "other frames that must be present and non-empty"),
    "derive": (False, "name -> expression: columns added to the frame before `where`"),
    "where": (False, "expression over the frame's columns selecting evidence rows (or `check`)"),
    "check": (False, "name of a registered Python check returning evidence rows (or `where`)"),
    "savings": (True, "expression: estimated savings in ps per evidence row"),
    "time": (False, "column capping each row's savings (default: the frame's own duration column)"),
    "rank": (False, "column ordering evidence rows of equal savings, largest first (default: frame order); a rule "
                    "that claims no time names its worst row first by it"),
    "report_if": (False, "expression over the finding's aggregates (count, share, sum_COLUMN, max_COLUMN, ...)"),
    "evidence": (False, "columns shown as evidence"),
    "message": (True, "what is wrong: str.format template over the finding's aggregates"),
    "fix": (True, "what to do: str.format template"),
    "why": (True, "why it matters"),
    "references": (True, "list of links"),
    "cases": (True, "pass: / fail: lists of {name, note, rows, frames, params, expect}"),
    "example": (False, "before: / after: what the trace or code looks like when the rule fires, and after the fix"),
    "workload": (False, "training | serving | any (default): a training rule stays silent on the programs the "
                        "serving view classes as prefill or decode (rows of other programs still count)"),
}
WORKLOADS = ("any", "training", "serving")
_ID = re.compile(r"^[A-Z]{2,}\d{3}$")
_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
#: the evidence columns shown when a rule names none (those the frame has), then its time column
DEFAULT_EVIDENCE = ["host", "device", "module", "op", "opcode", "kernel", "name", "step", "start_ps"]


def infer_kind(name: str, default: Any) -> str:
    """The kind of a parameter that does not declare one: from its default's type and its name's unit suffix."""
    if isinstance(default, bool):
        return "bool"
    if isinstance(default, str):
        return "text"
    if name.endswith("_ps"):
        return "duration"
    if name.endswith("_bytes"):
        return "bytes"
    return "count" if isinstance(default, int) else "number"


@record(frozen=True)
class Param:
    """A rule parameter: its default and the bounds a value must keep."""

    default: Any
    min: float | None = None
    max: float | None = None
    doc: str = ""
    kind: str = "number"

    def coerce(self, value: Any, where: str) -> Any:
        """``value`` (a number, or text with a unit: ``10ms``, ``5%``, ``64MiB``) converted for the parameter's
        kind and checked against min/max."""
        kind = self.kind
        try:
            if kind == "bool":
                if not isinstance(value, bool) and str(value).lower() not in ("1", "0", "true", "false", "yes",
                                                                             "no", "on", "off"):
                    raise ValueError("expected true or false")
                value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
            elif kind in ("text", "regex"):
                value = str(value)
                if kind == "regex":  # compiled by RE2, as the rule will run it (tracekit.analysis.rule_safety)
                    try:
                        compile_regex(value)
                    except RegexError as e:
                        raise ValueError(str(e)) from None
            else:
                v = parse_quantity(value, kind)
                if isinstance(v, float) and not math.isfinite(v):
                    raise ValueError("expected a finite number")
                whole = kind in ("duration", "bytes", "count") or (kind == "number" and isinstance(self.default, int)
                                                                   and not isinstance(self.default, bool))
                if whole:
                    if kind == "count" or kind == "number":
                        if float(v) != round(float(v)):
                            raise ValueError("expected a whole number")
                    value = int(round(float(v)))
                else:
                    value = float(v)
        except (TypeError, ValueError) as e:
            raise TraceError(f"bad value {value!r} for {where} (a {kind} parameter: {PARAM_KINDS.get(kind, kind)})",
                             hint=str(e)) from None
        if (self.min is not None and value < self.min) or (self.max is not None and value > self.max):
            raise TraceError(f"value {value!r} out of range [{self.min}, {self.max}]", where)
        return value


@record(frozen=True)
class Rule:
    """One rule file, parsed: what it reads, its check, why, the fix, its cases."""

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
    rank: str | None = None
    report_if: str | None = None
    evidence: tuple = ()
    path: str = ""
    version: int = RULE_FORMAT
    example: dict = field(default_factory=dict)  #: {"before": text, "after": text}
    workload: str = "any"  #: training | serving | any: what kind of program the rule's advice is for
    builtin: bool = False  #: one of tracekit's own rules (its cases run in tracekit's tests, not at load)
    #: the checked expressions: "where", "savings", "report_if", "derive.NAME" -> rule_expr.Expr
    exprs: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def claims_time(self) -> bool:
        """Whether the rule claims device time: false for a rule whose ``savings`` is the constant 0 (memory and
        utilization context); its findings say so instead of a time."""
        return str(self.savings).strip() not in ("0", "0.0")

    def resolve(self, override: dict | None = None) -> dict:
        """Parameter values: defaults updated with ``override`` (validated)."""
        override = override or {}
        unknown = set(override) - set(self.params)
        if unknown:
            raise TraceError(f"unknown parameter {sorted(unknown)[0]!r} for rule {self.id} ({self.name})",
                             hint=f"known: {', '.join(self.params) or 'none'}")
        return {k: p.coerce(override[k], f"{self.id}.{k}") if k in override else p.default
                for k, p in self.params.items()}


@record
class Finding:
    """What one rule found: its evidence, the time it claims, its message."""

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
    #: every evidence row is ``indicative`` (a derived column: e.g. a roofline efficiency on a CPU, whose peaks are
    #: estimates): the finding ranks after every finding that is not
    indicative: bool = False

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


def _refuse(doc: dict, path: str, what: str, hint: str | None = None):
    """A TraceError naming the rule; for a format-1 file, how to update it."""
    version = doc.get("version", 1)
    if isinstance(version, int) and version < RULE_FORMAT:
        hint = (hint + "; " if hint else "") + (
            f"this file is rule format {version} ({'no `version:` field' if 'version' not in doc else 'old'}, "
            f"written for pandas query/eval): rewrite it with the grammar above, then add `version: {RULE_FORMAT}` "
            "(docs/writing-rules.md)")
    raise TraceError(f"rule {doc.get('id')} ({doc.get('name')}): {what}", path, hint)


def _expr(doc, path, label, text, names, params, names_are="column"):
    try:
        return compile_expr(text, names, params, names_are=names_are)
    except ExprError as e:
        shown = " ".join(str(text).split())
        if isinstance(e.__cause__, RegexError):  # the grammar is fine: the pattern is not one RE2 runs
            _refuse(doc, path, f"`{label}` expression `{shown}`: {e}")
        _refuse(doc, path, f"`{label}` expression `{shown}` is not allowed: {e}", grammar_summary())


def parse_rule(doc: dict, path: str = "<rule>") -> Rule:
    """A :class:`Rule` from one parsed YAML document, validated; raises :class:`TraceError`."""
    if not isinstance(doc, dict):
        raise TraceError("a rule file must hold a mapping", path)
    version = doc.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TraceError(f"bad version {version!r}", path, f"write version: {RULE_FORMAT}")
    if version > RULE_FORMAT:
        raise TraceError(f"rule format {version} is newer than this tracekit reads ({RULE_FORMAT})", path,
                         "upgrade tracekit")
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
    if set(doc.get("needs") or ()) - set(FRAMES):
        _refuse(doc, path, f"`needs` names unknown frames {sorted(set(doc['needs']) - set(FRAMES))}",
                f"frames: {', '.join(FRAMES)}")
    params = {}
    for k, v in (doc.get("params") or {}).items():
        if not isinstance(v, dict) or "default" not in v:
            raise TraceError(f"parameter {k!r} needs a default", path)
        if not re.fullmatch(r"[a-z][a-z0-9_]*", str(k)):
            _refuse(doc, path, f"bad parameter name {k!r}", "snake_case, e.g. min_share")
        kind = v.get("kind") or infer_kind(k, v["default"])
        if kind not in PARAM_KINDS:
            _refuse(doc, path, f"parameter {k!r} has unknown kind {kind!r}", f"kinds: {', '.join(PARAM_KINDS)}")
        if set(v) - {"default", "kind", "min", "max", "doc"}:
            _refuse(doc, path, f"parameter {k!r} has unknown fields {sorted(set(v) - {'default', 'kind', 'min', 'max', 'doc'})}")
        p = Param(v["default"], v.get("min"), v.get("max"), str(v.get("doc", "")).strip(), kind)
        params[k] = Param(p.coerce(v["default"], f"{path}: {k}"), p.min, p.max, p.doc, kind)
    # expressions: checked against the columns the frame declares, in the order the engine runs them
    columns = dict(rule_schema.RULE_FRAMES[doc["frame"]])
    exprs = {}
    derive = dict(doc.get("derive") or {})
    for name, text in derive.items():
        if not re.fullmatch(r"[a-z][a-z0-9_]*", str(name)):
            _refuse(doc, path, f"bad derive name {name!r}", "snake_case, e.g. pad_waste")
        exprs[f"derive.{name}"] = _expr(doc, path, f"derive.{name}", text, columns, params)
        columns[name] = ("float64", "derived")
    if "where" in doc:
        exprs["where"] = _expr(doc, path, "where", doc["where"], columns, params)
    else:
        columns = check_columns(doc["check"], columns)
    exprs["savings"] = _expr(doc, path, "savings", doc["savings"], columns, params)
    for c in [doc.get("time"), doc.get("rank")] + list(doc.get("evidence") or []):
        if c is not None and c not in columns and c != "savings_ps":
            _refuse(doc, path, f"`time`/`rank`/`evidence` names {c!r}, which is not a column of {doc['frame']!r} here",
                    "docs/rules.md#frames lists the columns")
    names = value_names(columns, params)
    if doc.get("report_if") is not None:
        exprs["report_if"] = _expr(doc, path, "report_if", doc["report_if"], names - {"top", "savings"}, params,
                                   "value of the finding (count, share, sum_COLUMN, ...)")
    try:
        for label in ("message", "fix"):
            check_template(label, str(doc[label]), names, set(columns) | {"savings_ps"})
        cases = check_cases(doc["cases"], params, FRAMES)
    except Refused as e:
        _refuse(doc, path, e.what, e.hint)
    example = doc.get("example") or {}
    if not isinstance(example, dict) or set(example) - {"before", "after"}:
        _refuse(doc, path, "`example` may only have `before` and `after`")
    if doc.get("workload", "any") not in WORKLOADS:
        _refuse(doc, path, f"bad workload {doc.get('workload')!r}", f"one of: {', '.join(WORKLOADS)}")
    return Rule(
        id=doc["id"], name=doc["name"], severity=doc["severity"], groups=tuple(doc["groups"]), frame=doc["frame"],
        summary=str(doc["summary"]).strip(), savings=str(doc["savings"]), message=str(doc["message"]).strip(),
        fix=str(doc["fix"]).strip(), why=str(doc["why"]).strip(), references=tuple(doc["references"] or ()),
        cases=cases, params=params, needs=tuple(doc.get("needs") or ()),
        derive=derive, where=doc.get("where"), check=doc.get("check"), time=doc.get("time"), rank=doc.get("rank"),
        report_if=doc.get("report_if"), evidence=tuple(doc.get("evidence") or ()), path=path, version=version,
        example={k: str(v).rstrip() for k, v in example.items()}, exprs=exprs,
        workload=str(doc.get("workload", "any")))


def matches(rule: Rule, sel: str) -> bool:
    """Whether a --select/--ignore entry names ``rule``: its id or name or a group (any case), or an id prefix
    (``TK0``, ``tk0``; letters alone only in capitals: ``TK``)."""
    s = str(sel).casefold()
    if s in (rule.id.casefold(), rule.name.casefold()) or s in (g.casefold() for g in rule.groups):
        return True
    return (str(sel).isupper() or bool(re.fullmatch(r"[a-z]+\d+", s))) and rule.id.casefold().startswith(s)


def find_rule(rules: list, key: str) -> Rule | None:
    """The rule whose id or name is ``key``, in any case."""
    k = str(key).casefold()
    return next((r for r in rules if k in (r.id.casefold(), r.name.casefold())), None)


def params_for(rule: Rule, overrides: dict | None) -> dict:
    """The parameter overrides for ``rule`` from {rule id or name (any case): {param: value}}; the id's win."""
    out: dict = {}
    for key in sorted(overrides or {}, key=lambda k: str(k).casefold() == rule.id.casefold()):
        if str(key).casefold() in (rule.id.casefold(), rule.name.casefold()):
            out.update(overrides[key])
    return out


def load_rules(extra_dirs=(), select=None, ignore=None) -> list[Rule]:
    """Built-in rules plus every ``*.yaml``/``*.yml`` in ``extra_dirs``, sorted by id. ``select`` keeps rules
    matching any entry, ``ignore`` drops them (see :func:`matches`; ids in any case). A folder named twice (the
    built-in one included) is read once; duplicate ids or names raise :class:`TraceError`. The rules' cases are
    not run here (see :mod:`tracekit.analysis.rule_cases`)."""
    rules, seen, folders = [], {}, set()
    select, ignore = select or (), ignore or ()
    builtin_dir = builtin_rules_dir()
    for d in (builtin_dir, *map(Path, extra_dirs or ())):
        if not d.is_dir():
            raise TraceError("rules directory not found", str(d))
        if d.resolve() in folders:  # the built-in folder named again (`rules test rules`), or a folder twice
            continue
        folders.add(d.resolve())
        builtin = d == builtin_dir
        files = sorted([*d.glob("*.yaml"), *d.glob("*.yml")])
        for p, r in zip(files, _parsed(files, builtin)):
            for key in (r.id.casefold(), r.name):
                if key in seen:
                    raise TraceError(f"duplicate rule {key!r} (also in {seen[key]})", str(p))
                seen[key] = str(p)
            rules.append(r)
    for option, entries in (("--select", select), ("--ignore", ignore)):
        _check_selection(rules, option, entries)
    if select:
        rules = [r for r in rules if any(matches(r, s) for s in select)]
    return sorted([r for r in rules if not any(matches(r, s) for s in ignore)], key=lambda r: r.id)


#: rule file (path, modification time, size, built-in) -> its parsed Rule: a process that analyzes many traces
#: (a notebook, a pool or Dask worker, the test suite) reads and compiles each rule once, not once per trace
_PARSED: dict = {}


def forget_parsed() -> None:
    """Forget the rules this process has parsed: the next :func:`load_rules` reads their files again (through
    tracekit's cached artefact for the built-in ones)."""
    _PARSED.clear()


def _parsed(files: list, builtin: bool):
    """The :class:`Rule` of each file of ``files`` (one folder's), in order, parsed once per version of the file
    (a Rule is immutable; a file edited since is read again): the built-in files through tracekit's cached
    artefact, a user's parsed as they are. Every file's YAML is read before the first rule is parsed (an
    invalid file refuses the folder), each rule as it is taken (a rule's own error follows the earlier files')."""
    keys = []
    for p in files:
        try:
            st = p.stat()
            keys.append((str(p), st.st_mtime_ns, st.st_size, builtin))
        except OSError:
            keys.append(None)
    if all(k in _PARSED for k in keys):
        yield from (_PARSED[k] for k in keys)
        return
    try:
        docs = artefacts.yaml_docs(files, "rules") if builtin else \
            [artefacts.parse_yaml(p, p.read_text()) for p in files]
    except artefacts.YamlError as e:
        raise TraceError(f"not valid YAML ({e.message})", str(e.path)) from None
    for p, doc, key in zip(files, docs, keys):
        r = _PARSED.get(key)
        if r is None:
            r = parse_rule(doc, str(p))
            if builtin:
                r = dataclasses.replace(r, builtin=True)
            if key is not None:
                _PARSED[key] = r
        yield r


def _check_selection(rules: list[Rule], option: str, entries) -> None:
    """An entry of --select/--ignore that matches no rule is a typo: running no rules (or all of them) and
    reporting "gate passed" would hide it."""
    for sel in entries:
        if not any(matches(r, sel) for r in rules):
            ids = ", ".join(sorted(r.id for r in rules))
            raise TraceError(f"{option} {sel!r} matches no rule", hint=f"known rule ids: {ids} (names, groups and "
                             "id prefixes such as TK0 work too; `tracekit rules` lists them)")
