"""Generate ``docs/rules.md`` from the rule files: ``python -m tracekit.report.rulesdoc > docs/rules.md``.

The output depends only on the rule files (no paths, no dates), so a test can check that the committed document
is current.
"""
from __future__ import annotations

import sys

from tracekit.analysis import rule_schema
from tracekit.analysis import rule_functions
from tracekit.analysis.rule_checks import CHECK_COLUMNS, CHECKS
from tracekit.analysis.rule_safety import MAX_PRECISION, MAX_WIDTH
from tracekit.analysis.rule_fields import AGGREGATES, TEMPLATE_VALUES
from tracekit.analysis.rule_model import FIELDS, PARAM_KINDS, RULE_FORMAT, TIME_COLUMN, Rule, load_rules


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> list[str]:
    fence = "````" if "```" in text else "```"
    return [fence, text.rstrip("\n"), fence]


def _example(rule: Rule) -> list[str]:
    """ruff's "Example" section: the trace or code when the rule fires, then after the fix."""
    ex = rule.example or {}
    out = []
    if ex.get("before"):
        out += ["### Example", "", "When the rule fires:", ""] + _fence(ex["before"]) + [""]
    if ex.get("after"):
        out += ["Use instead:", ""] + _fence(ex["after"]) + [""]
    return out


