"""Traces that decode but do not hang together: each one is analyzed (every report format renders) and what makes
the analysis less trustworthy is a warning in the report (``Trace.warnings`` -> ``report.data["warnings"]``)."""
from __future__ import annotations

import numpy as np
import pytest

import tracekit
from conftest import cpu_fixture, shared_trace
from tracekit import pipeline
from tracekit.report import render
from tracekit.ingest import synth
from tracekit.proto import hlo_pb2, xplane_pb2
from tracekit.ingest.synth import instr, shape

FORMATS = ("json", "markdown", "html", "sarif", "text")
TPU_STATS = {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0,
             "peak_hbm_bw_gigabytes_per_second": 1638.0}
FUSION = "%fusion.1 = f32[1024]{0} fusion(f32[1024]{0} %p), kind=kLoop"


def analyze(path) -> dict:
    """Analyze and render every format; the JSON envelope."""
    rep = pipeline.analyze(path)
    for fmt in FORMATS:
        assert render.render(rep, fmt)
    return rep.data


def warned(data: dict, *needles: str) -> str:
    """The one warning that mentions every needle."""
    hits = [w for w in data["warnings"] if all(n in w for n in needles)]
    assert len(hits) == 1, (needles, data["warnings"])
    assert "\n" not in hits[0]
    return hits[0]


def tpu_module(pid=77, name="jit_step"):
    return synth.module(name, pid, [instr("p", "parameter", shape("f32", [1024])),
                                    instr("fusion.1", "fusion", shape("f32", [1024]), [1], fusion_kind="kLoop")])


def tpu_space(devices=2, steps=3, hlo=True, md_pid=77, hlo_pid=77, op=FUSION, dur=200_000, ts=10,
              with_metadata=True):
    b = synth.SpaceBuilder(hostname="tpuhost")
    if hlo:
        b.hlo_module(tpu_module(hlo_pid), label=f"jit_step({hlo_pid})")
    for d in range(devices):
        p = b.plane(f"/device:TPU:{d}", TPU_STATS)
        ops = p.line("XLA Ops", timestamp_ns=ts)
        st = p.line("Steps", timestamp_ns=ts)
        for s in range(steps):
            ops.event(op, s * 1_000_000 + 1000, dur, display=op.split(" ")[0].lstrip("%"),
                      md_stats={"program_id": md_pid, "hlo_category": "loop fusion"})
            st.event(str(s), s * 1_000_000, 1_000_000)
    if not with_metadata:
        del b.space.planes[[p.name for p in b.space.planes].index("/host:metadata")]
    return b


def stat_id(plane: xplane_pb2.XPlane, name: str) -> int:
    """The id of stat metadata ``name`` in ``plane``, added when missing."""
    for k, v in plane.stat_metadata.items():
        if v.name == name:
            return k
    k = max(plane.stat_metadata, default=0) + 1
    plane.stat_metadata[k].id, plane.stat_metadata[k].name = k, name
    return k


def write(tmp_path, space, name="t.xplane.pb"):
    f = tmp_path / name
    data = space.SerializeToString() if isinstance(space, xplane_pb2.XSpace) else space.serialize()
    f.write_bytes(data)
    return f


def test_consistent_synthetic_trace_has_no_warnings(tmp_path):
    assert analyze(write(tmp_path, tpu_space()))["warnings"] == []


@pytest.mark.parametrize("name", ["tpu/v6e-4_jax_inference.xplane.pb", "gpu/mi300x_jax_gemm.xplane.pb"])
def test_real_traces_have_no_warnings(name):
    assert tracekit.load(shared_trace(name)).warnings == []


def test_cpu_fixture_has_no_warnings():
    assert tracekit.load(cpu_fixture("train_step")).warnings == []


# ---- events -------------------------------------------------------------------------------------------------------

