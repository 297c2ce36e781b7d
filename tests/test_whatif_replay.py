"""The step replay (issue 36): fed measured times it reproduces the device step of every fixture and of the shared v6e
trace, against a step oracle read from the raw XSpace here (protobuf only: start-to-start of the step program's runs,
median of the slowest device); on constructed traces whose numbers this file sets, an op off the critical path made
10x faster predicts no gain and one on it predicts the gain worked out by hand."""
from __future__ import annotations

import json
import statistics
from collections import defaultdict

import pytest
from click.testing import CliRunner

import tracekit
from conftest import FIXTURES, shared_trace
from tracekit.analysis.replay import whatif as wi
from tracekit.ingest import synth
from tracekit.ingest.synth import instr, shape
from tracekit.proto import xplane_pb2

US = 1_000_000  # ps

CASES = sorted(p for group in ("cpu", "collectives", "pairs") for p in (FIXTURES / group).iterdir() if p.is_dir())


# ------------------------------------------------------------------------------------------ oracle (no tracekit)
def _raw_step(xplane) -> float:
    """Median start-to-start of the step program's runs on the slowest device, from the raw XSpace: XLA:CPU op
    events grouped by (module, device_ordinal, run_id) (a run starts at its first op), TPU ``XLA Modules`` events;
    the step program: the module with the most op time among modules run at least twice on a device."""
    sp = xplane_pb2.XSpace()
    sp.ParseFromString(open(xplane, "rb").read())
    runs = defaultdict(lambda: [float("inf"), 0.0])  # (module, device, run) -> [start, time]
    for p in sp.planes:
        sname = {k: v.name for k, v in p.stat_metadata.items()}
        for ln in p.lines:
            t0 = ln.timestamp_ns * 1000
            for e in ln.events:
                md = p.event_metadata[e.metadata_id]
                st = {sname.get(s.metadata_id): s for s in list(md.stats) + list(e.stats)}
                if p.name.startswith("/device:TPU") and ln.name == "XLA Modules":
                    key = (md.name.split("(")[0], p.name, e.offset_ps)
                elif "hlo_op" in st and "run_id" in st and "device_ordinal" in st:
                    mod = st["hlo_module"]
                    mod = p.stat_metadata[mod.ref_value].name if mod.ref_value else mod.str_value
                    key = (mod, st["device_ordinal"].int64_value, st["run_id"].int64_value)
                else:
                    continue
                r = runs[key]
                r[0] = min(r[0], t0 + e.offset_ps)
                r[1] += e.duration_ps
    per_dev = defaultdict(int)
    time = defaultdict(float)
    for (m, d, _), (_, t) in runs.items():
        per_dev[(m, d)] += 1
        time[m] += t
    repeated = {m for (m, _), k in per_dev.items() if k >= 2}
    prog = max(repeated or time, key=lambda m: time[m])
    starts = defaultdict(list)
    for (m, d, _), (s, _) in runs.items():
        if m == prog:
            starts[d].append(s)
    meds = [statistics.median([b - a for a, b in zip(sorted(v), sorted(v)[1:])]) for v in starts.values() if len(v) > 1]
    return max(meds)


def _xplane(case):
    return next(case.glob("plugins/profile/*/*.xplane.pb"))


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_replay_of_measured_times_reproduces_the_device_step(case):
    out = wi.whatif(tracekit.load(case), wi.Request())
    oracle = _raw_step(_xplane(case))
    assert out["reproduction_errors"] == 0
    assert out["predicted_step_ps"] == out["replayed_step_ps"] == out["measured_step_ps"]
    assert abs(out["replayed_step_ps"] - oracle) <= 0.05 * oracle, (out["replayed_step_ps"], oracle)


