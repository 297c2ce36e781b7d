"""The parts of a rule file that are neither expressions nor parameters, checked when the rule loads: the
``message``/``fix`` templates (every field a value a finding provides, every format spec within the caps of
:mod:`tracekit.analysis.rule_safety`) and the shape of the ``cases``. A part that is refused raises
:class:`Refused`; :func:`tracekit.analysis.rule_model.parse_rule` turns it into the one-line error naming the rule.
"""
from __future__ import annotations

import re
import string

from tracekit.analysis.rule_safety import MAX_PRECISION, MAX_WIDTH, format_spec_problem

CASE_FIELDS = ("name", "note", "rows", "frames", "params", "expect")
EXPECT_FIELDS = ("evidence", "savings_ps")
#: values every finding provides to ``message``/``fix``/``report_if`` (besides the parameters and aggregates)
TEMPLATE_VALUES = {"count": "number of evidence rows", "savings_ps": "the finding's savings (ps)",
                   "savings": "savings_ps as text with a unit", "share": "savings_ps / profiled time",
                   "profiled_ps": "profiled device time (sum of device spans)",
                   "devices": "devices with evidence", "hosts": "hosts with evidence",
                   "top": "the evidence row with the largest savings: {top[column]}"}
AGGREGATES = ("sum", "mean", "min", "max", "median")


class Refused(ValueError):
    """A part of a rule file refused: what is wrong and (maybe) what to do."""

    def __init__(self, what: str, hint: str | None = None):
        super().__init__(what)
        self.what, self.hint = what, hint


_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9_]*)(?:\[(?P<key>[A-Za-z][A-Za-z0-9_]*)\])?$")


def value_names(columns, params) -> set:
    """Names a finding's template and ``report_if`` can use: :data:`TEMPLATE_VALUES`, the parameters, and
    ``<agg>_<column>`` / ``top_<column>`` for every evidence column (``t_`` in front: as a duration)."""
    cols = set(columns) | {"savings_ps"}
    return (set(TEMPLATE_VALUES) | set(params) | {f"{a}_{c}" for a in AGGREGATES for c in cols}
            | {f"top_{c}" for c in cols})


def check_template(label: str, text: str, names: set, columns: set) -> None:
    """Every ``{field}`` of a str.format template is a known value, ``{top[column]}`` or ``t_<value>``; no
    attribute access, no other indexing, no nested fields."""
    try:
        fields = [(f, spec) for _, f, spec, _ in string.Formatter().parse(text) if f is not None]
    except ValueError as e:
        raise Refused(f"`{label}` is not a valid template ({e})",
                      "write {name} or {name:.1f}; {{ for a brace") from None
    for f, spec in fields:
        m = _FIELD.match(f)
        base = m and m.group("name")
        ok = m and ((m.group("key") is None and (base in names or (base.startswith("t_") and base[2:] in names)))
                    or (base == "top" and m.group("key") in columns))
        if not ok or "{" in (spec or ""):
            raise Refused(f"`{label}` uses {{{f}}}, which is not a value a finding provides",
                          "use {count}, {savings}, {share}, a parameter, {sum_COLUMN} (sum mean min max median), "
                          "{top[COLUMN]}, {t_VALUE} for a duration; no attribute access or nested fields "
                          "(docs/rules.md#message-template-variables)")
        problem = format_spec_problem(spec or "")
        if problem:
            raise Refused(f"`{label}` field {{{f}:...}}: {problem}",
                          f"widths up to {MAX_WIDTH} and precisions up to {MAX_PRECISION}, e.g. {{{f}:.1f}} or "
                          "{share:.0%} (docs/rules.md#message-template-variables)")


def check_cases(cases, params, frames) -> dict:
    """The rule's ``cases`` (pass/fail lists), each case named (``pass-1`` when it has no name), checked: known
    fields, unique names, known parameters, expected fields and frames, rows a list of mappings."""
    cases = cases or {}
    if not isinstance(cases, dict) or set(cases) - {"pass", "fail"}:
        raise Refused("cases may only have `pass` and `fail`")
    out, seen = {}, set()
    for kind in ("pass", "fail"):
        out[kind] = []
        for i, case in enumerate(cases.get(kind) or [], 1):
            where = f"case {kind}[{i}]"
            if not isinstance(case, dict):
                raise Refused(f"{where} must be a mapping with rows")
            extra = set(case) - set(CASE_FIELDS)
            if extra:
                raise Refused(f"{where} has unknown fields {sorted(extra)}", f"known: {', '.join(CASE_FIELDS)}")
            name = str(case.get("name") or f"{kind}-{i}")
            if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name) or name in seen:
                raise Refused(f"{where}: bad or duplicate case name {name!r}",
                              "names are unique within a rule: letters, digits, - _ .")
            seen.add(name)
            if set(case.get("params") or {}) - set(params):
                raise Refused(f"case {name!r} sets unknown parameters {sorted(set(case['params']) - set(params))}")
            if set(case.get("expect") or {}) - set(EXPECT_FIELDS):
                raise Refused(f"case {name!r} expects unknown fields", f"known: {', '.join(EXPECT_FIELDS)}")
            if set(case.get("frames") or {}) - set(frames):
                raise Refused(f"case {name!r} gives unknown frames", f"frames: {', '.join(frames)}")
            rows = case.get("rows") or []
            if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
                raise Refused(f"case {name!r}: rows must be a list of mappings column -> value")
            out[kind].append({**case, "name": name})
    return out
