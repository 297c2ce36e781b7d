"""Trace-viewer JSON without chip information (issue 32, item 5): every op that has work but no chip says "chip
unknown — pass --chip NAME", never "no work"; with ``--chip`` naming a chip too slow for the trace, a warning says
the chip is probably wrong. The JSON is written here (a small synthetic TPU export in xprof's dialect)."""
from __future__ import annotations

import json

import tracekit
from tracekit import pipeline
from tracekit.model import roofline


def _export(path, flops=400e9, nbytes=1e9, dur_us=1000.0, n=20):
    ev = [{"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:TPU:0"}},
          {"ph": "M", "name": "thread_name", "pid": 3, "tid": 2, "args": {"name": "XLA Modules"}},
          {"ph": "M", "name": "thread_name", "pid": 3, "tid": 3, "args": {"name": "XLA Ops"}}]
    for i in range(n):
        t0 = i * 2 * dur_us
        ev.append({"ph": "X", "pid": 3, "tid": 2, "ts": t0, "dur": dur_us + 2, "name": "jit_f(7)"})
        ev.append({"ph": "X", "pid": 3, "tid": 3, "ts": t0 + 1, "dur": dur_us, "name": "fusion.1",
                   "args": {"long_name": "%fusion.1 = bf16[4096,4096]{1,0} fusion(bf16[4096,4096]{1,0} %p), "
                                         "kind=kOutput, calls=%c", "hlo_category": "convolution fusion",
                            "model_flops": str(int(flops)), "bytes_accessed": str(int(nbytes)),
                            "device_duration_ps": str(int(dur_us * 1e6))}})
    path.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": ev}))
    return path


def test_no_chip_says_chip_unknown_never_no_work(tmp_path):
    p = _export(tmp_path / "t.trace.json")
    ops = roofline.join(tracekit.load(p))
    dev = ops[~ops["is_async"].astype(bool)]
    assert len(dev) == 20
    assert (dev["flops"] == 400e9).all()  # the args' model_flops, literally
    assert dev["roofline_ps"].isna().all()
    reasons = set(dev["unknown_reason"].astype(str))
    assert reasons == {"chip unknown — pass --chip NAME"}, reasons
    assert not any("no work" in r for r in reasons)


def test_zero_work_op_still_says_no_work(tmp_path):
    p = _export(tmp_path / "t.trace.json", flops=0, nbytes=0)
    ops = roofline.join(tracekit.load(p), chip="TPU v6e")
    assert set(ops["unknown_reason"].astype(str)) == {"no work (zero flops and bytes)"}


def test_wrong_chip_warns(tmp_path):
    # 400 GFLOP and 1 GB in 1 ms = 400 TFLOP/s, 1 TB/s: above TPU v2 (46 TFLOP/s, 700 GB/s), within v6e (920 T, 1.6 T)
    p = _export(tmp_path / "t.trace.json")
    slow = pipeline.analyze(p, chip="TPU v2").data
    assert any("chip is probably wrong" in w for w in slow["warnings"]), slow["warnings"]
    right = pipeline.analyze(p, chip="TPU v6e").data
    assert not any("chip is probably wrong" in w for w in right["warnings"])


def test_chip_from_the_process_name(tmp_path):
    """A process name carrying the kind (``/device:TPU:0 (TPU v6 Lite)``) names the chip: the ops are priced on
    TPU v6e's table numbers, and the plane keeps its XSpace name."""
    p = _export(tmp_path / "t.trace.json")
    doc = json.loads(p.read_text())
    doc["traceEvents"][0]["args"]["name"] = "/device:TPU:0 (TPU v6 Lite)"
    p.write_text(json.dumps(doc))
    tr = tracekit.load(p)
    assert list(tr.devices["device"]) == ["TPU:0"]
    ops = roofline.join(tr)
    dev = ops[~ops["is_async"].astype(bool)]
    assert dev["roofline_ps"].notna().all()
    # 400 GFLOP at 920 TFLOP/s (v6e bf16) = 434.78 us; 1 GB at 1.6 TB/s = 625 us: memory bound
    assert abs(float(dev["roofline_ps"].iloc[0]) - 1e9 / 1.6e12 * 1e12) / 625e6 < 1e-3, dev["roofline_ps"].iloc[0]


