"""tracekit.report.invariants: each check fires on a report built to break it, stays quiet on the good one, and
the report carries what it found (JSON ``invariant_violations`` and a warning line) without changing a number."""
from __future__ import annotations

import copy
import json

import pytest

from conftest import cpu_fixture
from tracekit.report import invariants


def good() -> dict:
    """A small report that keeps every invariant (hand-made: the numbers are easy to check)."""
    return {
        "summary": {"steps": 2, "step_source": ["step_annotation"], "profiled_ps": 1000, "busy_ps": 600,
                    "trust": {"profiled_ps": "measured", "busy_ps": "measured"}},
        "chips": [{"name": "cpu", "family": "cpu", "peak_flops_per_s": {"f32": 1e11}, "hbm_bw_bytes_per_s": 1e10,
                   "limits": {"peak_flops_per_s.f32": {"value": 2e11, "source": "ceiling: 2 cores"},
                              "hbm_bw_bytes_per_s": {"value": 5e10, "source": "ceiling"}}}],
        "overview": {
            "step_time": {"steps": 2, "mean_ps": 500, "source": "step_annotation", "trust": "measured"},
            "flops": {"utilization": 0.25, "trust": "indicative"},
            "bandwidth": {"hbm": {"utilization": 0.5, "trust": "indicative"}},
            "roofline": {"utilization_at_possible": 0.875, "trust": "indicative"},
            "breakdown": {"step_ps": 1000, "compute_bound_ps": 600, "host_idle_ps": 400, "trust": "measured"}},
        "devices": [{"host": "h", "device": "CPU:0", "utilization": 0.6}],
        "device_steps": [{"host": "h", "device": "CPU:0", "step_ps_sum": 1000, "compute_ps": 600,
                          "collective_exposed_ps": 0, "wait_ps": 0, "idle_ps": 400, "compute_bound_ps": 600,
                          "memory_bound_ps": 0, "compute_other_ps": 0, "offload_wait_ps": 0, "async_wait_ps": 0,
                          "host_idle_ps": 400, "launch_idle_ps": 0, "other_idle_ps": 0}],
        "top_ops": [{"module": "m", "op": "dot", "efficiency": 1.3}, {"module": "m", "op": "add", "efficiency": 0.4}],
        "model_warnings": [{"module": "m", "op": "dot", "message": "model: dot ran 130% of its roofline"}],
        "findings": [
            {"rule_id": "TK003", "savings_ps": 400, "claims_time": True, "trust": "measured",
             "message": "Devices sat idle in 1 gap(s), 400 ps in all", "evidence": []},
            {"rule_id": "TK024", "savings_ps": 0, "claims_time": False, "trust": "indicative",
             "message": "Steps take 500 ps: FLOPs utilization is 25.00%, and would be 87.50% at that step time.",
             "evidence": [{"mfu": 0.25}]}],
        "warnings": [],
    }


def checks(d) -> list[str]:
    return sorted({v["check"] for v in invariants.check(d)})


def test_the_good_report_passes():
    assert invariants.check(good()) == []


def _broken(edit):
    d = copy.deepcopy(good())
    edit(d)
    return d


@pytest.mark.parametrize("edit, check", [
    (lambda d: d["overview"]["flops"].update(utilization=1.7), "utilization+consistency"),  # TK024 says 25%
    (lambda d: d["overview"]["bandwidth"]["hbm"].update(utilization=1.01), "utilization"),
    (lambda d: d["devices"][0].update(utilization=1.2), "utilization"),
    (lambda d: d["summary"].update(busy_ps=1001), "utilization"),
    (lambda d: d["findings"][1].update(message=d["findings"][1]["message"].replace("87.50%", "142.10%")),
     "utilization+consistency"),
    (lambda d: d["findings"][1]["evidence"][0].update(mfu=1.5), "utilization"),
    (lambda d: d["model_warnings"].clear(), "efficiency"),
    (lambda d: d["chips"][0]["peak_flops_per_s"].update(f32=1.6e12), "peak"),
    (lambda d: d["chips"][0].update(hbm_bw_bytes_per_s=1.7e12), "peak"),
    (lambda d: d["overview"]["breakdown"].update(host_idle_ps=300), "breakdown"),
    (lambda d: d["device_steps"][0].update(idle_ps=500), "breakdown"),
    (lambda d: d["device_steps"][0].update(host_idle_ps=100, launch_idle_ps=100), "breakdown"),
    (lambda d: d["overview"]["roofline"].update(utilization_at_possible=0.7), "consistency"),
    (lambda d: d["overview"]["flops"].update(utilization=0.2), "consistency"),
    (lambda d: d["findings"][0].update(savings_ps=0), "zero-claim"),
    (lambda d: d["findings"][0].update(message="would save ~0 ps"), "zero-claim"),
    (lambda d: d["summary"].update(step_source=[]), "label"),
    (lambda d: d["summary"].update(step_source=["none"]), "label"),
    (lambda d: d["overview"]["step_time"].update(source=""), "label"),
    (lambda d: d["findings"][0].update(message="peak (from raised) is off"), "label"),
    (lambda d: d["findings"][0].pop("trust"), "trust"),
    (lambda d: d["overview"]["step_time"].update(trust="guessed"), "trust"),
    (lambda d: d["summary"].pop("trust"), "trust"),
])
def test_each_check_fires_on_a_report_that_breaks_it(edit, check):
    assert checks(_broken(edit)) == sorted(check.split("+"))


