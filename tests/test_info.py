"""`tracekit info` reads only what it prints: plane and line headers, event counts and times; never the events'
stats, never pandas. Its counts are checked against protobuf's own parse of the file (upb), not tracekit's."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import shared_trace
from tracekit.ingest import inventory, wire
from tracekit.ingest.synth import SpaceBuilder
from tracekit.ingest.xspace import device_of
from tracekit.proto import xplane_pb2


def _trace(path):
    b = SpaceBuilder(hostname="h")
    p = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0})
    ops = p.line("XLA Ops")
    for i in range(50):
        ops.event(f"%fusion.{i % 3} = f32[8]{{0}} fusion(f32[8]{{0}} %p)", 1000 * i, 700, display=f"fusion.{i % 3}",
                  stats={"flops": 1.0e6, "bytes_accessed": 4.0e4, "device_duration_ps": 700})
    b.write(path)


def test_info_decodes_no_event_stats(tmp_path, monkeypatch):
    path = tmp_path / "t.xplane.pb"
    _trace(path)
    calls = []
    real = wire.read_space

    def spy(data, *a, **kw):
        calls.append(kw.get("stats", True))
        planes, hosts = real(data, *a, **kw)
        assert all(len(ln.stat_id) == 0 for p in planes for ln in p.lines)  # nothing decoded
        return planes, hosts

    monkeypatch.setattr(wire, "read_space", spy)
    inv = inventory.scan(str(path))
    assert calls == [False]
    assert inv["devices"][0]["events"] == 50 and inv["devices"][0]["device_kind"] == "TPU v6 Lite"
    assert inv["span_ps"] == 49 * 1000 + 700  # first start to last end


@pytest.mark.parametrize("decoder", ["c", "python"])
def test_stats_false_keeps_the_events_and_drops_only_the_stats(decoder):
    if decoder == "c" and not wire.HAVE_C:
        pytest.skip("C decoder not built")
    data = shared_trace("tpu/v6e-4_jax_inference.xplane.pb").read_bytes()
    read = wire.read_space_c if decoder == "c" else wire.read_space_python
    full, _ = read(data)
    bare, _ = read(data, stats=False)
    assert sum(len(ln.stat_id) for p in full for ln in p.lines) > 0
    for pf, pb in zip(full, bare, strict=True):
        for lf, lb in zip(pf.lines, pb.lines, strict=True):
            assert len(lb.stat_id) == len(lb.stat_str) == 0
            for col in ("metadata_id", "offset_ps", "event_duration_ps"):
                assert np.array_equal(getattr(lf, col), getattr(lb, col))


def test_info_counts_match_protobufs_own_parse():
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    space = xplane_pb2.XSpace.FromString(path.read_bytes())
    p = subprocess.run([sys.executable, "-c", "import sys; from tracekit.cli import entry; sys.argv = ['tracekit', "
                        f"'info', {str(path)!r}, '--format', 'json']\ntry:\n    entry()\nfinally:\n"
                        "    assert 'pandas' not in sys.modules, 'info imported pandas'"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    inv = json.loads(p.stdout)
    want = [(pl.name, ln.name, len(ln.events)) for pl in space.planes for ln in pl.lines if ln.events]
    assert [(x["plane"], x["line"], x["events"]) for x in inv["lines"]] == want
    dev = {pl.name: sum(len(ln.events) for ln in pl.lines) for pl in space.planes if device_of(pl.name)}
    assert {f"/device:{d['device']}": d["events"] for d in inv["devices"]} == dev
    assert inv["device_events"] == sum(dev.values())
    starts = [ln.timestamp_ns * 1000 + e.offset_ps for pl in space.planes if device_of(pl.name) for ln in pl.lines
              for e in ln.events]
    ends = [ln.timestamp_ns * 1000 + e.offset_ps + e.duration_ps for pl in space.planes if device_of(pl.name)
            for ln in pl.lines for e in ln.events]
    assert inv["span_ps"] == max(ends) - min(starts)
    assert [m["module"] for m in inv["modules"]] == sorted(["jit_f", "jit__psum", "jit_broadcast_in_dim",
                                                            "jit_convert_element_type"])
