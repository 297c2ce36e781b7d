"""tracekit.model.cost on tiny hand-built HLO modules, against values worked out by hand."""
from __future__ import annotations

import json
import math

import pytest

from tracekit.model.cost import COLUMNS, computation_kinds, instruction_costs, module_totals
from tracekit.proto import hlo_pb2

PT = hlo_pb2.PrimitiveType


def S(dt: str, *dims: int) -> hlo_pb2.ShapeProto:
    return hlo_pb2.ShapeProto(element_type=PT.Value(dt.upper()), dimensions=dims,
                              layout=hlo_pb2.LayoutProto(minor_to_major=list(range(len(dims)))[::-1]))


def T(*shapes) -> hlo_pb2.ShapeProto:
    return hlo_pb2.ShapeProto(element_type=PT.TUPLE, tuple_shapes=shapes)


class Module:
    """Builds an HloModuleProto: ``comp(name)`` opens a computation, ``op(...)`` appends to the open one."""

    def __init__(self, name="m"):
        self.m = hlo_pb2.HloModuleProto(name=name, id=1)
        self._next = 1

    def comp(self, name, fused=False):
        c = self.m.computations.add(name=name, id=len(self.m.computations) + 1, is_fusion_computation=fused)
        self.cur = c
        return c

    def op(self, name, opcode, shape, operands=(), calls=(), **fields):
        self._next += 1
        i = self.cur.instructions.add(name=name, opcode=opcode, shape=shape, id=self._next,
                                      operand_ids=[o.id for o in operands],
                                      called_computation_ids=[c.id for c in calls])
        for k, v in fields.items():
            if isinstance(v, (list, tuple)):
                getattr(i, k).extend(v)
            elif hasattr(v, "DESCRIPTOR"):
                getattr(i, k).CopyFrom(v)
            else:
                setattr(i, k, v)
        self.cur.root_id = i.id
        return i

    def param(self, name, shape, n):
        return self.op(name, "parameter", shape, parameter_number=n)

    def entry(self):
        self.m.entry_computation_id = self.cur.id
        self.m.entry_computation_name = self.cur.name
        return self.m

    def add_reducer(self, name="add", dt="f32"):
        c = self.comp(name)
        x, y = self.param("x", S(dt), 0), self.param("y", S(dt), 1)
        self.op(name + ".r", "add", S(dt), [x, y])
        return c


def row(df, name):
    return df[df["name"] == name].iloc[0]


def test_dot():
    b = Module()
    b.comp("e")
    a, w = b.param("a", S("f32", 4, 8), 0), b.param("w", S("f32", 8, 5), 1)
    dd = hlo_pb2.DotDimensionNumbers(lhs_contracting_dimensions=[1], rhs_contracting_dimensions=[0])
    b.op("d", "dot", S("f32", 4, 5), [a, w], dot_dimension_numbers=dd)
    df = instruction_costs(b.entry())
    assert list(df.columns) == COLUMNS
    r = row(df, "d")
    assert r["flops"] == 2 * 4 * 5 * 8
    assert (r["bytes_read"], r["bytes_written"], r["bytes_accessed"]) == (4 * (32 + 40), 4 * 20, 4 * 92)
    assert r["dtype"] == "f32" and r["cost_known"] and r["group_size"] == -1 and r["collective"] == ""
    assert row(df, "a")["bytes_accessed"] == 0


def test_batched_complex_dot_counts_four_real_flops_per_mac():
    b = Module()
    b.comp("e")
    a, w = b.param("a", S("c64", 3, 4, 8), 0), b.param("w", S("c64", 3, 8, 2), 1)
    dd = hlo_pb2.DotDimensionNumbers(lhs_contracting_dimensions=[2], rhs_contracting_dimensions=[1],
                                     lhs_batch_dimensions=[0], rhs_batch_dimensions=[0])
    b.op("d", "dot", S("c64", 3, 4, 2), [a, w], dot_dimension_numbers=dd)
    assert row(instruction_costs(b.entry()), "d")["flops"] == 4 * 2 * 3 * 4 * 2 * 8