def test_unknown_metadata_ids(tmp_path):
    b = tpu_space()
    line = b.space.planes[1].lines[0]
    for e in list(line.events)[:2]:
        e.metadata_id = 9999
    data = analyze(write(tmp_path, b))
    assert "2 event(s) refer to event metadata" in warned(data, "tpuhost", "metadata")
    assert data["summary"]["op_executions"] == 6


def test_negative_and_zero_durations(tmp_path):
    b = tpu_space()
    evs = b.space.planes[1].lines[0].events
    evs[0].duration_ps = -5_000
    evs[1].duration_ps = 0
    path = write(tmp_path, b)
    tr = tracekit.load(path)
    assert (tr.ops["duration_ps"] >= 0).all()
    assert "1 event(s) have a negative duration" in warned(analyze(path), "negative")


def test_negative_device_duration_stat(tmp_path):
    b = tpu_space(devices=1)
    p = b.space.planes[1]
    p.lines[0].events[0].stats.add(metadata_id=stat_id(p, "device_duration_ps"), int64_value=-7)
    path = write(tmp_path, b)
    assert (tracekit.load(path).ops["duration_ps"] >= 0).all()
    warned(analyze(path), "negative duration")


def test_overlapping_events_on_one_line(tmp_path):
    b = tpu_space(devices=1, steps=1)
    line = b.space.planes[1].lines[0]
    for k in range(5):  # five ops on top of each other, and one inside another
        line.events.add().CopyFrom(line.events[0])
        line.events[-1].offset_ps += k * 10
    data = analyze(write(tmp_path, b))
    for d in data["devices"]:
        assert 0 <= d["busy_ps"] <= d["span_ps"]


def test_out_of_range_times(tmp_path):
    b = tpu_space()
    p = b.space.planes[1]
    p.lines[0].events[0].offset_ps = 2**63 - 1
    p.lines[0].events[1].duration_ps = 2**63 - 1
    b.space.planes[2].lines[1].timestamp_ns = -(2**62)
    data = analyze(write(tmp_path, b))
    warned(data, "beyond", "(clipped)")
    warned(data, "timestamp is out of range")


def test_empty_lines_and_planes(tmp_path):
    b = tpu_space()
    b.space.planes[1].lines.add(id=99, name="XLA Ops")
    b.space.planes[1].lines.add(id=98, name="")
    b.plane("/device:TPU:7", TPU_STATS)
    b.plane("/host:CPU").line("python")
    assert analyze(write(tmp_path, b))["warnings"] == []


def test_only_empty_planes(tmp_path):
    b = synth.SpaceBuilder(hostname="h")
    b.plane("/device:TPU:0", TPU_STATS).line("XLA Ops")
    data = analyze(write(tmp_path, b))
    assert data["summary"]["op_executions"] == 0


# ---- devices ------------------------------------------------------------------------------------------------------

def test_clock_offset_between_devices(tmp_path):
    b = tpu_space(devices=4)
    for line in b.space.planes[3].lines:  # TPU:2
        line.timestamp_ns += 5_000_000_000
    w = warned(analyze(write(tmp_path, b)), "clock offset")
    assert "TPU:2" in w and "TPU:1" not in w and "5 s" in w


def test_clock_offset_on_the_v6e_trace(tmp_path):
    sp = xplane_pb2.XSpace.FromString(shared_trace("tpu/v6e-4_jax_inference.xplane.pb").read_bytes())
    plane = next(p for p in sp.planes if p.name == "/device:TPU:1")
    span_ns = 250_000_000_000  # further than the whole capture
    for line in plane.lines:
        line.timestamp_ns += span_ns
    w = warned(analyze(write(tmp_path, sp)), "clock offset")
    assert "TPU:1" in w and "TPU:0" not in w


def test_duplicate_plane_names(tmp_path):
    b = tpu_space()
    dup = b.space.planes.add()
    dup.CopyFrom(b.space.planes[1])
    meta = b.space.planes.add()
    meta.CopyFrom(b.space.planes[0])
    path = write(tmp_path, b)
    data = analyze(path)
    warned(data, "/device:TPU:0", "appears 2 times")
    assert [d["device"] for d in data["devices"]] == ["TPU:0", "TPU:1"]
    assert len(tracekit.load(path).hlo_modules) == 1


