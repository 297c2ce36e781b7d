"""Serving traces (issue 37): prefill and decode programs, their steps, the KV cache and the decode roofline.

Oracles, none of them tracekit's own output:

* ``fixtures/serving/<case>/.../cpu.serving.json``: what ``fixtures/capture_serving.py`` set (the model's dimensions,
  the sum of ``nbytes`` of its weight arrays and cache arrays, the schedule of prefill and decode calls);
* the book's formulas written out as literal arithmetic (KV cache = 2 · bytes · L · B · S · Hkv · Dh; decode
  bound = bytes / HBM bandwidth; the LLaMA 3-70B numbers of "Serving LLaMA 3-70B on TPUs");
* the ``cpu.trace.json.gz`` jax wrote beside each xplane, read with gzip + json only (the runs' start times).
"""
from __future__ import annotations

import gzip
import json
import math
import statistics
from functools import lru_cache

import pytest
from click.testing import CliRunner

from conftest import FIXTURES

SERVING = FIXTURES / "serving"
CASES = ("decode_mha", "decode_gqa")


def _run1(case: str):
    return SERVING / case / "plugins" / "profile" / "run1"


@lru_cache(maxsize=None)
def oracle(case: str) -> dict:
    return json.loads((_run1(case) / "cpu.serving.json").read_text())


@lru_cache(maxsize=None)
def section(case: str, source: str = "xplane") -> dict:
    from tracekit.analysis import inference_report
    from tracekit.report.engine import inference as engine_inference
    from tracekit.ingest.trace import load
    path = _run1(case) / "cpu.trace.json.gz" if source == "json" else SERVING / case
    tr = load(path)
    return inference_report.section(engine_inference.build(tr))


def _program(sec: dict, module: str) -> dict:
    hits = [p for p in sec["programs"] if p["module"] == module]
    assert len(hits) == 1, [p["module"] for p in sec["programs"]]
    return hits[0]


def _near(a, b, rel=0.05) -> bool:
    return a is not None and b is not None and abs(a - b) <= rel * abs(b)


# --------------------------------------------------------------------------------------- the fixture's own numbers
@pytest.mark.parametrize("case", CASES)
def test_prefill_and_decode_told_apart_from_hlo(case):
    o, sec = oracle(case), section(case)
    assert sec["workload"] == "serving" and sec["workload_source"] == "trace"
    assert _program(sec, o["jitted"]["prefill"])["kind"] == "prefill"
    assert _program(sec, o["jitted"]["decode"])["kind"] == "decode"
    assert {p["kind"] for p in sec["programs"]} == {"prefill", "decode"}  # helper programs are not serving
    for kind in ("prefill", "decode"):
        p = _program(sec, o["jitted"][kind])
        assert p["source"] == "hlo"
        assert any("aliased to outputs and written in place" in e for e in p["evidence"])


@pytest.mark.parametrize("case", CASES)
def test_parameter_and_kv_bytes_match_the_script(case):
    o, sec = oracle(case), section(case)
    m = o["model"]
    # the book's KV formula on the script's own dimensions (f32: 4 bytes)
    kv = 2 * 4 * m["layers"] * m["batch"] * m["cache_len"] * m["kv_heads"] * m["head_dim"]
    assert kv == o["kv_cache_bytes"]
    for kind in ("prefill", "decode"):
        p = _program(sec, o["jitted"][kind])
        assert _near(p["param_bytes"], o["param_bytes"]), (p["param_bytes"], o["param_bytes"])
        assert _near(p["kv_cache_bytes"], kv)
        assert p["kv_layers"] == m["layers"]
        assert _near(p["kv_cache_bytes_per_layer"], o["kv_cache_bytes_per_layer"])
        assert p["cache_len"] == m["cache_len"]
        assert p["tokens_per_step"] == o["tokens_per_step"][kind]
        assert p["tokens_per_sequence"] == o["tokens_per_sequence"][kind]
    dec = _program(sec, o["jitted"]["decode"])
    assert _near(dec["kv_bytes_read"], kv)  # dense masked attention reads the whole buffer every step
    assert _program(sec, o["jitted"]["prefill"])["kv_bytes_read"] == 0  # it attends over its own keys only
    # the valid-length ideal: each decode step at position pos attends pos + 1 positions
    pos = [s["pos"] + 1 for s in o["schedule"] if s["kind"] == "decode"]
    assert _near(dec["kv_valid_bytes"], kv * statistics.mean(pos) / m["cache_len"], rel=0.01)


