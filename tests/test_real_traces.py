"""The loader on real traces: every shared trace and every CPU fixture loads; v6e op time agrees with xprof."""
import pytest

import tracekit
from conftest import CPU_CASES, cpu_fixture, shared_trace

SHARED_FILES = ["tpu/v6e-4_jax_inference.xplane.pb", "gpu/mi300x_jax_gemm.xplane.pb",
                "gpu/mi300x8_jax_conv3d.xplane.pb", "gpu/v100x8_tf_bert.xplane.pb"]
JAX_SHARED = SHARED_FILES[:3]


def _hlo_time_share(tr):
    d = tr.device_ops
    hlo_ops = d[d["source"] != "gpu_runtime"]  # runtime copies on an XLA GPU trace are not HLO ops
    return (hlo_ops["duration_ps"] * hlo_ops["in_hlo"]).sum() / hlo_ops["duration_ps"].sum()


@pytest.mark.parametrize("rel", SHARED_FILES)
def test_shared_trace_loads(rel):
    tr = tracekit.load(shared_trace(rel))
    assert len(tr.device_ops) > 0
    assert (tr.device_ops["duration_ps"] >= 0).all()
    if rel in JAX_SHARED:
        assert tr.has_hlo
        assert _hlo_time_share(tr) >= 0.99
    else:
        assert not tr.has_hlo
        assert tr.device_ops["kernel"].astype(str).str.len().gt(0).all()


@pytest.mark.parametrize("case", CPU_CASES)
def test_cpu_fixture_loads(case):
    tr = tracekit.load(cpu_fixture(case))
    d = tr.device_ops
    assert len(d) and tr.has_hlo
    assert d["device"].astype(str).str.startswith("CPU:").all()
    assert _hlo_time_share(tr) >= 0.99
    assert (d["step"] >= 0).mean() > 0.95
    if case in ("sharded8", "allreduce_exposed"):
        assert d["device"].nunique() == 8
        assert "all-reduce" in set(d["opcode"].astype(str))


def test_gpu_runtime_copies_are_not_hlo_ops():
    tr = tracekit.load(shared_trace("gpu/mi300x_jax_gemm.xplane.pb"))
    d = tr.device_ops
    rt = d[d["source"] == "gpu_runtime"]
    assert len(rt) and (rt["op"] == "").all() and not rt["in_hlo"].any()
    # several kernels belong to the one GEMM custom call
    cc = d[d["op"] == "custom-call.1"]
    assert cc["kernel"].nunique() > 1 and cc["in_hlo"].all()


def test_v6e_agrees_with_xprof_hlo_stats():
    pytest.importorskip("xprof")
    from tracekit.run import xprof
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    ref = xprof.hlo_stats(path)
    tr = tracekit.load(path)
    ours = tr.device_ops[tr.device_ops["source"] == "xla_ops"]
    # totals: time within 0.5 %, occurrences exact
    assert abs(ours["duration_ps"].sum() / ref["total_time_ps"].sum() - 1) < 0.005
    assert len(ours) == ref["occurrences"].sum()
    # per category: within 3 %
    mine = ours.groupby(ours["category"].astype(str))["duration_ps"].agg(["sum", "size"])
    theirs = ref.groupby("category")[["total_time_ps", "occurrences"]].sum()
    assert set(mine.index) == set(theirs.index)
    for cat, row in theirs.iterrows():
        assert mine.loc[cat, "size"] == row["occurrences"], cat
        assert abs(mine.loc[cat, "sum"] / row["total_time_ps"] - 1) < 0.03, cat
    # per device: each device's op count and time
    per_dev = ours.groupby(ours["device"].astype(str))["duration_ps"].size()
    assert per_dev.to_dict() == {"TPU:0": 1504, "TPU:1": 1503, "TPU:2": 1503, "TPU:3": 1503}
