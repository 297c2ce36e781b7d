"""The xprof bridge (tracekit.run.xprof) runs xprof's own analyses and returns plain frames."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tracekit.run.xprof as bridge
from conftest import SHARED

V6E = SHARED / "tpu" / "v6e-4_jax_inference.xplane.pb"

needs_xprof = pytest.mark.skipif(not bridge.available(), reason="xprof is not installed")
needs_trace = pytest.mark.usefixtures("v6e")  # skips when ../shared/traces is absent (fails: TRACEKIT_REQUIRE_SHARED)


def test_import_is_lazy():
    root = str(Path(__file__).resolve().parents[1])
    code = f"import sys; sys.path.insert(0, {root!r}); import tracekit.run.xprof; assert 'xprof' not in sys.modules"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@needs_xprof
@needs_trace
def test_hlo_stats_v6e():
    df = bridge.hlo_stats(V6E)
    assert len(df) > 0
    assert list(df.columns) == bridge.HLO_STATS_COLUMNS
    assert df["total_time_ps"].dtype == "int64" and df["total_time_ps"].sum() > 0
    assert df["occurrences"].dtype == "int64" and (df["occurrences"] > 0).all()
    assert (df["self_time_ps"] <= df["total_time_ps"]).all()
    # xprof sums over the 4 chips; its op time is exactly the sum of per-op self time.
    assert df["self_time_ps"].sum() == df.attrs["total_op_time_ps"]
    assert df.attrs["device_type"] == "TPU v6 Lite" and df["num_cores"].max() == 4
    assert set(df["module"]) >= {"jit_f", "jit__psum"}


@needs_xprof
@needs_trace
def test_async_overlap_v6e():
    df = bridge.async_overlap(V6E)
    assert len(df) > 0
    assert list(df.columns) == bridge.ASYNC_COLUMNS
    assert (df["span_ps"] > 0).all()
    assert ((df["covered_ps"] >= 0) & (df["covered_ps"] <= df["span_ps"])).all()
    assert ((df["overlap_ratio"] - df["covered_ps"] / df["span_ps"]).abs() < 1e-9).all()
    assert set(df["class"]) <= {"hidden", "partial", "exposed"}
    assert len(df) == df.attrs["summary"]["count"]
    assert df["device"].nunique() == 4


@needs_xprof
@needs_trace
def test_roofline_v6e():
    df = bridge.roofline(V6E)
    assert len(df) > 0
    assert list(df.columns) == bridge.ROOFLINE_COLUMNS
    assert set(df["bound_by"]) <= {"Compute", "HBM", "VMEM Read", "VMEM Write", "CMEM Read", "CMEM Write",
                                   "Shm/L1", "Unknown"}
    assert (df["peak_flop_rate_flops_per_s"] == 918e12).all()
    assert abs(df["peak_hbm_bw_bytes_per_s"].iloc[0] - 1637.993152512e9) < 1e3
    assert df.attrs["program"]["operation"] == "Program"


def test_missing_trace_is_a_runtime_error(tmp_path):
    with pytest.raises(RuntimeError):
        bridge.hlo_stats(tmp_path / "nope.xplane.pb")


@needs_xprof
@needs_trace
def test_measure_reports_child_wall_and_rss():
    m = bridge.measure(["get_hlo_stats", str(V6E), "--limit=1"])
    assert m["returncode"] == 0 and m["wall_s"] > 0 and m["peak_rss_bytes"] > 10 * 2 ** 20
    assert 0 < m["cpu_s"] < m["wall_s"] * 4  # user + system of the child (a few threads at most)