def _conv_module(in_shape, k_shape, out_shape, wins, fgc=1, bgc=1):
    """1-D/2-D conv with dims b0..f / 0..io / b0..f."""
    b = Module()
    b.comp("e")
    x, k = b.param("x", S("f32", *in_shape), 0), b.param("k", S("f32", *k_shape), 1)
    nd = len(in_shape) - 2
    dn = hlo_pb2.ConvolutionDimensionNumbers(
        input_batch_dimension=0, input_feature_dimension=nd + 1, input_spatial_dimensions=range(1, nd + 1),
        kernel_input_feature_dimension=nd, kernel_output_feature_dimension=nd + 1,
        kernel_spatial_dimensions=range(nd), output_batch_dimension=0, output_feature_dimension=nd + 1,
        output_spatial_dimensions=range(1, nd + 1))
    win = hlo_pb2.Window(dimensions=[hlo_pb2.WindowDimension(**w) for w in wins])
    b.op("c", "convolution", S("f32", *out_shape), [x, k], window=win, convolution_dimension_numbers=dn,
         feature_group_count=fgc, batch_group_count=bgc)
    return row(instruction_costs(b.entry()), "c")


def test_conv_padding_taps_counted_exactly():
    # 1-D: input 5, kernel 3, pad 1/1, stride 1 -> 5 outputs; taps per output 2,3,3,3,2 = 13
    r = _conv_module((2, 5, 3), (3, 3, 4), (2, 5, 4), [dict(size=3, stride=1, padding_low=1, padding_high=1)])
    assert r["flops"] == 2 * 2 * 4 * 3 * 13
    # stride 2, no padding: input 7, kernel 3 -> 3 outputs, 3 taps each
    r = _conv_module((1, 7, 2), (3, 2, 5), (1, 3, 5), [dict(size=3, stride=2)])
    assert r["flops"] == 2 * 1 * 5 * 2 * 9
    # base (lhs) dilation 2: input 3 -> dilated 5 (x.x.x), kernel 2, no pad -> 4 outputs, each sees 1 real tap
    r = _conv_module((1, 3, 1), (2, 1, 1), (1, 4, 1), [dict(size=2, stride=1, base_dilation=2)])
    assert r["flops"] == 2 * 4
    # window dilation 2: input 5, kernel 2 spans 3 -> 3 outputs x 2 taps
    r = _conv_module((1, 5, 1), (2, 1, 1), (1, 3, 1), [dict(size=2, stride=1, window_dilation=2)])
    assert r["flops"] == 2 * 6


def test_conv_groups():
    # depthwise: 8 features in 8 groups -> kernel input features 1; 2-D 4x4 valid 3x3 -> 2x2 outputs, 9 taps each
    r = _conv_module((1, 4, 4, 8), (3, 3, 1, 8), (1, 2, 2, 8), [dict(size=3, stride=1)] * 2, fgc=8)
    assert r["flops"] == 2 * (1 * 2 * 2 * 8) * 1 * 9
    # batch groups (as in a filter gradient): input batch 4 in 2 groups -> output batch 2; 3 input features
    r = _conv_module((4, 5, 3), (3, 3, 6), (2, 3, 6), [dict(size=3, stride=1)], bgc=2)
    assert r["flops"] == 2 * (2 * 3 * 6) * 3 * 3


def _fusion_module():
    b = Module()
    fc = b.comp("fused", fused=True)
    p0, p1 = b.param("p0", S("f32", 10, 100), 0), b.param("p1", S("f32", 10, 100), 1)
    sl = b.op("sl", "slice", S("f32", 10, 10), [p1],
              slice_dimensions=[hlo_pb2.HloInstructionProto.SliceDimensions(start=s, limit=e, stride=1)
                                for s, e in ((0, 10), (0, 10))])
    e = b.op("ex", "exponential", S("f32", 10, 100), [p0])
    m = b.op("mx", "multiply", S("f32", 10, 100), [e, p0])
    bc = b.op("bc", "broadcast", S("f32", 10, 100), [sl], dimensions=[0, 1])  # shape-wise nonsense, cost 0
    b.op("out", "add", S("f32", 10, 100), [m, bc])
    b.comp("e")
    a0, a1 = b.param("a0", S("f32", 10, 100), 0), b.param("a1", S("f32", 10, 100), 1)
    b.op("f", "fusion", S("f32", 10, 100), [a0, a1], calls=[fc], fusion_kind="kLoop")
    return b.entry()


