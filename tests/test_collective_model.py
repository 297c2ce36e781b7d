"""The collective cost model against the book's formulas, written out as literal arithmetic (never tracekit's own
formula): How to Scale Your Model part 3 (TPU: V/W over a bidirectional ring, one-way without wraparound,
V/(W*axes) over several axes, V/(4W) all-to-all with V global, ~1 us per hop) and part 12 (GPU: V(N-1)/N over the
GPU's egress inside a node, B(N-1)/(W N^2) all-to-all, node egress across nodes). Link figures, from the book's
tables: TPU v5e 4.5e10 B/s one-way per link, v5p and v6e 9e10; H100 450e9 egress per GPU and 50e9 NIC per GPU
(400e9 per 8-GPU node); GB200 900e9; MI300X 64e9 per Infinity Fabric link (one per peer); TPU v5p DCN 50 Gb/s
per chip (6.25e9 B/s)."""
from __future__ import annotations

import pytest

from tracekit.model import chips, collective_cost, topology
from tracekit.model.collective_hlo import CollectiveOp

MiB = 2**20
V = 64 * MiB


def op(kind, v=V, groups=(), pairs=()):
    return CollectiveOp(0, "c", kind, float(v), float(v), tuple(tuple(g) for g in groups), tuple(pairs))


def price(chip, spec, kind, group=None, v=V, gid=None, pairs=()):
    ch = chips.get(chip)
    topo = topology.from_trace([], {}, ch, spec=spec)
    group = tuple(range(topo.size)) if group is None else tuple(group)
    p = collective_cost.predict(op(kind, v, (group,) if not pairs else (), pairs), group[0] if gid is None else gid,
                                topo, ch)
    return p


def secs(p) -> float:
    return p.time_ps / 1e12


# ---------------------------------------------------------------------------------------------- 1-D TPU rings

@pytest.mark.parametrize("kind, expect", [
    ("all-gather", 64 * 2**20 * 15 / 16 / 9e10),       # 16-ring of v5e wraps: both directions, 2 x 4.5e10
    ("reduce-scatter", 64 * 2**20 * 15 / 16 / 9e10),
    ("all-reduce", 2 * 64 * 2**20 * 15 / 16 / 9e10),
    ("all-to-all", 64 * 2**20 / (4 * 9e10)),
])
def test_ring_of_16_with_wraparound(kind, expect):
    p = price("TPU v5e", "16", kind)
    assert secs(p) == pytest.approx(expect, rel=1e-9)
    assert p.bound == "ici" and "wrap" in p.span


@pytest.mark.parametrize("kind, expect", [
    ("all-gather", 64 * 2**20 * 7 / 8 / 4.5e10),        # 8 chips of v5e: no wraparound, one way
    ("reduce-scatter", 64 * 2**20 * 7 / 8 / 4.5e10),
    ("all-reduce", 2 * 64 * 2**20 * 7 / 8 / 4.5e10),
    ("all-to-all", 64 * 2**20 / (4 * 4.5e10)),
])
def test_ring_of_8_without_wraparound(kind, expect):
    p = price("TPU v5e", "8", kind)
    assert secs(p) == pytest.approx(expect, rel=1e-9)
    assert "wrap" not in p.span


def test_permute_shift_by_one_and_two_on_a_wrapped_ring():
    shift1 = [(i, (i + 1) % 16) for i in range(16)]
    assert secs(price("TPU v5e", "16", "collective-permute", pairs=shift1, gid=0)) == \
        pytest.approx(64 * 2**20 / 4.5e10, rel=1e-9)          # every link carries one pair's bytes, one way
    shift2 = [(i, (i + 2) % 16) for i in range(16)]
    assert secs(price("TPU v5e", "16", "collective-permute", pairs=shift2, gid=0)) == \
        pytest.approx(2 * 64 * 2**20 / 4.5e10, rel=1e-9)      # two pairs share every link
    # a line of 8 (no wraparound): 7 -> 0 takes the 7 links back; each link still carries one pair
    line = [(i, (i + 1) % 8) for i in range(8)]
    p = price("TPU v5e", "8", "collective-permute", pairs=line, gid=0)
    assert secs(p) == pytest.approx(64 * 2**20 / 4.5e10, rel=1e-9)
    small = price("TPU v5e", "8", "collective-permute", pairs=line, gid=0, v=1024)
    assert secs(small) == pytest.approx(7 * 1e-6, rel=1e-9) and small.bound == "ici latency"   # 7 hops x 1 us


