"""Trace-viewer JSON in: the same ops, steps and costs as the .xplane.pb it was exported from.

The JSON files are made here, in temporary folders (never committed): xprof's own converter exports the v6e trace
(both its formats), and jax.profiler writes the CPU dialect beside its .xplane.pb. The xplane side is read two
ways: through tracekit, and for raw event durations through the protobuf schema directly (upb)."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import tracekit
from conftest import shared_trace
from tracekit import pipeline
from tracekit.errors import TraceError
from tracekit.ingest import paths
from tracekit.proto import xplane_pb2
import tracekit.run.xprof as bridge

EXE = [sys.executable, "-m", "tracekit.cli"]
needs_xprof = pytest.mark.skipif(not bridge.available(), reason="xprof is not installed")
V6E = "tpu/v6e-4_jax_inference.xplane.pb"


@pytest.fixture(scope="module")
def v6e_json(tmp_path_factory):
    """(xplane path, streaming export, one-document export .gz) of the v6e trace, made by xprof."""
    src = shared_trace(V6E)
    if not bridge.available():
        pytest.skip("xprof is not installed")
    d = tmp_path_factory.mktemp("v6e_json")
    stream = bridge.trace_viewer_json(src, d / "v6e.trace.json")
    legacy = bridge.trace_viewer_json(src, d / "legacy.json", streaming=False)
    gz = d / "tb" / "v6e.trace.json.gz"
    gz.parent.mkdir()
    gz.write_bytes(gzip.compress(legacy.read_bytes()))
    return src, stream, gz


def _raw_xla_ops(path) -> dict:
    """device -> list of (op short name, start ps, event duration ps, device duration ps) from the XSpace itself."""
    space = xplane_pb2.XSpace.FromString(Path(path).read_bytes())
    out = {}
    for p in space.planes:
        if not p.name.startswith("/device:TPU:"):
            continue
        sm = {k: v.name for k, v in p.stat_metadata.items()}
        for line in p.lines:
            if line.name != "XLA Ops":
                continue
            rows = out.setdefault(p.name.split("/device:")[1], [])
            for e in line.events:
                dd = next((s.int64_value or s.uint64_value for s in e.stats if sm.get(s.metadata_id) ==
                           "device_duration_ps"), None)
                rows.append((p.event_metadata[e.metadata_id].display_name, line.timestamp_ns * 1000 + e.offset_ps,
                             e.duration_ps, dd))
    return out


def _sync(tr):
    return tr.ops[tr.ops["source"] == "xla_ops"]


@needs_xprof
def test_streaming_export_same_ops_and_time(v6e_json):
    """xprof's streaming trace-viewer JSON holds every op: the same count per device and op name as the XSpace,
    and the same time (it has the event durations, not the device clock)."""
    src, stream, _ = v6e_json
    raw = _raw_xla_ops(src)
    tr = tracekit.load(stream)
    ops = _sync(tr)
    assert len(ops) == sum(len(v) for v in raw.values()) == 6013
    for dev, rows in raw.items():
        mine = ops[ops["device"] == dev]
        assert Counter(mine["op"].astype(str)) == Counter(r[0] for r in rows)
        assert int(mine["duration_ps"].sum()) == sum(r[2] for r in rows)
    assert any("no op costs" in w for w in tr.warnings)
    assert ops["trace_flops"].isna().all()


@needs_xprof
def test_one_document_export_same_ops_costs_and_roofline(v6e_json):
    """The .trace.json.gz with cost args: every op it holds is the XSpace's op at the same instant (both on the
    device clock; each file's clock fit runs over the ops it holds, so they agree within a picosecond), with the
    same device-clock time, FLOPs and bytes; the roofline (chip v6e) of each op is the same; the ops xprof left out
    of this export are exactly the ops whose event (host clock) duration is 0."""
    src, _, gz = v6e_json
    doc = json.load(gzip.open(gz))
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    n_json = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and names.get((e["pid"], e.get("tid"))) == "XLA Ops")
    tj, tx = tracekit.load(gz), tracekit.load(src)
    j, x = _sync(tj), _sync(tx)
    assert len(j) == n_json
    j = _at_xspace_instants(j, x)
    key = ["device", "op", "start_ps"]
    m = j.merge(x, on=key, suffixes=("_j", "_x"), how="left", indicator=True)
    assert (m["_merge"] == "both").all() and len(m) == len(j)
    for c in ("duration_ps", "trace_flops", "trace_bytes"):
        assert np.array_equal(m[c + "_j"].to_numpy(), m[c + "_x"].to_numpy()), c
    assert (m["module_j"].astype(str) == m["module_x"].astype(str)).all()
    assert j["trace_flops"].sum() == m["trace_flops_x"].sum() and j["trace_bytes"].sum() == m["trace_bytes_x"].sum()
    # what xprof left out of this export: exactly the ops whose event (host clock) duration is 0
    left = x.merge(j[key], on=key, how="left", indicator=True)
    left = left[left["_merge"] == "left_only"]
    zero = Counter((d, name) for d, rows in _raw_xla_ops(src).items() for name, _, dur, _ in rows if dur == 0)
    assert 0 < len(left) < 0.05 * len(x)
    assert Counter(zip(left["device"].astype(str), left["op"].astype(str))) == zero
    # the roofline of the JSON ops equals that of the same ops read from the XSpace
    rj, rx = pipeline.with_roofline(tj, "v6e"), pipeline.with_roofline(tx, "v6e")
    rm = _at_xspace_instants(_sync_frame(rj), _sync_frame(rx)).merge(_sync_frame(rx), on=key, suffixes=("_j", "_x"))
    assert len(rm) == len(j)
    # a -done is judged over its -start..-done window: where xprof left the -start out of this export, the -done
    # has no window in the JSON (and says so); every other op is judged the same
    lost = rm["unknown_reason_j"].astype(str).str.startswith("async -done without its window").to_numpy()
    assert lost.sum() < 0.05 * len(rm)  # (xprof left out under 5 % of the ops, above)
    rm = rm[~lost]
    for c in ("bound_by", "cost_source", "dtype", "is_host_transfer", "group_size", "category", "opcode"):
        assert (rm[c + "_j"].astype(str) == rm[c + "_x"].astype(str)).all(), c
    for c in ("flops", "bytes_accessed", "net_bytes", "roofline_ps"):
        assert np.allclose(rm[c + "_j"].to_numpy(float), rm[c + "_x"].to_numpy(float), equal_nan=True), c
    assert set(rj["cost_source"].astype(str)) >= {"trace"}
    assert any("no device properties" in w and "model_flops" in w for w in tj.warnings)


def _at_xspace_instants(j, x):
    """The JSON's op rows with the start of the XSpace op of the same device and name that starts within 1 ns of
    it (a row with none keeps its own start, and the exact merges above then fail on it)."""
    cols = ["device", "op", "start_ps"]
    jj = j.reset_index(drop=True).astype({"device": str, "op": str})
    xx = x[cols].astype({"device": str, "op": str}).assign(x_start=x["start_ps"].to_numpy())
    a = pd.merge_asof(jj.sort_values("start_ps", kind="stable"), xx.sort_values("start_ps", kind="stable"),
                      on="start_ps", by=["device", "op"], direction="nearest", tolerance=1000)
    a["start_ps"] = a["x_start"].fillna(a["start_ps"]).astype(np.int64)
    return a.drop(columns="x_start").astype({"device": x["device"].dtype, "op": x["op"].dtype})


def _sync_frame(ops):
    return ops[ops["source"] == "xla_ops"]


@needs_xprof
def test_json_through_the_cli(v6e_json, tmp_path):
    """analyze, ops and diff take the JSON; the report states what the JSON cannot tell."""
    from click.testing import CliRunner
    from tracekit.cli import main
    src, _, gz = v6e_json
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["analyze", str(gz), "--chip", "v6e", "-o", str(out)])
    assert res.exit_code == 0, res.output
    rep = json.loads(out.read_text())
    assert any("trace-viewer JSON" in w and "no buffer assignment" in w for w in rep["warnings"])
    assert rep["findings"]
    res = CliRunner().invoke(main, ["ops", str(gz), "--limit", "3", "--format", "csv"])
    assert res.exit_code == 0 and "copy-done" in res.output, res.output
    res = CliRunner().invoke(main, ["diff", str(src), str(gz)])
    assert res.exit_code in (0, 1), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


CPU_CAPTURE = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    import jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(jax.devices(), ("x",))
    x = jax.device_put(jnp.ones((256, 256)), NamedSharding(mesh, P("x")))
    f = jax.jit(lambda a: jnp.tanh(a @ a.T).sum())
    f(x).block_until_ready()
    jax.profiler.start_trace(sys.argv[1], create_perfetto_trace=True)
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            f(x).block_until_ready()
    jax.profiler.stop_trace()
""")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    pytest.importorskip("jax")
    d = tmp_path_factory.mktemp("cpu_json")
    p = subprocess.run([sys.executable, "-c", CPU_CAPTURE, str(d)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    runs = list((d / "plugins" / "profile").iterdir())
    assert len(runs) == 1
    return runs[0]


def test_cpu_dialect_same_ops_and_steps(cpu_run):
    """jax.profiler's perfetto_trace.json.gz and <host>.trace.json.gz: the same op count and op time per device
    and op, and the same steps, as its .xplane.pb (they carry no costs)."""
    xp = next(cpu_run.glob("*.xplane.pb"))
    tx = tracekit.load(xp)
    assert len(tx.ops) and tx.ops["device"].nunique() == 2
    for name in ("perfetto_trace.json.gz", xp.name.replace(".xplane.pb", ".trace.json.gz")):
        tj = tracekit.load(cpu_run / name)
        for t in (tx, tj):
            assert t.ops["source"].astype(str).eq("cpu_thunk").all()
        cnt = lambda t: Counter(zip(t.ops["device"].astype(str), t.ops["op"].astype(str)))  # noqa: E731
        assert cnt(tj) == cnt(tx)
        per = lambda t: t.ops.groupby(["device", "op"], observed=True)["duration_ps"].sum().to_dict()  # noqa: E731
        assert per(tj) == per(tx)
        assert tj.steps[["device", "step", "duration_ps"]].astype(str).values.tolist() == \
            tx.steps[["device", "step", "duration_ps"]].astype(str).values.tolist()
        assert any("trace-viewer JSON" in w for w in tj.warnings)
    # the run folder holds both formats: the .xplane.pb is the one read
    assert [Path(f.path).name for f in paths.resolve(cpu_run)] == [xp.name]


def test_run_folder_with_json_only(cpu_run, tmp_path):
    run = tmp_path / "logs" / "plugins" / "profile" / "r1"
    run.mkdir(parents=True)
    for f in cpu_run.iterdir():
        if f.name.endswith(".json.gz"):
            (run / f.name).write_bytes(f.read_bytes())
    files = paths.resolve(tmp_path / "logs")
    assert [Path(f.path).name for f in files] == [n for n in sorted(os.listdir(run)) if n.endswith(".trace.json.gz")]
    assert len(tracekit.load(tmp_path / "logs").ops)


# ---- formats tracekit does not read: one line naming them ------------------------------------------------

def _one_line(p, needle):
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in p.stderr, p.stderr
    assert "binary mode" not in lines[0]


KINETO = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}],
          "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0},
                          {"ph": "X", "cat": "kernel", "name": "ampere_sgemm", "pid": 0, "tid": 7, "ts": 2, "dur": 1}]}
