"""Rule authoring: the format version, `tracekit rules test`, cases run at load for user rules, case names,
parameter kinds with units, case-insensitive ids, declared frame schemas, and the built-in rules' docs."""
from __future__ import annotations

import json
import re


import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from tracekit.analysis import rule_schema
from tracekit.analysis.rule_checks import CHECK_COLUMNS, CHECKS
from tracekit.analysis.rule_model import RULE_FORMAT, Param, find_rule, matches, params_for
from tracekit.analysis.rule_model import load_rules, parse_rule
from tracekit.analysis.rules import run_rules
from tracekit.cli import main
from tracekit.errors import TraceError
from conftest import FIXTURES, cpu_fixture

RULES = load_rules()


def _rule(**over) -> dict:
    doc = {"version": 2, "id": "XX001", "name": "slow-op", "severity": "info", "groups": ["test"], "frame": "ops",
           "summary": "s", "params": {"min_ps": {"default": 10, "kind": "duration", "min": 0, "doc": "d"}},
           "where": "duration_ps >= @min_ps", "savings": "duration_ps", "message": "{count} ops, {savings}",
           "fix": "f", "why": "w", "references": [],
           "cases": {"pass": [{"name": "short", "rows": [{"host": "h", "device": "d", "duration_ps": 5}]}],
                     "fail": [{"name": "two-slow", "rows": [{"host": "h", "device": "d", "duration_ps": 50},
                                                             {"host": "h", "device": "d", "duration_ps": 20}],
                               "expect": {"evidence": 2, "savings_ps": 70}}]}}
    doc.update(over)
    return doc