def test_fusion_sums_fused_flops_and_counts_only_boundary_bytes():
    df = instruction_costs(_fusion_module())
    assert set(df["computation"]) == {"e"}  # fused computation gets no rows
    r = row(df, "f")
    assert r["flops"] == 2000 and r["transcendentals"] == 1000
    # p0 read whole (4000), p1 only through a slice (10x10x4 = 400), output 4000
    assert (r["bytes_read"], r["bytes_written"]) == (4400, 4000)


def test_fusion_in_place_dynamic_update_slice():
    b = Module()
    fc = b.comp("fused", fused=True)
    buf, upd, i = b.param("buf", S("f32", 64, 100), 0), b.param("upd", S("f32", 2, 100), 1), b.param("i", S("s32"), 2)
    z = b.op("z", "constant", S("s32"))
    n = b.op("n", "negate", S("f32", 2, 100), [upd])
    b.op("dus", "dynamic-update-slice", S("f32", 64, 100), [buf, n, i, z])
    b.comp("e")
    args = [b.param(f"a{k}", s, k) for k, s in enumerate((S("f32", 64, 100), S("f32", 2, 100), S("s32")))]
    b.op("f", "fusion", S("f32", 64, 100), args, calls=[fc], fusion_kind="kLoop")
    r = row(instruction_costs(b.entry()), "f")
    assert r["flops"] == 200
    assert (r["bytes_read"], r["bytes_written"]) == (800 + 4, 800)


def _while_module(trip: int | None):
    b = Module()
    body = b.comp("body")
    st = b.param("st", T(S("f32", 16), S("s32")), 0)
    x = b.op("x", "get-tuple-element", S("f32", 16), [st], tuple_index=0)
    i = b.op("i", "get-tuple-element", S("s32"), [st], tuple_index=1)
    y = b.op("y", "tanh", S("f32", 16), [x])
    y2 = b.op("y2", "multiply", S("f32", 16), [y, y])
    one = b.op("one", "constant", S("s32"))
    i2 = b.op("i2", "add", S("s32"), [i, one])
    b.op("t", "tuple", T(S("f32", 16), S("s32")), [y2, i2])
    cond = b.comp("cond")
    st = b.param("st", T(S("f32", 16), S("s32")), 0)
    i = b.op("i", "get-tuple-element", S("s32"), [st], tuple_index=1)
    lim = b.op("lim", "constant", S("s32"))
    b.op("lt", "compare", S("pred"), [i, lim], comparison_direction="LT")
    b.comp("e")
    p = b.param("p", T(S("f32", 16), S("s32")), 0)
    cfg = {"known_trip_count": {"n": str(trip)}} if trip is not None else {}
    b.op("w", "while", T(S("f32", 16), S("s32")), [p], calls=[body, cond], backend_config=json.dumps(cfg).encode())
    return b.entry()


def test_while_known_trip_count():
    # body: tanh 16 transc., multiply 16 + add 1 flops, bytes tanh 128 + multiply 192 + add 12 = 332;
    # cond: compare 1 flop, 9 bytes. Trip 5 -> body x5, cond x6.
    df = instruction_costs(_while_module(5))
    r = row(df, "w")
    assert r["flops"] == 5 * 17 + 6 * 1 and r["transcendentals"] == 5 * 16
    assert r["bytes_accessed"] == 5 * 332 + 6 * 9
    assert r["cost_known"] and "known trip count 5" in r["note"]
    assert set(df["computation"]) == {"body", "cond", "e"}
    assert row(df[df["computation"] == "body"], "y")["transcendentals"] == 16  # per-execution rows
    t = module_totals(_while_module(5))
    assert (t["flops"], t["transcendentals"], t["bytes accessed"]) == (91, 80, 5 * 332 + 54)


def test_while_unknown_trip_count():
    r = row(instruction_costs(_while_module(None)), "w")
    assert not r["cost_known"] and r["unknown_reason"] == "unknown trip count" and math.isnan(r["flops"])
    t = module_totals(_while_module(None))
    assert not t["cost_known"] and t["flops"] == 0 and t["unknown_reasons"] == ["unknown trip count"]


