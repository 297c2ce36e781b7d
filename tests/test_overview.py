"""The utilization headline and the step-time breakdown: MFU against XLA's cost_analysis() and the step times the
capture script measured, the trace's own model_flops, --model-flops-per-step, and the breakdown's invariants on
every fixture (every bucket >= 0, the buckets sum to the step time exactly, "other" under 5%)."""
from __future__ import annotations

import functools
import json
import subprocess
import sys

import pytest

from conftest import CPU_CASES, FIXTURES, REPORTS_GROUP, cpu_fixture, default_report, shared_trace

from tracekit import pipeline
from tracekit.analysis import timeline as tl
from tracekit.model import chips
from tracekit.report import render

pytestmark = pytest.mark.xdist_group(REPORTS_GROUP)  # one worker: each trace analyzed once (default_report)


@functools.lru_cache(maxsize=None)
def _analyze(path: str, chip: str | None = None):
    """One analysis per trace (the reports are read, never changed); the default one shared with the other modules
    of the group."""
    return default_report(path) if chip is None else pipeline.analyze(path, chip=chip)


CASES = json.loads((FIXTURES / "cpu" / "cases.json").read_text())["cases"]
BUCKETS = ["collective_exposed_ps", *tl.REFINED]


def _traces():
    for c in sorted(set(CASES) | set(CPU_CASES)):  # every recorded fixture
        yield pytest.param(lambda c=c: cpu_fixture(c), id=c)
    for rel in ("tpu/v6e-4_jax_inference.xplane.pb", "gpu/v100x8_tf_bert.xplane.pb"):
        yield pytest.param(lambda rel=rel: shared_trace(rel), id=rel.split("/")[-1].split(".")[0])


@pytest.mark.parametrize("get", list(_traces()))
def test_breakdown_partitions_every_step(get):
    rep = _analyze(str(get()))
    steps = rep.data["device_steps"]
    assert steps, "no steps"
    bd = rep.data["overview"]["breakdown"]
    total = bd["step_ps"]
    assert total == sum(r["step_ps_sum"] for r in steps)
    assert all(bd[c] >= 0 for c in BUCKETS)
    assert sum(bd[c] for c in BUCKETS) == total
    for r in rep.data["steps"]:  # each step on each device (the first rows kept in the envelope)
        assert all(r[c] >= 0 for c in BUCKETS) and sum(r[c] for c in BUCKETS) == r["step_ps"]
        assert r["compute_bound_ps"] + r["memory_bound_ps"] + r["compute_other_ps"] == r["compute_ps"]
        assert sum(r[c] for c in tl.REFINED[3:]) == r["wait_ps"] + r["idle_ps"]
    if "v100" not in str(get()):  # TF trace: no program executions, no HLO — its idle cannot be told apart
        assert bd["other_idle_ps"] + bd["compute_other_ps"] < 0.05 * total


def test_sleepy_steps_idle_is_the_host():
    rep = _analyze(str(cpu_fixture("sleepy_steps")))
    bd = rep.data["overview"]["breakdown"]
    assert bd["host_idle_ps"] > 0.8 * bd["step_ps"]  # the host sleeps 20 ms inside each step


def test_v6e_breakdown_is_waiting_on_host_offload():
    rep = _analyze(str(shared_trace("tpu/v6e-4_jax_inference.xplane.pb")))
    bd = rep.data["overview"]["breakdown"]
    assert bd["offload_wait_ps"] > 0.9 * bd["step_ps"]


def test_mfu_of_big_matmul_equals_xla_flops_over_measured_step_time():
    c = CASES["big_matmul"]
    if "step_wall_s" not in c:
        pytest.skip("cases.json has no measured step times yet")
    chip = "TPU v5e"  # any --chip: the formula must use its peak
    rep = pipeline.analyze(cpu_fixture("big_matmul"), chip=chip)
    flops = c["xla_cost"]["matmul"]["flops"]
    peak = chips.peak_flops(chips.get(chip), "f32")[0]
    expected = flops * c["steps"] / (peak * sum(c["step_wall_s"]))
    f = rep.data["overview"]["flops"]
    assert f["label"] == "hardware FLOPs utilization"  # from the HLO: recomputation cannot be told apart
    assert f["per_step"] == pytest.approx(flops, rel=0.01)
    assert f["utilization"] == pytest.approx(expected, rel=0.05)