CHROME = {"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Browser"}},
                          {"ph": "X", "name": "Paint", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}


@pytest.mark.parametrize("name,body,needle", [
    ("trace.json", json.dumps(KINETO), "PyTorch profiler (Kineto) trace"),
    ("kineto.pt.trace.json.gz", gzip.compress(json.dumps(KINETO).encode()), "PyTorch profiler (Kineto) trace"),
    ("host.xplane.pb", json.dumps(KINETO), "PyTorch profiler (Kineto) trace"),
    ("chrome.json", json.dumps(CHROME), "Chrome trace-event JSON from another tool"),
    ("events.out.tfevents.1700000000.host", b"\x18\x00\x00\x00\x00\x00\x00\x00junk", "TensorBoard event file"),
])
def test_foreign_formats_named(tmp_path, name, body, needle):
    f = tmp_path / name
    f.write_bytes(body if isinstance(body, bytes) else body.encode())
    with pytest.raises(TraceError) as e:
        tracekit.load(f)
    assert needle in str(e.value) and "binary mode" not in str(e.value) and "\n" not in str(e.value)


def test_foreign_format_cli_one_line(tmp_path):
    f = tmp_path / "trace.json"
    f.write_text(json.dumps(KINETO))
    _one_line(subprocess.run(EXE + ["info", str(f)], capture_output=True, text=True), "Kineto")


