"""Generate ``docs/rules.md`` from the rule files: ``python -m tracekit.report.rulesdoc > docs/rules.md``.

The output depends only on the rule files (no paths, no dates), so a test can check that the committed document
is current.
"""
from __future__ import annotations

import sys

from tracekit.analysis.rule_model import FIELDS, TIME_COLUMN, Rule, load_rules


def _cell(value) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _example(rule: Rule) -> list[str]:
    """The first fail case as a Markdown table of its rows."""
    case = (rule.cases.get("fail") or [{}])[0]
    rows = case.get("rows") or []
    if not rows:
        return []
    cols = list(dict.fromkeys(k for r in rows for k in r))
    out = [f"Example that fires ({_cell(case.get('note', 'fail case'))}), `{rule.frame}` rows:", "",
           "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
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
             "### What it does", "", rule.summary, "", "### Why is this bad?", "", rule.why, "",
             "### How it decides", ""]
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
        lines += ["| parameter | default | range | meaning |", "|---|---|---|---|"]
        for k, p in rule.params.items():
            rng = "" if p.min is None and p.max is None else f"[{'' if p.min is None else p.min}, " \
                                                              f"{'' if p.max is None else p.max}]"
            lines.append(f"| `{k}` | `{_cell(p.default)}` | {rng} | {_cell(p.doc)} |")
        lines.append("")
    lines += ["### Fix", "", rule.fix, ""]
    lines += _example(rule)
    if rule.references:
        lines += ["### References", ""] + [f"- <{r}>" for r in rule.references] + [""]
    return "\n".join(lines)


def render_rules_doc(rules: list[Rule] | None = None) -> str:
    """The whole Markdown document for ``rules`` (default: the built-in rules)."""
    rules = load_rules() if rules is None else rules
    head = ["# tracekit rules", "",
            "Generated from `rules/*.yaml` by `python -m tracekit.report.rulesdoc > docs/rules.md`; do not edit by hand.",
            "", "Select or ignore rules by id, id prefix, name or group; set parameters per rule. Savings are",
            "device time summed over devices, each row capped at its own time and each device at its profiled",
            "time; see `tracekit/analysis/rules.py` for how overlapping claims are resolved.", "",
            "| id | name | severity | reads | summary |", "|---|---|---|---|---|"]
    head += [f"| {r.id} | [`{r.name}`](#{r.id.lower()}-{r.name}) | {r.severity} | `{r.frame}` | {_cell(r.summary)} |"
             for r in rules]
    fields = ["", "## Rule file fields", "", "| field | required | meaning |", "|---|---|---|"]
    fields += [f"| `{k}` | {'yes' if req else 'no'} | {_cell(doc)} |" for k, (req, doc) in FIELDS.items()]
    return "\n".join(head + fields + [""] + [render_rule(r) for r in rules]).rstrip("\n") + "\n"


def main() -> None:
    sys.stdout.write(render_rules_doc())


if __name__ == "__main__":
    main()
