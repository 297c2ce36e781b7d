"""Roofline coverage, defined once (issue 32): an op is covered when its FLOPs (a declared 0 counts) and bytes are
known and its predicted time is finite; coverage = covered op time / op time, per device and overall. The report's
``summary.roofline_coverage`` and the text line use that definition; the expected figures are arithmetic on the
rows written here."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit import pipeline
from tracekit.analysis import coverage
from tracekit.report.render import text
from conftest import cpu_fixture

NAN = math.nan


def _ops():
    # GPU:0 computes: a dot (covered), a copy with a declared 0 FLOPs (covered), an op without FLOPs (not), an
    # async window (never op time); GPU:1 only copies, none of it priced
    rows = [("GPU:0", 400, 1e9, 1e6, 300.0, False), ("GPU:0", 100, 0.0, 1e6, 80.0, False),
            ("GPU:0", 100, NAN, 1e6, NAN, False), ("GPU:0", 900, 1e6, 1e6, 50.0, True),
            ("GPU:1", 1000, NAN, NAN, NAN, False), ("GPU:1", 200, 0.0, 0.0, NAN, False)]
    return pd.DataFrame({"host": "h", "device": [r[0] for r in rows], "duration_ps": [r[1] for r in rows],
                         "self_ps": [r[1] for r in rows], "flops": [r[2] for r in rows],
                         "bytes_accessed": [r[3] for r in rows], "roofline_ps": [r[4] for r in rows],
                         "is_async": [r[5] for r in rows]})


def test_covered_rows():
    assert coverage.covered(_ops()).tolist() == [True, True, False, True, False, False]


def test_per_device_and_overall():
    s = coverage.summarize(coverage.parts(_ops()))
    by = {d["device"]: d for d in s["devices"]}
    assert (by["GPU:0"]["op_time_ps"], by["GPU:0"]["covered_ps"]) == (400 + 100 + 100, 400 + 100)
    assert by["GPU:0"]["coverage"] == 500 / 600 and by["GPU:1"]["coverage"] == 0.0
    assert s["overall"] == 500 / (600 + 1200)  # the copying device pulls the overall figure down...
    assert coverage.spread(s) == "per device 0.0% (GPU:1) to 83.3% (GPU:0)"  # ...the per-device one shows it


def test_parts_of_disjoint_devices_add_up():
    ops = _ops()
    a, b = ops[ops["device"] == "GPU:0"], ops[ops["device"] == "GPU:1"]
    assert coverage.summarize(coverage.parts(a) + coverage.parts(b)) == coverage.summarize(coverage.parts(ops))
    assert coverage.summarize(()) == {"overall": 0.0, "devices": []}


def test_report_uses_the_definition():
    rep = pipeline.analyze(cpu_fixture("sharded8"))
    ops = pipeline.with_roofline(__import__("tracekit").load(cpu_fixture("sharded8")))
    sync = ~ops["is_async"].to_numpy(bool)
    t = ops["self_ps"].to_numpy(np.int64)
    ok = np.isfinite(ops["roofline_ps"].to_numpy(float)) & ops["flops"].notna().to_numpy() & \
        ops["bytes_accessed"].notna().to_numpy()
    s = rep.data["summary"]
    assert s["roofline_coverage"] == t[sync & ok].sum() / t[sync].sum()
    assert len(s["roofline_coverage_by_device"]) == 8
    assert sum(d["op_time_ps"] for d in s["roofline_coverage_by_device"]) == s["op_time_ps"]
    assert f"roofline known for {100 * s['roofline_coverage']:.1f}% of op time" in " ".join(text.render(rep).split())
