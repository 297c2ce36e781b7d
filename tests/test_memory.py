"""The memory view against independent oracles: XLA's own ``memory_analysis()`` of the CPU fixture programs
(recorded by fixtures/capture_cpu.py into cases.json), and, on the TPU v6e trace, the buffer assignment decoded
here from the raw protobuf wire bytes (not through tracekit's proto) and summed by hand."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import CPU_CASES, FIXTURES, cpu_fixture, shared_trace

import tracekit
from tracekit.analysis import memory
from tracekit.model import roofline

CASES = json.loads((FIXTURES / "cpu" / "cases.json").read_text())["cases"]
GIB = 1024 ** 3


def _xla_memory_cases():
    for case, c in sorted(CASES.items()):
        for fn, stats in sorted((c.get("xla_memory") or {}).items()):
            yield pytest.param(case, c["jitted"][fn], stats, id=f"{case}-{fn}")


@pytest.fixture(scope="module")
def views():
    cache = {}

    def get(case):
        if case not in cache:
            tr = tracekit.load(cpu_fixture(case))
            cache[case] = (tr, memory.build(tr, roofline.device_chips(tr)))
        return cache[case]
    return get


@pytest.mark.parametrize("case,module,stats", list(_xla_memory_cases()) or [
    pytest.param(None, None, None, marks=pytest.mark.skip(reason="cases.json has no xla_memory yet"))])
def test_sizes_equal_xla_memory_analysis(case, module, stats, views):
    tr, mv = views(case)
    ran = {int(p) for p in tr.ops.loc[tr.ops["module"].astype(str) == module, "program_id"].unique()}
    rows = mv.programs[(mv.programs["module"] == module) & (mv.programs["memory_space"] == "device")
                       & (mv.programs["program_id"].astype("uint64").isin(ran) if ran else True)]  # (an init
    # program that ran only before the window: the one program of that name)
    assert len(rows) == 1, (case, module, ran)
    r = rows.iloc[0]
    for ours, xla in (("argument_bytes", "argument_size_in_bytes"), ("output_bytes", "output_size_in_bytes"),
                      ("temp_bytes", "temp_size_in_bytes"), ("alias_bytes", "alias_size_in_bytes")):
        assert r[ours] == pytest.approx(stats[xla], rel=0.05, abs=64), (case, ours, r[ours], stats[xla])


# ------------------------------------------------------------------------- an independent wire decode (v6e)
def _fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message: varints as ints, length-delimited as bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(wt)
        yield num, wt, v


def _varint(buf, i):
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return out, i


def _hlo_payloads(path) -> dict:
    """module label -> the raw ``Hlo Proto`` bytes, read from the XSpace wire format field by field (XSpace.planes
    = 1; XPlane.name = 2, event_metadata = 4 (map: value = 2), stat_metadata = 5 (map: value = 2);
    XEventMetadata.name = 2, stats = 5; XStatMetadata id = 1, name = 2; XStat metadata_id = 1, bytes_value = 6)."""
    out = {}
    for num, _, plane in _fields(path.read_bytes()):
        if num != 1:
            continue
        f = list(_fields(plane))
        if not any(n == 2 and v == b"/host:metadata" for n, _, v in f):
            continue
        stat_names = {}
        for n, _, entry in f:
            if n == 5:
                md = dict((k, v) for k, _, v in _fields(dict((a, b) for a, _, b in _fields(entry))[2]))
                stat_names[md.get(1, 0)] = md.get(2, b"").decode()
        for n, _, entry in f:
            if n != 4:
                continue
            md = list(_fields(dict((a, b) for a, _, b in _fields(entry))[2]))
            name = next((v.decode() for k, _, v in md if k == 2), "")
            for k, _, st in md:
                if k == 5:
                    s = dict((a, b) for a, _, b in _fields(st))
                    if stat_names.get(s.get(1)) == "Hlo Proto":
                        out[name] = s[6]
    return out


def _allocations(hlo_proto: bytes) -> list[dict]:
    """BufferAssignmentProto (HloProto field 3) -> its buffer_allocations (field 3): index 1, size 2,
    is_thread_local 3, is_entry_computation_parameter 5, maybe_live_out 7, color 8, is_constant 12."""
    ba = next(v for n, _, v in _fields(hlo_proto) if n == 3)
    names = {1: "index", 2: "size", 3: "thread_local", 5: "param", 7: "live_out", 8: "color", 12: "constant"}
    return [{names[n]: v for n, wt, v in _fields(a) if n in names and wt == 0}
            for n, _, a in _fields(ba) if n == 3]


def test_v6e_byte_counts_equal_the_buffer_assignment_decoded_by_hand():
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    tr = tracekit.load(path)
    mv = memory.build(tr, roofline.device_chips(tr))
    payloads = _hlo_payloads(path)
    assert len(payloads) == 4
    checked = 0
    for label, blob in payloads.items():
        module = label.split("(")[0]
        allocs = _allocations(blob)
        for color, space in ((0, "device"), (5, "host")):
            a = [x for x in allocs if x.get("color", 0) == color]
            if not a:
                continue
            arg = sum(x.get("size", 0) for x in a if x.get("param"))
            out = sum(x.get("size", 0) for x in a if x.get("live_out"))
            alias = sum(x.get("size", 0) for x in a if x.get("param") and x.get("live_out"))
            temp = sum(x.get("size", 0) for x in a if not (x.get("param") or x.get("live_out")
                                                          or x.get("thread_local") or x.get("constant")))
            row = mv.programs[(mv.programs["module"] == module) & (mv.programs["memory_space"] == space)].iloc[0]
            assert (row.argument_bytes, row.output_bytes, row.alias_bytes, row.temp_bytes) == (arg, out, alias, temp)
            checked += 1
    assert checked == 5
    # jit_f: three f32[5,1024,1024,256] arrays (5 GiB each) live in host memory, donated (aliased to the outputs)
    host = mv.programs[(mv.programs["module"] == "jit_f") & (mv.programs["memory_space"] == "host")].iloc[0]
    assert host.argument_bytes == host.alias_bytes == 3 * 5 * 1024 * 1024 * 256 * 4


def test_v6e_offload_fits_and_what_it_would_save():
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    from tracekit import pipeline
    rep = pipeline.analyze(path)
    off = rep.data["memory"]["offload"]
    assert len(off) == 1 and off[0]["module"] == "jit_f"
    o = off[0]
    # kept in HBM: the 3 host arrays + the 3 fusion results alive at the heap simulator's peak (the staging copies
    # of the host arrays are gone) + the 32-byte output tuple and the copies' 32-byte tuple tables
    assert o["host_bytes"] == 15 * GIB
    assert 30 * GIB <= o["need_bytes"] <= 30 * GIB + 1024
    assert o["capacity_bytes"] == 32 * GIB and o["fits"] is True
    # the host-link roofline: 6 copies of 5 GiB per step and device, both directions of a 32 GB/s link
    chip = rep.data["chips"][0]
    link = chip["host_link_bw_bytes_per_s"]
    assert o["host_link_per_step_ps"] == pytest.approx(6 * 5 * GIB / link / 2 * 1e12, rel=1e-6)
    st = rep.data["overview"]["step_time"]
    assert o["host_link_per_step_ps"] < o["wait_per_step_ps"] < st["mean_ps"]
    from tracekit.report import render
    text = render.render(rep, "text")
    assert "jit_f keeps 16.1 GB in host memory" in text and ": fits" in text
    assert "keeping the arrays on the device would save about" in text
    ids = [f["rule_id"] for f in rep.data["findings"]]
    assert "TK021" in ids
    f = next(f for f in rep.data["findings"] if f["rule_id"] == "TK021")
    assert f["savings_ps"] > 0.5 * rep.data["summary"]["profiled_ps"]


def test_heap_simulator_live_curve_by_hand():
    """ALLOC/FREE/SHARE_WITH replayed: a shared buffer frees its memory only when the last sharer dies."""
    import pandas as pd
    ev = pd.DataFrame({"seq": range(6), "kind": [0, 0, 2, 1, 1, 1], "buffer_id": [1, 2, 3, 1, 3, 2],
                       "share_with": [-1, -1, 1, -1, -1, -1], "instruction": list("abcdef")})
    _, live, _ = memory.live_curve(ev, {1: 100, 2: 10, 3: 100}, lambda b: True)
    assert live.tolist() == [100, 110, 110, 110, 10, 0]


def test_donation_candidates_on_the_train_step_fixture(views):
    tr, mv = views("train_step")
    row = mv.programs[(mv.programs["module"] == "jit_train_step") & (mv.programs["memory_space"] == "device")]
    row = row[row["footprint_bytes"] == row["footprint_bytes"].max()].iloc[0]
    # the MLP's two f32[512,512] weights and two f32[512] biases come back updated and are not donated
    assert row.alias_bytes == 0
    assert row.undonated_bytes == 2 * 512 * 512 * 4 + 2 * 512 * 4


@pytest.mark.parametrize("fmt", ["text", "json", "markdown"])
def test_memory_command(fmt):
    path = cpu_fixture("train_step")
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", "memory", str(path), "--format", fmt, "--top", "3"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    if fmt == "json":
        d = json.loads(r.stdout)
        assert len(d["buffers"]) == 3 and any(p["module"] == "jit_train_step" for p in d["programs"])
    else:
        name = "jit_train_step" if fmt == "text" else "jit\\_train\\_step"
        assert name in r.stdout and "live peak" in r.stdout and "largest buffers" in r.stdout.lower()


def test_memory_command_bad_path():
    r = subprocess.run([sys.executable, "-m", "tracekit.cli", "memory", "/no/such/trace"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1


def test_allocator_events_over_time():
    path = shared_trace("gpu/mi300x8_jax_conv3d.xplane.pb")
    tr = tracekit.load(path)
    mv = memory.build(tr, roofline.device_chips(tr))
    a = mv.allocators.set_index("allocator")
    assert len(a) == 8 and set(a["device"]) == {f"GPU:{i}" for i in range(8)}
    ev = tr.memory_events[tr.memory_events["allocator"].astype(str) == "GPU_0_bfc"]
    assert a.loc["GPU_0_bfc", "peak_in_trace_bytes"] == ev["bytes_in_use"].max()
    assert a.loc["GPU_0_bfc", "events"] == len(ev)


assert set(CPU_CASES) <= set(CASES)


def test_buffer_tables_of_a_module_with_a_negative_program_id():
    """A damaged module's program id (HloModuleProto.id is an int64) wraps to its unsigned form in the buffer
    tables, as pandas' cast gives it, instead of stopping the analysis."""
    import dataclasses
    from tracekit.ingest import buffers
    tr = tracekit.load(shared_trace("tpu/v6e-4_jax_inference.xplane.pb"))
    mod = max((m for m in tr.hlo_modules if m.buffers is not None), key=lambda m: len(buffers.tables([m]).heap))
    good = buffers.tables([mod])
    bad = buffers.tables([dataclasses.replace(mod, program_id=-1, buffer_rows=None)])
    for a, b in zip((good.allocations, good.buffers, good.heap), (bad.allocations, bad.buffers, bad.heap)):
        assert len(a) and b["program_id"].dtype == np.uint64 and set(b["program_id"]) == {2**64 - 1}
        pd.testing.assert_frame_equal(a.drop(columns="program_id"), b.drop(columns="program_id"))