def test_coverage_line_says_chip_unknown(tmp_path):
    import subprocess
    import sys
    p = _export(tmp_path / "t.trace.json")
    out = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(p)], capture_output=True,
                         text=True).stdout
    para = " ".join(out.split("op time by bound", 1)[1].split("\n\n")[0].split())  # (the paragraph, unwrapped)
    assert "chip unknown — pass --chip NAME" in para.split("profiled")[0], para
    named = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(p), "--chip", "TPU v6e"],
                           capture_output=True, text=True).stdout
    assert "chip unknown" not in named


def _mixed_export(path):
    """A TPU export of five kinds of op, none of them priceable without a chip: a fusion with its stats, a Pallas
    kernel whose stats are 0 flops and 0 bytes (no cost estimate), a copy without a flops stat (costed from its
    long name's shapes), a custom call of an unknown target without stats, and a tuple (no work at all)."""
    ev = [{"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:TPU:0"}},
          {"ph": "M", "name": "thread_name", "pid": 3, "tid": 2, "args": {"name": "XLA Modules"}},
          {"ph": "M", "name": "thread_name", "pid": 3, "tid": 3, "args": {"name": "XLA Ops"}}]
    ops = [("fusion.1", "%fusion.1 = bf16[64,64]{1,0} fusion(bf16[64,64]{1,0} %p), kind=kOutput, calls=%c",
            {"model_flops": "1000", "bytes_accessed": "100"}),
           ("pallas.1", '%pallas.1 = bf16[8,128]{1,0} custom-call(bf16[8,128]{1,0} %q, bf16[8,128]{1,0} %k), '
                        'custom_call_target="tpu_custom_call"', {"model_flops": "0", "bytes_accessed": "0"}),
           ("copy.1", "%copy.1 = bf16[64,64]{1,0} copy(bf16[64,64]{0,1} %p)", {"bytes_accessed": "100"}),
           ("mine.1", '%mine.1 = f32[16]{0} custom-call(f32[16]{0} %a), custom_call_target="my_kernel"', {}),
           ("tuple.1", "%tuple.1 = (bf16[64,64]{1,0}) tuple(bf16[64,64]{1,0} %p)", {})]
    for i in range(3):
        ev.append({"ph": "X", "pid": 3, "tid": 2, "ts": i * 1000, "dur": 900, "name": "jit_f(7)"})
        for j, (name, long_name, args) in enumerate(ops):
            ev.append({"ph": "X", "pid": 3, "tid": 3, "ts": i * 1000 + 1 + j * 100, "dur": 90, "name": name,
                       "args": {"long_name": long_name, **args}})
    path.write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": ev}))
    return path


def test_every_unknown_reason_says_chip_unknown(tmp_path):
    """Done-when of issue 32: a JSON TPU export without chip information says so in every unknown reason (an op
    with no work at all says that instead: it needs no chip), and no reason is false: the Pallas kernel's 0/0
    stats are no count (its FLOPs unknown, its bytes one read of q and k and one write of its result)."""
    ops = roofline.join(tracekit.load(_mixed_export(tmp_path / "t.trace.json")))
    by = ops[~ops["is_async"].astype(bool)].drop_duplicates("op").set_index("op")
    assert by["roofline_ps"].isna().all()
    reasons = by["unknown_reason"].astype(str).to_dict()
    for op, why in reasons.items():
        if op == "tuple.1":
            assert why == "no work (zero flops and bytes)"
        else:
            assert "chip unknown — pass --chip NAME" in why, (op, why)
    assert "stats are both 0" in reasons["pallas.1"] and "my_kernel" in reasons["mine.1"]
    assert by.loc["pallas.1", "bytes_accessed"] == 3 * 8 * 128 * 2 and by["flops"].isna()["pallas.1"]
    named = roofline.join(tracekit.load(tmp_path / "t.trace.json"), chip="TPU v6e")
    assert not named["unknown_reason"].astype(str).str.contains("chip unknown").any()