# ---- HLO ----------------------------------------------------------------------------------------------------------

def test_missing_metadata_plane_cpu(tmp_path):
    sp = xplane_pb2.XSpace.FromString(
        (cpu_fixture("train_step") / "plugins/profile/run1/cpu.xplane.pb").read_bytes())
    del sp.planes[[p.name for p in sp.planes].index("/host:metadata")]
    data = analyze(write(tmp_path, sp))
    warned(data, "no HLO")
    assert data["summary"]["hlo_present"] is False and data["summary"]["op_executions"] > 0


def test_missing_metadata_plane_with_trace_costs(tmp_path):
    """TPU ops that carry their own flops/bytes stats need no HLO: no warning."""
    b = tpu_space(with_metadata=False)
    for p in b.space.planes:
        for md in p.event_metadata.values():
            md.stats.add(metadata_id=stat_id(p, "flops"), double_value=1024.0)
            md.stats.add(metadata_id=stat_id(p, "bytes_accessed"), double_value=8192.0)
    assert analyze(write(tmp_path, b))["warnings"] == []


def test_ops_not_in_the_hlo(tmp_path):
    b = tpu_space(op="%fusion.99 = f32[1024]{0} fusion(f32[1024]{0} %p), kind=kLoop")
    w = warned(analyze(write(tmp_path, b)), "did not match an instruction")
    assert "100.0% of op time" in w


def test_hlo_of_another_program(tmp_path):
    b = tpu_space(hlo_pid=78)  # the ops say program 77
    warned(analyze(write(tmp_path, b)), "did not match an instruction")


def test_partly_joined_share(tmp_path):
    b = tpu_space(devices=1, steps=4)
    line = b.space.planes[1].lines[0]
    md = b.space.planes[1].event_metadata[line.events[0].metadata_id]
    other = b.space.planes[1].event_metadata[777]
    other.CopyFrom(md)
    other.id, other.name, other.display_name = 777, "%nope.1 = f32[8]{0} add(f32[8]{0} %p, f32[8]{0} %p)", "nope.1"
    line.events[0].metadata_id = 777
    assert "25.0% of op time (1 op executions)" in warned(analyze(write(tmp_path, b)), "did not match")


def test_undecodable_hlo_payload(tmp_path):
    b = tpu_space()
    meta = b.space.planes[0]
    hid = next(k for k, v in meta.stat_metadata.items() if v.name == "Hlo Proto")
    for md in meta.event_metadata.values():
        for s in md.stats:
            if s.metadata_id == hid:
                s.bytes_value = b"\x0a\xff\xff\xff\xff\x0f garbage"
    data = analyze(write(tmp_path, b))
    warned(data, "could not be decoded")
    assert data["summary"]["hlo_present"] is False


def test_nonsense_hlo(tmp_path):
    """Valid protobuf, nonsense HLO: dangling operand ids, a fusion without its computation, a call cycle, negative
    and absurd dimensions, unknown opcodes. Costs are unknown where they cannot be known, nothing raises."""
    ins = [instr("p", "parameter", shape("f32", [-4, 8])),
           instr("fusion.1", "fusion", shape("f32", [2**20, 2**20]), [1, 4242]),
           instr("loop", "while", shape("f32", [8]), [1], called_computation_ids=[1000, 1000]),
           instr("huh", "frobnicate", shape("f32", [2**62, 2**62]), [1])]
    m = synth.module("jit_step", 77, ins)
    b = tpu_space(hlo=False)
    b.hlo_module(m, label="jit_step(77)")
    data = analyze(write(tmp_path, b))
    assert data["summary"]["hlo_present"] is True


# ---- stats of unexpected types ----------------------------------------------------------------------------------