def test_model_flops_per_step_option():
    path = cpu_fixture("big_matmul")
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(path), "--format", "json",
                        "--model-flops-per-step", "1e9"], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    f, st = d["overview"]["flops"], d["overview"]["step_time"]
    assert f["label"] == "MFU" and f["per_step"] == 1e9
    assert f["utilization"] == pytest.approx(1e9 / (f["peak_flops_per_s"] * st["mean_ps"] / 1e12), rel=1e-4)
    per_step = {}
    for s in d["steps"]:  # one device; its last run has no next start (open_end): not a step time
        if not s["open_end"]:
            per_step[s["step"]] = max(per_step.get(s["step"], 0), s["step_ps"])
    assert len(per_step) == len(d["steps"]) - 1
    assert st["mean_ps"] == pytest.approx(sum(per_step.values()) / len(per_step), rel=1e-6)


def test_v6e_mfu_from_the_traces_model_flops():
    rep = _analyze(str(shared_trace("tpu/v6e-4_jax_inference.xplane.pb")))
    f = rep.data["overview"]["flops"]
    assert f["label"] == "MFU" and f["source"].startswith("trace: model_flops")
    # per step: 3 elementwise adds over f32[5,1024,1024,256] on each of the 4 chips
    assert f["per_step"] == 4 * 3 * 5 * 1024 * 1024 * 256
    # the host link at its roofline bounds the step: 6 copies of 5 GiB, both directions of the link
    r = rep.data["overview"]["roofline"]
    link = rep.data["chips"][0]["host_link_bw_bytes_per_s"]
    assert r["bound_by"] == "host link"
    assert r["possible_step_ps"] == pytest.approx(6 * 5 * 2**30 / link / 2 * 1e12, rel=1e-6)
    hl = rep.data["overview"]["bandwidth"]["host_link"]
    assert hl["utilization"] <= 1.0


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_overview_is_the_first_section(fmt):
    rep = _analyze(str(cpu_fixture("train_step")))
    out = render.render(rep, fmt)
    if fmt == "text":
        lines = out.splitlines()
        assert lines[1] == "Overview" and lines[2].startswith("  step time: mean")
        assert "Memory (XLA's buffer assignment)" in out
    elif fmt == "markdown":
        heads = [x for x in out.splitlines() if x.startswith("### ")]
        assert heads[:2] == ["### Overview", "### Memory (XLA's buffer assignment)"]
    else:
        # issue 38: the page reads the headline and the findings first, then the overview, then memory
        assert out.index('<section id="summary">') < out.index('<section id="findings">') < out.index(
            '<section id="overview">') < out.index('<section id="memory">')
    assert "hardware FLOPs utilization" in out


def test_report_format_documents_overview_and_memory():
    doc = (FIXTURES.parent / "docs" / "report-format.md").read_text()
    for key in ("`overview`", "`memory`", "offload_wait_ps", "live_peak_bytes", "possible_step_ps"):
        assert key in doc, key


@pytest.mark.parametrize("get", list(_traces()))
def test_no_step_is_faster_than_the_possible_step_time(get):
    """The possible step time is a lower bound: when no op ran faster than its roofline (no model warning), the
    measured steps cannot be shorter. Counting a loop's or conditional's whole duration beside its traced body
    ops broke this (cond_branch: steps 0.87x the 'possible' time)."""
    rep = _analyze(str(get()))
    r = rep.data["overview"]["roofline"]
    if rep.data.get("model_warnings") or r.get("possible_step_ps") is None:
        pytest.skip("an op ran above its roofline, or no roofline is known")
    assert r["ratio"] >= 1.0
    assert r["known_share"] > 0.95  # (the loops' own time is small: their bodies carry the rooflines)


