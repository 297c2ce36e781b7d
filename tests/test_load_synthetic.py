"""Exact op extraction on synthetic TPU-, GPU- and CPU-shaped traces built with tracekit.ingest.synth."""
import numpy as np
import pytest

import tracekit
from tracekit.ingest import synth
from tracekit.ingest.synth import instr, shape


def _tpu_module():
    ins = [
        instr("p", "parameter", shape("f32", [1024])),
        instr("fusion.1", "fusion", shape("f32", [1024]), [1], fusion_kind="kLoop"),
        instr("all-reduce-start", "all-reduce-start", shape("f32", [1024]), [2]),
        instr("all-reduce-done", "all-reduce-done", shape("f32", [1024]), [3]),
    ]
    return synth.module("jit_step", 77, ins)


def _tpu_space(with_async_line=False):
    b = synth.SpaceBuilder(hostname="tpuhost")
    b.hlo_module(_tpu_module(), label="jit_step(77)")
    for d in range(2):
        p = b.plane(f"/device:TPU:{d}", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0,
                                         "peak_hbm_bw_gigabytes_per_second": 1638.0})
        mods = p.line("XLA Modules", timestamp_ns=10)
        ops = p.line("XLA Ops", timestamp_ns=10)
        for step in range(3):
            t0 = step * 1_000_000
            mods.event("jit_step(77)", t0, 900_000, stats={"run_id": 100 + step})
            ops.event("%fusion.1 = f32[1024]{0} fusion(f32[1024]{0} %p), kind=kLoop", t0 + 1000, 200_000,
                      display="fusion.1", md_stats={"program_id": 77, "hlo_category": "loop fusion",
                                                    "flops": 1024, "bytes_accessed": 8192})
            ops.event("%all-reduce-start = f32[1024]{0} all-reduce-start(f32[1024]{0} %fusion.1)", t0 + 300_000,
                      10_000, display="all-reduce-start", md_stats={"program_id": 77, "hlo_category": "all-reduce"})
            ops.event("%all-reduce-done = f32[1024]{0} all-reduce-done(f32[1024]{0} %all-reduce-start)",
                      t0 + 700_000, 50_000, display="all-reduce-done", md_stats={"program_id": 77})
        if with_async_line and d == 0:
            a = p.line("Async XLA Ops", timestamp_ns=10)
            a.event("%all-reduce-start = f32[1024]{0} all-reduce-start(f32[1024]{0} %fusion.1)", 300_000, 450_000,
                    md_stats={"program_id": 77})
        st = p.line("Steps", timestamp_ns=10)
        for step in range(3):
            st.event(str(step), step * 1_000_000, 1_000_000)
    return b


def test_tpu_ops_exact(tmp_path):
    f = tmp_path / "tpuhost.xplane.pb"
    _tpu_space().write(f)
    tr = tracekit.load(f)
    ops = tr.device_ops
    assert len(ops) == 2 * 3 * 3
    assert set(ops["device"].astype(str)) == {"TPU:0", "TPU:1"}
    assert set(ops["module"].astype(str)) == {"jit_step"}
    assert ops["in_hlo"].all()
    fu = ops[ops["op"] == "fusion.1"].sort_values(["device", "start_ps"])
    assert fu["duration_ps"].tolist() == [200_000] * 6
    assert fu["start_ps"].iloc[0] == 10 * 1000 + 1000
    assert fu["opcode"].astype(str).unique().tolist() == ["fusion"]
    assert fu["category"].astype(str).unique().tolist() == ["loop fusion"]
    assert fu["trace_flops"].tolist() == [1024.0] * 6 and fu["trace_bytes"].tolist() == [8192.0] * 6
    assert fu["run_id"].tolist() == [100, 101, 102] * 2
    assert fu["step"].tolist() == [0, 1, 2] * 2
    assert tr.steps["step_source"].astype(str).unique().tolist() == ["steps_line"]
    assert ops["device_kind"].astype(str).unique().tolist() == ["TPU v6 Lite"]
    # async windows paired from -start/-done: start of -start to end of -done
    win = tr.ops[tr.ops["is_async"]]
    assert len(win) == 6
    assert (win["duration_ps"] == 700_000 + 50_000 - 300_000).all()
    assert set(win["source"].astype(str)) == {"async_pair"}


