"""Real JAX CPU captures of collectives over 16- and 64-device meshes (fixtures/capture_collectives.py), priced as
TPU slices and GPU nodes with --chip / --topology: every collective's predicted time equals the book's formula
written out here as literal arithmetic (link figures as in tests/test_collective_model.py), and the measured side
(algbw, busbw, skew) is consistent with the trace.

Local inputs are 1 MiB (2**20 B) per device (256 KiB on the 64-device mesh); V is the full array: an all-gather
over N gathers N x 1 MiB, an all-to-all's global array is N x 1 MiB, an all-reduce or reduce-scatter works on the
1 MiB operand. Mesh device ids are row-major, as --topology numbers chips."""
from __future__ import annotations

import json

import pytest

import tracekit
from tracekit import pipeline
from tracekit.analysis import interconnect
from tracekit.model import roofline
from conftest import FIXTURES

CASES = FIXTURES / "collectives"
MiB = 2**20

# (case, chip, topology) -> {label: (predicted seconds as the book's formula, bounding level)}
EXPECT = {
    ("ring16", "TPU v5e", "16"): {                       # a full 16-chip axis of v5e wraps: 2 x 4.5e10
        "ag_i": (16 * 2**20 * 15 / 16 / 9e10, "ici"),
        "rs_i": (2**20 * 15 / 16 / 9e10, "ici"),
        "ar_i": (2 * 2**20 * 15 / 16 / 9e10, "ici"),
        "a2a_i": (16 * 2**20 / (4 * 9e10), "ici"),
        "cp_i": (2**20 / 4.5e10, "ici"),                 # shift by one: one pair per link, one way
    },
    ("mesh2x8", "TPU v5e", "2x8"): {                     # no wraparound on axes of 2 and 8
        "ag_b": (8 * 2**20 * 7 / 8 / 4.5e10, "ici"),
        "ar_a": (2 * 2**20 * 1 / 2 / 4.5e10, "ici"),
        "ar_ab": (2 * 2**20 * 15 / 16 / (4.5e10 + 4.5e10), "ici"),
        "rs_b": (2**20 * 7 / 8 / 4.5e10, "ici"),
        "a2a_b": (8 * 2**20 / (4 * 4.5e10), "ici"),
    },
    ("mesh4x4", "TPU v5e", "4x4"): {
        "ar_y": (2 * 2**20 * 3 / 4 / 4.5e10, "ici"),
        "ag_x": (4 * 2**20 * 3 / 4 / 4.5e10, "ici"),
        "rs_xy": (2**20 * 15 / 16 / (4.5e10 + 4.5e10), "ici"),
        "a2a_y": (4 * 2**20 / (4 * 4.5e10), "ici"),
        "a2a_xy": (16 * 2**20 / (4 * (4.5e10 + 4.5e10)), "ici"),
        "cp_x": (2**20 / 4.5e10, "ici"),
    },
    ("mesh2x2x4", "TPU v5p", "2x2x4"): {                 # not whole 4x4x4 cubes: no wraparound at all
        "ag_z": (4 * 2**20 * 3 / 4 / 9e10, "ici"),
        "ar_xz": (2 * 2**20 * 7 / 8 / (9e10 + 9e10), "ici"),
        # 2 x (1 + 1 + 3) hops of ~1 us outlast the bytes: latency-bound
        "ar_xyz": (max(2 * 2**20 * 15 / 16 / (3 * 9e10), 2 * (1 + 1 + 3) * 1e-6), "ici latency"),
        "a2a_z": (4 * 2**20 / (4 * 9e10), "ici"),
    },
    ("mesh4x4x4", "TPU v5p", "4x4x4"): {                 # whole cube: every axis wraps, 2 x 9e10 per axis
        "ag_z": (4 * 2**18 * 3 / 4 / 1.8e11, "ici"),
        # book: T = max[T_min * sum(|X_i|)/2, V / (W * n_axes)], here 256 KiB over two axes of 4
        "rs_yz": (max(2**18 * 15 / 16 / (2 * 1.8e11), 1e-6 * (4 + 4) / 2), "ici latency"),
        "ar_yz": (max(2 * 2**18 * 15 / 16 / (2 * 1.8e11), 2 * 1e-6 * (4 + 4) / 2), "ici latency"),
        "a2a_yz": (max(16 * 2**18 / (4 * 2 * 1.8e11), 1e-6 * (4 + 4) / 2), "ici latency"),
    },
    ("mesh2x8", "TPU v5p", "2x2x2@2"): {                 # axis 'a' crosses the two slices over DCN (6.25e9/chip)
        "ar_a": (2 * 2**20 * 1 / 2 / 6.25e9, "dcn"),
        "ag_b": (8 * 2**20 * 7 / 8 / (3 * 9e10), "ici"),
        "ar_ab": (2 * 2**20 * 7 / 8 / (3 * 9e10) + 2 * (2**20 / 8) * 1 / 2 / 6.25e9, "dcn"),
        "a2a_b": (8 * 2**20 / (4 * 3 * 9e10), "ici"),
    },
    ("mesh2x8", "H100", "2x8gpu"): {                     # axis 'a' crosses the two nodes over IB (50e9/GPU)
        "ar_a": (2 * 2**20 * 1 / 2 / 5e10, "ib"),
        "ag_b": (8 * 2**20 * 7 / 8 / 4.5e11, "nvlink"),
        # each phase is latency-bound at this size: 2 x 7 NVLink steps x 0.6 us, then 2 x 1 network step x 2.7 us
        "ar_ab": (max(2 * 2**20 * 7 / 8 / 4.5e11, 2 * 7 * 0.6e-6) + max(2 * (2**20 / 8) * 1 / 2 / 5e10, 2 * 2.7e-6),
                  "nvlink latency"),
        # 7 ring steps x 0.6 us (NCCL's NVLink step latency) outlast 1 MiB x 7/8 at 450 GB/s
        "rs_b": (max(2**20 * 7 / 8 / 4.5e11, 7 * 0.6e-6), "nvlink latency"),
        "a2a_b": (8 * 2**20 * 7 / (4.5e11 * 8**2), "nvlink"),
    },
    ("arslice16", "TPU v5e", "16"): {"ar_slice_i": (2 * 2**20 * 15 / 16 / 9e10, "ici")},
    ("mesh8x2", "MI300X", "2x8gpu"): {                   # pairs inside a node: one Infinity Fabric link each
        "ar_q": (2 * 2**20 * 1 / 2 / 6.4e10, "xgmi"),
        "ag_q": (2 * 2**20 * 1 / 2 / 6.4e10, "xgmi"),
        "cp_q": (2**20 / 6.4e10, "xgmi"),
    },
}
FACTOR = {"all-reduce": lambda n: 2 * (n - 1) / n, "all-gather": lambda n: (n - 1) / n,
          "reduce-scatter": lambda n: (n - 1) / n, "all-to-all": lambda n: (n - 1) / n,
          "collective-permute": lambda n: 1.0}


