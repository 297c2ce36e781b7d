"""Rules: every rule file's pass/fail cases (``pytest -k unoverlapped-collective`` selects one rule), the engine's
savings caps, selection and parameters, frames_for_rules on a synthetic trace, and meta-tests on the rule files."""
from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tracekit import schema
from tracekit.errors import TraceError
from tracekit.analysis.rule_checks import CHECKS, frames_for_rules
from tracekit.analysis.rule_model import TIME_COLUMN, builtin_rules_dir, load_rules, parse_rule
from tracekit.analysis.rules import run_rules
from tracekit.report.rulesdoc import render_rules_doc

ROOT = Path(__file__).resolve().parents[1]
RULES = load_rules()


def _case_params():
    for r in RULES:
        for kind in ("pass", "fail"):
            for case in r.cases.get(kind, []):
                yield pytest.param(r, kind, case, id=f"{r.id}-{r.name}-{kind}-{case['name']}")


def _case_frames(rule, case) -> dict:
    frames = {name: pd.DataFrame(rows) for name, rows in (case.get("frames") or {}).items()}
    frames[rule.frame] = pd.DataFrame(case["rows"])
    return frames


@pytest.mark.parametrize("rule,kind,case", list(_case_params()))
def test_rule_case(rule, kind, case):
    frames = _case_frames(rule, case)
    findings = run_rules(frames, [rule], {rule.id: case.get("params") or {}})
    if kind == "pass":
        assert findings == [], findings[0].message if findings else ""
        return
    assert len(findings) == 1
    f = findings[0]
    assert (f.rule_id, f.name, f.severity) == (rule.id, rule.name, rule.severity)
    expect = case.get("expect") or {}
    if "evidence" in expect:
        assert f.evidence_count == expect["evidence"]
    if "savings_ps" in expect:
        assert f.savings_ps == pytest.approx(expect["savings_ps"], abs=1)
    assert f.message and f.fix and "{" not in f.message
    assert (f.evidence["savings_ps"] >= 0).all()
    assert f.claimed_ps <= f.savings_ps


# ------------------------------------------------------------------------------------------------------- meta
def test_ids_and_names_unique_and_well_formed():
    ids, names = [r.id for r in RULES], [r.name for r in RULES]
    assert len(set(ids)) == len(ids) and len(set(names)) == len(names)
    for r in RULES:
        assert re.fullmatch(r"TK\d{3}", r.id) and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.name)
        assert Path(r.path).name.startswith(f"{r.id}-{r.name}."), r.path


REQUIRED = {"unoverlapped-collective", "memory-bound-matmul", "device-idle-gaps", "low-roofline-efficiency",
            "collective-bound-step", "data-shuffle-heavy", "f32-matmul", "launch-bound-kernels", "straggler-device",
            "compilation-in-trace", "host-transfers-in-step", "padded-matmul-shapes"}


def test_builtin_rule_names():
    assert REQUIRED <= {r.name for r in RULES}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.id}-{r.name}")
def test_rule_documented_and_exercised(rule):
    assert rule.summary and rule.why and rule.fix and rule.message and rule.references
    assert len(rule.cases.get("pass", [])) >= 1 and len(rule.cases.get("fail", [])) >= 1
    for case in rule.cases["fail"]:
        assert "evidence" in case.get("expect", {}) and "savings_ps" in case.get("expect", {})
    for name, p in rule.params.items():
        assert p.doc, f"{rule.id}.{name} has no doc"


def test_docs_current():
    assert (ROOT / "docs" / "rules.md").read_text() == render_rules_doc(), \
        "docs/rules.md is stale: run python -m tracekit.report.rulesdoc > docs/rules.md"


def test_builtin_dir_is_repo_rules():
    assert builtin_rules_dir() == ROOT / "rules"


# ----------------------------------------------------------------------------------------------------- engine
def _rule(**over) -> dict:
    doc = {"id": "XX001", "name": "slow-op", "severity": "info", "groups": ["test"], "frame": "ops",
           "summary": "s", "params": {"min_ps": {"default": 10, "min": 0, "doc": "d"}},
           "where": "duration_ps >= @min_ps", "savings": "duration_ps * 2", "message": "{count} ops, {savings}",
           "fix": "f", "why": "w", "references": [], "cases": {"pass": [], "fail": []}}
    doc.update(over)
    return doc


OPS_ROWS = pd.DataFrame({"host": ["h"] * 3, "device": ["d0", "d0", "d1"], "op": ["a", "b", "c"],
                         "duration_ps": [100, 50, 5], "start_ps": [0, 100, 0]})


