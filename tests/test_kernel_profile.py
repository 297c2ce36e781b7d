"""What a TPU trace measured inside its kernels (issue 32 item 3): the ``_counters_`` line's MXU busy cycles and the
Mosaic pipeline stages of the ``XLA TraceMe`` line, per kernel, beside the roofline.

Oracles: xprof's own ``get_kernel_utilization`` (the installed xprof, run on the same file: skipped when xprof is
not importable) for the MXU utilization; the raw events read with the protobuf alone for the DMA-wait share; the
numbers ``fixtures/make_pallas_tpu.py`` set and literal arithmetic for the rest."""
import json

import pytest

import tracekit
from conftest import FIXTURES, shared_trace
from tracekit import pipeline
from tracekit.analysis import kernelprof as kp_analysis
from tracekit.ingest import synth
from tracekit.model import roofline
from tracekit.proto import xplane_pb2

PALLAS = FIXTURES / "pallas_tpu" / "pallas_matmul.xplane.pb"
FACTS = FIXTURES / "pallas_tpu" / "pallas_matmul.json"
M, K, N = 2048, 1024, 2048


def xprof_kernel_utilization(data: bytes) -> dict:
    """xprof's ``get_kernel_utilization`` on an XSpace's bytes (the tool as its CLI runs it)."""
    tool = pytest.importorskip("xprof.cli.tools.oss.get_kernel_utilization_tool")
    return tool.get_kernel_utilization(session_id="", raw_bytes=data, output_format="dict", bypass_cache=True)