def _index() -> dict:
    p = CASES / "cases.json"
    if not p.exists():
        pytest.skip("collective fixtures not captured (python fixtures/capture_collectives.py)")
    return json.loads(p.read_text())


_TRACES: dict = {}


def _trace(case: str):
    if case not in _TRACES:
        _TRACES[case] = tracekit.load(CASES / case)
    return _TRACES[case]


@pytest.mark.parametrize("case, chip, topo", list(EXPECT), ids=lambda x: str(x))
def test_capture_priced_as_the_book_says(case, chip, topo):
    info = _index()[case]
    tr = _trace(case)
    j = roofline.joined(tr, chip=chip, topology=topo)
    model, (summary, ex) = j.model, interconnect.view(j.ops, j.model)
    assert len(summary) == len(info["collectives"])  # one op per collective the program ran, nothing else
    for c in info["collectives"]:
        if c["label"] not in EXPECT[(case, chip, topo)]:
            continue
        want, level = EXPECT[(case, chip, topo)][c["label"]]
        groups = tuple(tuple(int(x) for x in g.split()) for g in c["groups"])
        shift = {(g[i], g[(i + 1) % len(g)]) for g in groups for i in range(len(g))}  # the permutes shift by one
        mine = [o for o in model.ops.values() if o.kind == c["kind"] and
                (set(o.pairs) == shift if o.pairs else set(o.groups) == set(groups))]
        assert len(mine) == 1, (c["label"], [o.name for o in model.ops.values() if o.kind == c["kind"]])
        op = mine[0]
        assert op.global_bytes == c["v_bytes"], c["label"]
        row = summary[summary["op"] == op.name].iloc[0]
        assert row["predicted_ps"] / 1e12 == pytest.approx(want, rel=1e-6), c["label"]
        assert row["bound"] == level, c["label"]
        # measured side: bus bandwidth is algbw x the nccl-tests factor; skew within the time
        n = len(groups[0])
        e = ex[ex["op"] == op.name]
        assert (e["busbw_bytes_per_s"] / e["algbw_bytes_per_s"]).round(12).eq(round(FACTOR[c["kind"]](n), 12)).all()
        assert ((e["skew_ps"] >= 0) & (e["skew_ps"] <= e["duration_ps"])).all()
        assert (e["transfer_ps"] == e["duration_ps"] - e["skew_ps"]).all()
        assert len(e) == 2 * info["devices"]  # two profiled steps, every device