@pytest.mark.parametrize("case", CASES)
def test_decode_bound_from_the_scripts_bytes_and_the_chips_bandwidth(case):
    o, sec = oracle(case), section(case)
    dec = _program(sec, o["jitted"]["decode"])
    bw = dec["hbm_bw_bytes_per_s"]
    assert bw and bw > 0
    bound_ps = (o["param_bytes"] + o["kv_cache_bytes"]) / bw * 1e12
    assert _near(dec["decode_bound_ps"], bound_ps)
    assert _near(dec["bound_share"], dec["decode_bound_ps"] / dec["step_p50_ps"], rel=1e-3)
    assert dec["trust"]["decode_bound_ps"] == "indicative"  # a CPU's bandwidth is a calibration
    assert _program(sec, o["jitted"]["prefill"])["decode_bound_ps"] is None  # prefill: its compute roofline
    pre = _program(sec, o["jitted"]["prefill"])
    flops = o["xla_cost"]["prefill"]["flops"]
    assert _near(pre["flops_per_step"], flops, rel=0.2)  # tracekit's cost model against XLA's cost_analysis
    assert _near(pre["compute_share"], pre["compute_bound_ps"] / pre["step_p50_ps"], rel=1e-3)


def _json_runs(case: str) -> list:
    """(start us, module) of every run in jax's own trace JSON: the op events of one run id, earliest start."""
    with gzip.open(_run1(case) / "cpu.trace.json.gz", "rt") as f:
        events = json.load(f)["traceEvents"]
    first: dict = {}
    for e in events:
        a = e.get("args") or {}
        if e.get("ph") == "X" and "hlo_op" in a and "run_id" in a:
            key = (a["hlo_module"], a["run_id"])
            first[key] = min(first.get(key, math.inf), float(e["ts"]))
    return sorted((t, m) for (m, _), t in first.items())


@pytest.mark.parametrize("case", CASES)
def test_steps_per_kind_against_jax_json(case):
    """Steps are start to the next serving start (prefill and decode interleaved): the oracle from jax's JSON."""
    o, sec = oracle(case), section(case)
    names = {o["jitted"]["prefill"]: "prefill", o["jitted"]["decode"]: "decode"}
    runs = [(t, names[m]) for t, m in _json_runs(case) if m in names]
    assert [k for _, k in runs] == [s["kind"] for s in o["schedule"]]  # the schedule the script ran
    steps = {"prefill": [], "decode": []}
    for (t, k), (t2, _) in zip(runs, runs[1:]):
        steps[k].append((t2 - t) * 1e6)  # us -> ps
    for kind, xs in steps.items():
        p = _program(sec, o["jitted"][kind])
        assert p["steps"] == sum(1 for s in o["schedule"] if s["kind"] == kind)
        assert _near(p["step_p50_ps"], statistics.median(xs), rel=0.01)
        assert _near(p["tokens_per_s_per_chip"], o["tokens_per_step"][kind] / (statistics.median(xs) / 1e12),
                     rel=0.01)
    dec = _program(sec, o["jitted"]["decode"])
    between = sum(1 for a, b, c in zip(o["schedule"], o["schedule"][1:], o["schedule"][2:])
                  if (a["kind"], b["kind"]) == ("decode", "prefill") and c["kind"] == "decode")
    assert dec["interruptions"] == between  # decode_gqa: one prefill between decode steps; decode_mha: none


# ---------------------------------------------------------------------------------- without HLO: jax's JSON alone
@pytest.mark.parametrize("case", CASES)
def test_told_apart_from_the_trace_json_alone(case):
    o, sec = oracle(case), section(case, "json")
    assert _program(sec, o["jitted"]["prefill"])["kind"] == "prefill"
    dec = _program(sec, o["jitted"]["decode"])
    assert dec["kind"] == "decode"
    assert dec["tokens_per_step"] is None and dec["decode_bound_ps"] is None  # no shapes: unknown, never 0
    assert any("cannot be checked without HLO" in e for e in dec["evidence"])


@pytest.mark.parametrize("case", CASES)
def test_told_apart_from_json_with_names_that_say_nothing(case, tmp_path):
    """The same JSON with the programs renamed jit_a / jit_b: the runs tell decode (most runs, shorter) from prefill."""
    from tracekit.analysis import inference_report
    from tracekit.report.engine import inference as engine_inference
    from tracekit.ingest.trace import load
    o = oracle(case)
    ren = {o["jitted"]["prefill"]: "jit_a", o["jitted"]["decode"]: "jit_b"}
    with gzip.open(_run1(case) / "cpu.trace.json.gz", "rt") as f:
        doc = json.load(f)
    for e in doc["traceEvents"]:
        a = e.get("args") or {}
        if a.get("hlo_module") in ren:
            a["hlo_module"] = ren[a["hlo_module"]]
    out = tmp_path / "cpu.trace.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(doc, f)
    tr = load(out)
    sec = inference_report.section(engine_inference.build(tr))
    assert _program(sec, "jit_a")["kind"] == "prefill" and _program(sec, "jit_b")["kind"] == "decode"
    assert _program(sec, "jit_b")["source"] == "runs"


