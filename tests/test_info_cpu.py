"""`tracekit info` on a CPU trace: no '0 device events on 0 device(s)' (issue 38); the host-thread event count is
the one the XSpace itself holds, read with protobuf alone (no tracekit decoder)."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tracekit.cli.app import main
from tracekit.proto import xplane_pb2

TRACE = Path(__file__).resolve().parent.parent / "fixtures/cpu/sharded8/plugins/profile/run1/cpu.xplane.pb"


def test_cpu_trace_info_counts_host_thread_events():
    space = xplane_pb2.XSpace.FromString(TRACE.read_bytes())
    want = sum(len(ln.events) for p in space.planes if p.name.startswith("/host:")
               for ln in p.lines if ln.name != "python" and len(ln.events))
    assert want > 0
    r = CliRunner().invoke(main, ["info", str(TRACE)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "0 device events on 0 device(s)" not in r.output
    assert f"a CPU trace, its ops among {want:,} events on host threads" in r.output
    assert "devices: no device planes" not in r.output  # said once, on the line above


def test_cpu_trace_info_json_carries_the_host_thread_events():
    """`info --format json` carries the count the text shows, equal to the protobuf-only count."""
    import json
    space = xplane_pb2.XSpace.FromString(TRACE.read_bytes())
    want = sum(len(ln.events) for p in space.planes if p.name.startswith("/host:")
               for ln in p.lines if ln.name != "python")
    r = CliRunner().invoke(main, ["info", str(TRACE), "--format", "json"])
    assert r.exit_code == 0, r.output
    inv = json.loads(r.output)
    assert inv["host_thread_events"] == want and inv["devices"] == []