def test_collectives_command_and_report_sections(tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import main
    _index()
    path = str(CASES / "mesh4x4")
    r = CliRunner().invoke(main, ["collectives", path, "--chip", "TPU v5e", "--topology", "4x4", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["topology"]["shape"] == [4, 4] and d["chip"] == "TPU v5e" and len(d["collectives"]) == 6
    for rec in d["collectives"]:
        for k in ("algbw_bytes_per_s", "busbw_bytes_per_s", "skew_ps", "predicted_ps", "bound", "time_ps"):
            assert rec[k] is not None, (rec["op"], k)
    r = CliRunner().invoke(main, ["collectives", path, "--chip", "TPU v5e", "--topology", "4x4"],
                           env={"COLUMNS": "200"})  # wide enough for every column (narrower drops some)
    assert r.exit_code == 0 and "busbw" in r.output and "ici x(4)" in r.output
    r = CliRunner().invoke(main, ["collectives", path, "--topology", "4x4"])  # a TPU slice needs a TPU chip
    assert r.exit_code == 2 and "--chip" in r.output
    outs = [tmp_path / f"r.{x}" for x in ("json", "md", "html", "txt")]
    args = ["analyze", path, "--chip", "TPU v5e", "--topology", "4x4"] + [a for o in outs for a in ("-o", str(o))]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    rep = json.loads(outs[0].read_text())
    assert rep["interconnect"]["topology"]["description"].startswith("TPU slice 4x4")
    assert {c["kind"] for c in rep["interconnect"]["collectives"]} == {"all-reduce", "all-gather", "reduce-scatter",
                                                                      "all-to-all", "collective-permute"}
    for o in outs[1:]:
        text = o.read_text()
        assert "Collectives: measured vs predicted" in text and "busbw" in text and "skew" in text


def test_rules_on_priced_captures():
    """The collective rules fire on real programs: an all-reduce sliced afterwards (TK014), an all-reduce over
    the mesh axis that crosses two slices although a pair fits in one (TK013); the unoverlapped-collective
    message names the bounding level."""
    info = _index()
    rep = pipeline.analyze(_trace("arslice16"), chip="TPU v5e", topology="16")
    by_id = {f["rule_id"]: f for f in rep.findings}
    (ar,) = [c for c in info["arslice16"]["collectives"] if c["pattern"] == "all-reduce then slice"]
    assert "TK014" in by_id and {e["op"] for e in by_id["TK014"]["evidence"]} == {"psum_invariant.7"}
    assert "bound by: ici" in by_id["TK001"]["message"]
    rep = pipeline.analyze(_trace("mesh2x8"), chip="TPU v5p", topology="2x2x2@2")
    by_id = {f["rule_id"]: f for f in rep.findings}
    tr = _trace("mesh2x8")
    from tracekit.model import collective_hlo
    pairs = {n for (_, n), o in collective_hlo.collectives(tr.hlo_modules).items() if o.group_size == 2}
    assert "TK013" in by_id and {e["op"] for e in by_id["TK013"]["evidence"]} == pairs
    assert "(dcn)" in by_id["TK013"]["message"]
    same = pipeline.analyze(_trace("mesh2x8"), chip="TPU v5p", topology="4x4")  # one slice: nothing crosses DCN
    assert "TK013" not in {f["rule_id"] for f in same.findings}


def _every_trace_with_collectives():
    from conftest import SHARED
    cpu = json.loads((FIXTURES / "cpu" / "cases.json").read_text())
    cpu = cpu.get("cases", cpu)
    out = [FIXTURES / "cpu" / k for k, v in cpu.items() if isinstance(v, dict) and (v.get("devices") or 1) > 1]
    out += [CASES / k for k in _index()]
    out += sorted(SHARED.glob("*/*.xplane.pb")) if SHARED.exists() else []
    return [p for p in out if "bad" not in p.parts]


def test_view_complete_for_every_collective_in_the_traces():
    """Every collective in ../shared/traces and the fixtures gets algbw, busbw, a predicted time and its bounding
    level; skew is measured, or says why not. CPU traces are priced on their own shared memory."""
    seen = 0
    for path in _every_trace_with_collectives():
        tr = _trace(path.name) if path.parent == CASES else tracekit.load(path)
        j = roofline.joined(tr)
        summary, _ = interconnect.view(j.ops, j.model)
        for r in summary.itertuples(index=False):
            seen += 1
            assert r.algbw_bytes_per_s > 0 and r.busbw_bytes_per_s > 0, (path, r.op)
            assert r.predicted_ps > 0 and r.bound not in ("", "unknown", "none"), (path, r.op, r.bound)
            assert r.skew_ps >= 0 or "skew unknown" in r.note, (path, r.op)
    assert seen >= 30


@pytest.mark.parametrize("case, want", [
    # sharded8: w1 f32[512,512] (1 MiB) all-gathered and its gradient reduce-scattered; w2's gradient f32[512,256]
    # (512 KiB) all-reduced twice: alone, and in a tuple all-reduce with the f32[] loss (512 KiB + 4 B)
    ("sharded8", {"all-gather": [2**20 * 7 / 8 / 4.5e10], "reduce-scatter": [2**20 * 7 / 8 / 4.5e10],
                  "all-reduce": [2 * 2**19 * 7 / 8 / 4.5e10, 2 * (2**19 + 4) * 7 / 8 / 4.5e10]}),
    ("allreduce_exposed", {"all-reduce": [2 * 8 * 2**20 * 7 / 8 / 4.5e10]}),  # the 8 MiB gradient psum
])
def test_8_device_captures_priced_as_a_v5e_ring_of_8(case, want):
    """1-D of 8: the project's 8-device CPU captures priced with --chip "TPU v5e" --topology 8 (8 chips: no
    wraparound, one way at 4.5e10 B/s per link), against the book's V(N-1)/N / W (all-reduce twice that)."""
    from conftest import cpu_fixture
    tr = tracekit.load(cpu_fixture(case))
    j = roofline.joined(tr, chip="TPU v5e", topology="8")
    summary, ex = interconnect.view(j.ops, j.model)
    got: dict = {}
    for r in summary.itertuples():
        got.setdefault(r.kind, []).append(r.predicted_ps / 1e12)
        assert r.bound == "ici" and r.group_size == 8 and r.span == "ici x(8)"
    assert {k: sorted(v) for k, v in got.items()} == {k: pytest.approx(sorted(v), rel=1e-6) for k, v in want.items()}
    assert (ex["skew_ps"] <= ex["duration_ps"]).all() and (ex["algbw_bytes_per_s"] > 0).all()