def test_replay_reproduces_the_v6e_step_with_its_host_offload_copies():
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    s = wi.setup(tracekit.load(path))
    out = wi.whatif(s.tr, wi.Request(), s)
    oracle = _raw_step(path)
    assert abs(out["replayed_step_ps"] - oracle) <= 0.05 * oracle, (out["replayed_step_ps"], oracle)
    assert out["reproduction_errors"] == 0
    # the step waits on the host link: the copies queue in their direction, and the path runs through them
    kinds = {e["kind"] for e in out["critical_path"]}
    assert "window" in kinds
    assert any(g.qprev.max() >= 0 for g in s.joined.graphs)
    # on a v5e, keeping each op's efficiency: the step is the host-offload copies (5.4 GB each) on the host link,
    # whose one-way bandwidth is 3.2e10 B/s on a v6e and 1.6e10 on a v5e (DOMAIN.md, book part 2): twice as long
    v5e = wi.whatif(s.tr, wi.Request(chip="v5e", keep_efficiency=True), s)
    assert abs(v5e["predicted_step_ps"] / out["measured_step_ps"] - 3.2e10 / 1.6e10) <= 0.05 * 2
    # the fusions run under the copies: at their roofline they win nothing
    fixed = wi.whatif(s.tr, wi.Request(fix=("broadcast_add_fusion.1",)), s)
    assert fixed["predicted_step_ps"] == out["measured_step_ps"]


# ------------------------------------------------------------------------------------------ constructed traces
def _cpu_two_streams(tmp_path):
    """XLA:CPU shape, one device: a (100 us) and b (30 us) start together on two threads, c (10 us) reads both and
    starts 1 us after a ends; a run every 200 us, 4 runs."""
    b = synth.SpaceBuilder(hostname="c")
    b.hlo_module(synth.module("jit_step", 3, [
        instr("p", "parameter", shape("f32", [1024])),
        instr("a", "fusion", shape("f32", [1024]), [1], fusion_kind="kLoop"),
        instr("b", "fusion", shape("f32", [1024]), [1], fusion_kind="kLoop"),
        instr("c", "add", shape("f32", [1024]), [2, 3])]), label="jit_step(3)")
    p = b.plane("/host:CPU")
    t1, t2 = p.line("tf_XLAEigen/1", timestamp_ns=0), p.line("tf_XLAEigen/2", timestamp_ns=0)
    for r in range(4):
        t = r * 200 * US
        st = {"hlo_module": "jit_step", "program_id": 3, "run_id": 10 + r, "device_ordinal": 0}
        t1.event("a", t, 100 * US, stats={"hlo_op": "a", **st}, ref_stats=True)
        t2.event("b", t, 30 * US, stats={"hlo_op": "b", **st}, ref_stats=True)
        t1.event("c", t + 101 * US, 10 * US, stats={"hlo_op": "c", **st}, ref_stats=True)
    f = tmp_path / "c.xplane.pb"
    b.write(f)
    return f


def test_two_streams_an_op_off_the_critical_path_made_10x_faster_wins_nothing(tmp_path):
    tr = tracekit.load(_cpu_two_streams(tmp_path))
    s = wi.setup(tr)
    base = wi.whatif(tr, wi.Request(), s)
    assert base["measured_step_ps"] == 200 * US
    assert wi.whatif(tr, wi.Request(speedup=(("b", 10.0),)), s)["predicted_step_ps"] == 200 * US
    # a on the path: c starts 1 us after the later of a (10 us) and b (30 us): 200 - (100 - 30) = 130 us
    assert wi.whatif(tr, wi.Request(speedup=(("a", 10.0),)), s)["predicted_step_ps"] == 130 * US
    # b 10x slower: c waits for its operand b (300 us), not for the op that ended before it on the device
    assert wi.whatif(tr, wi.Request(speedup=(("b", 0.1),)), s)["predicted_step_ps"] == 200 * US + 200 * US
    path = [e["op"] for e in base["critical_path"]]
    assert path == ["jit_step/a", "jit_step/c"]