def test_tpu_async_line_preferred(tmp_path):
    f = tmp_path / "t.xplane.pb"
    _tpu_space(with_async_line=True).write(f)
    tr = tracekit.load(f)
    win = tr.ops[tr.ops["is_async"]]
    assert sorted(win["source"].astype(str).tolist()) == ["async_pair"] * 3 + ["async_xla_ops"]
    assert win[win["source"] == "async_xla_ops"]["duration_ps"].tolist() == [450_000]


def test_gpu_kernels_with_ref_stats(tmp_path):
    b = synth.SpaceBuilder(hostname="g")
    m = synth.module("jit_dot", 5, [instr("a", "parameter", shape("bf16", [64, 64])),
                                     instr("custom-call.1", "custom-call", shape("bf16", [64, 64]), [1],
                                           custom_call_target="__cublas$lt$matmul")])
    b.hlo_module(m, label="jit_dot(5)")
    p = b.plane("/device:GPU:0", {"device_vendor": "Nvidia", "compute_cap_major": 9, "compute_cap_minor": 0,
                                  "core_count": 132, "memory_bandwidth": 3.35e12})
    ln = p.line("Stream #7(Kernel)", timestamp_ns=5)
    for i in range(2):  # one op, two kernels each time
        ln.event("gemm_kernel_a", i * 100_000, 20_000, stats={"hlo_op": "custom-call.1", "hlo_module": "jit_dot",
                                                              "program_id": 5}, ref_stats=True)
        ln.event("gemm_kernel_b", i * 100_000 + 30_000, 10_000, stats={"hlo_op": "custom-call.1",
                                                                       "hlo_module": "jit_dot", "program_id": 5},
                 ref_stats=True)
    ln.event("copy_runtime", 500_000, 1_000)
    f = tmp_path / "g.xplane.pb"
    b.write(f)
    tr = tracekit.load(f)
    o = tr.device_ops
    assert len(o) == 5
    k = o[o["op"] == "custom-call.1"]
    assert len(k) == 4 and k["in_hlo"].all() and set(k["opcode"].astype(str)) == {"custom-call"}
    assert set(k["kernel"].astype(str)) == {"gemm_kernel_a", "gemm_kernel_b"}
    assert o[o["op"] == ""]["source"].astype(str).tolist() == ["gpu_runtime"]
    assert o["device_kind"].astype(str).iloc[0] == "Nvidia cc9.0"


def test_cpu_thunks_and_step_annotations(tmp_path):
    b = synth.SpaceBuilder(hostname="c")
    b.hlo_module(synth.module("jit_f", 8, [instr("x", "parameter", shape("f32", [4])),
                                           instr("all-reduce", "all-reduce", shape("f32", [4]), [1])]),
                 label="jit_f(8)")
    p = b.plane("/host:CPU")
    py = p.line("python", timestamp_ns=0)
    py.event("train", 0, 1_000_000, stats={"step_num": 0})
    py.event("train", 1_000_000, 1_000_000, stats={"step_num": 1})
    for d in range(2):
        ln = p.line(f"tf_XLAPjRtCpuClient/{d}", timestamp_ns=0)
        for s in range(2):
            ln.event("all-reduce", s * 1_000_000 + 100, 5_000, stats={"hlo_op": "all-reduce", "hlo_module": "jit_f",
                                                                      "program_id": 8, "run_id": 40 + s,
                                                                      "device_ordinal": d}, ref_stats=True)
        ln.event("ThunkExecutor::Execute", 10, 10, stats={"device_ordinal": d})
    f = tmp_path / "c.xplane.pb"
    b.write(f)
    tr = tracekit.load(f)
    o = tr.device_ops
    assert sorted(set(o["device"].astype(str))) == ["CPU:0", "CPU:1"]
    assert len(o) == 4 and o["in_hlo"].all()
    assert o.sort_values(["device", "start_ps"])["step"].tolist() == [0, 1, 0, 1]
    # steps are the program's device runs (run ids); the annotations, one run each, only number them
    assert set(tr.steps["step_source"].astype(str)) == {"module_execution"}
    assert tr.steps.sort_values(["device", "start_ps"])["step"].tolist() == [0, 1, 0, 1]
    assert not any("step annotations" in w for w in tr.warnings)
    assert len(tr.modules) == 4  # derived from run ids: 2 devices x 2 runs