def test_conditional_takes_max_branch():
    b = Module()
    br0 = b.comp("br0")
    p = b.param("p", S("f32", 8), 0)
    b.op("x", "exponential", S("f32", 8), [p])
    br1 = b.comp("br1")
    p = b.param("p", S("f32", 8), 0)
    q = b.op("q", "multiply", S("f32", 8), [p, p])
    b.op("r", "add", S("f32", 8), [q, p])
    b.comp("e")
    k, x = b.param("k", S("s32"), 0), b.param("x", S("f32", 8), 1)
    b.op("c", "conditional", S("f32", 8), [k, x, x], calls=[br0, br1])
    r = row(instruction_costs(b.entry()), "c")
    assert (r["flops"], r["transcendentals"], r["bytes_accessed"]) == (16, 8, 192)
    assert "max over 2 branches" in r["note"]


def test_custom_calls():
    b = Module()
    b.comp("e")
    a, w = b.param("a", S("bf16", 32, 64), 0), b.param("w", S("bf16", 64, 16), 1)
    b.op("opaque", "custom-call", S("f32", 32, 64), [a], custom_call_target="my_kernel")
    cfg = {"gemm_backend_config": {"alpha_real": 1, "beta": 0, "dot_dimension_numbers": {
        "lhs_contracting_dimensions": ["1"], "rhs_contracting_dimensions": ["0"],
        "lhs_batch_dimensions": [], "rhs_batch_dimensions": []}}}
    b.op("gemm", "custom-call", T(S("bf16", 32, 16), S("s8", 4096)), [a, w], custom_call_target="__cublas$lt$matmul",
         backend_config=json.dumps(cfg).encode())
    b.op("nocfg", "custom-call", S("bf16", 32, 16), [a, w], custom_call_target="__cublas$gemm")
    df = instruction_costs(b.entry())
    o = row(df, "opaque")
    assert not o["cost_known"] and o["unknown_reason"] == "opaque custom call my_kernel"
    assert math.isnan(o["flops"]) and math.isnan(o["transcendentals"])
    assert o["bytes_read"] == 32 * 64 * 2 and o["bytes_written"] == 32 * 64 * 4  # I/O bytes are known
    g = row(df, "gemm")
    assert g["cost_known"] and g["flops"] == 2 * 32 * 16 * 64
    assert g["bytes_read"] == (32 * 64 + 64 * 16) * 2 and g["bytes_written"] == 32 * 16 * 2  # workspace excluded
    assert not row(df, "nocfg")["cost_known"]
    t = module_totals(b.m)
    assert t["flops"] == 2 * 32 * 16 * 64 and not t["cost_known"]


def test_all_gather_iota_groups():
    b = Module()
    b.comp("e")
    x = b.param("x", S("f32", 16, 32), 0)
    iota = hlo_pb2.IotaReplicaGroupListProto(num_replica_groups=2, num_devices_per_group=4,
                                             iota_reshape_dims=[2, 4], iota_transpose_perm=[0, 1])
    b.op("ag", "all-gather", S("f32", 64, 32), [x], dimensions=[0], channel_id=1, use_global_device_ids=True,
         collective_device_list=hlo_pb2.CollectiveDeviceListProto(iota_replica_group_list=iota))
    r = row(instruction_costs(b.entry()), "ag")
    v = 64 * 32 * 4
    assert (r["collective"], r["group_size"], r["flops"]) == ("all-gather", 4, 0)
    assert r["net_bytes"] == v * 3 / 4 and r["bytes_read"] == v / 4 and r["bytes_written"] == v


def _all_reduce_async(groups):
    b = Module()
    add = b.add_reducer()
    b.comp("e")
    x = b.param("x", S("bf16", 1024), 0)
    rg = [hlo_pb2.ReplicaGroup(replica_ids=g) for g in groups]
    s = b.op("ars", "all-reduce-start", S("bf16", 1024), [x], calls=[add], replica_groups=rg)
    b.op("ard", "all-reduce-done", S("bf16", 1024), [s])
    return b.entry()


def test_all_reduce_start_done():
    df = instruction_costs(_all_reduce_async([[0, 1], [2, 3]]))
    assert set(df["computation"]) == {"e"}  # the reducer is an applied computation: no rows
    s, d = row(df, "ars"), row(df, "ard")
    assert (s["collective"], s["group_size"], s["flops"]) == ("all-reduce", 2, 1024)
    assert s["net_bytes"] == 2 * 2048 * 1 / 2 and s["bytes_accessed"] == 4096
    assert d["cost_known"] and d["flops"] == d["bytes_accessed"] == d["net_bytes"] == 0
    # empty replica groups: all devices, which must be given
    df = instruction_costs(_all_reduce_async([]), num_devices=8)
    assert row(df, "ars")["group_size"] == 8 and row(df, "ars")["net_bytes"] == 2 * 2048 * 7 / 8
    r = row(instruction_costs(_all_reduce_async([])), "ars")
    assert not r["cost_known"] and math.isnan(r["net_bytes"]) and r["flops"] == 1024