def raw_stage_times(path) -> dict:
    """Stage name -> summed duration (ps) of the ``XLA TraceMe`` events of every TPU plane, read with the protobuf
    alone."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    out: dict = {}
    for p in space.planes:
        for line in p.lines:
            if line.name == "XLA TraceMe":
                for e in line.events:
                    name = p.event_metadata[e.metadata_id].name
                    out[name] = out.get(name, 0) + e.duration_ps
    return out


# --- the Pallas case of issue 32 ------------------------------------------------------------------------------
def test_pallas_fixture_costs_from_shapes_and_the_disagreement_named():
    facts = json.loads(FACTS.read_text())
    assert facts["author_cost_estimate"] == {"flops": 1_080_000_000, "bytes_accessed": 0}
    tr = tracekit.load(PALLAS)
    o = roofline.join(tr)
    assert len(o) == 3 and set(o["op"].astype(str)) == {"pallas_call.1"}
    assert (o["flops"] == 2 * M * K * N).all()  # 8.59 G per execution, not the stated 1.08 G
    assert (o["bytes_accessed"] >= 4 * (M * K + K * N + M * N)).all()  # not the stated 0
    rep = pipeline.analyze(PALLAS)
    warned = [w for w in rep.data["model_warnings"] if w.get("op") == "pallas_call.1"]
    # the author's figure reaches the trace twice (the cost_estimate in the backend config, the flops stat the
    # capture copies from it): each source is named once, with both numbers
    assert sorted(w["stated_source"] for w in warned) == ["the kernel's cost_estimate (backend config)",
                                                          "the trace's flops stat"]
    assert all("1.08e+09" in w["message"] and "8.59e+09" in w["message"] for w in warned)


def test_pallas_mxu_utilization_equals_xprof():
    want = xprof_kernel_utilization(PALLAS.read_bytes())
    kernels = [k for dev in want["devices"] for k in dev["kernels"]]
    assert len(kernels) == 1
    rep = pipeline.analyze(PALLAS)
    top = rep.ops_frame().set_index("op").loc["pallas_call.1"]  # (every digit: the JSON keeps 6)
    assert round(100 * top["mxu_util"], 2) == kernels[0]["mxu_utilization"]  # xprof rounds to 2 decimals (percent)
    # and the fixture's own counters, as literal arithmetic: (0.5 MXU_BUSY_1 + MXU_BUSY_2) / cycles over the runs
    runs = json.loads(FACTS.read_text())["runs"]
    c = [{int(k): v for k, v in r["counters"].items()} for r in runs]
    busy = sum(0.5 * x[3257467408] + x[3257467416] for x in c)
    assert top["mxu_util"] == pytest.approx(busy / sum(x[3257466888] for x in c), rel=1e-12)
    assert "hardware counters" in top["mxu_util_source"] and "3 of 3" in top["mxu_util_source"]
    assert rep.data["top_ops"][0]["mxu_util"] == pytest.approx(top["mxu_util"], rel=1e-5)  # the JSON's record
    assert rep.data["top_ops_trust"]["mxu_util"] == "measured"
    assert "fraction" in rep.data["units"]["mxu_util"]


def test_pallas_dma_wait_share_equals_the_raw_stages():
    t = raw_stage_times(PALLAS)
    wait = t["ep_wait_in"] + t["ep_wait_out"] + t["ep_finalize"]
    rep = pipeline.analyze(PALLAS)
    top = rep.ops_frame().set_index("op").loc["pallas_call.1"]
    assert top["dma_wait_ps"] == wait
    assert top["dma_wait_share"] == pytest.approx(wait / (wait + t["ep_run_kernel"]), rel=1e-12)
    assert rep.data["top_ops_trust"]["dma_wait_share"] == "measured"
    assert "ep_run_kernel" in top["dma_wait_source"]
    # the rule: the kernel waits 58 % of its pipeline time; the savings are the wait, capped by the headroom
    f = [x for x in rep.data["findings"] if x["rule_id"] == "TK026"]
    assert len(f) == 1 and f[0]["evidence"][0]["op"] == "pallas_call.1"
    assert f[0]["savings_ps"] == min(wait, top["headroom_ps"])


def test_kernel_measurements_reach_a_pod_report(tmp_path):
    """Two hosts that each ran the fixture's kernel: the kernel measurements travel in each host's part of the
    one engine (report/engine/ops.py), so the pod's top op has the same MXU utilization (busy and cycles both
    double), twice the raw DMA wait, TK026 on it, and the report in a pool of 2 equals the one in this process."""
    from tracekit.run import pod
    for h in ("host0", "host1"):
        (tmp_path / f"{h}.xplane.pb").write_bytes(PALLAS.read_bytes())
    one = pipeline.analyze(PALLAS).ops_frame().set_index("op").loc["pallas_call.1"]
    t = raw_stage_times(PALLAS)
    wait = t["ep_wait_in"] + t["ep_wait_out"] + t["ep_finalize"]
    here, pool = pod.analyze(tmp_path, jobs=1), pod.analyze(tmp_path, jobs=2)
    top = here.ops_frame().set_index("op").loc["pallas_call.1"]
    assert top["mxu_util"] == pytest.approx(one["mxu_util"], rel=1e-12) and "6 of 6" in top["mxu_util_source"]
    assert top["dma_wait_ps"] == 2 * wait
    assert top["dma_wait_share"] == pytest.approx(wait / (wait + t["ep_run_kernel"]), rel=1e-12)
    assert here.data["top_ops_trust"]["mxu_util"] == "measured"
    assert [f["evidence"][0]["op"] for f in here.data["findings"] if f["rule_id"] == "TK026"] == ["pallas_call.1"]
    assert json.dumps(here.data, sort_keys=True) == json.dumps(pool.data, sort_keys=True)


def test_pallas_kernel_measurements_in_the_text_markdown_and_html_reports():
    from tracekit.report.render import html, markdown, text
    rep = pipeline.analyze(PALLAS)
    for out in (text.render(rep, width=120), markdown.render(rep), html.render(rep)):
        assert "Measured inside kernels" in out and "MXU busy 59.8%" in out and "measured" in out
        assert "roofline efficiency of 27.0%" in out and "waiting on block DMAs 57.8%" in out


# --- synthetic counter lines: the forms xprof reads, and the LLO form ---------------------------------------------
V6E = {"cycles": 3257466888, "b0": 3257467400, "b1": 3257467408, "b2": 3257467416}
V7X = ({"cycles": 2847490056, "b1": 2791875024, "b2": 2791875032},
       {"cycles": 3384360968, "b1": 3328745936, "b2": 3328745944})


def _space(kind: str, line: str, samples: list, kernel_ps: int = 10_000_000, runs: int = 1,
           sample_ps: int | None = None) -> bytes:
    """One TPU plane: ``runs`` executions of op ``k.1`` and, inside each, one counter event per (id, value) of
    ``samples`` on line ``line``, lasting ``sample_ps`` (default: the kernel's duration, so that xprof's nominal
    cycles (the longest sample times the clock) equal ours (the kernel's duration times the clock)). No hostname:
    xprof refuses bytes whose XSpace names a host other than its file's."""
    b = synth.SpaceBuilder()
    p = b.plane("/device:TPU:0", {"device_id": 0, "device_type_string": kind})
    ops, ctr = p.line("XLA Ops", timestamp_ns=1000), p.line(line, timestamp_ns=1000)
    for r in range(runs):
        t = r * 2 * kernel_ps
        ops.event("%k.1 = f32[8]{0} custom-call(), custom_call_target=\"tpu_custom_call\"", t, kernel_ps,
                  display="k.1", md_stats={"program_id": 1})
        for cid, v in samples:
            ctr.event(f"c{cid}", t, sample_ps or kernel_ps, stats={"performance_counter_id": cid,
                                                                   "counter_value": float(v)})
    return b.serialize()


def _ours(data: bytes, tmp_path):
    f = tmp_path / "t.xplane.pb"
    f.write_bytes(data)
    tr = tracekit.load(f)
    return kp_analysis.per_op(tr.kernel_profile).set_index("op"), tr


CASES = {
    "v6e-two-runs": ("TPU v6 Lite", "_counters_",
                     [(V6E["cycles"], 17_500), (V6E["b1"], 3_001), (V6E["b2"], 9_117), (V6E["b0"], 5_382)], 2),
    "v6e-no-cycle-counter": ("TPU v6 Lite", "_counters_", [(V6E["b1"], 4_111), (V6E["b2"], 7_003)], 1),
    "v7x-two-dies": ("TPU v7x", "counters_k.1",
                     [(V7X[0]["cycles"], 19_000), (V7X[0]["b1"], 2_000), (V7X[0]["b2"], 11_013),
                      (V7X[1]["cycles"], 18_977), (V7X[1]["b1"], 5_171), (V7X[1]["b2"], 4_409)], 1),
    "v7x-one-die-counted": ("TPU v7x", "_counters_",
                            [(V7X[0]["cycles"], 19_000), (V7X[0]["b1"], 2_000), (V7X[0]["b2"], 11_013)], 1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_counter_forms_equal_xprof(case, tmp_path):
    kind, line, samples, runs = CASES[case]
    data = _space(kind, line, samples, runs=runs)
    want = [k for d in xprof_kernel_utilization(data)["devices"] for k in d["kernels"]]
    assert len(want) == 1
    ours, _ = _ours(data, tmp_path)
    assert round(100 * ours.loc["k.1", "mxu_util"], 2) == want[0]["mxu_utilization"]


def test_counter_form_literal_arithmetic(tmp_path):
    # v7x, both dies: (0.5 b1 + b2) summed over the dies, over the dies' cycles
    ours, _ = _ours(_space(*CASES["v7x-two-dies"][:3]), tmp_path)
    assert ours.loc["k.1", "mxu_util"] == pytest.approx((0.5 * 2_000 + 11_013 + 0.5 * 5_171 + 4_409) /
                                                        (19_000 + 18_977), rel=1e-12)
    # v6e without a cycle counter: the kernel's 10 us at 1.75 GHz = 17,500 cycles
    ours, _ = _ours(_space(*CASES["v6e-no-cycle-counter"][:3]), tmp_path)
    assert ours.loc["k.1", "mxu_util"] == pytest.approx((0.5 * 4_111 + 7_003) / 17_500, rel=1e-12)


def test_samples_outside_every_op_and_unsupported_chips_are_not_counted(tmp_path):
    b = synth.SpaceBuilder(hostname="h")
    p = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite"})
    p.line("XLA Ops").event("%k.1 = f32[8]{0} custom-call()", 1_000_000, 1_000_000, display="k.1",
                            md_stats={"program_id": 1})
    ctr = p.line("_counters_")
    ctr.event("c", 5_000_000, 100, stats={"performance_counter_id": V6E["cycles"], "counter_value": 100.0})
    ctr.event("c", 5_000_000, 100, stats={"performance_counter_id": V6E["b2"], "counter_value": 50.0})
    tm = p.line("XLA TraceMe")
    tm.event("ep_wait_in", 7_000_000, 100)  # after the op
    tm.event("dependency-wait", 1_200_000, 100)  # inside, but not a pipeline stage
    ours, tr = _ours(b.serialize(), tmp_path)
    assert len(tr.kernel_profile) == 0 and len(ours) == 0
    # a chip xprof's counter reader does not know: its hardware counters are not read
    data = _space("TPU v5 lite", "_counters_", [(V6E["cycles"], 17_500), (V6E["b2"], 9_117)])
    ours, tr = _ours(data, tmp_path)
    assert len(tr.kernel_profile) == 0


def test_llo_slot_occupancy_windows(tmp_path):
    # the LLO form: '% util' per window on events named after the unit; weighted by the windows' durations
    b = synth.SpaceBuilder(hostname="h")
    p = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite"})
    p.line("XLA Ops").event("%k.1 = f32[8]{0} custom-call()", 0, 10_000_000, display="k.1",
                            md_stats={"program_id": 1})
    ctr = p.line("_counters_")
    for t, d, u in ((0, 1_000_000, 80.0), (1_000_000, 4_000_000, 10.0), (5_000_000, 78, 79.0)):
        ctr.event("MXU", t, d, stats={"% util": u})
    ctr.event("Vector Load", 0, 1_000_000, stats={"% util": 99.0})  # another unit: not the MXU's
    ours, tr = _ours(b.serialize(), tmp_path)
    want = (1_000_000 * 0.80 + 4_000_000 * 0.10 + 78 * 0.79) / (1_000_000 + 4_000_000 + 78)
    assert ours.loc["k.1", "mxu_util"] == pytest.approx(want, rel=1e-12)
    assert "LLO static slot occupancy" in ours.loc["k.1", "mxu_util_source"]
    table = kp_analysis.annotate(ours.reset_index()[["program_id", "op"]], tr.kernel_profile)
    assert kp_analysis.trust(table)["mxu_util"] == "indicative"


def test_no_profile_no_columns_in_use(tmp_path):
    # a TPU trace without the kernel-profiling lines: nothing measured, nothing said, no finding
    rep = pipeline.analyze(shared_trace("tpu/v6e-4_jax_inference.xplane.pb"))
    assert all(r.get("mxu_util") is None and r.get("dma_wait_share") is None for r in rep.data["top_ops"])
    assert "mxu_util" not in rep.data["top_ops_trust"]
    assert not [f for f in rep.data["findings"] if f["rule_id"] == "TK026"]
    names = raw_stage_times(shared_trace("tpu/v6e-4_jax_inference.xplane.pb"))  # (its TraceMe holds no ep_*)
    assert names and not any(n.startswith("ep_") for n in names)


def test_ops_command_shows_the_kernel_measurements():
    from click.testing import CliRunner
    from tracekit.cli import main
    res = CliRunner().invoke(main, ["ops", str(PALLAS), "--format", "json"])
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)[0]
    t = raw_stage_times(PALLAS)
    wait = t["ep_wait_in"] + t["ep_wait_out"] + t["ep_finalize"]
    assert row["dma_wait_share"] == pytest.approx(wait / (wait + t["ep_run_kernel"]), rel=1e-9)
    assert 0 < row["mxu_util"] < 1 and row["mxu_util_source"] and row["dma_wait_source"]
    res = CliRunner().invoke(main, ["ops", str(PALLAS)], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "mxu" in res.output and "dma_wait" in res.output and "59.8%" in res.output
    # a trace without kernel profiling: no such columns
    res = CliRunner().invoke(main, ["ops", str(shared_trace("tpu/v6e-4_jax_inference.xplane.pb")), "--format", "json",
                                    "--limit", "3"])
    assert res.exit_code == 0 and "mxu_util" not in res.output
