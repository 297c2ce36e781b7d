"""Runtime copies priced from their size and direction (issue 32 item 4): the CUDA/ROCm runtime's memcpy and memset
activity and its copy kernels, with the ``memcpy_details`` / ``memset_details`` stats as XLA's profilers write them
(xla/backends/profiler/gpu/cupti_collector.cc and rocm_collector.cc). Oracles: the stat strings as those writers
format them, the raw events of the shared traces read with the protobuf alone, and the roofline formulas written
out as literal arithmetic."""
import numpy as np
import pytest

import tracekit
from conftest import shared_trace
from tracekit.ingest import copies, synth
from tracekit.model import roofline, runtime_copies
from tracekit.proto import xplane_pb2

H100 = {"device_vendor": "Nvidia", "compute_cap_major": 9, "compute_cap_minor": 0, "core_count": 132,
        "memory_bandwidth": 3.35e12}


@pytest.mark.parametrize("details,event,line,want", [
    # CUDA (cupti_collector.cc): kind_src/kind_dst memory kinds, size, dest, async
    ("kind_src:pinned kind_dst:device size:1048576 dest:0 async:1", "MemcpyH2D", "Stream #5(MemcpyH2D)", copies.H2D),
    ("kind_src:device kind_dst:pageable size:64 dest:0 async:0", "MemcpyD2H", "Stream #6(MemcpyD2H)", copies.D2H),
    ("kind_src:device kind_dst:device size:4096 dest:0 async:1", "MemcpyOther", "Stream #7(MemcpyOther)", copies.D2D),
    ("kind_src:device kind_dst:device size:4096 dest:3 async:1", "MemcpyOther", "Stream #7(MemcpyOther)", copies.P2P),
    ("kind_src:device kind_dst:device size:4096 dest:3 async:1", "MemcpyP2P", "Stream #8(MemcpyP2P)", copies.P2P),
    # older writers: size dest async only; the event and line names say the direction
    ("size:4 dest:1 async:1", "MemcpyH2D", "Stream #123(MemcpyH2D)", copies.H2D),
    ("size:8 dest:4 async:1", "MemcpyD2H", "Stream #136(MemcpyD2H)", copies.D2H),
    # ROCm (rocm_collector.cc): kind:Unknown; MemcpyOther to this device: the source is not in the trace
    ("kind:Unknown size:2048 dest:0 async:1", "MemcpyOther", "Stream #3(MemcpyOther)", copies.TO_DEVICE),
    ("kind:Unknown size:2048 dest:5 async:1", "MemcpyOther", "Stream #3(MemcpyOther)", copies.UNKNOWN),
    ("kind:Unknown size:2048 dest:0 async:1", "hipMemcpyDtoDAsync", "Stream #3(MemcpyOther)", copies.D2D),
    # memset_details: kind, num_bytes, async
    ("kind:device num_bytes:512 async:0", "Memset", "Stream #9(Memset)", copies.MEMSET),
])
def test_direction_from_the_writers_formats(details, event, line, want):
    assert copies.direction(event, line, copies.parse(details), 0) == want


def test_parse():
    assert copies.parse("kind_src:pinned kind_dst:device size:1048576 dest:0 async:1") == {
        "kind_src": "pinned", "kind_dst": "device", "size": 1048576, "dest": 0, "async": 1}
    assert copies.parse("kind:Unknown num_bytes:7 async:0") == {"kind": "unknown", "num_bytes": 7, "async": 0}


def _gpu_trace(tmp_path, events):
    """One H100 with one event per (line, name, details stat, value, duration_ps) of ``events``."""
    b = synth.SpaceBuilder(hostname="g")
    p = b.plane("/device:GPU:0", H100)
    lines = {}
    for i, (line, name, stat, value, dur) in enumerate(events):
        ln = lines.setdefault(line, p.line(line))
        ln.event(name, i * 10_000_000, dur, stats={stat: value} if stat else {}, ref_stats=True)
    f = tmp_path / "g.xplane.pb"
    b.write(f)
    tr = tracekit.load(f)
    return roofline.join(tr), roofline.device_chips(tr)[("g", "GPU:0")]