def test_async_start_wrapping_reduce_scatter_and_permute():
    b = Module()
    add = b.add_reducer()
    wrapped = b.comp("wrapped")
    p = b.param("p", S("f32", 64), 0)
    b.op("rs", "reduce-scatter", S("f32", 16), [p], calls=[add], dimensions=[0],
         replica_groups=[hlo_pb2.ReplicaGroup(replica_ids=[0, 1, 2, 3])])
    b.comp("e")
    x = b.param("x", S("f32", 64), 0)
    st = b.op("st", "async-start", T(T(S("f32", 64)), S("f32", 16)), [x], calls=[wrapped])
    b.op("dn", "async-done", S("f32", 16), [st], calls=[wrapped])
    pairs = [hlo_pb2.SourceTarget(source=i, target=(i + 1) % 4) for i in range(4)]
    cps = b.op("cps", "collective-permute-start", T(S("f32", 64), S("f32", 64), S("u32"), S("u32")), [x],
               source_target_pairs=pairs)
    b.op("cpd", "collective-permute-done", S("f32", 64), [cps])
    df = instruction_costs(b.entry())
    assert set(df["computation"]) == {"wrapped", "e"}
    s = row(df, "st")
    assert (s["collective"], s["group_size"], s["net_bytes"]) == ("reduce-scatter", 4, 256 * 3 / 4)
    assert s["bytes_accessed"] == 256 + 64 and row(df, "dn")["bytes_accessed"] == 0
    c = row(df, "cps")
    assert (c["collective"], c["group_size"], c["net_bytes"], c["bytes_written"]) == ("collective-permute", 4, 256, 256)
    assert module_totals(b.m)["net bytes"] == 192 + 256


def test_reduce_sort_and_data_movement():
    b = Module()
    add = b.add_reducer()
    b.comp("e")
    x = b.param("x", S("f32", 8, 16), 0)
    z = b.op("z", "constant", S("f32"))
    b.op("red", "reduce", S("f32", 8), [x, z], calls=[add], dimensions=[1])
    b.op("srt", "sort", S("f32", 8, 16), [x], calls=[add], dimensions=[1])
    b.op("bc", "bitcast", S("f32", 128), [x])
    b.op("tr", "transpose", S("f32", 16, 8), [x], dimensions=[1, 0])
    b.op("sl", "slice", S("f32", 2, 16), [x])
    df = instruction_costs(b.entry())
    assert row(df, "red")["flops"] == 128 - 8
    assert row(df, "srt")["flops"] == 128 * 7  # n * ceil(log2 n) over all 128 elements
    assert row(df, "bc")["bytes_accessed"] == 0
    assert row(df, "tr")["bytes_accessed"] == 2 * 512 and row(df, "tr")["flops"] == 0
    assert row(df, "sl")["bytes_accessed"] == 2 * 128


def test_computation_kinds_and_hloproto_input():
    m = _while_module(3)
    b = Module()
    b.m = m
    add = b.add_reducer("unused_reducer")
    kinds = computation_kinds(m)
    assert kinds == {"body": "executable", "cond": "executable", "e": "entry", add.name: "unused"}
    kinds = computation_kinds(_fusion_module())
    assert kinds == {"fused": "fused", "e": "entry"}
    assert computation_kinds(_all_reduce_async([]))["add"] == "applied"
    wrapped = hlo_pb2.HloProto(hlo_module=_while_module(3))
    assert module_totals(wrapped)["flops"] == 3 * 17 + 4


def test_empty_tuple_and_unknown_opcode():
    b = Module()
    b.comp("e")
    x = b.param("x", S("f32", 4), 0)
    b.op("t", "tuple", T())
    b.op("weird", "batch-norm-training", T(S("f32", 4)), [x])
    df = instruction_costs(b.entry())
    assert row(df, "t")["cost_known"]
    w = row(df, "weird")
    assert not w["cost_known"] and w["unknown_reason"] == "no cost rule for opcode batch-norm-training"