def cpu_space(pid_value=8, ordinal=None, hlo_op="all-reduce"):
    b = synth.SpaceBuilder(hostname="c")
    b.hlo_module(synth.module("jit_f", 8, [instr("x", "parameter", shape("f32", [4])),
                                           instr("all-reduce", "all-reduce", shape("f32", [4]), [1])]),
                 label="jit_f(8)")
    p = b.plane("/host:CPU")
    for d in range(2):
        ln = p.line(f"tf_XLAPjRtCpuClient/{d}", timestamp_ns=0)
        for s in range(2):
            ln.event("all-reduce", s * 1_000_000 + 100, 5_000,
                     stats={"hlo_op": hlo_op, "hlo_module": "jit_f", "program_id": pid_value, "run_id": 40 + s,
                            "device_ordinal": d if ordinal is None else ordinal(d)})
    return b


def test_program_id_as_string(tmp_path):
    path = write(tmp_path, cpu_space(pid_value="8"))
    tr = tracekit.load(path)
    assert tr.device_ops["in_hlo"].all() and set(tr.ops["program_id"]) == {8}
    warned(analyze(path), "unexpected type", "program_id")


def test_program_id_not_a_number(tmp_path):
    path = write(tmp_path, cpu_space(pid_value="jit_f"))
    warned(analyze(path), "unexpected type", "program_id")


def test_device_ordinal_as_double(tmp_path):
    path = write(tmp_path, cpu_space(ordinal=float))
    tr = tracekit.load(path)
    assert sorted(set(tr.ops["device"].astype(str))) == ["CPU:0", "CPU:1"]
    warned(analyze(path), "unexpected type", "device_ordinal")


def test_device_ordinal_nan(tmp_path):
    path = write(tmp_path, cpu_space(ordinal=lambda d: float("nan")))
    warned(analyze(path), "unexpected type", "device_ordinal")


def test_hlo_op_as_int(tmp_path):
    path = write(tmp_path, cpu_space(hlo_op=5))
    warned(analyze(path), "unexpected type", "hlo_op")


def test_tpu_metadata_stats_of_unexpected_types(tmp_path):
    b = tpu_space(md_pid="77")
    p = b.space.planes[1]
    for md in p.event_metadata.values():
        md.stats.add(metadata_id=stat_id(p, "flops"), bytes_value=b"\x00\x01")
        md.stats.add(metadata_id=stat_id(p, "bytes_accessed"), str_value="lots")
    path = write(tmp_path, b)
    tr = tracekit.load(path)
    assert set(tr.ops["program_id"]) == {77} and tr.ops["in_hlo"].all()
    assert np.isnan(tr.ops.loc[tr.ops["device"] == "TPU:0", "trace_flops"]).all()
    warned(analyze(path), "unexpected type", "flops")


def test_gpu_plane_stats_of_unexpected_types(tmp_path):
    sp = xplane_pb2.XSpace.FromString(shared_trace("gpu/mi300x_jax_gemm.xplane.pb").read_bytes())
    for p in sp.planes:
        names = {k: v.name for k, v in p.stat_metadata.items()}
        for s in p.stats:
            if names.get(s.metadata_id) in ("compute_cap_major", "clock_rate", "core_count"):
                s.str_value = "AMD"
            elif names.get(s.metadata_id) in ("compute_cap_minor", "memory_bandwidth"):
                s.double_value = float("nan")
    assert analyze(write(tmp_path, sp))["summary"]["op_executions"] > 0


def test_hlo_module_proto_types(tmp_path):
    """An HloProto payload stored as a string stat, or on a plane that is not the metadata plane: ignored."""
    b = tpu_space(hlo=False)
    meta = b.plane("/host:metadata")
    meta.metadata_id("jit_step(77)", "", {"Hlo Proto": "not bytes"})
    payload = hlo_pb2.HloProto(hlo_module=tpu_module()).SerializeToString()
    b.space.planes[1].stats.add(metadata_id=stat_id(b.space.planes[1], "Hlo Proto"), bytes_value=payload)
    analyze(write(tmp_path, b))