def test_copies_priced_by_path(tmp_path):
    mib = 1 << 20
    o, chip = _gpu_trace(tmp_path, [
        ("Stream #5(MemcpyH2D)", "MemcpyH2D", "memcpy_details", f"kind_src:pinned kind_dst:device size:{8 * mib} dest:0 async:1", 1_000_000_000),
        ("Stream #6(MemcpyD2H)", "MemcpyD2H", "memcpy_details", f"kind_src:device kind_dst:pinned size:{4 * mib} dest:0 async:1", 1_000_000_000),
        ("Stream #7(MemcpyD2D)", "MemcpyD2D", "memcpy_details", f"kind_src:device kind_dst:device size:{64 * mib} dest:0 async:1", 100_000_000),
        ("Stream #8(MemcpyOther)", "MemcpyOther", "memcpy_details", f"kind:Unknown size:{16 * mib} dest:0 async:1", 100_000_000),
        ("Stream #9(Memset)", "Memset", "memset_details", f"kind:device num_bytes:{32 * mib} async:0", 100_000_000),
        ("Stream #8(MemcpyOther)", "MemcpyOther", "memcpy_details", "kind:Unknown size:0 dest:0 async:1", 100_000_000),
        ("Stream #8(MemcpyOther)", "MemcpyOther", "memcpy_details", f"kind:Unknown size:{mib} dest:7 async:1", 100_000_000),
    ])
    o = o.reset_index(drop=True)
    cat = o["category"].astype(str).tolist()
    assert cat == [copies.H2D, copies.D2H, copies.D2D, copies.TO_DEVICE, copies.MEMSET, copies.TO_DEVICE,
                   copies.UNKNOWN]
    hbm, host = chip.hbm_bw_bytes_per_s, chip.host_link_bw_bytes_per_s
    assert hbm > 0 and host > 0
    priced = o.iloc[:5]
    assert (priced["cost_source"].astype(str) == "model:runtime_copy").all() and (priced["flops"] == 0).all()
    # H2D / D2H: the size over the host link (and the size in HBM on the device's side)
    for i, size in ((0, 8 * mib), (1, 4 * mib)):
        assert o.at[i, "network_ps"] == pytest.approx(size / host * 1e12, rel=1e-6)
        assert o.at[i, "roofline_ps"] == pytest.approx(size / host * 1e12, rel=1e-6)
        assert o.at[i, "bytes_accessed"] == size and o.at[i, "bound_by"] == "host_link" and o.at[i, "is_host_transfer"]
    assert not o.at[0, "to_host"] and o.at[1, "to_host"]
    # device to device (and to this device from an unknown source): read + write in HBM
    for i, size in ((2, 64 * mib), (3, 16 * mib)):
        assert o.at[i, "bytes_accessed"] == 2 * size
        assert o.at[i, "roofline_ps"] == pytest.approx(2 * size / hbm * 1e12, rel=1e-6)
        assert o.at[i, "bound_by"] == "memory" and not o.at[i, "is_host_transfer"]
    assert o.at[4, "roofline_ps"] == pytest.approx(32 * mib / hbm * 1e12, rel=1e-6)  # a fill writes once
    # what the trace does not give stays unknown, with the reason: no size (size:0), no direction
    assert np.isnan(o.at[5, "roofline_ps"]) and o.at[5, "unknown_reason"] == runtime_copies.NO_SIZE
    assert np.isnan(o.at[6, "roofline_ps"]) and o.at[6, "unknown_reason"] == runtime_copies.NO_DIRECTION
    assert (o["efficiency"].dropna() <= 1.0).all()


def _raw_memcpys(path):
    """(event name, size) of every event with a memcpy_details stat, read with the protobuf alone."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    out = []
    for p in space.planes:
        if not p.name.startswith("/device:GPU"):
            continue
        sm = {k: v.name for k, v in p.stat_metadata.items()}
        for line in p.lines:
            for e in line.events:
                for st in e.stats:
                    if sm.get(st.metadata_id) == "memcpy_details":
                        text = sm[st.ref_value] if st.WhichOneof("value") == "ref_value" else st.str_value
                        size = int(text.split("size:")[1].split()[0])
                        out.append((p.event_metadata[e.metadata_id].name, size, e.duration_ps))
    return out


def test_v100_memcpys_priced_on_the_host_link():
    path = shared_trace("gpu/v100x8_tf_bert.xplane.pb")
    raw = _raw_memcpys(path)
    tr = tracekit.load(path)
    o = roofline.join(tr)
    host = {k: c.host_link_bw_bytes_per_s for k, c in roofline.device_chips(tr).items()}
    for name, cat in (("MemcpyH2D", copies.H2D), ("MemcpyD2H", copies.D2H)):
        want = [s for n, s, _ in raw if n == name]
        rows = o[o["category"].astype(str) == cat]
        assert len(rows) == len(want) and rows["bytes_accessed"].sum() == sum(want)
        bw = np.array([host[(h, d)] for h, d in zip(rows["host"].astype(str), rows["device"].astype(str))])
        assert rows["roofline_ps"].to_numpy(float) == pytest.approx(rows["bytes_accessed"].to_numpy() / bw * 1e12,
                                                                    rel=1e-6)
        assert (rows["bound_by"].astype(str) == "host_link").all()


def test_mi300x_copy_kernels_without_a_size_stay_unknown():
    path = shared_trace("gpu/mi300x8_jax_conv3d.xplane.pb")
    assert not [r for r in _raw_memcpys(path)]  # the device's copy kernels carry no memcpy_details
    o = roofline.join(tracekit.load(path))
    rows = o[o["kernel"].astype(str) == "__amd_rocclr_copyBuffer.kd"]
    assert len(rows) and (rows["category"].astype(str) == copies.UNKNOWN).all()
    assert (rows["unknown_reason"].astype(str) == runtime_copies.NO_SIZE).all() and rows["roofline_ps"].isna().all()