def test_a_trace_without_hlo_has_unknown_flops_bytes_and_roofline_not_zero():
    """TF BERT on V100: no HLO, so no FLOP or byte count and no roofline for any op but its runtime memcpys. The headline says unknown
    (null in JSON) instead of 0 FLOP and 0 % utilization, and the step-time rule does not compare with a
    'possible' time that would only be the measured busy time."""
    rep = _analyze(str(shared_trace("gpu/v100x8_tf_bert.xplane.pb")))
    ov = rep.data["overview"]
    f, hbm, r = ov["flops"], ov["bandwidth"]["hbm"], ov["roofline"]
    assert f["per_step"] is None and f["utilization"] is None and f["known_share"] == 0
    assert hbm["bytes_per_step"] is None and hbm["utilization"] is None
    assert r["possible_step_ps"] is None and r["known_share"] == 0 and r["bound_by"] == ""
    assert not any(x["rule_id"] == "TK024" for x in rep.data["findings"])
    text = render.render(rep, "text")
    assert "unknown: no compute op in the steps has a FLOP count" in text
    assert "0.0%: 0 FLOP" not in text
    # the roofline floor says what it stands on: here every op counts at its measured time (the line the findings
    # section opens with; the device idle outside this trace's one step is no step idle, so no finding may be left)
    from tracekit.report.render import text as text_render
    line = text_render.claims_line(rep.data["summary"])
    # (its runtime memcpys, 1.6 % of op time, have a roofline of their own: their size over the host link)
    assert "ops without a roofline (98.4% of op time) count at their measured time" in line
    if rep.data["findings"]:
        assert " ".join(line.split()) in " ".join(text.split())


def test_virtual_cpu_devices_count_their_host_once():
    """allreduce_exposed ran 8 virtual XLA:CPU devices on one host's cores and memory: the overview's FLOPs
    utilization divides by that one chip's peak and its memory bandwidth is that chip's (before: 8x both, so the
    utilization read 8x too low), and the possible step adds the devices' roofline work up (before: the largest
    device's alone, as if each had the cores to itself). TPU devices stay one chip each."""
    from tracekit.analysis import overview
    from tracekit.model import roofline

    d = _analyze(str(cpu_fixture("allreduce_exposed"))).data
    (chip,) = d["chips"]
    assert len(chip["devices"]) == 8
    ov = d["overview"]
    peak = chip["peak_flops_per_s"][ov["flops"]["dtype"]]
    assert ov["flops"]["peak_flops_per_s"] == pytest.approx(peak, rel=1e-5)
    assert ov["bandwidth"]["hbm"]["peak_bytes_per_s"] == pytest.approx(chip["hbm_bw_bytes_per_s"], rel=1e-5)
    step_s = ov["step_time"]["mean_ps"] / 1e12
    assert ov["flops"]["utilization"] == pytest.approx(ov["flops"]["per_step"] / (peak * step_s), rel=1e-4)
    # the possible step: the sum of what each device alone could do (each given a chip of its own)
    tr = pipeline.load(str(cpu_fixture("allreduce_exposed")))
    ops = roofline.join(tr)
    from dataclasses import replace

    from tracekit.analysis import rule_checks
    frames = rule_checks.frames_for_rules(ops, tr.steps, tr.host_events, modules=tr.modules)
    dchips = roofline.device_chips(tr)
    alone = {k: replace(c, name=f"{c.name} #{k[1]}") for k, c in dchips.items()}
    each = overview.device_parts(ops, frames.steps, alone)["possible_step_ps"]
    assert ov["roofline"]["possible_step_ps"] == pytest.approx(float(each.sum()), rel=1e-5)
    assert ov["roofline"]["possible_step_ps"] > 7 * float(each.max())
    v6e = _analyze(str(shared_trace("tpu/v6e-4_jax_inference.xplane.pb"))).data
    (tpu,) = v6e["chips"]
    assert v6e["overview"]["flops"]["peak_flops_per_s"] == pytest.approx(
        len(tpu["devices"]) * tpu["peak_flops_per_s"][v6e["overview"]["flops"]["dtype"]], rel=1e-5)


def test_model_flops_leave_the_host_frames_once_read(v6e):
    """The engine's own trace (release_trace_costs) lets the trace's model FLOPs stat go once the overview's
    device parts have read it; the parts are those of a library caller's trace, which keeps the column."""
    import numpy as np
    from tracekit.analysis import hostview
    from tracekit.ingest.trace import load
    from tracekit.options import Options
    kept = hostview.build(load(str(v6e)), Options())
    gone = hostview.build(load(str(v6e)), Options(), release_trace_costs=True)
    assert "trace_model_flops" in kept.ops.columns and kept.ops["trace_model_flops"].notna().any()
    for frame in (gone.ops, gone.frames.ops, gone.trace.ops):
        assert "trace_model_flops" not in frame.columns
    assert np.nansum(gone.overview_parts["tot_model"]) > 0
    assert gone.overview_parts.equals(kept.overview_parts)