# ---------------------------------------------------------------------------------------------- 2-D TPU slices

def test_4x4_without_wraparound_one_and_two_axes():
    row = [0, 1, 2, 3]                                          # row-major: the last axis
    assert secs(price("TPU v5e", "4x4", "all-gather", row)) == pytest.approx(64 * 2**20 * 3 / 4 / 4.5e10, rel=1e-9)
    col = [1, 5, 9, 13]
    assert secs(price("TPU v5e", "4x4", "all-gather", col)) == pytest.approx(64 * 2**20 * 3 / 4 / 4.5e10, rel=1e-9)
    both = price("TPU v5e", "4x4", "all-reduce")                # two axes at once: V/(W * 2)
    assert secs(both) == pytest.approx(2 * 64 * 2**20 * 15 / 16 / (4.5e10 + 4.5e10), rel=1e-9)
    assert secs(price("TPU v5e", "4x4", "all-to-all")) == pytest.approx(64 * 2**20 / (4 * (4.5e10 + 4.5e10)), rel=1e-9)


def test_book_pop_quiz_allgather_on_a_v5e_4x4():
    # book part 3, pop quiz 2: AllGather_Y([E_Y, F]) on {'X': 8, 'Y': 4}, E=2048, F=8192 bf16, no wraparound:
    # "3 * 8.4e6 / 4.5e10 = 560us"
    p = price("TPU v5e", "8x4", "all-gather", [0, 1, 2, 3], v=2 * 2048 * 8192)
    assert secs(p) == pytest.approx(3 * (2 * 2048 * 8192 / 4) / 4.5e10, rel=1e-9)


def test_2x8_axes():
    assert secs(price("TPU v5e", "2x8", "all-gather", range(8))) == pytest.approx(64 * 2**20 * 7 / 8 / 4.5e10, rel=1e-9)
    assert secs(price("TPU v5e", "2x8", "all-gather", [3, 11])) == pytest.approx(64 * 2**20 * 1 / 2 / 4.5e10, rel=1e-9)
    assert secs(price("TPU v5e", "2x8", "reduce-scatter")) == \
        pytest.approx(64 * 2**20 * 15 / 16 / (4.5e10 + 4.5e10), rel=1e-9)


def test_16x16_axes_wrap():
    row = list(range(16))
    assert secs(price("TPU v5e", "16x16", "all-gather", row)) == \
        pytest.approx(64 * 2**20 * 15 / 16 / (2 * 4.5e10), rel=1e-9)
    assert secs(price("TPU v5e", "16x16", "all-gather")) == \
        pytest.approx(64 * 2**20 * 255 / 256 / (2 * 4.5e10 + 2 * 4.5e10), rel=1e-9)
    half = list(range(8))                                       # half an axis: a line, no wraparound
    assert secs(price("TPU v5e", "16x16", "all-gather", half)) == pytest.approx(64 * 2**20 * 7 / 8 / 4.5e10, rel=1e-9)


# ---------------------------------------------------------------------------------------------- 3-D TPU slices

def test_2x2x4_has_no_wraparound():
    assert secs(price("TPU v5p", "2x2x4", "all-gather", [0, 1, 2, 3])) == \
        pytest.approx(64 * 2**20 * 3 / 4 / 9e10, rel=1e-9)      # an axis of 4, but not a whole cube: one way
    assert secs(price("TPU v5p", "2x2x4", "all-gather", [0, 1, 2, 3, 8, 9, 10, 11])) == \
        pytest.approx(64 * 2**20 * 7 / 8 / (9e10 + 9e10), rel=1e-9)
    assert secs(price("TPU v5p", "2x2x4", "all-reduce")) == \
        pytest.approx(2 * 64 * 2**20 * 15 / 16 / (9e10 + 9e10 + 9e10), rel=1e-9)