def test_savings_capped_per_row_and_per_device():
    r = parse_rule(_rule())
    (f,) = run_rules({"ops": OPS_ROWS}, [r])
    assert f.savings_ps == 150 and f.evidence_count == 2  # 2x duration capped at the row's own time
    assert math.isnan(f.share)
    devices = pd.DataFrame({"host": ["h", "h"], "device": ["d0", "d1"], "span_ps": [120, 1000]})
    (f,) = run_rules({"ops": OPS_ROWS, "devices": devices}, [r])
    assert f.savings_ps == 120 and f.share == pytest.approx(120 / 1120)  # d0 capped at its span


def test_overlapping_claims_greedy():
    devices = pd.DataFrame({"host": ["h"], "device": ["d0"], "span_ps": [120]})
    ops = OPS_ROWS[OPS_ROWS["device"] == "d0"]
    big = parse_rule(_rule(savings="duration_ps"))
    small = parse_rule(_rule(id="XX002", name="slow-op-again", where="op == 'b'", savings="duration_ps"))
    fs = run_rules({"ops": ops, "devices": devices}, [small, big])
    assert [f.rule_id for f in fs] == ["XX001", "XX002"]
    assert [f.savings_ps for f in fs] == [120, 50]
    assert [f.claimed_ps for f in fs] == [120, 0]  # nothing of d0 left for the second finding
    assert sum(f.claimed_ps for f in fs) <= devices["span_ps"].sum()


def test_params_override_and_validation():
    r = parse_rule(_rule())
    (f,) = run_rules({"ops": OPS_ROWS}, [r], {"slow-op": {"min_ps": "60"}})
    assert f.evidence_count == 1 and f.params == {"min_ps": 60}
    with pytest.raises(TraceError, match="out of range"):
        run_rules({"ops": OPS_ROWS}, [r], {"XX001": {"min_ps": -1}})
    with pytest.raises(TraceError, match="unknown parameter"):
        run_rules({"ops": OPS_ROWS}, [r], {"XX001": {"nope": 1}})
    with pytest.raises(TraceError, match="unknown rule"):
        run_rules({"ops": OPS_ROWS}, [r], {"XX999": {"min_ps": 1}})


def test_bad_expression_is_a_trace_error():
    with pytest.raises(TraceError, match="XX001"):
        run_rules({"ops": OPS_ROWS}, [parse_rule(_rule(where="no_such_column > 1"))])


def test_missing_frame_skips_rule():
    assert run_rules({"gaps": pd.DataFrame()}, [parse_rule(_rule())]) == []


@pytest.mark.parametrize("bad,match", [
    ({"severity": "fatal"}, "bad severity"),
    ({"name": "Slow_Op"}, "bad id"),
    ({"check": "nope"}, "exactly one"),
    ({"where": None, "check": "nope"}, "unknown check"),
    ({"bogus": 1}, "unknown fields"),
    ({"params": {"x": {"default": 5, "max": 1}}}, "out of range"),
])
def test_parse_rule_rejects(bad, match):
    doc = _rule(**bad)
    if doc.get("where") is None:
        doc.pop("where")
    with pytest.raises(TraceError, match=match):
        parse_rule(doc)


def test_load_rules_select_ignore_and_extra_dir(tmp_path):
    assert [r.name for r in load_rules(select=["TK001"])] == ["unoverlapped-collective"]
    assert {r.id for r in load_rules(select=["collectives"])} >= {"TK001", "TK005"}
    assert "TK012" not in {r.id for r in load_rules(ignore=["padded-matmul-shapes"])}
    (tmp_path / "XX001-slow-op.yaml").write_text(yaml.safe_dump(_rule()))
    assert "XX001" in {r.id for r in load_rules(extra_dirs=[tmp_path])}
    (tmp_path / "dup.yaml").write_text(yaml.safe_dump(_rule(id="XX002")))
    with pytest.raises(TraceError, match="duplicate"):
        load_rules(extra_dirs=[tmp_path])
    with pytest.raises(TraceError, match="not found"):
        load_rules(extra_dirs=[tmp_path / "missing"])


def test_finding_to_dict_is_plain():
    (f,) = run_rules({"ops": OPS_ROWS}, [parse_rule(_rule())])
    d = f.to_dict()
    assert d["rule_id"] == "XX001" and d["evidence"][0]["op"] == "a" and d["share"] is None
    assert json.loads(json.dumps(d))["evidence"][0]["duration_ps"] == 100


def test_checks_registered():
    assert {"straggler-devices", "launch-bound", "compile-in-steps"} <= set(CHECKS)
    assert set(TIME_COLUMN) >= {r.frame for r in RULES}