# ------------------------------------------------------------------------------------------ never classed as serving
def _all_training_fixtures():
    return sorted(p for d in ("cpu", "pairs") for p in (FIXTURES / d).iterdir() if p.is_dir())


def test_training_fixtures_are_never_serving():
    from tracekit.report.engine import inference as engine_inference
    from tracekit.ingest.trace import load
    checked = 0
    for p in _all_training_fixtures():
        tr = load(p)
        view = engine_inference.build(tr)
        assert view.workload == "training" and not len(view.programs), p
        checked += 1
    assert checked >= 30


def test_v6e_inference_trace_has_no_decode_step(v6e):
    """An inference trace whose programs write no cache in place: nothing is classed as a decode step."""
    from tracekit.report.engine import inference as engine_inference
    from tracekit.ingest.trace import load
    tr = load(v6e)
    assert not len(engine_inference.build(tr).programs)
    given = engine_inference.build(tr, workload="serving")  # told it serves: the step program, kind unknown
    assert set(given.programs["kind"]) <= {"unknown"}


def test_no_in_place_cache_no_decode():
    """The decode fixture with its module's input/output aliasing removed (the cache no longer donated): its
    dynamic-update-slice and its name remain, yet it is not classed as decode."""
    from tracekit.report.engine import inference as engine_inference
    from tracekit.ingest.trace import load
    o = oracle("decode_mha")
    tr = load(SERVING / "decode_mha")
    for m in tr.hlo_modules:
        if m.name == o["jitted"]["decode"]:
            m.proto.ClearField("input_output_alias")
    view = engine_inference.build(tr)
    assert o["jitted"]["decode"] not in set(view.programs["module"])
    assert set(view.programs["kind"]) == {"prefill"}


def test_workload_given():
    from tracekit.report.engine import inference as engine_inference
    from tracekit.ingest.trace import load
    tr = load(SERVING / "decode_mha")
    v = engine_inference.build(tr, workload="training")
    assert v.workload == "training" and v.workload_source == "given" and not len(v.programs)
    with pytest.raises(ValueError):
        engine_inference.build(tr, workload="inference")


# --------------------------------------------------------------------------------- the book's worked numbers
def test_formulas_against_the_book():
    """How to Scale Your Model, "Serving LLaMA 3-70B on TPUs" (v5e: 1.97e14 bf16 FLOP/s, 8.2e11 B/s HBM, 16 GB)."""
    from tracekit.model import serving as f
    # LLaMA 3-70B: 80 layers, 8 KV heads of 128; int8 cache: 2 * 8 * 128 * 80 = 160 KiB per token
    assert f.kv_bytes_per_token(80, 8, 128, 1) == 2 * 8 * 128 * 80 == 160 * 1024
    # "a sequence length of 32k tokens ... 162e3 * 32,768 = 5.3GB / sequence"
    assert 5.3e9 <= f.kv_cache_bytes(80, 1, 32768, 8, 128, 1) <= 5.4e9
    # "v5e HBM / v5e HBM memory bandwidth = 16GB / 8.2e11 = 19ms" per decode step when params + KV fill HBM
    assert f.decode_bound_s(16e9 - 5e9, 5e9, 8.2e11) == pytest.approx(16e9 / 8.2e11)
    assert 0.019 <= f.decode_bound_s(11e9, 5e9, 8.2e11) < 0.0196
    assert f.decode_bound_ps(11e9, 5e9, 8.2e11) == pytest.approx(16e9 / 8.2e11 * 1e12)
    # "FFW blocks are compute bound when B > 240" (bf16); int8 weights with bf16 matmuls: 120, int4: 60
    assert f.critical_batch(1.97e14, 8.2e11, 2) == pytest.approx(1.97e14 / 8.2e11)
    assert round(f.critical_batch(1.97e14, 8.2e11, 2)) == 240
    assert round(f.critical_batch(1.97e14, 8.2e11, 1)) == 120
    assert round(f.critical_batch(1.97e14, 8.2e11, 0.5)) == 60
    # bf16 on a 4x4 (16 chips of 16 GB): 256 - 140 GB of params = 116 GB for caches; 324 kB per token at 8k: 43
    assert f.sequences_that_fit(16 * 16e9 - 140e9, f.kv_cache_bytes(80, 1, 8192, 8, 128, 2)) == 43
    # throughput per chip: batch 43 every 19 ms on 16 chips
    assert f.tokens_per_s(43, 0.019) / 16 == pytest.approx(43 / 0.019 / 16)
    # unknown stays unknown
    assert math.isnan(f.decode_bound_s(1e9, 0, 0)) and math.isnan(f.critical_batch(1.97e14, float("nan")))
    assert math.isnan(f.sequences_that_fit(float("nan"), 1e6)) and f.sequences_that_fit(-5, 1e6) == 0


