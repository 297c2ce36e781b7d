"""Timeline analysis: hand-computed frames and hypothesis properties."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracekit import schema
from tracekit.analysis import gaps as idle, timeline as tl
from tracekit.analysis import outliers as ol
from tracekit.analysis import stepstats


def ops_frame(rows: list[dict]) -> pd.DataFrame:
    base = {"host": "h", "device": "TPU:0", "device_kind": "TPU v4", "module": "m", "is_async": False,
            "opcode": "fusion", "category": "", "kernel": ""}
    rows = [{**base, **r} for r in rows]
    for i, r in enumerate(rows):
        r.setdefault("op", f"{r['opcode']}.{i}")
    return schema.conform(pd.DataFrame(rows, columns=list(dict.fromkeys(k for r in rows for k in r))), schema.OPS)


def steps_frame(rows: list[dict]) -> pd.DataFrame:
    base = {"host": "h", "device": "TPU:0", "step_source": "steps_line"}
    return schema.conform(pd.DataFrame([{**base, **r} for r in rows]), schema.STEPS)


# One TPU with two steps and an async all-reduce, one more TPU without steps (times in ps):
#   fusion.0 [10,40)  fusion.1 [25,40)  all-reduce-start [35,65) async  fusion.3 [50,60)  all-gather [70,80)
#   TPU:1: fusion [5,15)          steps on TPU:0: 1 = [0,50), 2 = [50,90)
OPS = ops_frame([
    {"start_ps": 10, "duration_ps": 30},
    {"start_ps": 25, "duration_ps": 15},
    {"opcode": "all-reduce-start", "start_ps": 35, "duration_ps": 30, "is_async": True, "network_ps": 20.0},
    {"start_ps": 50, "duration_ps": 10},
    {"opcode": "all-gather", "start_ps": 70, "duration_ps": 10},
    {"device": "TPU:1", "start_ps": 5, "duration_ps": 10},
])
STEPS = steps_frame([{"step": 1, "start_ps": 0, "duration_ps": 50}, {"step": 2, "start_ps": 50, "duration_ps": 40}])


def test_merge_and_covered():
    ms, me = tl.merge(np.array([5, 0, 20, 8]), np.array([10, 3, 30, 12]))
    assert ms.tolist() == [0, 5, 20] and me.tolist() == [3, 12, 30]
    assert tl.covered(ms, me, np.array([0, 2, 11, 40]), np.array([30, 6, 25, 50])).tolist() == [20, 2, 6, 0]
    assert tl.merge(np.array([0, 10]), np.array([10, 20]))[1].tolist() == [20]  # touching intervals merge


def test_busy_intervals():
    b = tl.busy_intervals(OPS)
    assert b[["device", "start_ps", "end_ps"]].values.tolist() == [
        ["TPU:0", 10, 40], ["TPU:0", 50, 60], ["TPU:0", 70, 80], ["TPU:1", 5, 15]]


def test_device_summary():
    d = tl.device_summary(OPS, STEPS).set_index("device")
    # TPU:0 window: host's first op (5, on TPU:1) or its first step (0) -> 0, to its last step end 90.
    assert d.loc["TPU:0", ["window_start_ps", "span_ps", "busy_ps", "idle_ps", "idle_before_first_op_ps",
                           "op_count", "async_count"]].tolist() == [0, 90, 50, 40, 10, 4, 1]
    assert d.loc["TPU:1", ["window_start_ps", "span_ps", "busy_ps", "idle_ps"]].tolist() == [5, 10, 10, 0]
    assert d.loc["TPU:0", "utilization"] == pytest.approx(50 / 90)


def test_gaps_kinds_and_steps():
    g = idle.gaps(OPS, STEPS)
    assert g[["device", "start_ps", "duration_ps", "kind", "step"]].values.tolist() == [
        ["TPU:0", 0, 10, "before_first_op", 1], ["TPU:0", 40, 10, "inside_step", 1],
        ["TPU:0", 60, 10, "inside_step", 2], ["TPU:0", 80, 10, "inside_step", 2]]
    assert idle.gaps(OPS, STEPS, min_gap_ps=11).empty
    nosteps = idle.gaps(OPS)  # without steps, gaps after the first op are between_ops
    assert nosteps[["start_ps", "duration_ps", "kind"]].values.tolist()[:2] == [
        [5, 5, "before_first_op"], [40, 10, "between_ops"]]


def test_gap_cut_at_step_boundaries():
    ops = ops_frame([{"start_ps": 0, "duration_ps": 10}, {"start_ps": 100, "duration_ps": 10}])
    steps = steps_frame([{"step": 1, "start_ps": 0, "duration_ps": 30}, {"step": 2, "start_ps": 60, "duration_ps": 50}])
    g = idle.gaps(ops, steps)
    assert g[["start_ps", "duration_ps", "kind", "step"]].values.tolist() == [
        [10, 20, "inside_step", 1], [30, 30, "between_steps", -1], [60, 40, "inside_step", 2]]


def test_gaps_label_every_device_of_a_host_with_hundreds():
    """Host and device are held per device while the gaps are cut and spread to the rows at the end: with more
    devices than an 8-bit code holds, every gap still names its own device (two ops per device, one gap between)."""
    rows = []
    for i in range(300):
        rows += [{"device": f"CPU:{i}", "start_ps": 1000 * i, "duration_ps": 10},
                 {"device": f"CPU:{i}", "start_ps": 1000 * i + 40, "duration_ps": 10}]
    g = idle.gaps(ops_frame(rows))
    between = g[g["kind"] == "between_ops"]
    assert len(between) == 300
    assert [str(d) for d in between["device"]] == sorted(f"CPU:{i}" for i in range(300))
    assert between["start_ps"].tolist() == [int(d.split(":")[1]) * 1000 + 10 for d in between["device"].astype(str)]
    assert set(between["duration_ps"]) == {30} and set(g["host"].astype(str)) == {"h"}


def test_step_breakdown_hand_computed():
    b = tl.step_breakdown(OPS, STEPS).set_index("step")
    # step 1 [0,50): compute [10,40) = 30; collectives [35,50) = 15; union [10,50) = 40.
    assert b.loc[1, ["step_ps", "compute_ps", "collective_ps", "collective_exposed_ps", "collective_hidden_ps",
                     "idle_ps"]].tolist() == [50, 30, 15, 10, 5, 10]
    # step 2 [50,90): compute [50,60) = 10; collectives [50,65) + [70,80) = 25 = union.
    assert b.loc[2, ["compute_ps", "collective_ps", "collective_exposed_ps", "collective_hidden_ps",
                     "idle_ps"]].tolist() == [10, 25, 15, 10, 15]


def test_step_stats():
    s = stepstats.step_stats(STEPS).iloc[0]
    assert (s["steps"], s["mean_ps"], s["median_ps"], s["max_ps"], s["std_ps"]) == (2, 45, 45, 50, 5)
    assert s["p90_ps"] == pytest.approx(49)


def test_collective_overlap():
    c = tl.collective_overlap(OPS).set_index("op")
    ar = c.loc["all-reduce-start.2"]  # [35,65) under compute [35,40) + [50,60) = 15
    assert (ar["span_ps"], ar["covered_ps"], ar["exposed_ps"], ar["overlap_class"]) == (30, 15, 15, "partial")
    assert ar["overlap_ratio"] == 0.5 and ar["network_ps"] == 20.0
    ag = c.loc["all-gather.4"]
    assert (ag["covered_ps"], ag["overlap_ratio"], ag["overlap_class"]) == (0, 0.0, "exposed")
    assert len(c) == 2


def test_collective_classification():
    ops = ops_frame([
        {"opcode": "all-reduce", "start_ps": 0, "duration_ps": 1},
        {"opcode": "reduce-scatter-done", "start_ps": 0, "duration_ps": 1},
        {"opcode": "custom-call", "kernel": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "device": "GPU:0",
         "start_ps": 0, "duration_ps": 1},
        {"opcode": "fusion", "category": "all-gather", "start_ps": 0, "duration_ps": 1},
        {"opcode": "fusion", "start_ps": 0, "duration_ps": 1},
        {"opcode": "all-reduce-scatter-fusion-thing", "start_ps": 0, "duration_ps": 1},
    ])
    assert tl.is_collective(ops).tolist() == [True, True, True, True, False, False]


def test_op_classifiers():
    ops = ops_frame([
        {"opcode": "dot", "start_ps": 0, "duration_ps": 1},
        {"opcode": "fusion", "category": "convolution fusion", "start_ps": 0, "duration_ps": 1},
        {"opcode": "custom-call", "kernel": "sm90_xmma_gemm_bf16bf16", "start_ps": 0, "duration_ps": 1},
        {"opcode": "transpose", "start_ps": 0, "duration_ps": 1},
        {"opcode": "infeed", "start_ps": 0, "duration_ps": 1},
        {"opcode": "copy", "kernel": "Memcpy DtoH (Device -> Pinned)", "start_ps": 0, "duration_ps": 1},
        {"opcode": "copy-done", "start_ps": 0, "duration_ps": 1},
    ])
    assert tl.is_matmul(ops).tolist() == [True, True, True, False, False, False, False]
    assert tl.is_data_shuffle(ops).tolist() == [False, False, False, True, False, True, False]
    assert tl.is_host_transfer(ops).tolist() == [False, False, False, False, True, True, False]
    marked = ops.assign(is_host_transfer=[False] * 6 + [True])  # e.g. the HLO says it copies to host memory
    assert tl.is_host_transfer(marked).tolist()[-1]


def test_modified_z_and_outliers():
    z = ol.modified_z(pd.Series([100, 102, 98, 101, 99, 100, 150]))
    assert z.iloc[6] == pytest.approx(0.6745 * 50) and z.iloc[1] == pytest.approx(0.6745 * 2)
    # MAD = 0: mean absolute deviation 20 stands in.
    z0 = ol.modified_z(pd.Series([100, 100, 100, 100, 200]))
    assert z0.iloc[4] == pytest.approx(100 / (1.253314 * 20))
    assert (ol.modified_z(pd.Series([7, 7, 7])) == 0).all()
    o = ol.outliers(pd.Series([100, 102, 98, 101, 99, 100, 150]))
    assert o["is_outlier"].tolist() == [False] * 6 + [True]
    assert np.isnan(ol.modified_z(pd.Series([1.0, np.nan, 3.0, 2.0])).iloc[1])


def test_stragglers():
    dev = pd.DataFrame({"host": ["a"] * 4 + ["b"] * 4, "device": [f"TPU:{i}" for i in range(8)],
                        "busy_ps": [100, 101, 99, 100, 100, 101, 99, 400]})
    s = ol.straggler_devices(dev)
    assert s["is_straggler"].tolist() == [False] * 7 + [True]
    assert s["busy_ps_median"].iloc[0] == 100
    h = ol.straggler_hosts(dev)
    assert h["host"].tolist() == ["a", "b"] and not h["is_straggler"].any()  # two hosts: z is +-0.6745


def test_empty_frames():
    empty = schema.empty(schema.OPS)
    assert tl.busy_intervals(empty).empty and tl.device_summary(empty).empty and idle.gaps(empty).empty
    assert tl.collective_overlap(empty).empty and tl.step_breakdown(empty, schema.empty(schema.STEPS)).empty


# ------------------------------------------------------------------------------------------------- properties
@st.composite
def timelines(draw):
    n = draw(st.integers(1, 25))
    rows = []
    for _ in range(n):
        kind = draw(st.sampled_from(["fusion", "all-reduce", "all-gather-start", "copy-start"]))
        rows.append({"device": draw(st.sampled_from(["TPU:0", "TPU:1"])), "opcode": kind,
                     "is_async": kind.endswith("-start"), "start_ps": draw(st.integers(0, 200)),
                     "duration_ps": draw(st.integers(0, 60))})
    cuts = sorted(draw(st.lists(st.integers(0, 260), min_size=2, max_size=8, unique=True)))
    steps = [{"device": d, "step": i, "start_ps": a, "duration_ps": b - a}
             for d in ("TPU:0", "TPU:1") for i, (a, b) in enumerate(zip(cuts[::2], cuts[1::2]))]
    return ops_frame(rows), steps_frame(steps)


def _paint(ops: pd.DataFrame, device: str, mask: np.ndarray, size: int = 400) -> np.ndarray:
    t = np.zeros(size, bool)
    sel = ops[(ops["device"] == device).to_numpy() & mask]
    for s, d in zip(sel["start_ps"], sel["duration_ps"]):  # brute-force oracle, fine in a test
        t[s:s + d] = True
    return t


@settings(max_examples=150, deadline=None)
@given(timelines())
def test_properties(frames):
    ops, steps = frames
    coll = tl.is_collective(ops)
    sync = ~ops["is_async"].to_numpy(bool)
    summ = tl.device_summary(ops, steps).set_index("device")
    gaps = idle.gaps(ops, steps)
    for dev, row in summ.iterrows():
        busy = _paint(ops, dev, sync)
        assert row["busy_ps"] == busy.sum()  # union length equals the painted oracle
        assert 0 <= row["busy_ps"] <= row["span_ps"]
        assert row["idle_ps"] == gaps.loc[gaps["device"] == dev, "duration_ps"].sum()
    saved = idle.CHUNK
    try:  # gaps cut one at a time (a pass per gap) give the same frame as one pass per device
        idle.CHUNK = 1
        pd.testing.assert_frame_equal(idle.gaps(ops, steps), gaps, check_exact=True)
    finally:
        idle.CHUNK = saved
    c = tl.collective_overlap(ops)
    assert ((c["overlap_ratio"] >= 0) & (c["overlap_ratio"] <= 1)).all()
    assert ((c["covered_ps"] >= 0) & (c["covered_ps"] <= c["span_ps"])).all()
    assert (c["exposed_ps"] == c["span_ps"] - c["covered_ps"]).all()
    b = tl.step_breakdown(ops, steps)
    parts = b["compute_ps"] + b["collective_exposed_ps"] + b["wait_ps"] + b["idle_ps"]
    assert (parts == b["step_ps"]).all()
    assert ((b[["compute_ps", "collective_exposed_ps", "collective_hidden_ps", "wait_ps", "idle_ps"]] >= 0)
            .all()).all()
    assert (b["collective_hidden_ps"] <= b["compute_ps"]).all()
    marker = tl.is_async_marker(ops)
    for _, r in b.iterrows():  # compute part against the oracle
        comp = _paint(ops, r["device"], sync & ~coll & ~marker)
        assert r["compute_ps"] == comp[r["start_ps"]:r["start_ps"] + r["step_ps"]].sum()
        busy = comp | _paint(ops, r["device"], coll) | _paint(ops, r["device"], sync & ~coll & marker)
        busy |= _paint(ops, r["device"], ~sync & ~coll)  # a non-collective async window in flight: waiting, not idle
        assert r["idle_ps"] == r["step_ps"] - busy[r["start_ps"]:r["start_ps"] + r["step_ps"]].sum()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-10**15, 10**15), min_size=1, max_size=30))  # times are integer ps
def test_modified_z_finite(values):
    z = ol.modified_z(pd.Series(values))
    assert np.isfinite(z).all()


def test_step_breakdown_waiting_on_an_async_copy():
    """A copy-done that lasts is the device stalled on a transfer: wait, not compute and not idle."""
    ops = ops_frame([
        {"opcode": "fusion", "start_ps": 0, "duration_ps": 10},
        {"opcode": "copy-start", "start_ps": 10, "duration_ps": 1},
        {"opcode": "copy-done", "start_ps": 20, "duration_ps": 50},
        {"opcode": "fusion", "start_ps": 60, "duration_ps": 20},  # overlaps the wait by 10: compute wins
    ])
    b = tl.step_breakdown(ops, steps_frame([{"step": 0, "start_ps": 0, "duration_ps": 100}])).iloc[0]
    assert (b["compute_ps"], b["wait_ps"], b["collective_exposed_ps"], b["idle_ps"]) == (30, 41, 0, 29)
    assert b["compute_ps"] + b["wait_ps"] + b["collective_exposed_ps"] + b["idle_ps"] == b["step_ps"]