# ------------------------------------------------------------------------------------------ frames_for_rules
def test_frames_for_rules_end_to_end():
    base = {"host": "h", "device_kind": "TPU v4", "module": "jit_step", "is_async": False, "category": "",
            "kernel": ""}
    rows = []
    for dev in ("TPU:0", "TPU:1"):
        for s in range(2):  # per step: 40 compute, then a 50 exposed all-reduce, then 10 idle
            t0 = s * 100
            rows += [{**base, "device": dev, "op": "fusion.1", "opcode": "fusion", "start_ps": t0, "duration_ps": 40,
                      "dtype": "f32", "bound_by": "memory", "compute_ps": 10.0, "roofline_ps": 20.0},
                     {**base, "device": dev, "op": "all-reduce.2", "opcode": "all-reduce", "start_ps": t0 + 40,
                      "duration_ps": 50}]
    ops = schema.conform(pd.DataFrame(rows), schema.OPS)
    steps = schema.conform(pd.DataFrame([{"host": "h", "device": d, "step": s, "start_ps": s * 100,
                                          "duration_ps": 100} for d in ("TPU:0", "TPU:1") for s in range(2)]),
                           schema.STEPS)
    events = pd.DataFrame({"host": ["h"], "line": ["main"], "name": ["XlaCompile"], "start_ps": [150],
                           "duration_ps": [10]})
    frames = frames_for_rules(ops, steps, events)
    assert set(frames) == {"ops", "op_stats", "collectives", "steps", "devices", "gaps", "host_events"}
    st = frames["op_stats"].set_index("op")
    assert st.loc["fusion.1", "total_ps"] == 160 and st.loc["fusion.1", "occurrences"] == 4
    assert st.loc["fusion.1", "share"] == pytest.approx(160 / 400) and st.loc["fusion.1", "devices"] == 2
    assert st.loc["fusion.1", "efficiency"] == pytest.approx(80 / 160) and st.loc["fusion.1", "chip_f32_slower"]
    assert st.loc["all-reduce.2", "is_collective"] and st.loc["all-reduce.2", "dot_m"] == -1
    assert frames["ops"]["in_step"].all() and frames["devices"]["busy_ps_z"].eq(0).all()
    assert (frames["steps"]["collective_exposed_ps"] == 50).all()
    params = {"compilation-in-trace": {"min_duration_ps": 0}, "TK001": {"min_exposed_ps": 0}}
    fs = run_rules(frames, load_rules(), params)
    names = [f.name for f in fs]
    assert {"unoverlapped-collective", "collective-bound-step", "compilation-in-trace"} <= set(names)
    assert sum(f.claimed_ps for f in fs) <= frames["devices"]["span_ps"].sum()
    assert all(f.savings_ps <= frames["devices"]["span_ps"].sum() for f in fs)
    assert fs == sorted(fs, key=lambda f: -f.savings_ps)
    top = {f.name: f for f in fs}["collective-bound-step"]
    assert top.savings_ps == 200 and top.share == pytest.approx(200 / 400)


def test_rule_file_roundtrip_in_yaml(tmp_path):
    text = textwrap.dedent("""\
        id: XX001
        name: slow-op
        severity: info
        groups: [t]
        frame: ops
        summary: s
        where: duration_ps > 60
        savings: duration_ps
        message: "{count} op, top {top[op]} {t_sum_duration_ps}"
        fix: f
        why: w
        references: []
        cases: {pass: [], fail: []}
        """)
    (tmp_path / "XX001-slow-op.yaml").write_text(text)
    rules = [r for r in load_rules(extra_dirs=[tmp_path]) if r.id == "XX001"]
    (f,) = run_rules({"ops": OPS_ROWS}, rules)
    assert f.message == "1 op, top a 100 ps"


@pytest.mark.parametrize("case", ["allreduce_exposed", "sharded8", "train_step"])
def test_step_collective_level_is_the_largest_exposed_level(case):
    """The steps frame's ``collective_level`` (a categorical: one code per step) names, row by row, the level of
    the largest ``collective_exposed_<level>_ps`` column, 'none' where no collective time is exposed."""
    from conftest import cpu_fixture
    from tracekit import pipeline
    from tracekit.ingest.trace import load
    tr = load(cpu_fixture(case))
    frames = frames_for_rules(pipeline.with_roofline(tr), tr.steps, tr.host_events, modules=tr.modules)
    st = frames["steps"]
    assert isinstance(st["collective_level"].dtype, pd.CategoricalDtype)
    cols = [c for c in st.columns if c.startswith("collective_exposed_") and c != "collective_exposed_ps"]
    for _, row in st.iterrows():
        vals = {c[len("collective_exposed_"):-len("_ps")]: int(row[c]) for c in cols}
        best = max(vals, key=lambda k: vals[k]) if vals else None
        want = best if best is not None and vals[best] > 0 else "none"
        assert row["collective_level"] == want, (row.to_dict(), want)
    if case == "allreduce_exposed":
        assert (st["collective_level"] != "none").any()