def test_v5e_decode_bound_from_the_chip_table():
    """The same bound with tracekit's TPU v5e entry: its bandwidth is the book's table's (8.1e11 B/s)."""
    from tracekit.model import chips, serving as f
    v5e = chips.get("v5e")
    assert v5e.hbm_bw_bytes_per_s == 8.1e11
    # LLaMA 3-70B in int8 (70 GB) on a 4x2 (8 chips): 8.75 GB of weights per chip + an 8k int8 cache of 4 sequences
    params, kv = 70e9 / 8, f.kv_cache_bytes(80, 4, 8192, 8, 128, 1) / 8
    assert f.decode_bound_s(params, kv, v5e.hbm_bw_bytes_per_s) == pytest.approx((8.75e9 + kv) / 8.1e11)


# --------------------------------------------------------------------------------------------- rules and reports
@lru_cache(maxsize=None)
def _report(case: str, workload: str | None = None):
    from tracekit import pipeline
    return pipeline.analyze(SERVING / case, workload=workload).data


def test_serving_findings_and_training_rules_silent():
    d = _report("decode_mha")
    ids = {f["rule_id"] for f in d["findings"]}
    assert {"TK028", "TK030"} <= ids  # far from the memory roofline (~10 %); the host reads every token
    assert "TK024" not in ids  # training-only (MFU) stays silent on a serving trace
    tk028 = next(f for f in d["findings"] if f["rule_id"] == "TK028")
    assert tk028["savings_ps"] > 0 and tk028["evidence"][0]["module"] == oracle("decode_mha")["jitted"]["decode"]
    given = _report("decode_mha", "training")
    assert not {"TK028", "TK029", "TK030", "TK031"} & {f["rule_id"] for f in given["findings"]}
    assert given["inference"]["workload"] == "training"
    gqa = {f["rule_id"] for f in _report("decode_gqa")["findings"]}
    assert "TK031" in gqa  # a prefill between decode steps


def test_training_rules_declare_their_workload():
    from tracekit.analysis import rule_model
    rules = {r.id: r for r in rule_model.load_rules()}
    assert {k for k, r in rules.items() if r.workload == "training"} == {"TK001", "TK014", "TK015", "TK024"}
    assert rules["TK023"].workload == "any"  # donating the cache matters when serving too


def test_training_rule_keeps_rows_of_other_programs():
    import pandas as pd
    from tracekit.analysis import rule_model, rules
    r = next(x for x in rule_model.load_rules() if x.id == "TK001")
    serving = pd.DataFrame({"module": ["jit_decode"], "program_id": [3]})
    coll = pd.DataFrame({"module": ["jit_decode", "jit_train"], "op": ["all-reduce.1", "all-reduce.2"]})
    kept = rules.for_workload(r, {"serving": serving}, coll)
    assert list(kept["module"]) == ["jit_train"]
    steps = pd.DataFrame({"step": [0, 1]})  # no program column: the serving programs' steps
    assert not len(rules.for_workload(r, {"serving": serving}, steps))
    assert len(rules.for_workload(r, {"serving": serving.iloc[:0]}, steps)) == 2


def test_section_in_every_format():
    from tracekit.report import envelope, render
    d = _report("decode_gqa")
    rep = envelope.Report(d)
    for fmt, mark, name in (("text", "Inference (prefill and decode steps)", "jit_generate"),
                            ("markdown", "### Inference", "jit\\_generate"),
                            ("html", 'id="inference"', "jit_generate")):
        out = render.render(rep, fmt)
        assert mark in out and name in out, fmt
    keys = {"module", "kind", "steps", "step_p50_ps", "tokens_per_step", "tokens_per_s_per_chip", "param_bytes",
            "kv_cache_bytes", "kv_bytes_read", "decode_bound_ps", "bound_share", "evidence"}
    for p in json.loads(render.render(rep, "json"))["inference"]["programs"]:
        assert keys <= set(p)
    train = envelope.Report(_train_report())
    assert "Inference (prefill" not in render.render(train, "text")


@lru_cache(maxsize=None)
def _train_report():
    from tracekit import pipeline
    return pipeline.analyze(FIXTURES / "cpu" / "train_step").data