def test_4x4x4_wraps_every_axis():
    z = [0, 1, 2, 3]
    assert secs(price("TPU v5p", "4x4x4", "all-gather", z)) == pytest.approx(64 * 2**20 * 3 / 4 / 1.8e11, rel=1e-9)
    yz = list(range(16))
    assert secs(price("TPU v5p", "4x4x4", "reduce-scatter", yz)) == \
        pytest.approx(64 * 2**20 * 15 / 16 / (2 * 1.8e11), rel=1e-9)
    assert secs(price("TPU v5p", "4x4x4", "all-to-all", yz)) == pytest.approx(64 * 2**20 / (4 * 2 * 1.8e11), rel=1e-9)
    assert secs(price("TPU v5p", "4x4x4", "all-reduce")) == \
        pytest.approx(2 * 64 * 2**20 * 63 / 64 / (3 * 1.8e11), rel=1e-9)
    stride = [0, 2]                                             # every other chip of z: half an axis, links shared by 2
    assert secs(price("TPU v5p", "4x4x4", "all-gather", stride)) == pytest.approx(64 * 2**20 * 1 / 2 / (9e10 / 2),
                                                                                  rel=1e-9)


def test_latency_bound_small_gathers():
    # book part 3, question 3: a tiny AllGather over an axis of 4 of a 4x4x4 slice: 2 hops, ~2 us
    p = price("TPU v5p", "4x4x4", "all-gather", [0, 1, 2, 3], v=256)
    assert secs(p) == pytest.approx(2 * 1e-6, rel=1e-9) and p.bound == "ici latency"
    assert secs(price("TPU v5p", "4x4x4", "all-reduce", [0, 1, 2, 3], v=256)) == pytest.approx(4 * 1e-6, rel=1e-9)
    assert secs(price("TPU v5e", "8", "all-gather", v=256)) == pytest.approx(7 * 1e-6, rel=1e-9)  # no wrap: 7 hops


# ---------------------------------------------------------------------------------------------- several slices

def test_two_slices_over_dcn():
    # 2 slices of 2x2x2 v5p (no wraparound), all 16 chips: inside each slice over 3 axes, then across DCN the
    # 1/8 of the array each chip holds, over its own DCN share (50 Gb/s = 6.25e9 B/s)
    ag = price("TPU v5p", "2x2x2@2", "all-gather")
    assert secs(ag) == pytest.approx(64 * 2**20 * 7 / 8 / (3 * 9e10) + (64 * 2**20 / 8) * 1 / 2 / 6.25e9, rel=1e-9)
    assert ag.bound == "dcn" and ag.crosses_slow_level
    ar = price("TPU v5p", "2x2x2@2", "all-reduce")
    assert secs(ar) == pytest.approx(2 * 64 * 2**20 * 7 / 8 / (3 * 9e10) + 2 * (64 * 2**20 / 8) * 1 / 2 / 6.25e9,
                                     rel=1e-9)
    a2a = price("TPU v5p", "2x2x2@2", "all-to-all")
    assert secs(a2a) == pytest.approx((64 * 2**20 / 2) / (4 * 3 * 9e10) + 64 * 2**20 * 1 / (2**2 * 8 * 6.25e9),
                                      rel=1e-9)
    pair = price("TPU v5p", "2x2x2@2", "all-gather", [0, 8])    # the same chip position in each slice
    assert secs(pair) == pytest.approx(64 * 2**20 * 1 / 2 / 6.25e9, rel=1e-9)
    assert pair.fast_ps / 1e12 == pytest.approx(64 * 2**20 * 1 / 2 / 9e10, rel=1e-9)   # if both sat in one slice
    assert price("TPU v5p", "2x2x2@2", "all-gather").fast_ps != pair.fast_ps


def test_dcn_permute():
    p = price("TPU v5p", "2x2x2@2", "collective-permute", pairs=[(0, 8), (8, 0)], gid=0)
    assert secs(p) == pytest.approx(64 * 2**20 / 6.25e9, rel=1e-9) and p.bound == "dcn"


# ---------------------------------------------------------------------------------------------- GPUs

@pytest.mark.parametrize("kind, expect", [
    ("all-gather", 64 * 2**20 * 7 / 8 / 4.5e11),
    ("reduce-scatter", 64 * 2**20 * 7 / 8 / 4.5e11),
    ("all-reduce", 2 * 64 * 2**20 * 7 / 8 / 4.5e11),
    ("all-to-all", 64 * 2**20 * 7 / (4.5e11 * 8**2)),           # book: B (N-1) / (W N^2) through the switch
])
def test_h100_node(kind, expect):
    p = price("H100", "8gpu", kind)
    assert secs(p) == pytest.approx(expect, rel=1e-9) and p.bound == "nvlink"