def _case(rule: Rule) -> list[str]:
    """The first fail case as a Markdown table of its rows."""
    case = (rule.cases.get("fail") or [{}])[0]
    rows = case.get("rows") or []
    if not rows:
        return []
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = ["### Test case", "", f"`{case.get('name')}` ({_cell(case.get('note', 'fail case'))}), `{rule.frame}` rows:",
           "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    out += ["| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |" for r in rows]
    if case.get("params"):
        out += ["", "with parameters " + ", ".join(f"`{k}={v}`" for k, v in case["params"].items())]
    if case.get("expect"):
        out += ["", "expected: " + ", ".join(f"{k} = {v}" for k, v in case["expect"].items())]
    return out + [""]


def render_rule(rule: Rule) -> str:
    lines = [f"## {rule.id} `{rule.name}`", "",
             f"**Severity:** {rule.severity} · **Groups:** {', '.join(rule.groups)} · **Reads:** `{rule.frame}`"
             + (f" (also {', '.join(f'`{n}`' for n in rule.needs)})" if rule.needs else ""), "",
             "### What it does", "", rule.summary, "", "### Why is this bad?", "", rule.why, ""]
    lines += _example(rule)
    lines += ["### How it decides", ""]
    if rule.derive:
        lines += [f"- derives `{k}` = `{' '.join(str(v).split())}`" for k, v in rule.derive.items()]
    if rule.where:
        lines.append(f"- evidence rows: `{' '.join(rule.where.split())}`")
    else:
        lines.append(f"- evidence rows: the registered check `{rule.check}`")
    lines.append(f"- savings per row: `{rule.savings}`, capped at the row's `{rule.time or TIME_COLUMN[rule.frame]}`")
    if rule.report_if:
        lines.append(f"- reported when: `{rule.report_if}`")
    lines.append("")
    if rule.params:
        lines += ["### Parameters", "", "| parameter | kind | default | range | meaning |", "|---|---|---|---|---|"]
        for k, p in rule.params.items():
            rng = "" if p.min is None and p.max is None else f"[{'' if p.min is None else p.min}, " \
                                                              f"{'' if p.max is None else p.max}]"
            lines.append(f"| `{k}` | {p.kind} | `{_cell(p.default)}` | {rng} | {_cell(p.doc)} |")
        lines.append("")
    lines += ["### Fix", "", rule.fix, ""]
    lines += _case(rule)
    if rule.references:
        lines += ["### References", ""] + [f"- <{r}>" for r in rule.references] + [""]
    return "\n".join(lines)


def render_rules_doc(rules: list[Rule] | None = None) -> str:
    """The whole Markdown document for ``rules`` (default: the built-in rules)."""
    rules = load_rules() if rules is None else rules
    head = ["# tracekit rules", "",
            "Generated from `rules/*.yaml` by `python -m tracekit.report.rulesdoc > docs/rules.md`; do not edit by hand.",
            "", "Select or ignore rules by id, id prefix, name or group (any case); set parameters per rule. Savings are",
            "device time summed over devices, each row capped at its own time and each device at its profiled",
            "time; see `tracekit/analysis/rules.py` for how overlapping claims are resolved.", "",
            "| id | name | severity | reads | summary |", "|---|---|---|---|---|"]
    head += [f"| {r.id} | [`{r.name}`](#{r.id.lower()}-{r.name}) | {r.severity} | `{r.frame}` | {_cell(r.summary)} |"
             for r in rules]
    fields = ["", "## Rule file fields", "", f"Rule format version {RULE_FORMAT}.", "",
              "| field | required | meaning |", "|---|---|---|"]
    fields += [f"| `{k}` | {'yes' if req else 'no'} | {_cell(doc)} |" for k, (req, doc) in FIELDS.items()]
    fields += ["", "Parameter kinds (what `--param RULE.PARAM=VALUE` accepts; rule ids and names in any case):", "",
               "| kind | accepts |", "|---|---|"] + [f"| `{k}` | {_cell(v)} |" for k, v in PARAM_KINDS.items()]
    return "\n".join(head + fields + [""] + reference_sections() + [render_rule(r) for r in rules]).rstrip("\n") + "\n"


def reference_sections() -> list[str]:
    """The expression grammar, the message template variables and the frames' declared columns."""
    out = ["## Expressions", "",
           "`where`, `savings`, `derive` and `report_if` are expressions in a small grammar that tracekit parses",
           "when it loads the rule and evaluates itself, vectorized over the frame's columns (no pandas",
           "query/eval, no Python). Anything outside this list is refused when the rule is loaded (exit 2).", "",
           "- values: columns of the rule's frame (below), its `derive` columns, `@param` for its parameters,",
           "  numbers, 'strings', `True`/`False`; in `report_if` the finding's values instead (next section)",
           "- arithmetic `+ - * / // % **` (numbers only; integers are 64-bit), comparisons",
           "  `== != < <= > >=` (chained: `0 < x <= 1`), `x in ['a', 'b']`, `x not in [...]`",
           "- boolean `and or not`, also written `& | ~` (with the precedence of `and`/`or`, as in pandas)",
           "- regular expressions (`.str.contains(pat)`, `kind: regex` parameters, `--param`) run on RE2: time",
           "  linear in the text whatever the pattern, so `(a+)+$` cannot hang; no backreferences (`\\1`) or",
           "  lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`): such a pattern is refused at load (exit 2, one line)", "",
           "| function | meaning |", "|---|---|"]
    out += [f"| `{v[-2]}` | {_cell(v[-1])} |" for v in rule_functions.FUNCTIONS.values()]
    out += ["", "Column methods, directly on an expression that reads a column (text arguments: constants or",
            "`@params`):", "", "| method | meaning |", "|---|---|"]
    out += [f"| `{v[-2]}` | {_cell(v[-1])} |" for t in (rule_functions.METHODS, rule_functions.STR_METHODS)
            for v in t.values()]
    out += ["", "## Message template variables", "",
            "`message` and `fix` are `str.format` templates (`{count}`, `{share:.0%}`); `report_if` reads the same",
            "values (without `top` and `savings`). Each rule's parameters are values too. A format spec may ask for",
            f"a width up to {MAX_WIDTH} and a precision up to {MAX_PRECISION} (`{{count:>8}}`, `{{share:.1%}}`); a "
            "larger one, or a spec", "Python does not read, is refused when the rule loads (exit 2).", "",
            "| variable | meaning |", "|---|---|"]
    out += [f"| `{k}` | {_cell(v)} |" for k, v in TEMPLATE_VALUES.items()]
    out += [f"| `{a}_COLUMN` | {a} of an evidence column over all evidence rows |" for a in AGGREGATES]
    out += ["| `top_COLUMN` | the column's value in the evidence row with the largest savings |",
            "| `t_VALUE` | any value above formatted as a duration (`{t_sum_exposed_ps}` -> `1.5 ms`) |", ""]
    out += ["## Frames", "",
            "The frames a rule may read (`frame:`, `needs:`), with their declared columns",
            "(`tracekit.analysis.rule_schema.RULE_FRAMES`). Kind text: categorical or string; times are integer picoseconds.", ""]
    for name, cols in rule_schema.RULE_FRAMES.items():
        out += [f"### `{name}`", "", f"Each row's own time (the cap on its savings): `{TIME_COLUMN[name]}`.", "",
                "| column | kind | unit | meaning |", "|---|---|---|---|"]
        out += [f"| `{c}` | {k} | {rule_schema.unit_of(c)} | {_cell(m)} |" for c, (k, m) in cols.items()]
        out.append("")
    out += ["### Columns added by checks", "", "| check | column | kind | unit | meaning |", "|---|---|---|---|---|"]
    for name in sorted(CHECKS):
        cols, replaces = CHECK_COLUMNS.get(name, ({}, False))
        out += [f"| `{name}`{' (returns only these)' if replaces else ''} | `{c}` | {k} | {rule_schema.unit_of(c)} | "
                f"{_cell(m)} |" for c, (k, m) in cols.items()]
    return out + [""]


def main() -> None:
    sys.stdout.write(render_rules_doc())


if __name__ == "__main__":
    main()