def _tpu_async_window(tmp_path):
    """TPU shape, one device: copy-start (1 us in), fusion.1 (100 us) under the copy, copy-done waits until 403 us
    (the copy: 402 us), fusion.2 (20 us) 1 us later; a run every 1000 us, 4 runs."""
    b = synth.SpaceBuilder(hostname="t")
    b.hlo_module(synth.module("jit_step", 7, [
        instr("p", "parameter", shape("f32", [1024])),
        instr("copy-start", "copy-start", shape("f32", [1024]), [1]),
        instr("fusion.1", "fusion", shape("f32", [1024]), [1], fusion_kind="kLoop"),
        instr("copy-done", "copy-done", shape("f32", [1024]), [2]),
        instr("fusion.2", "fusion", shape("f32", [1024]), [3, 4], fusion_kind="kLoop")]), label="jit_step(7)")
    p = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0,
                                  "peak_hbm_bw_gigabytes_per_second": 1638.0})
    mods, ops = p.line("XLA Modules", timestamp_ns=0), p.line("XLA Ops", timestamp_ns=0)
    text = {"copy-start": "%copy-start = f32[1024]{0} copy-start(f32[1024]{0} %p)",
            "fusion.1": "%fusion.1 = f32[1024]{0} fusion(f32[1024]{0} %p), kind=kLoop",
            "copy-done": "%copy-done = f32[1024]{0} copy-done(f32[1024]{0} %copy-start)",
            "fusion.2": "%fusion.2 = f32[1024]{0} fusion(f32[1024]{0} %fusion.1, f32[1024]{0} %copy-done), kind=kLoop"}
    for r in range(4):
        t = r * 1000 * US
        mods.event("jit_step(7)", t, 430 * US, stats={"run_id": 100 + r})
        for name, at, dur in (("copy-start", 1 * US, US // 100), ("fusion.1", 2 * US, 100 * US),
                              ("copy-done", 103 * US, 300 * US), ("fusion.2", 404 * US, 20 * US)):
            ops.event(text[name], t + at, dur, display=name, md_stats={"program_id": 7})
    f = tmp_path / "t.xplane.pb"
    b.write(f)
    return f


def test_async_window_the_op_under_the_copy_made_10x_faster_wins_nothing(tmp_path):
    tr = tracekit.load(_tpu_async_window(tmp_path))
    s = wi.setup(tr)
    base = wi.whatif(tr, wi.Request(), s)
    assert base["measured_step_ps"] == 1000 * US
    assert wi.whatif(tr, wi.Request(speedup=(("fusion.1", 10.0),)), s)["predicted_step_ps"] == 1000 * US
    # the copy twice as fast (402 -> 201 us from 1 us): it ends at 202 us, the -done at once, fusion.2 1 us later
    # and the run's tail after it as measured: 202 + 1 + 20 + (1000 - 424) = 799 us
    assert wi.whatif(tr, wi.Request(speedup=(("copy-start", 2.0),)), s)["predicted_step_ps"] == 799 * US
    kinds = [(e["op"], e["kind"]) for e in base["critical_path"]]
    assert ("jit_step/copy-start", "window") in kinds and ("jit_step/fusion.1", "op") not in kinds


# ------------------------------------------------------------------------------------------ the command
def test_whatif_json_and_text(tmp_path):
    f = str(_cpu_two_streams(tmp_path))
    from tracekit.cli.app import main
    r = CliRunner().invoke(main, ["whatif", f, "--speedup", "a=10", "--format", "json"])
    assert r.exit_code == 0, r.output
    w = json.loads(r.output)["whatif"]
    for k in ("measured_step_ps", "predicted_step_ps", "changes", "critical_path", "bound_changes", "assumptions"):
        assert k in w
    assert w["changes"] == {"speedup": ["a=10"]} and w["predicted_step_ps"] == 130 * US
    assert all({"op", "time_ps"} <= set(e) for e in w["critical_path"])
    for width in (60, 80, 200):
        r = CliRunner().invoke(main, ["whatif", f, "--speedup", "a=10"], env={"COLUMNS": str(width)})
        assert r.exit_code == 0, r.output
        assert not [ln for ln in r.output.split("\n") if len(ln) > width]
        assert "assumptions:" in r.output and "predicted 130 µs" in r.output


@pytest.mark.parametrize("args,says", [(["--speedup", "a"], "OP=K"), (["--speedup", "a=-1"], "OP=K"),
                                       (["--fix", "no_such_op"], "no finding"),
                                       (["--keep-efficiency"], "--chip"),
                                       (["--chip", "nope.machine.json"], "not found")])
def test_whatif_bad_input_is_one_line_and_exit_2(tmp_path, args, says):
    from tracekit.cli.app import main
    r = CliRunner().invoke(main, ["whatif", str(_cpu_two_streams(tmp_path)), *args])
    assert r.exit_code == 2 and says in r.output, r.output
    assert "Traceback" not in r.output


def test_hosts_join_at_shared_collectives_with_their_clock_offset(tmp_path):
    """Two hosts running the same 8-device program (``sharded8`` twice), host b's clock 5 ms ahead: the hosts'
    collective instances join (16 participants each), the offset is found from their ends, and the replay still
    reproduces every step."""
    import shutil

    import numpy as np

    from tracekit.analysis.replay import engine, inputs
    from tracekit.analysis.replay.graph import producers
    from tracekit.ingest import hlo as hlo_mod
    from tracekit.model import roofline
    run = tmp_path / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    src = FIXTURES / "cpu" / "sharded8" / "plugins" / "profile" / "run1" / "cpu.xplane.pb"
    for h in ("hosta", "hostb"):
        shutil.copyfile(src, run / f"{h}.xplane.pb")
    tr = tracekit.load(run)
    ops = roofline.join(tr)
    shift = 5_000 * US
    b_ops = ops["host"].astype(str).to_numpy() == "hostb"
    ops = ops.assign(start_ps=np.where(b_ops, ops["start_ps"] + shift, ops["start_ps"]))
    steps = tr.steps.assign(start_ps=np.where(tr.steps["host"].astype(str) == "hostb",
                                              tr.steps["start_ps"] + shift, tr.steps["start_ps"]))
    nums, _ = inputs.choose_steps(steps, len(ops))
    d2s, prod = hlo_mod.done_to_start(tr.hlo), producers(tr.hlo)
    # no replica groups given: every device of both hosts that runs the op takes part
    gs = [inputs.host_graph(h, ops, steps, nums, d2s, prod, None) for h in ("hosta", "hostb")]
    j = engine.join(gs)
    assert j.offset.tolist() == [0, shift] and j.alignment_ps == 0
    assert j.g_members and all(len(m) == 16 for m in j.g_members)
    r = engine.evaluate(j)
    assert r.clipped == 0
    for h, g in enumerate(gs):
        assert (r.step_ps[h] == g.steps_next - g.steps_start).all()



def _raw_fixed_gaps(xplane, min_gap: int = 10 * US) -> tuple[float, float]:
    """(median step, median step with every idle gap of at least ``min_gap`` removed) of a one-device XLA:CPU
    trace, from the raw XSpace: a step is a run of the step program start to start; without the gaps it is the
    union of its op intervals plus the gaps shorter than ``min_gap`` (inside the run, and to the next run)."""
    sp = xplane_pb2.XSpace()
    sp.ParseFromString(open(xplane, "rb").read())
    runs = defaultdict(list)
    for p in sp.planes:
        sname = {k: v.name for k, v in p.stat_metadata.items()}
        for ln in p.lines:
            for e in ln.events:
                st = {sname.get(s.metadata_id): s for s in e.stats}
                if "hlo_op" in st and "run_id" in st:
                    t = ln.timestamp_ns * 1000 + e.offset_ps
                    runs[st["run_id"].int64_value].append((t, t + e.duration_ps))
    order = sorted(runs.values(), key=lambda iv: min(iv)[0])
    steps, fixed = [], []
    for iv, nxt in zip(order, order[1:]):
        iv.sort()
        start, next_start = iv[0][0], min(nxt)[0]
        kept, (cs, ce) = 0, iv[0]
        for s, e in iv[1:]:
            if s > ce:
                kept += ce - cs + (s - ce if s - ce < min_gap else 0)
                cs, ce = s, e
            else:
                ce = max(ce, e)
        kept += ce - cs + (next_start - ce if next_start - ce < min_gap else 0)
        steps.append(next_start - start)
        fixed.append(kept)
    return statistics.median(steps), statistics.median(fixed)


def test_findings_savings_come_from_the_replay():
    """``analyze`` states each replayable finding's saving per step: on the host-bound ``sleepy_steps`` (the host
    sleeps 20 ms a step), device-idle-gaps fixed takes the step to the device's own time plus the gaps under the
    rule's 10 us, as the raw events give it; together, the findings win at least as much."""
    from tracekit.cli.app import main
    case = FIXTURES / "cpu" / "sleepy_steps"
    r = CliRunner().invoke(main, ["analyze", str(case), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    rep = d["summary"]["replay_savings"]
    assert d["summary"]["savings_basis"] == "replay" == rep["basis"]
    step, fixed = _raw_fixed_gaps(_xplane(case))
    assert abs(rep["step_ps"] - step) <= 0.05 * step
    gaps = next(f for f in d["findings"] if f["name"] == "device-idle-gaps")
    assert abs(gaps["replay_savings_ps"] - (step - fixed)) <= 0.05 * step, (gaps["replay_savings_ps"], step - fixed)
    assert rep["per_finding"]["TK003"] == gaps["replay_savings_ps"]
    assert max(rep["per_finding"].values()) <= rep["savings_ps"] <= rep["step_ps"]
    r = CliRunner().invoke(main, ["analyze", str(case)], env={"COLUMNS": "100"})
    assert "replayed along the critical path" in r.output and "replayed: " in r.output


def test_batch_scaling_turns_the_batch_1_matvecs_compute_bound():
    """``matvec_b1`` (x f32[1,4096] @ W f32[4096,4096], 4 dots) at batch 512: by the book's arithmetic intensity,
    2·B·D² FLOPs over 4·(D² + 2·B·D) bytes, a dot goes from under the recording machine's ridge (its calibrated
    f32 FLOP/s over its copy bandwidth, read from cpu.machine.json here) to far above it."""
    case = FIXTURES / "cpu" / "matvec_b1"
    rec = json.loads(next(case.glob("plugins/profile/*/cpu.machine.json")).read_text())["calibration"]
    ridge = rec["peak_flops_per_s"]["f32"] / rec["hbm_bw_bytes_per_s"]
    d = 4096

    def intensity(b):
        return 2 * b * d * d / (4 * (d * d + 2 * b * d))
    assert intensity(1) < ridge < intensity(512)
    out = wi.whatif(tracekit.load(case), wi.Request(batch_scale=512.0, batch_size=1))
    changed = {c["op"]: (c["from"], c["to"]) for c in out["bound_changes"]}
    assert changed == {f"jit_matvec/dot.{k}": ("memory", "compute") for k in (4, 5, 6, 7)}
    assert any("change bound" in a for a in out["assumptions"])


def _stretched_copy(case, f: float) -> bytes:
    """The case's XSpace with every XLA:CPU thread event's offset and duration scaled by ``f``."""
    sp = xplane_pb2.XSpace.FromString(_xplane(case).read_bytes())
    for p in sp.planes:
        if p.name.startswith("/host:CPU"):
            for ln in p.lines:
                for e in ln.events:
                    e.offset_ps, e.duration_ps = int(e.offset_ps * f), int(e.duration_ps * f)
    return sp.SerializeToString()


def test_a_pods_savings_come_from_the_replay_of_its_slowest_host(tmp_path):
    """A run folder of two hosts, each replayed on its own worker: ``sleepy_steps`` as captured, and the same with
    every event's time stretched 1.5x (the pod's slowest host). The pod's replayed step and device-idle-gaps'
    saving are the stretched host's, by the raw-events oracle on its file; a pool of 2 gives the same report."""
    from tracekit import pipeline
    from tracekit.run import pod
    case = FIXTURES / "cpu" / "sleepy_steps"
    (tmp_path / "h0.xplane.pb").write_bytes(_xplane(case).read_bytes())
    (tmp_path / "h1.xplane.pb").write_bytes(_stretched_copy(case, 1.5))
    rep = pipeline.analyze(tmp_path)
    s = rep.data["summary"]
    assert s["hosts"] == 2 and s["savings_basis"] == "replay", s["replay_savings"]
    step, fixed = _raw_fixed_gaps(tmp_path / "h1.xplane.pb")
    step0, _ = _raw_fixed_gaps(tmp_path / "h0.xplane.pb")
    assert step > 1.4 * step0
    r = s["replay_savings"]
    assert abs(r["step_ps"] - step) <= 0.05 * step, (r["step_ps"], step)
    gaps = next(f for f in rep.data["findings"] if f["name"] == "device-idle-gaps")
    assert abs(gaps["replay_savings_ps"] - (step - fixed)) <= 0.05 * step, (gaps["replay_savings_ps"], step - fixed)
    assert json.loads(pod.analyze(tmp_path, jobs=2).to_json()) == json.loads(rep.to_json())


def test_no_replay_keeps_the_claims():
    """``--no-replay`` (``Options.replay`` off): the claims alone, said so, and no finding carries a replayed saving."""
    from tracekit import pipeline
    from tracekit.options import Options
    d = pipeline.analyze(FIXTURES / "cpu" / "sleepy_steps", Options(replay=False)).data
    assert d["summary"]["savings_basis"] == "claims" and "not replayed" in d["summary"]["replay_savings"]["note"]
    assert not any("replay_savings_ps" in f for f in d["findings"]) and d["findings"]