def test_h100_two_nodes_over_infiniband():
    ag = price("H100", "2x8gpu", "all-gather")
    assert secs(ag) == pytest.approx(64 * 2**20 * 7 / 8 / 4.5e11 + (64 * 2**20 / 8) * 1 / 2 / 5e10, rel=1e-9)
    ar = price("H100", "2x8gpu", "all-reduce")
    assert secs(ar) == pytest.approx(2 * 64 * 2**20 * 7 / 8 / 4.5e11 + 2 * (64 * 2**20 / 8) * 1 / 2 / 5e10, rel=1e-9)
    assert ar.bound == "nvlink"     # book part 12, question 5: over exactly 2 nodes the node level bounds it
    # book: an all-to-all across M nodes runs at the node egress: B (M-1) / (M^2 W_node), W_node = 8 x 50e9
    a2a = price("H100", "2x8gpu", "all-to-all")
    assert secs(a2a) == pytest.approx((64 * 2**20 / 2) * 7 / (4.5e11 * 8**2) + 64 * 2**20 * 1 / (2**2 * 4e11),
                                      rel=1e-9)
    dp = price("H100", "2x8gpu", "all-reduce", [3, 11])        # one GPU per node: only its own NIC
    assert secs(dp) == pytest.approx(2 * 64 * 2**20 * 1 / 2 / 5e10, rel=1e-9) and dp.bound == "ib"
    assert dp.fast_ps / 1e12 == pytest.approx(2 * 64 * 2**20 * 1 / 2 / 4.5e11, rel=1e-9)


def test_gb200_nvl72_domain():
    assert secs(price("GB200", "72gpu", "all-gather")) == pytest.approx(64 * 2**20 * 71 / 72 / 9e11, rel=1e-9)


def test_mi300x_infinity_fabric_mesh():
    pair = price("MI300X", "8gpu", "all-gather", [0, 1])        # a pair shares one link, not seven
    assert secs(pair) == pytest.approx(64 * 2**20 * 1 / 2 / 6.4e10, rel=1e-9) and pair.bound == "xgmi"
    assert secs(price("MI300X", "8gpu", "all-reduce", [0, 1])) == pytest.approx(2 * 64 * 2**20 * 1 / 2 / 6.4e10,
                                                                               rel=1e-9)
    assert secs(price("MI300X", "8gpu", "all-gather")) == pytest.approx(64 * 2**20 * 7 / 8 / (7 * 6.4e10), rel=1e-9)
    assert secs(price("MI300X", "8gpu", "all-to-all")) == pytest.approx(64 * 2**20 * 7 / (7 * 6.4e10 * 8**2),
                                                                       rel=1e-9)
    assert secs(price("MI300X", "8gpu", "collective-permute", pairs=[(0, 1), (1, 0)], gid=0)) == \
        pytest.approx(64 * 2**20 / 6.4e10, rel=1e-9)


def test_gpu_latency_floor_and_unknown_nic():
    p = price("H100", "8gpu", "all-gather", v=64)
    assert secs(p) == pytest.approx(7 * 0.6e-6, rel=1e-9) and p.bound == "nvlink latency"   # 7 ring steps
    q = price("MI300X", "2x8gpu", "all-gather")                # AMD's spec gives no NIC: unknown, and why
    assert q.time_ps != q.time_ps and "ib" in q.reason


def test_group_of_one_and_unknown_device():
    assert price("TPU v5e", "4x4", "all-reduce", [5]).time_ps == 0.0
    ch = chips.get("TPU v5e")
    topo = topology.from_trace([], {}, ch, spec="4x4")
    p = collective_cost.predict(op("all-reduce", V, ((0, 1),)), 7, topo, ch)
    assert p.time_ps != p.time_ps and "none of the replica groups" in p.reason


