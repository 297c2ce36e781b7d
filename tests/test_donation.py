"""TK023 (input-not-donated) on real captures (fixtures/capture_cpu.py: donation_undonated, donation_donated) and
the donation match of tracekit.analysis.donation on hand-made allocations.

Oracles: the fixture's cases.json (which programs ran in the profiled window, which were donated) and XLA's
``compiled.memory_analysis()`` recorded at capture time (``alias_size_in_bytes``: what XLA aliased)."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES, cpu_fixture
from tracekit import pipeline
from tracekit.analysis import donation

CASES = json.loads((FIXTURES / "cpu" / "cases.json").read_text())["cases"]


@pytest.fixture(scope="module")
def reports():
    return {c: pipeline.analyze(str(cpu_fixture(c))).data for c in ("donation_undonated", "donation_donated")}


def _tk023(d):
    return [f for f in d["findings"] if f["rule_id"] == "TK023"]


def test_undonated_train_step_is_named_first(reports):
    d = reports["donation_undonated"]
    case = CASES["donation_undonated"]
    assert case["xla_memory"]["train_step"]["alias_size_in_bytes"] == 0  # XLA aliased nothing: not donated
    (f,) = _tk023(d)
    assert f["evidence"][0]["module"] == case["jitted"]["train_step"] == "jit_train_step"
    assert "the most is jit_train_step" in f["message"]
    # parameters and momentum, 2 x (512x1024 + 1024x512) f32 = 8 MiB, listed in number order
    assert f["evidence"][0]["undonated_parameters"] == "0,1,2,3"
    assert f["evidence"][0]["undonated_bytes"] == 2 * 2 * 512 * 1024 * 4
    assert f["evidence"][0]["executions"] == case["steps"]


def test_no_program_without_an_execution_in_the_window_appears(reports):
    for case, d in reports.items():
        ran = set(CASES[case]["ran_in_window"])
        progs = {p["module"]: p for p in d["memory"]["programs"]}
        # the init program is compiled and in the trace's HLO, ran only before the window, and is not donated
        assert progs["jit_init_params"]["executions"] == 0 and progs["jit_init_params"]["undonated_bytes"] > 0
        for f in _tk023(d):
            named = {ev["module"] for ev in f["evidence"]}
            assert named <= ran, (case, named - ran)
            never = {m for m, p in progs.items() if p["executions"] == 0}
            assert not any(m in f["message"] for m in never), (case, f["message"])


def test_same_size_other_shape_or_dtype_is_no_candidate(reports):
    """jit_relayout returns arrays as large as its arguments but transposed (f32[1024,256] -> f32[256,1024]) and
    as s32: XLA can alias neither, so it is not a candidate although it runs every step."""
    for d in reports.values():
        prog = next(p for p in d["memory"]["programs"] if p["module"] == "jit_relayout")
        assert prog["executions"] > 0 and prog["output_bytes"] >= prog["argument_bytes"] > 0
        assert prog["undonated_bytes"] == 0 and prog["undonated_parameters"] == ""


def test_donated_variant_does_not_fire(reports):
    d = reports["donation_donated"]
    case = CASES["donation_donated"]
    assert case["donated"] and case["xla_memory"]["train_step"]["alias_size_in_bytes"] == 8 * 2**20
    assert _tk023(d) == []
    step = next(p for p in d["memory"]["programs"] if p["module"] == "jit_train_step")
    assert step["alias_bytes"] == case["xla_memory"]["train_step"]["alias_size_in_bytes"]
    assert step["undonated_bytes"] == 0


def _alloc(i, kind, size, param=-1, color=0, is_tuple=False):
    return {"allocation": i, "kind": kind, "size_bytes": size, "parameter_number": param, "color": color,
            "is_tuple": is_tuple}


def _buf(i, shape, size):
    return {"allocation": i, "offset_bytes": 0, "size_bytes": size, "shape": shape}


@pytest.mark.parametrize("args, outs, aliased, want", [
    # two f32[512,512] arguments, two outputs of that shape: both candidates, in number order
    ([(1, "f32[512,512]"), (0, "f32[512,512]")], ["f32[512,512]", "f32[512,512]"], set(), (2 * 2**20, "0,1")),
    # an output of the same size but another shape or dtype is no candidate
    ([(0, "f32[512,512]")], ["f32[256,1024]"], set(), (0, "")),
    ([(0, "f32[512,512]")], ["s32[512,512]"], set(), (0, "")),
    # one output, two arguments of its shape: matched once
    ([(0, "f32[512,512]"), (1, "f32[512,512]")], ["f32[512,512]"], set(), (2**20, "0")),
    # an aliased (donated) argument is no candidate
    ([(0, "f32[512,512]"), (1, "f32[512,512]")], ["f32[512,512]", "f32[512,512]"], {0}, (2**20, "1")),
])
def test_undonated_matches_shape_and_dtype(args, outs, aliased, want):
    size = 2**20
    allocs = [_alloc(i, "argument", size, p) for i, (p, _) in enumerate(args)]
    bufs = [_buf(i, s, size) for i, (_, s) in enumerate(args)]
    for j, s in enumerate(outs, len(args)):
        allocs.append(_alloc(j, "output", size))
        bufs.append(_buf(j, s, size))
    assert donation.undonated(allocs, allocs, aliased, donation.allocation_shapes(bufs)) == want


@pytest.mark.parametrize("case", ["donation_undonated", "async_dp8", "fori_loop"])
def test_executions_count_each_programs_runs_as_the_rows_text_does(case):
    """Programs without module events count their distinct (host, device, run_id) among their op rows: checked
    against pandas on the rows' text (module events removed, so every program is counted from its ops)."""
    import tracekit
    tr = tracekit.load(cpu_fixture(case))
    tr.modules = tr.modules.iloc[:0]
    ops = tr.ops.astype({"module": str, "host": str, "device": str})
    want = ops.groupby(["module", "program_id"])[["host", "device", "run_id"]].apply(
        lambda g: len(g.drop_duplicates()))
    assert donation.executions(tr) == {(m, int(p)): int(v) for (m, p), v in want.items()}
    assert len(want) and want.max() > 1
