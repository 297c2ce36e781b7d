"""A rule's pass/fail cases, run: what ``tracekit rules test [DIR]`` reports and what ``--rules DIR`` checks at load.

A case is a tiny frame written in the rule file (``rows``: the rule's own frame; ``frames``: any other frame it
needs), optional ``params``, and for a fail case what to ``expect`` (``evidence`` rows, ``savings_ps`` within 1 ps).
A pass case passes when the rule reports nothing; a fail case when it reports exactly one finding that matches the
expectation, with a message whose fields all filled, non-negative savings per row and claimed <= savings.
"""
from __future__ import annotations


import pandas as pd

from tracekit.errors import TraceError
from tracekit.analysis.rule_model import Rule
from tracekit.analysis.rules import run_rules
from tracekit.records import record


@record(frozen=True)
class CaseResult:
    """The outcome of one case of a rule file."""

    rule_id: str
    rule_name: str
    kind: str  #: "pass" or "fail"
    case: str  #: the case's name
    error: str | None  #: why it failed; None when it passed
    path: str = ""

    @property
    def label(self) -> str:
        return f"{self.rule_id} {self.rule_name} {self.kind}/{self.case}"


def case_frames(rule: Rule, case: dict) -> dict:
    """The frames of one case: ``rows`` as the rule's frame, ``frames`` as the others."""
    frames = {name: pd.DataFrame(rows) for name, rows in (case.get("frames") or {}).items()}
    frames[rule.frame] = pd.DataFrame(case.get("rows") or [])
    return frames


def run_case(rule: Rule, kind: str, case: dict) -> str | None:
    """Why the case fails, or None when it passes."""
    try:
        findings = run_rules(case_frames(rule, case), [rule], {rule.id: case.get("params") or {}})
    except TraceError as e:
        return f"raised: {e}"
    if kind == "pass":
        return None if not findings else f"expected no finding, got: {findings[0].message}"
    if len(findings) != 1:
        return "expected one finding, got none (the rows selected no evidence, or report_if was false)"
    f = findings[0]
    expect = case.get("expect") or {}
    if "evidence" in expect and f.evidence_count != expect["evidence"]:
        return f"expected {expect['evidence']} evidence row(s), got {f.evidence_count}"
    if "savings_ps" in expect and abs(f.savings_ps - expect["savings_ps"]) > 1:
        return f"expected savings_ps {expect['savings_ps']}, got {f.savings_ps}"
    if "{" in f.message or "}" in f.message:
        return f"the message has an unfilled field: {f.message}"
    if len(f.evidence) and not (f.evidence["savings_ps"] >= 0).all():
        return "negative savings in the evidence"
    if f.claimed_ps > f.savings_ps:
        return f"claimed {f.claimed_ps} ps > savings {f.savings_ps} ps"
    return None


def run_cases(rules: list) -> list[CaseResult]:
    """Every case of every rule, in rule order, pass cases first."""
    return [CaseResult(r.id, r.name, kind, case["name"], run_case(r, kind, case), r.path)
            for r in rules for kind in ("pass", "fail") for case in r.cases.get(kind, [])]


def check_user_rules(rules: list) -> list:
    """``rules``, after running the cases of those that are not built in; the first failing case raises
    :class:`TraceError` naming the rule and the case (``tracekit rules test DIR`` lists them all)."""
    for res in run_cases([r for r in rules if not r.builtin]):
        if res.error:
            raise TraceError(f"rule {res.rule_id} ({res.rule_name}) case {res.kind}/{res.case} failed: {res.error}",
                             res.path, "fix the rule or the case; `tracekit rules test DIR` runs them all")
    return rules