# ------------------------------------------------------------------ the five kinds on every shape, one and two axes
# Book part 3 written out per case: V = 64 MiB (the full array), W = 4.5e10 B/s per v5e link one way, 9e10 per v5p
# link one way; an axis with wraparound moves both ways (2W), a line one way (W); axes at once add up.
# all-gather / reduce-scatter V(N-1)/N / sum(W), all-reduce twice that, all-to-all V / (4 sum(W)).
GRID = [  # chip, shape, group, N, sum of the axes' W (literal), label
    ("TPU v5e", "4x4", [0, 1, 2, 3], 4, 4.5e10, "2-D 4x4, one axis, no wraparound"),
    ("TPU v5e", "4x4", range(16), 16, 4.5e10 + 4.5e10, "2-D 4x4, two axes, no wraparound"),
    ("TPU v5e", "2x8", range(8), 8, 4.5e10, "2-D 2x8, the axis of 8, no wraparound"),
    ("TPU v5e", "2x8", range(16), 16, 4.5e10 + 4.5e10, "2-D 2x8, two axes, no wraparound"),
    ("TPU v5e", "16x16", range(16), 16, 2 * 4.5e10, "2-D 16x16, one axis, wraparound"),
    ("TPU v5e", "16x16", range(256), 256, 2 * 4.5e10 + 2 * 4.5e10, "2-D 16x16, two axes, wraparound"),
    ("TPU v5p", "2x2x4", [0, 1, 2, 3], 4, 9e10, "3-D 2x2x4, one axis, no wraparound"),
    ("TPU v5p", "2x2x4", [0, 1, 2, 3, 4, 5, 6, 7], 8, 9e10 + 9e10, "3-D 2x2x4, two axes, no wraparound"),
    ("TPU v5p", "4x4x4", [0, 1, 2, 3], 4, 2 * 9e10, "3-D 4x4x4, one axis, wraparound"),
    ("TPU v5p", "4x4x4", range(16), 16, 2 * 9e10 + 2 * 9e10, "3-D 4x4x4, two axes, wraparound"),
]


@pytest.mark.parametrize("chip, shape, group, n, w, label", GRID, ids=[g[-1] for g in GRID])
def test_every_kind_on_every_shape(chip, shape, group, n, w, label):
    group = list(group)
    assert secs(price(chip, shape, "all-gather", group)) == pytest.approx(64 * 2**20 * (n - 1) / n / w, rel=1e-9)
    assert secs(price(chip, shape, "reduce-scatter", group)) == pytest.approx(64 * 2**20 * (n - 1) / n / w, rel=1e-9)
    assert secs(price(chip, shape, "all-reduce", group)) == pytest.approx(2 * 64 * 2**20 * (n - 1) / n / w, rel=1e-9)
    assert secs(price(chip, shape, "all-to-all", group)) == pytest.approx(64 * 2**20 / (4 * w), rel=1e-9)


@pytest.mark.parametrize("chip, shape, axis, link", [
    ("TPU v5e", "4x4", [0, 1, 2, 3], 4.5e10), ("TPU v5e", "4x4", [1, 5, 9, 13], 4.5e10),
    ("TPU v5e", "2x8", list(range(8)), 4.5e10), ("TPU v5e", "16x16", list(range(16)), 4.5e10),
    ("TPU v5p", "2x2x4", [0, 1, 2, 3], 9e10), ("TPU v5p", "4x4x4", [0, 4, 8, 12], 9e10)])
def test_permute_shift_along_one_axis_of_every_shape(chip, shape, axis, link):
    """A shift by one along an axis (the last pair wraps to the first: over the wraparound link where there is
    one, back along the line where there is not): every link carries one pair's V, one way."""
    pairs = [(a, axis[(i + 1) % len(axis)]) for i, a in enumerate(axis)]
    p = price(chip, shape, "collective-permute", pairs=pairs, gid=axis[0])
    assert secs(p) == pytest.approx(64 * 2**20 / link, rel=1e-9)


def test_permute_across_two_axes():
    """(0,0) -> (1,1) on a v5e 4x4: two hops (one per axis), each link carries the pair's V once; a small
    transfer is bound by its two hops' latency (1 us each)."""
    assert secs(price("TPU v5e", "4x4", "collective-permute", pairs=[(0, 5)], gid=0)) == \
        pytest.approx(64 * 2**20 / 4.5e10, rel=1e-9)
    small = price("TPU v5e", "4x4", "collective-permute", pairs=[(0, 5)], gid=0, v=64)
    assert secs(small) == pytest.approx(2 * 1e-6, rel=1e-9) and small.bound == "ici latency"