def test_a_finding_that_claims_no_time_may_claim_zero():
    d = good()
    assert d["findings"][1]["savings_ps"] == 0 and invariants.check(d) == []
    d["findings"][1]["claims_time"] = True
    assert checks(d) == ["zero-claim"]


def test_utilization_at_exactly_100_percent_passes():
    d = _broken(lambda d: d["overview"]["flops"].update(utilization=1.0 + 1e-12))
    d["findings"][1]["message"] = d["findings"][1]["message"].replace("25.00%", "100.00%")
    assert invariants.check(d) == []


def test_warning_lines_name_the_check_and_place():
    d = _broken(lambda d: d["overview"]["flops"].update(utilization=1.7))
    lines = invariants.warning_lines(invariants.check(d))
    assert any(ln.startswith("report check failed (utilization, overview.flops.utilization)") and "170.0%" in ln
               for ln in lines)
    # its own warning lines do not trip the label check when the report is checked again
    d["warnings"] = lines + ["report check failed (label, x): a label that says nothing: '(from raised)'"]
    assert "label" not in checks(d)


def test_a_real_report_records_its_violations_and_never_clamps(monkeypatch):
    """A built report carries invariant_violations and a warning per violation, its numbers as computed."""
    from tracekit import pipeline
    from tracekit.report import envelope
    path = cpu_fixture("train_step")
    rep = pipeline.analyze(str(path))
    assert rep.data["invariant_violations"] == []
    # break an invariant upstream of the check: the overview's utilization made 100 times larger
    real = invariants.check

    def spy(d):  # (without model FLOPs the headline utilization is the HFU, which TK024 reads)
        d["overview"]["flops"]["utilization"] *= 100
        d["overview"]["flops"]["hfu"] *= 100
        return real(d)
    monkeypatch.setattr(invariants, "check", spy)
    rep = invariants.self_checked(envelope.Report(json.loads(rep.to_json())))
    u = rep.data["overview"]["flops"]["utilization"]
    assert u > 1  # reported as it is: not clamped to 100 %
    assert {v["check"] for v in rep.data["invariant_violations"]} == {"utilization", "consistency"}  # TK024 too
    assert any(w.startswith("report check failed (utilization") for w in rep.data["warnings"])
    from tracekit.report.render import render
    assert "report check failed (utilization" in render(rep, "text")


def _ops_rule(savings: str):
    from tracekit.analysis.rule_model import parse_rule
    return parse_rule({
        "version": 2, "id": "XX001", "name": "slow-op", "severity": "info", "groups": ["test"], "frame": "ops",
        "summary": "s", "where": "duration_ps >= 0", "savings": savings, "message": "{count} ops, {savings}",
        "fix": "f", "why": "w", "references": [], "rank": "duration_ps",
        "cases": {"pass": [], "fail": [{"name": "any", "rows": [{"host": "h", "device": "d", "duration_ps": 5}]}]}})


@pytest.mark.parametrize("savings, kept", [("duration_ps", True), ("duration_ps * 0.0001", False),
                                           ("0", True)])
def test_a_claim_that_rounds_to_zero_is_no_finding(savings, kept):
    """A rule that claims time and claims 0.3 ps here is dropped upstream (never shown as '~0 ps'); a rule that
    claims no time (savings "0") still reports, as 'no time claimed'."""
    import pandas as pd

    from tracekit.analysis import rules
    ops = pd.DataFrame({"host": ["h", "h"], "device": ["d", "d"], "duration_ps": [200, 3000], "op": ["a", "b"]})
    rule = _ops_rule(savings)
    got = rules.run_rules({"ops": ops}, [rule])
    assert bool(got) == kept
    if got:
        assert got[0].evidence.iloc[0]["duration_ps"] == 3000  # rank: the largest first
        assert (got[0].savings_ps > 0) == rule.claims_time


def test_a_report_of_an_odd_shape_gets_one_line_not_a_traceback():
    from tracekit.report import envelope
    rep = invariants.self_checked(envelope.Report({"overview": {"bandwidth": {"hbm": 3}}, "warnings": []}))
    assert [v["check"] for v in rep.data["invariant_violations"]] == ["self-check"]
    assert len(rep.data["warnings"]) == 1 and rep.data["warnings"][0].startswith("report check failed (self-check")


def test_tk024_on_unequal_virtual_devices_says_the_overviews_figures():
    """Virtual XLA:CPU devices share one chip: a device that does more than its share of the work read its FLOPs
    against its 1/8 of the peak, so TK024 said 8x the overview's utilization (and could pass 100 %). Here CPU:1-7
    lose their dots and fusions (sharded8, ops filtered): TK024's figures are the chip's, the overview's."""
    import re

    from tracekit import pipeline
    from tracekit.ingest.trace import load
    tr = load(cpu_fixture("sharded8"))
    ops = pipeline.with_roofline(tr)
    drop = (ops["device"].astype(str) != "CPU:0") & ops["opcode"].astype(str).isin(["dot", "fusion"])
    d = pipeline.analyze(tr, ops=ops[~drop.to_numpy()].reset_index(drop=True)).data
    (f,) = [f for f in d["findings"] if f["rule_id"] == "TK024"]
    ov = d["overview"]
    util = float(re.search(r"utilization is ([\d.]+)%", f["message"]).group(1)) / 100
    would = float(re.search(r"would be ([\d.]+)%", f["message"]).group(1)) / 100
    assert util == pytest.approx(ov["flops"]["utilization"], abs=5e-5)
    assert would == pytest.approx(ov["roofline"]["utilization_at_possible"], abs=5e-5) and would <= 1
    assert [v for v in d["invariant_violations"] if v["check"] == "consistency"] == []