def test_inference_command():
    from tracekit.cli.app import main
    r = CliRunner().invoke(main, ["inference", str(SERVING / "decode_mha"), "--format", "json"])
    assert r.exit_code == 0, r.output
    sec = json.loads(r.output)
    assert {p["kind"] for p in sec["programs"]} == {"prefill", "decode"}
    r = CliRunner().invoke(main, ["inference", str(SERVING / "decode_mha")])
    assert r.exit_code == 0 and "decode bound" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(main, ["inference", str(SERVING / "decode_mha"), "--workload", "inference"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["inference", str(FIXTURES / "cpu" / "train_step")])
    assert r.exit_code == 0 and r.output.startswith("workload: training")


def test_pod_path_gives_the_same_section(tmp_path):
    """Two hosts (copies of the serving fixture): the map over hosts and the reduce give the single process's
    inference section and serving findings."""
    from tracekit import pipeline
    from tracekit.options import Options
    from tracekit.run import pod
    src = _run1("decode_gqa") / "cpu.xplane.pb"
    for h in ("host0", "host1"):
        (tmp_path / f"{h}.xplane.pb").write_bytes(src.read_bytes())
    single = pipeline.analyze(tmp_path).data
    mapped = pod.analyze(tmp_path, Options(jobs=2)).data  # a pool of two workers
    assert single["inference"] == mapped["inference"]
    assert {p["hosts"] for p in mapped["inference"]["programs"]} == {2}
    serving = {"TK028", "TK029", "TK030", "TK031"}
    assert {f["rule_id"] for f in single["findings"]} & serving == {f["rule_id"] for f in mapped["findings"]} & serving


def test_readme_worked_example_is_what_the_command_prints():
    """The methodology doc's serving example: its decode-bound line is what `tracekit inference` prints on the fixture."""
    from tracekit.cli.app import main
    readme = (FIXTURES.parent / "docs" / "methodology.md").read_text()
    r = CliRunner().invoke(main, ["inference", str(SERVING / "decode_mha")], env={"COLUMNS": "118"})
    assert r.exit_code == 0
    flat = " ".join(r.output.split())
    for line in ("decode bound: (526 kB of parameters + 524 kB of KV read) / 24.6 GB/s = 42.7 µs",
                 "tokens: 4 per step (4 sequence(s) x 1) [exact]: 8,956 tokens/s per chip"):
        assert line in flat and line in " ".join(readme.split())
    o = oracle("decode_mha")
    assert f"{o['param_bytes']:,}" in readme and f"{o['kv_cache_bytes']:,}" in readme


@pytest.mark.parametrize("case", CASES)
def test_live_peaks_from_the_memory_view_equal_the_serving_modules_own(case):
    """The serving part takes its programs' live peaks from the memory view's programs (all modules, buffer
    assignments read once) instead of working them out again from the serving modules' tables: the same peaks."""
    from tracekit.analysis import inference, memory
    from tracekit.ingest.trace import load
    from tracekit.model import roofline
    tr = load(SERVING / case)
    j = roofline.joined(tr)
    mem = memory.build(tr, j.chips)
    own = inference.host_summary(tr.hosts[0], tr.modules, tr.hlo_modules, j.ops, j.chips)
    viewed = inference.host_summary(tr.hosts[0], tr.modules, tr.hlo_modules, j.ops, j.chips,
                                    memory_programs=mem.programs)
    assert own.live_peak, "no serving program with a buffer assignment: the test checks nothing"
    assert list(viewed.live_peak.items()) == list(own.live_peak.items())


@pytest.mark.parametrize("case", [*CASES, "v6e"])
def test_program_shapes_from_one_table_equal_each_modules_own(case):
    """program_shapes builds one buffer table for every module; each module's shape equals the one made from a
    table of that module alone (as before)."""
    from conftest import shared_trace
    from tracekit.analysis import serving_hlo
    from tracekit.ingest import buffers as buf
    from tracekit.ingest.trace import load
    tr = load(shared_trace("tpu/v6e-4_jax_inference.xplane.pb") if case == "v6e" else SERVING / case)
    mods = tr.hlo_modules
    assert sum(m.buffers is not None for m in mods) >= 2, "fewer than two buffer assignments: nothing checked"
    own = {(m.name, int(m.program_id)): serving_hlo.program_shape(m.name, m.program_id, m.proto,
                                                                  buf.tables([m]) if m.buffers is not None else None)
           for m in mods}
    assert repr(serving_hlo.program_shapes(mods)) == repr(own)  # (repr: NaN fields compare unequal as floats)