def _write(d, doc, name="XX001-slow-op.yaml"):
    d.mkdir(exist_ok=True)
    (d / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return d


# ------------------------------------------------------------------------------------------------ versions
def test_builtin_rules_are_current_format_with_names_kinds_and_examples():
    for r in RULES:
        assert r.version == RULE_FORMAT, r.id
        raw = yaml.safe_load(open(r.path))
        assert raw.get("version") == RULE_FORMAT
        assert all("kind" in p for p in (raw.get("params") or {}).values()), f"{r.id}: a parameter without kind"
        assert all("name" in c for k in ("pass", "fail") for c in raw["cases"].get(k) or []), f"{r.id}: unnamed case"
        assert r.example.get("before") and r.example.get("after"), f"{r.id}: no before/after example"


def test_newer_format_refused():
    with pytest.raises(TraceError, match="newer than this tracekit"):
        parse_rule(_rule(version=RULE_FORMAT + 1))
    with pytest.raises(TraceError, match="bad version"):
        parse_rule(_rule(version="two"))


def test_format_1_rule_accepted_when_it_fits_and_told_how_to_update_when_not():
    doc = _rule()
    del doc["version"]
    assert parse_rule(doc).version == 1
    doc["where"] = "duration_ps.apply(lambda d: d > 10)"
    with pytest.raises(TraceError) as e:
        parse_rule(doc, "my_rules/XX001.yaml")
    assert "rule format 1 (no `version:` field" in str(e.value) and "add `version: 2`" in str(e.value)
    doc["version"] = 2
    with pytest.raises(TraceError) as e:
        parse_rule(doc)
    assert "version: 2" not in str(e.value)  # a current file gets no update hint


# -------------------------------------------------------------------------------------------------- cases
def test_rules_test_command_builtin_passes():
    r = CliRunner().invoke(main, ["rules", "test"])
    assert r.exit_code == 0, r.output
    n = sum(len(x.cases.get("pass", [])) + len(x.cases.get("fail", [])) for x in RULES)
    assert f"{len(RULES)} rule(s), {n} case(s): {n} passed, 0 failed" in r.output


def test_rules_test_command_on_the_builtin_folder(tmp_path):
    """`tracekit rules test rules` (docs/writing-rules.md's example, run from a checkout) tests the built-in rules once, not
    "duplicate rule 'tk001'"; named beside a user folder (and through a symlink) both are tested."""
    from tracekit.analysis.rule_model import builtin_rules_dir
    n = sum(len(x.cases.get("pass", [])) + len(x.cases.get("fail", [])) for x in RULES)
    link = tmp_path / "builtin-link"
    link.symlink_to(builtin_rules_dir(), target_is_directory=True)
    for folder in (builtin_rules_dir(), link):
        r = CliRunner().invoke(main, ["rules", "test", str(folder)])
        assert r.exit_code == 0 and "duplicate" not in r.output, r.output
        assert f"{len(RULES)} rule(s), {n} case(s): {n} passed, 0 failed" in r.output
    d = _write(tmp_path / "mine", _rule())
    r = CliRunner().invoke(main, ["rules", "test", str(builtin_rules_dir()), str(d), str(d)])
    assert r.exit_code == 0 and f"{len(RULES) + 1} rule(s), {n + 2} case(s)" in r.output, r.output


def test_rules_test_command_names_the_failing_case(tmp_path):
    d = _write(tmp_path / "ok", _rule())
    r = CliRunner().invoke(main, ["rules", "test", str(d), "-v"])
    assert r.exit_code == 0 and "ok   XX001 slow-op fail/two-slow" in r.output, r.output
    bad = _rule()
    bad["cases"]["fail"][0]["expect"]["savings_ps"] = 75
    bad["cases"]["pass"][0]["rows"][0]["duration_ps"] = 500
    d = _write(tmp_path / "bad", bad)
    r = CliRunner().invoke(main, ["rules", "test", str(d)])
    assert r.exit_code == 1, r.output
    assert "FAIL XX001 slow-op fail/two-slow: expected savings_ps 75, got 70" in r.output
    assert "FAIL XX001 slow-op pass/short: expected no finding" in r.output
    assert "1 rule(s), 2 case(s): 0 passed, 2 failed" in r.output


def test_rules_test_command_refused_rule_exits_2(tmp_path):
    d = _write(tmp_path, _rule(where="duration_ps.__class__"))
    r = CliRunner().invoke(main, ["rules", "test", str(d)])
    assert r.exit_code == 2


def test_user_rule_cases_run_at_load(tmp_path):
    bad = _rule()
    bad["cases"]["fail"][0]["expect"]["evidence"] = 3
    d = _write(tmp_path, bad)
    r = CliRunner().invoke(main, ["analyze", str(cpu_fixture("big_matmul")), "--rules", str(d)])
    assert r.exit_code == 2
    assert "rule XX001 (slow-op) case fail/two-slow failed: expected 3 evidence row(s), got 2" in r.output
    r = CliRunner().invoke(main, ["rules", "--rules", str(d)])
    assert r.exit_code == 2 and "two-slow" in r.output


@pytest.mark.parametrize("bad,match", [
    ({"name": "a b"}, "bad or duplicate case name"),
    ({"nmae": "x"}, "unknown fields"),
    ({"params": {"nope": 1}}, "unknown parameters"),
    ({"expect": {"evidnce": 1}}, "expects unknown fields"),
    ({"frames": {"opps": []}}, "unknown frames"),
])
def test_case_shape_checked(bad, match):
    doc = _rule()
    doc["cases"]["fail"][0].update(bad)
    with pytest.raises(TraceError, match=match):
        parse_rule(doc)


def test_case_names_default_and_unique():
    doc = _rule()
    doc["cases"]["pass"].append({"rows": []})
    assert [c["name"] for c in parse_rule(doc).cases["pass"]] == ["short", "pass-2"]
    doc["cases"]["pass"][1]["name"] = "short"
    with pytest.raises(TraceError, match="duplicate case name"):
        parse_rule(doc)


# ---------------------------------------------------------------------------------------- parameter units
def test_fraction_with_a_whole_default_stays_a_fraction():
    assert Param(0, 0, 1, kind="fraction").coerce("5%", "XX001.p") == 0.05


@pytest.mark.parametrize("kind,text,want", [
    ("duration", "10ms", 10 * 10**9), ("duration", "250us", 250 * 10**6), ("duration", "250µs", 250 * 10**6),
    ("duration", "2s", 2 * 10**12), ("duration", "100ns", 100 * 10**3), ("duration", "1500", 1500),
    ("duration", 1500, 1500), ("fraction", "5%", 0.05), ("fraction", "0.25", 0.25), ("fraction", 0.5, 0.5),
    ("count", "1.5e9", 1_500_000_000), ("count", "3", 3), ("bytes", "64MiB", 64 * 2**20),
    ("bytes", "1.5GB", 1_500_000_000), ("number", "1.5e9", 1.5e9), ("number", "3.5", 3.5),
    ("regex", "compil(e|ation)", "compil(e|ation)"), ("bool", "true", True),
])
def test_param_units(kind, text, want):
    default = {"duration": 1, "count": 1, "bytes": 1, "fraction": 0.1, "number": 1.0, "regex": "x",
               "bool": False}[kind]
    got = Param(default, kind=kind).coerce(text, "XX001.p")
    assert got == want and type(got) is type(want)


@pytest.mark.parametrize("kind,text,match", [
    ("duration", "5%", "does not fit a duration"), ("fraction", "10ms", "does not fit a fraction"),
    ("count", "2.5", "whole number"), ("duration", "ten", "expected a number"), ("regex", "(", "regular expression"),
    ("bool", "maybe", "true or false"), ("fraction", "150%", "out of range"),
])
def test_param_units_refused(kind, text, match):
    default = {"duration": 1, "count": 1, "fraction": 0.1, "regex": "x", "bool": False}[kind]
    with pytest.raises(TraceError, match=match):
        Param(default, 0 if kind == "fraction" else None, 1.0 if kind == "fraction" else None, kind=kind).coerce(
            text, "XX001.p")


def test_param_with_units_on_the_command_line_same_report(tmp_path):
    path = str(cpu_fixture("sleepy_steps"))
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    r1 = CliRunner().invoke(main, ["analyze", path, "--param", "TK003.min_gap_ps=10000000",
                                   "--param", "TK003.min_share=0.05", "-o", str(a)])
    r2 = CliRunner().invoke(main, ["analyze", path, "--param", "tk003.min_gap_ps=10us",
                                   "--param", "device-idle-gaps.min_share=5%", "-o", str(b)])
    assert r1.exit_code == 0 and r2.exit_code == 0, r1.output + r2.output
    ja, jb = json.loads(a.read_text()), json.loads(b.read_text())
    assert ja["params"]["rules"]["TK003"] == {"min_gap_ps": 10_000_000, "min_share": 0.05}
    assert ja["findings"] == jb["findings"] and ja["params"] == jb["params"]
    r3 = CliRunner().invoke(main, ["analyze", path, "--param", "TK003.min_share=10ms"])
    assert r3.exit_code == 2 and "does not fit a fraction" in r3.output


# ------------------------------------------------------------------------------------------- ids any case
def test_ids_case_insensitive():
    tk1 = find_rule(RULES, "tk001")
    assert tk1.id == "TK001" and find_rule(RULES, "Unoverlapped-Collective") is tk1
    assert matches(tk1, "tk001") and matches(tk1, "tk0") and matches(tk1, "TK") and matches(tk1, "COLLECTIVES")
    assert not matches(tk1, "tk") and not matches(tk1, "tk002")
    assert [r.id for r in load_rules(select=["tk001", "Padded-Matmul-Shapes"])] == ["TK001", "TK012"]
    assert "TK003" not in {r.id for r in load_rules(ignore=["tk003"])}
    assert params_for(tk1, {"tk001": {"min_exposed_ps": 1}, "unoverlapped-collective": {"min_exposed_ps": 2}}) == \
        {"min_exposed_ps": 1}  # the id's entry wins
    r = CliRunner().invoke(main, ["rules", "explain", "tk012"])
    assert r.exit_code == 0 and r.output.startswith("## TK012 `padded-matmul-shapes`")
    ops = pd.DataFrame({"host": ["h"], "device": ["d"], "duration_ps": [100], "start_ps": [0]})
    (f,) = run_rules({"ops": ops}, [parse_rule(_rule())], {"xx001": {"min_ps": "50ps"}})
    assert f.params == {"min_ps": 50}


# ------------------------------------------------------------------------------------------ frame schemas
KIND_OF = {"text": lambda s: isinstance(s.dtype, pd.CategoricalDtype) or s.dtype == object or s.dtype.kind == "O"
           or pd.api.types.is_string_dtype(s.dtype),
           "int64": lambda s: s.dtype.kind == "i", "uint64": lambda s: s.dtype.kind == "u",
           "float64": lambda s: s.dtype.kind == "f", "bool": lambda s: s.dtype.kind == "b",
           "int32": lambda s: s.dtype == np.int32, "float32": lambda s: s.dtype == np.float32}


def test_rule_frames_match_their_declared_schemas():
    import tracekit
    from tracekit.analysis import hostview
    from tracekit.options import Options
    tr = tracekit.load(cpu_fixture("allreduce_exposed"))
    events = pd.DataFrame({"host": pd.Categorical(["h"]), "line": pd.Categorical(["main"]), "name": ["XlaCompile"],
                           "start_ps": [0], "duration_ps": [10]})
    tr.host_events = events
    hv = hostview.build(tr, Options())
    frames = dict(hv.frames)  # the frames the engine's rules read, one host's
    from tracekit.analysis import parallelism  # (the mesh axes' frame is the pod's: the parallelism section's)
    par = parallelism.reduce([parallelism.host_summary(tr, hv.ops)], chip=hv.joined.model.chip,
                             topology=hv.joined.model.topology)
    frames["parallel_axes"] = parallelism.rule_frame(par)
    serving = tracekit.load(FIXTURES / "serving" / "decode_gqa")  # the serving frame, of a serving trace
    frames["serving"] = hostview.build(serving, Options()).frames.serving
    assert set(frames) == set(rule_schema.RULE_FRAMES)
    checked = 0
    for name, df in frames.items():
        if not len(df):
            continue  # an empty frame (no offloading program here) is never read: the rule is not applicable
        checked += 1
        declared = rule_schema.RULE_FRAMES[name]
        extra = rule_schema.RULE_FRAME_EXTRA.get(name)
        if extra:
            df = df[[c for c in df.columns if c in declared or not re.match(extra, c)]]
        assert not [c for c in df.columns if c not in declared], \
            f"{name}: undeclared columns {[c for c in df.columns if c not in declared]} (declare them in rule_schema.RULE_FRAMES)"
        assert set(declared) == set(df.columns), f"{name}: declared but absent {set(declared) - set(df.columns)}"
        for c, (kind, meaning) in declared.items():
            assert KIND_OF[kind](df[c]), f"{name}.{c}: declared {kind}, is {df[c].dtype}"
            assert meaning, f"{name}.{c} has no meaning"
            if kind in ("int64", "int32", "float64", "float32") and c not in ("run_id", "step"):
                assert rule_schema.unit_of(c), f"{name}.{c}: a number without a unit"
    assert checked >= 10


def test_checks_declare_their_columns():
    assert set(CHECK_COLUMNS) == set(CHECKS)
    frames = {"devices": pd.DataFrame({"host": ["h"] * 4, "device": list("abcd"), "device_kind": ["k"] * 4,
                                       "busy_ps": [10, 10, 10, 90], "span_ps": [100] * 4})}
    out = CHECKS["straggler-devices"](frames, {"threshold": 3.5, "min_devices": 3})
    assert set(CHECK_COLUMNS["straggler-devices"][0]) <= set(out.columns)


def test_expressions_limited_to_declared_columns():
    with pytest.raises(TraceError, match="`overlap_ratio` is not a column here"):
        parse_rule(_rule(where="overlap_ratio < 0.1"))  # a collectives column, not an ops one
    with pytest.raises(TraceError, match="not a column of 'ops'"):
        parse_rule(_rule(evidence=["op", "nope"]))
    check = {"frame": "devices", "check": "straggler-devices", "cases": {"pass": [], "fail": []},
             "params": {"threshold": {"default": 3.5, "doc": "d"}, "min_devices": {"default": 3, "doc": "d"}}}
    doc = _rule(savings="busy_ps - busy_ps_median", **check)
    del doc["where"]
    assert parse_rule(doc).exprs["savings"].names == {"busy_ps", "busy_ps_median"}  # a column the check adds
    with pytest.raises(TraceError, match="`busy_ps_median` is not a column here"):
        parse_rule(_rule(frame="devices", where="busy_ps > busy_ps_median", params={}, cases={}))


def test_docs_list_grammar_frames_and_template_variables():
    from tracekit.report.rulesdoc import render_rules_doc
    doc = render_rules_doc()
    for heading in ("## Expressions", "## Message template variables", "## Frames", "### `op_stats`",
                    "### Example", "Use instead:", "| `x.str.contains('pat', case=False"):
        assert heading in doc, heading
    assert doc.count("### Example") == len(RULES)
    assert "| `exposed_ps` | int64 | ps |" in doc and "| `overlap_ratio` | float64 | fraction |" in doc


def test_docs_rule_example(tmp_path):
    """The user rule in docs/writing-rules.md loads, its cases pass, and it runs in an analysis with a unit-valued --param."""
    import re
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "docs" / "writing-rules.md").read_text()
    section = readme[readme.index("### Writing a rule"):]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    d = tmp_path / "my_rules"
    d.mkdir()
    (d / "MY001-slow-transposes.yaml").write_text(block)
    r = CliRunner().invoke(main, ["rules", "test", str(d)])
    assert r.exit_code == 0 and "1 rule(s), 2 case(s): 2 passed, 0 failed" in r.output, r.output
    assert "--param my001.min_share=5%" in section and "tracekit rules test my_rules/" in section
    r = CliRunner().invoke(main, ["analyze", str(cpu_fixture("big_matmul")), "--rules", str(d), "--param",
                                  "my001.min_share=5%", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["params"]["rules"]["MY001"] == {"min_share": 0.05}


def test_rules_parsed_once_per_process_and_again_when_edited(tmp_path, monkeypatch):
    """A process that analyzes many traces parses each rule file once; a file edited since is parsed again."""
    from tracekit.analysis import rule_model
    d = _write(tmp_path / "rules", _rule(fix="first fix"))
    (mine,) = [r for r in load_rules(extra_dirs=[d]) if r.id == "XX001"]
    assert mine.fix == "first fix"
    parse = rule_model.parse_rule
    calls = []
    monkeypatch.setattr(rule_model, "parse_rule", lambda doc, path: calls.append(path) or parse(doc, path))
    again = load_rules(extra_dirs=[d])
    assert calls == []  # nothing parsed again: built-in and user rules alike
    assert sorted(r.id for r in again) == sorted([r.id for r in RULES] + ["XX001"])
    _write(d, _rule(fix="the edited, longer fix"))
    (edited,) = [r for r in load_rules(extra_dirs=[d]) if r.id == "XX001"]
    assert edited.fix == "the edited, longer fix" and calls == [str(d / "XX001-slow-op.yaml")]