# ---- limits and corrupt JSON -------------------------------------------------------------------------------

def _tiny(n: int) -> bytes:
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}}]
    ev += [{"ph": "X", "pid": 1, "tid": 2, "ts": i, "dur": 0.5, "name": "fusion", "args": {
        "hlo_op": "fusion", "hlo_module": "jit_f", "device_ordinal": "0", "run_id": "1"}} for i in range(n)]
    return json.dumps({"traceEvents": ev}).encode()


def test_event_limit_checked_while_reading(tmp_path):
    f = tmp_path / "h.trace.json"
    f.write_bytes(_tiny(50))
    assert len(tracekit.load(f).ops) == 50
    with pytest.raises(TraceError, match="more than 20 events"):
        tracekit.load(f, max_events=20)


def test_size_and_bomb_limits(tmp_path):
    f = tmp_path / "h.trace.json.gz"
    body = _tiny(2000)
    f.write_bytes(gzip.compress(body))
    with pytest.raises(TraceError, match="over the"):
        tracekit.load(f, max_bytes=len(body) // 2)
    bomb = tmp_path / "b.trace.json.gz"  # 80 MB of spaces compress ~1000x
    bomb.write_bytes(gzip.compress(b'{"traceEvents": [' + b" " * (80 << 20) + b"]}", 9))
    with pytest.raises(TraceError, match="decompression bomb"):
        tracekit.load(bomb)


@pytest.mark.parametrize("cut", [0.3, 0.7, 0.999])
def test_truncated_json(tmp_path, cut):
    body = _tiny(200)
    f = tmp_path / "t.trace.json"
    f.write_bytes(body[: int(len(body) * cut)])
    with pytest.raises(TraceError, match="truncated or corrupt"):
        tracekit.load(f)
    if cut == 0.7:
        _one_line(subprocess.run(EXE + ["analyze", str(f)], capture_output=True, text=True), "truncated or corrupt")