def test_multi_host_run_folder_and_logdir(tmp_path):
    run = tmp_path / "logdir" / "plugins" / "profile"
    for name in ("2026_01_01_00_00_00", "2026_01_02_00_00_00"):
        d = run / name
        d.mkdir(parents=True)
        for h in ("hostA", "hostB"):
            _tpu_space().write(d / f"{h}.xplane.pb")
    tr = tracekit.load(tmp_path / "logdir")
    assert sorted(tr.hosts) == ["hostA", "hostB"]
    assert tr.paths[0].endswith("2026_01_02_00_00_00/hostA.xplane.pb")
    assert set(tr.ops["host"].astype(str)) == {"hostA", "hostB"}
    tr2 = tracekit.load(tmp_path / "logdir", run="2026_01_01_00_00_00")
    assert "2026_01_01_00_00_00" in tr2.paths[0]
    with pytest.raises(tracekit.TraceError, match="no run named"):
        tracekit.load(tmp_path / "logdir", run="nope")
    tr3 = tracekit.load(run / "2026_01_01_00_00_00")
    assert len(tr3.hosts) == 2 and np.array_equal(tr3.ops["duration_ps"].sum(), tr.ops["duration_ps"].sum())


def test_tpu_device_clock_over_corrupt_host_stamps(tmp_path):
    """XLA Ops carrying device_offset_ps / device_duration_ps: op starts come from the device clock, mapped onto the
    plane's timeline (here the device runs 5 us behind the host), also where the host stamps are corrupt (run 2:
    its -start stamped 3 ms late, after its -done; its fusion stamped 3 ms late with host duration 0, like the real
    v6e trace). Every op stays in its module run, and every -start..-done window is the 6 ms the chip measured."""
    ms = 1_000_000_000
    b = synth.SpaceBuilder(hostname="tpuhost")
    b.hlo_module(_tpu_module(), label="jit_step(77)")
    p = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite"})
    mods, ops = p.line("XLA Modules", timestamp_ns=0), p.line("XLA Ops", timestamp_ns=0)
    text = {"fusion.1": "%fusion.1 = f32[1024]{0} fusion(f32[1024]{0} %p), kind=kLoop",
            "all-reduce-start": "%all-reduce-start = f32[1024]{0} all-reduce-start(f32[1024]{0} %fusion.1)",
            "all-reduce-done": "%all-reduce-done = f32[1024]{0} all-reduce-done(f32[1024]{0} %all-reduce-start)"}
    for k in range(6):
        t0 = k * 12 * ms
        mods.event("jit_step(77)", t0, 10 * ms, stats={"run_id": 100 + k})
        late = 3 * ms if k == 2 else 0
        for op, at, dur, host_dur in (("fusion.1", ms // 10, ms, 0 if late else ms), ("all-reduce-start", 2 * ms, 0, 0),
                                      ("all-reduce-done", 2 * ms, 6 * ms, 6 * ms)):
            host_at = t0 + at + (late if op != "all-reduce-done" else 0)
            ops.event(text[op], host_at, host_dur, display=op, md_stats={"program_id": 77},
                      stats={"device_offset_ps": t0 + at - 5_000_000, "device_duration_ps": dur})
    f = tmp_path / "clock.xplane.pb"
    b.write(f)
    tr = tracekit.load(f)
    fu = tr.device_ops[tr.device_ops["op"] == "fusion.1"].sort_values("start_ps")
    assert fu["start_ps"].tolist() == [k * 12 * ms + ms // 10 for k in range(6)]
    assert fu["duration_ps"].tolist() == [ms] * 6
    assert tr.device_ops.groupby("run_id").size().to_dict() == {100 + k: 3 for k in range(6)}
    win = tr.ops[tr.ops["is_async"]].sort_values("start_ps")
    assert win["start_ps"].tolist() == [k * 12 * ms + 2 * ms for k in range(6)]
    assert (win["duration_ps"] == 6 * ms).all() and (win["run_id"] == [100 + k for k in range(6)]).all()
