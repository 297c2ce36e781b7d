"""Custom-call cost models on synthetic GPU traces whose HLO follows XLA's real formats (custom-call targets,
GpuBackendConfig JSON as XLA prints it, typed-FFI MLIR attribute dictionaries, operand/result shapes as JAX, XLA
and TransformerEngine lower them). Expected FLOPs and bytes are written out as literal arithmetic."""
import json
import math

import numpy as np
import pytest

import tracekit
from conftest import shared_trace
from tracekit.analysis import customcalls, timeline
from tracekit.ingest import synth
from tracekit.ingest.backend_config import ffi_attributes, parse_mlir_dict
from tracekit.ingest.synth import instr, shape
from tracekit.model import chips, identity, precision, roofline
from tracekit.model.cost import instruction_costs
from tracekit.proto import hlo_pb2

H100 = {"device_vendor": "Nvidia", "compute_cap_major": 9, "compute_cap_minor": 0, "core_count": 132,
        "memory_bandwidth": 3.35e12}
MI300X = {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 4, "core_count": 304,
          "memory_bandwidth": 2.6624e12}


def tup(*shapes):
    return hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.TUPLE, tuple_shapes=list(shapes))


def gemm_config(lc, rc, lb=(), rb=()):
    """A GpuBackendConfig as XLA prints it (field names from backend_configs.proto, int64 as strings)."""
    return json.dumps({"operation_queue_id": "0", "wait_on_operation_queues": [], "gemm_backend_config": {
        "selected_algorithm": "-621293861", "alpha_real": 1, "beta": 0, "dot_dimension_numbers": {
            "lhs_contracting_dimensions": [str(x) for x in lc], "rhs_contracting_dimensions": [str(x) for x in rc],
            "lhs_batch_dimensions": [str(x) for x in lb], "rhs_batch_dimensions": [str(x) for x in rb]},
        "alpha_imag": 0, "precision_config": {"operand_precision": ["DEFAULT", "DEFAULT"], "algorithm": "ALG_UNSET"},
        "epilogue": "DEFAULT", "grad_x": False, "grad_y": False, "damax_output": False},
        "force_earliest_schedule": False, "reification_cost": [], "device_type": "DEVICE_TYPE_INVALID"}).encode()


def run(tmp_path, params, calls, device=H100, kernel="kernel_a"):
    """One module: ``params`` [(name, shape)], then ``calls`` [(name, result shape, operand indices (1-based
    parameter ids), fields)]; one kernel event per call on one GPU. Returns the roofline frame indexed by op."""
    ins = [instr(n, "parameter", s, parameter_number=i) for i, (n, s) in enumerate(params)]
    for name, res, ops, fields in calls:
        ins.append(instr(name, "custom-call", res, ops, **fields))
    b = synth.SpaceBuilder(hostname="g")
    b.hlo_module(synth.module("jit_f", 5, ins), label="jit_f(5)")
    p = b.plane("/device:GPU:0", device)
    ln = p.line("Stream #7(Kernel)", timestamp_ns=5)
    for i, (name, *_rest) in enumerate(calls):
        ln.event(kernel, i * 10_000_000, 1_000_000, stats={"hlo_op": name, "hlo_module": "jit_f", "program_id": 5},
                 ref_stats=True)
    f = tmp_path / "g.xplane.pb"
    b.write(f)
    tr = tracekit.load(f)
    return roofline.join(tr).set_index("op"), tr


def peak(device, dtype):
    return chips.peak_flops(chips.detect(f"{device['device_vendor']} cc{device['compute_cap_major']}."
                                         f"{device['compute_cap_minor']}", device), dtype)[0]


# --- GEMMs --------------------------------------------------------------------------------------------------
def test_cublas_gemm_bf16(tmp_path):
    o, tr = run(tmp_path, [("a", shape("bf16", [1024, 512])), ("b", shape("bf16", [512, 256]))],
                [("custom-call.1", tup(shape("bf16", [1024, 256]), shape("s8", [4194304])), [1, 2],
                  dict(custom_call_target="__cublas$gemm", backend_config=gemm_config([1], [0])))])
    r = o.loc["custom-call.1"]
    assert r["flops"] == 2 * 1024 * 256 * 512
    assert r["bytes_accessed"] == (1024 * 512 + 512 * 256) * 2 + 1024 * 256 * 2  # workspace not counted
    assert r["cost_source"] == "model:gemm" and r["compute_dtype"] == "bf16"
    assert r["compute_ps"] == pytest.approx(2 * 1024 * 256 * 512 / peak(H100, "bf16") * 1e12)
    assert (r["dot_m"], r["dot_n"], r["dot_k"]) == (1024, 256, 512)
    ops = tr.ops.assign(cost_source=roofline.join(tr)["cost_source"].to_numpy())
    assert timeline.is_matmul(ops).all()  # kernel name says nothing; the model does


def test_bf16_gemm_with_f32_result_runs_at_the_bf16_peak(tmp_path):
    o, _ = run(tmp_path, [("a", shape("bf16", [8, 64, 128])), ("b", shape("bf16", [8, 128, 32]))],
               [("gemm", tup(shape("f32", [8, 64, 32]), shape("s8", [1 << 20])), [1, 2],
                 dict(custom_call_target="__cublas$lt$matmul", backend_config=gemm_config([2], [1], [0], [0])))])
    r = o.loc["gemm"]
    assert r["flops"] == 2 * 8 * 64 * 32 * 128
    assert r["bytes_accessed"] == (8 * 64 * 128 + 8 * 128 * 32) * 2 + 8 * 64 * 32 * 4
    assert r["dtype"] == "f32" and r["compute_dtype"] == "bf16"
    assert r["compute_ps"] == pytest.approx(2 * 8 * 64 * 32 * 128 / peak(H100, "bf16") * 1e12)


def test_fp8_gemm_reads_the_scales_and_does_not_multiply_them(tmp_path):
    # XLA's FP8 rewrite: (f32[16,16], s8[..]) custom-call(x f8e4m3fn[16,32], y^T f8e5m2[16,32], x_scale, y_scale)
    o, _ = run(tmp_path, [("x", shape("f8e4m3fn", [16, 32])), ("y", shape("f8e5m2", [16, 32])),
                          ("x_scale", shape("f32")), ("y_scale", shape("f32"))],
               [("cublas-gemm.1", tup(shape("f32", [16, 16]), shape("s8", [33554432])), [1, 2, 3, 4],
                 dict(custom_call_target="__cublas$lt$matmul$f8", backend_config=gemm_config([1], [1])))])
    r = o.loc["cublas-gemm.1"]
    assert r["flops"] == 2 * 16 * 16 * 32
    assert r["bytes_accessed"] == 16 * 32 * 1 + 16 * 32 * 1 + 4 + 4 + 16 * 16 * 4
    assert r["cost_source"] == "model:gemm_fp8" and r["compute_dtype"] == "f8e4m3fn"
    assert r["compute_ps"] == pytest.approx(2 * 16 * 16 * 32 / peak(H100, "fp8") * 1e12)
    assert peak(H100, "fp8") > peak(H100, "bf16")


def test_mx_gemm_block_scales_are_read(tmp_path):
    o, _ = run(tmp_path, [("a", shape("f8e4m3fn", [128, 256])), ("b", shape("f8e4m3fn", [64, 256])),
                          ("sa", shape("f8e8m0fnu", [128, 8])), ("sb", shape("f8e8m0fnu", [64, 8]))],
               [("mx", tup(shape("bf16", [128, 64]), shape("s8", [4096])), [1, 2, 3, 4],
                 dict(custom_call_target="__cublas$lt$matmul$mx", backend_config=gemm_config([1], [1])))])
    r = o.loc["mx"]
    assert r["flops"] == 2 * 128 * 64 * 256
    assert r["bytes_accessed"] == 128 * 256 + 64 * 256 + 128 * 8 + 64 * 8 + 128 * 64 * 2
    assert r["cost_source"] == "model:gemm_mx"


def test_hipblaslt_cijk_kernels_are_matmuls(tmp_path):
    name = "Cijk_Ailk_Bljk_BBS_BH_MT256x128x64_MI16x16x16x1_SN_1LDSB0_APM1_ABV0_ACED0_AF0EM1_AF1EM1.kd"
    o, tr = run(tmp_path, [("a", shape("bf16", [2048, 2048])), ("b", shape("bf16", [2048, 2048]))],
                [("custom-call.1", tup(shape("bf16", [2048, 2048]), shape("s8", [67108864])), [1, 2],
                  dict(custom_call_target="__cublas$lt$matmul", backend_config=gemm_config([1], [0])))],
                device=MI300X, kernel=name)
    assert o.loc["custom-call.1", "flops"] == 2 * 2048 ** 3
    assert timeline.is_matmul(tr.ops).all()  # the kernel name alone (no roofline columns)


def test_grouped_gemm_counts_the_ragged_dimension_once(tmp_path):
    # __cublas$lt$groupedMatmul as XLA's gemm rewriter emits a ragged dot: lhs [M, K], rhs [G, K, N], group sizes
    cfg = json.dumps({"operation_queue_id": "0", "grouped_gemm_backend_config": {
        "gemm_backend_config": {"alpha_real": 1, "beta": 0, "dot_dimension_numbers": {
            "lhs_contracting_dimensions": ["1"], "rhs_contracting_dimensions": ["1"], "lhs_batch_dimensions": [],
            "rhs_batch_dimensions": []}, "alpha_imag": 0, "epilogue": "DEFAULT"},
        "ragged_dot_dimension_numbers": {"dot_dimension_numbers": {
            "lhs_contracting_dimensions": ["1"], "rhs_contracting_dimensions": ["1"], "lhs_batch_dimensions": [],
            "rhs_batch_dimensions": []}, "lhs_ragged_dimensions": ["0"], "rhs_group_dimensions": ["0"]}}})
    o, _ = run(tmp_path, [("x", shape("f32", [101, 407])), ("w", shape("f32", [2, 407, 400])),
                          ("sizes", shape("s32", [2]))],
               [("gg", tup(shape("f32", [101, 400]), shape("s8", [33554432])), [1, 2, 3],
                 dict(custom_call_target="__cublas$lt$groupedMatmul", backend_config=cfg.encode()))])
    r = o.loc["gg"]
    assert r["flops"] == 2 * 101 * 407 * 400  # not x 2 groups
    assert r["bytes_accessed"] == (101 * 407 + 2 * 407 * 400 + 2) * 4 + 101 * 400 * 4
    assert r["cost_source"] == "model:grouped_gemm"


def test_hlo_ragged_dot_counts_the_ragged_dimension_once():
    rd = hlo_pb2.RaggedDotDimensionNumbers(
        dot_dimension_numbers=hlo_pb2.DotDimensionNumbers(lhs_contracting_dimensions=[1],
                                                          rhs_contracting_dimensions=[1]),
        lhs_ragged_dimensions=[0], rhs_group_dimensions=[0])
    m = synth.module("m", 1, [instr("x", "parameter", shape("bf16", [64, 32])),
                              instr("w", "parameter", shape("bf16", [4, 32, 16]), parameter_number=1),
                              instr("g", "parameter", shape("s32", [4]), parameter_number=2),
                              instr("rd", "ragged-dot", shape("bf16", [64, 16]), [1, 2, 3],
                                    ragged_dot_dimension_numbers=rd)])
    r = instruction_costs(m).set_index("name").loc["rd"]
    assert r["flops"] == 2 * 64 * 32 * 16


# --- convolutions -------------------------------------------------------------------------------------------
def _conv_fields(target, groups=2):
    dn = hlo_pb2.ConvolutionDimensionNumbers(
        input_batch_dimension=0, input_feature_dimension=1, input_spatial_dimensions=[2, 3],
        kernel_output_feature_dimension=0, kernel_input_feature_dimension=1, kernel_spatial_dimensions=[2, 3],
        output_batch_dimension=0, output_feature_dimension=1, output_spatial_dimensions=[2, 3])
    w = hlo_pb2.Window(dimensions=[hlo_pb2.WindowDimension(size=3, stride=1, padding_low=1, padding_high=1,
                                                            window_dilation=1, base_dilation=1)] * 2)
    cfg = json.dumps({"operation_queue_id": "0", "wait_on_operation_queues": [], "cudnn_conv_backend_config": {
        "activation_mode": "kNone", "conv_result_scale": 1, "side_input_scale": 0, "algorithm": {
            "algo_id": "0", "math_type": "DEFAULT_MATH", "tuning_knobs": {}, "is_cudnn_frontend": True,
            "workspace_size": "0"}, "leakyrelu_alpha": 0}}).encode()
    return dict(custom_call_target=target, convolution_dimension_numbers=dn, window=w, feature_group_count=groups,
                backend_config=cfg)


@pytest.mark.parametrize("target,operands,result", [
    ("__cudnn$convForward", [("x", [2, 8, 16, 16]), ("w", [16, 4, 3, 3])], [2, 16, 16, 16]),
    ("__cudnn$convBackwardInput", [("dy", [2, 16, 16, 16]), ("w", [16, 4, 3, 3])], [2, 8, 16, 16]),
    ("__cudnn$convBackwardFilter", [("x", [2, 8, 16, 16]), ("dy", [2, 16, 16, 16])], [16, 4, 3, 3]),
])
def test_cudnn_conv_forward_and_backward_with_feature_groups(tmp_path, target, operands, result):
    # 2 feature groups: 8 input features, 4 per group; 3x3 window, padding 1 on 16x16: 16*3 - 2 = 46 valid taps
    # per spatial dimension. Same multiply-adds in all three directions.
    o, tr = run(tmp_path, [(n, shape("bf16", d)) for n, d in operands],
                [("cudnn-conv.1", tup(shape("bf16", result), shape("u8", [65536])), [1, 2], _conv_fields(target))])
    r = o.loc["cudnn-conv.1"]
    assert r["flops"] == 2 * 2 * 16 * 4 * 46 * 46
    sizes = {"x": 2 * 8 * 16 * 16, "w": 16 * 4 * 3 * 3, "dy": 2 * 16 * 16 * 16}
    out = {"__cudnn$convForward": "dy", "__cudnn$convBackwardInput": "x", "__cudnn$convBackwardFilter": "w"}[target]
    assert r["bytes_accessed"] == (sizes[operands[0][0]] + sizes[operands[1][0]] + sizes[out]) * 2
    assert r["cost_source"] == "model:cudnn_conv" and r["compute_dtype"] == "bf16"
    assert timeline.is_matmul(tr.ops.assign(cost_source=roofline.join(tr)["cost_source"].to_numpy())).all()


# --- attention ----------------------------------------------------------------------------------------------
def fmha_config(mask, backward=False, b=2, n=8, t=1024, s=1024):
    """cudnn_fmha_backend_config as jax/_src/cudnn/fused_attention_stablehlo.py writes it (BTNH layout)."""
    dims = ([("bmm1_grad_gemm1_dot_dimension_numbers", (2, 1), (0, 1), (0, 2)),
             ("bmm1_grad_gemm2_dot_dimension_numbers", (3, 1), (0, 1), (0, 2)),
             ("bmm2_grad_gemm1_dot_dimension_numbers", (2, 1), (0, 1), (0, 2)),
             ("bmm2_grad_gemm2_dot_dimension_numbers", (3, 3), (0, 2), (0, 2))] if backward else
            [("bmm1_dot_dimension_numbers", (3, 3), (0, 2), (0, 2)),
             ("bmm2_dot_dimension_numbers", (3, 1), (0, 1), (0, 2))])
    cfg = {"algorithm": {"algo_id": "0", "math_type": "TENSOR_OP_MATH", "tuning_knobs": {"17": "1", "24": "0"},
                         "is_cudnn_frontend": True, "workspace_size": "0"},
           "fmha_scale": 0.125, "dropout_rate": 0.0,
           "intermediate_tensor_shape": {"element_type": "BF16", "dimensions": [str(b), str(n), str(t), str(s)],
                                         "tuple_shapes": [], "layout": {"minor_to_major": ["3", "2", "1", "0"]},
                                         "is_dynamic_dimension": [False] * 4},
           "seed": 42, "is_flash_attention": True, "sliding_window_length": 0}
    if mask is not None:
        cfg["mask_type"] = mask
    for key, (lc, rc), lb, rb in dims:
        cfg[key] = {"lhs_contracting_dimensions": [str(lc)], "rhs_contracting_dimensions": [str(rc)],
                    "lhs_batch_dimensions": [str(i) for i in lb], "rhs_batch_dimensions": [str(i) for i in rb]}
    return json.dumps({"operation_queue_id": "0", "wait_on_operation_queues": [],
                       "cudnn_fmha_backend_config": cfg}).encode()


QKV = [("q", shape("bf16", [2, 1024, 8, 64])), ("k", shape("bf16", [2, 1024, 8, 64])),
       ("v", shape("bf16", [2, 1024, 8, 64]))]


def test_cudnn_fmha_forward_causal(tmp_path):
    res = tup(shape("bf16", [2, 8, 1024, 64]), shape("f32", [2, 8, 1024]), shape("u8", [0]))
    o, _ = run(tmp_path, QKV, [("fmha", res, [1, 2, 3], dict(custom_call_target="__cudnn$fmhaSoftmax",
                                                             backend_config=fmha_config("CAUSAL")))])
    r = o.loc["fmha"]
    assert r["flops"] == 4 * 2 * 8 * 1024 * 1024 * 64 / 2
    assert r["bytes_accessed"] == 3 * 2 * 1024 * 8 * 64 * 2 + 2 * 8 * 1024 * 64 * 2 + 2 * 8 * 1024 * 4
    assert r["cost_source"] == "model:cudnn_fmha" and r["compute_dtype"] == "bf16"


def test_cudnn_fmha_causality_unknown_takes_the_lower_end_and_says_so(tmp_path):
    res = tup(shape("bf16", [2, 8, 1024, 64]), shape("u8", [0]))
    o, tr = run(tmp_path, QKV, [("fmha", res, [1, 2, 3], dict(custom_call_target="__cudnn$fmhaSoftmax",
                                                              backend_config=fmha_config(None)))])
    assert o.loc["fmha", "flops"] == 4 * 2 * 8 * 1024 * 1024 * 64 / 2
    note = identity.costs(tr).set_index("op").loc["fmha", "note"]
    assert 4 * 2 * 8 * 1024 * 1024 * 64 / 2 == 2_147_483_648
    lo, hi = "2.15 GFLOP", "4.29 GFLOP"  # the range, with its unit
    assert "causality unknown" in note and lo in note and hi in note
    from tracekit import pipeline
    from tracekit.report.render import text
    out = text.render(pipeline.analyze(tr))  # the report says so, with the range
    flat = " ".join(out.split())  # the note is a paragraph under the table, wrapped to the width
    note = flat[flat.index("__cudnn$fmhaSoftmax: causality unknown"):][:200]
    assert lo in note and hi in note


def test_cudnn_fmha_backward_gqa_no_mask(tmp_path):
    # grouped-query attention: 8 query heads, 2 K/V heads; backward = 2.5 x the forward FLOPs
    params = [("q", shape("bf16", [2, 1024, 8, 64])), ("k", shape("bf16", [2, 1024, 2, 64])),
              ("v", shape("bf16", [2, 1024, 2, 64])), ("stats", shape("f32", [2, 8, 1024])),
              ("do", shape("bf16", [2, 1024, 8, 64])), ("o", shape("bf16", [2, 1024, 8, 64]))]
    res = tup(shape("bf16", [2, 8, 1024, 64]), shape("bf16", [2, 2, 1024, 64]), shape("bf16", [2, 2, 1024, 64]),
              shape("u8", [0]))
    o, _ = run(tmp_path, params, [("fmha-bwd", res, [1, 2, 3, 4, 5, 6],
                                   dict(custom_call_target="__cudnn$fmhaSoftmaxBackward",
                                        backend_config=fmha_config("NO_MASK", backward=True)))])
    r = o.loc["fmha-bwd"]
    assert r["flops"] == 2.5 * 4 * 2 * 8 * 1024 * 1024 * 64
    q, kv = 2 * 1024 * 8 * 64 * 2, 2 * 1024 * 2 * 64 * 2
    assert r["bytes_accessed"] == (q + 2 * kv + 2 * 8 * 1024 * 4 + q + q) + (q + 2 * kv)


def te_attrs(mask=2, b=4, h=16, s=2048, d=128, left=-1, right=-1, training=True):
    """TransformerEngine's FFI attributes (transformer_engine/jax/cpp_extensions/attention.py), printed as MLIR."""
    return (f"{{attn_heads = {h} : i64, bias_batch = 0 : i64, bias_heads = 0 : i64, bias_type = 0 : i64, "
            f"deterministic = false, dropout_probability = 0.000000e+00 : f64, head_dim = {d} : i64, "
            f"input_batch = {b} : i64, is_training = {'true' if training else 'false'}, kv_max_seqlen = {s} : i64, "
            f"mask_type = {mask} : i64, max_segments_per_seq = 1 : i64, num_gqa_groups = {h} : i64, "
            f"q_max_seqlen = {s} : i64, qkv_layout = 9 : i64, scaling_factor = 8.838835e-02 : f64, "
            f"window_size_left = {left} : i64, window_size_right = {right} : i64}}")


def _te_forward(tmp_path, attrs, s=2048, aux=None, raw=True):
    q = shape("bf16", [4, s, 16, 128])
    params = [("q", q), ("k", q), ("v", q), ("bias", shape("bf16", [0])), ("seed", shape("u32", [2])),
              ("q_cu", shape("s32", [5])), ("kv_cu", shape("s32", [5]))]
    aux = aux or shape("f32", [4, 16, s, 1])
    res = tup(q, aux, shape("u32", [1, 4]), shape("u8", [1 << 16]))
    cfg = attrs if raw else json.dumps({"custom_call_backend_config": {"attributes": attrs}})
    return run(tmp_path, params, [("te_fused_attn_forward_ffi.1", res, [1, 2, 3, 4, 5, 6, 7],
                                   dict(custom_call_target="te_fused_attn_forward_ffi",
                                        backend_config=cfg.encode()))])


@pytest.mark.parametrize("raw", [True, False])
def test_te_fused_attn_forward_causal(tmp_path, raw):
    o, _ = _te_forward(tmp_path, te_attrs(), raw=raw)
    r = o.loc["te_fused_attn_forward_ffi.1"]
    assert r["flops"] == 4 * 4 * 16 * 2048 * 2048 * 128 / 2
    qkv = 3 * 4 * 2048 * 16 * 128 * 2
    assert r["bytes_accessed"] == qkv + 2 * 4 + 2 * 5 * 4 + 4 * 2048 * 16 * 128 * 2 + 4 * 16 * 2048 * 4 + 4 * 4
    assert r["cost_source"] == "model:te_fused_attn"


def test_te_fused_attn_max512_softmax_matrix_not_counted(tmp_path):
    aux = shape("bf16", [4, 16, 512, 512])  # the S x S softmax of the max-512 backend
    o, _ = _te_forward(tmp_path, te_attrs(mask=0, s=512), s=512, aux=aux)
    r = o.loc["te_fused_attn_forward_ffi.1"]
    assert r["flops"] == 4 * 4 * 16 * 512 * 512 * 128
    assert r["bytes_accessed"] == 4 * 4 * 512 * 16 * 128 * 2 + 2 * 4 + 2 * 5 * 4 + 4 * 4


def test_te_fused_attn_sliding_window(tmp_path):
    # causal sliding window of 255 keys back: 256 keys per query
    o, _ = _te_forward(tmp_path, te_attrs(mask=2, left=255, right=0))
    assert o.loc["te_fused_attn_forward_ffi.1", "flops"] == 4 * 4 * 16 * 2048 * 256 * 128


def test_te_fused_attn_backward(tmp_path):
    q = shape("bf16", [4, 2048, 16, 128])
    params = [("q", q), ("k", q), ("v", q), ("bias", shape("bf16", [0])), ("aux", shape("f32", [4, 16, 2048, 1])),
              ("rng", shape("u32", [1, 4])), ("o", q), ("do", q)]
    res = tup(q, q, q, shape("bf16", [0]), shape("u8", [1 << 16]))
    o, _ = run(tmp_path, params, [("te_bwd", res, [1, 2, 3, 4, 5, 6, 7, 8],
                                   dict(custom_call_target="te_fused_attn_backward_ffi",
                                        backend_config=te_attrs(mask=0).encode()))])
    r = o.loc["te_bwd"]
    assert r["flops"] == 10 * 4 * 16 * 2048 * 2048 * 128
    t = 4 * 2048 * 16 * 128 * 2
    assert r["bytes_accessed"] == 5 * t + 4 * 16 * 2048 * 4 + 4 * 4 + 3 * t


def test_pallas_triton_attention_range(tmp_path):
    attrs = ('{debug = false, grid_x = 8 : i32, grid_y = 2 : i32, grid_z = 4 : i32, '
             'ir = "ML\\EFR\\00\\01", name = "mha_forward", num_stages = 3 : i32, num_warps = 4 : i32}')
    qkv = [(n, shape("bf16", [2, 512, 4, 64])) for n in "qkv"]
    o, tr = run(tmp_path, qkv, [("pallas", shape("bf16", [2, 512, 4, 64]), [1, 2, 3],
                                 dict(custom_call_target="__gpu$xla.gpu.triton", backend_config=attrs.encode()))])
    r = o.loc["pallas"]
    assert r["flops"] == 4 * 2 * 4 * 512 * 512 * 64 / 2
    assert r["bytes_accessed"] == 4 * 2 * 512 * 4 * 64 * 2
    assert r["cost_source"] == "model:pallas_attention"
    assert "causality unknown" in identity.costs(tr).set_index("op").loc["pallas", "note"]


def test_tpu_pallas_cost_estimate():
    cfg = {"custom_call_config": {"body": "TUxJUg==", "cost_estimate": {
        "bytes_accessed": 1000, "flops": 5000, "remote_bytes_transferred": 0, "transcendentals": 7}}}
    m = synth.module("m", 1, [instr("x", "parameter", shape("bf16", [8, 128])),
                              instr("k", "custom-call", shape("bf16", [8, 128]), [1],
                                    custom_call_target="tpu_custom_call", backend_config=json.dumps(cfg).encode())])
    r = instruction_costs(m).set_index("name").loc["k"]
    # bytes_accessed 1000 is below one read of x and one write of k (2 * 8*128*2 bytes): raised to that floor
    assert (r["flops"], r["transcendentals"], r["bytes_accessed"]) == (5000, 7, 2 * 8 * 128 * 2)
    assert r["cost_model"] == "pallas_cost_estimate"


def test_tpu_pallas_cost_estimate_bytes_above_the_floor_kept():
    cfg = {"custom_call_config": {"cost_estimate": {"bytes_accessed": 10 ** 6, "flops": 5000, "transcendentals": 0}}}
    m = synth.module("m", 1, [instr("x", "parameter", shape("bf16", [8, 128])),
                              instr("k", "custom-call", shape("bf16", [8, 128]), [1],
                                    custom_call_target="tpu_custom_call", backend_config=json.dumps(cfg).encode())])
    r = instruction_costs(m).set_index("name").loc["k"]
    assert (r["flops"], r["bytes_accessed"]) == (5000, 10 ** 6)


def _pallas_matmul_space(tmp_path, flops_stat, bytes_stat, cfg=None):
    """The TPU v6e Pallas matmul of issue 32: x f32[2048,1024] . y f32[1024,2048] -> f32[2048,2048] as a
    ``tpu_custom_call``, its event carrying the author's flops and bytes_accessed stats."""
    fields = {"custom_call_target": "tpu_custom_call"}
    if cfg is not None:
        fields["backend_config"] = json.dumps(cfg).encode()
    ins = [instr("x", "parameter", shape("f32", [2048, 1024]), parameter_number=0),
           instr("y", "parameter", shape("f32", [1024, 2048]), parameter_number=1),
           instr("mm", "custom-call", shape("f32", [2048, 2048]), [1, 2], **fields)]
    b = synth.SpaceBuilder(hostname="t")
    b.hlo_module(synth.module("jit_mm", 9, ins), label="jit_mm(9)")
    p = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite"})
    ln = p.line("XLA Ops")
    ln.event("%mm = f32[2048,2048]{1,0} custom-call(f32[2048,1024]{1,0} %x, f32[1024,2048]{0,1} %y), "
             "custom_call_target=\"tpu_custom_call\"", 0, 76_000_000, display="mm",
             md_stats={"program_id": 9, "flops": flops_stat, "bytes_accessed": bytes_stat})
    f = tmp_path / "t.xplane.pb"
    b.write(f)
    return tracekit.load(f)


@pytest.mark.parametrize("cfg", [None, {"custom_call_config": {"cost_estimate": {
    "flops": 1.08e9, "bytes_accessed": 0, "transcendentals": 0}}}])
def test_pallas_matmul_flops_from_shapes_not_the_authors_estimate(tmp_path, cfg):
    tr = _pallas_matmul_space(tmp_path, 1.08e9, 0.0, cfg)
    o = roofline.join(tr).set_index("op").loc["mm"]
    assert o["flops"] == 2 * 2048 * 1024 * 2048  # 8.59 G, not the stated 1.08 G
    assert o["bytes_accessed"] >= 4 * (2048 * 1024 + 1024 * 2048 + 2048 * 2048)  # not the stated 0
    assert o["cost_source"] == "model:pallas_matmul"
    assert o["compute_dtype"] == "f32"
    ch = roofline.device_chips(tr)[(o["host"], o["device"])]
    f32_peak = precision.peak(ch, "f32")[0]  # the chip's f32 peak, as chips.yaml defines it for the part
    assert f32_peak > 0
    assert o["compute_ps"] == pytest.approx(2 * 2048 * 1024 * 2048 / f32_peak * 1e12, rel=1e-6)
    w = roofline.joined(tr).disagreements  # the trace's flops stat and the shapes' figure, both named
    assert [(x["op"], x["stated_flops"], x["derived_flops"]) for x in w] == [("mm", 1.08e9, 2 * 2048 * 1024 * 2048)]
    assert "1.08e+09" in w[0]["message"] and "8.59e+09" in w[0]["message"] and "flops stat" in w[0]["message"]
    if cfg is not None:  # the author's number, from the kernel's config, named beside the shapes'
        note = identity.costs(tr).set_index("op").loc["mm", "note"]
        assert "1.08e+09" in note and "2*1*2048*1024*2048" in note


def test_pallas_kernel_not_a_matmul_keeps_the_stated_flops_with_a_bytes_floor(tmp_path):
    # a stated bytes_accessed above the floor is kept; the kernel is not a matmul by its shapes: flops stated
    cfg = {"custom_call_config": {"cost_estimate": {"flops": 123.0, "bytes_accessed": 7, "transcendentals": 0}}}
    m = synth.module("m", 1, [instr("x", "parameter", shape("f32", [16, 16])),
                              instr("k", "custom-call", shape("f32", [16]), [1],
                                    custom_call_target="tpu_custom_call", backend_config=json.dumps(cfg).encode())])
    r = instruction_costs(m).set_index("name").loc["k"]
    assert (r["flops"], r["bytes_accessed"], r["cost_model"]) == (123.0, 4 * (16 * 16 + 16), "pallas_cost_estimate")


# --- TopK, sort, unknown ------------------------------------------------------------------------------------
def test_topk_and_radix_sort(tmp_path):
    o, _ = run(tmp_path, [("x", shape("f32", [8, 1000])), ("keys", shape("u32", [1 << 20]))],
               [("topk", tup(shape("f32", [8, 16]), shape("s32", [8, 16])), [1],
                 dict(custom_call_target="TopK")),
                ("sort", tup(shape("u32", [1 << 20]), shape("u8", [123456])), [2],
                 dict(custom_call_target="__cub$DeviceRadixSort"))])
    t = o.loc["topk"]
    assert t["flops"] == 8 * 1000 * 4  # log2(16) = 4 comparisons per element
    assert t["bytes_accessed"] == 8 * 1000 * 4 + 8 * 16 * 4 + 8 * 16 * 4
    s = o.loc["sort"]
    assert s["flops"] == 0 and s["bytes_accessed"] == (1 << 20) * 4 * 2
    assert s["bound_by"] == "memory" and np.isfinite(s["roofline_ps"])


def test_unknown_custom_calls_listed_by_share_of_time(tmp_path):
    o, tr = run(tmp_path, [("a", shape("bf16", [64, 64])), ("b", shape("bf16", [64, 64]))],
                [("mine", shape("bf16", [64, 64]), [1], dict(custom_call_target="my_kernel")),
                 ("gemm", tup(shape("bf16", [64, 64]), shape("s8", [4096])), [1, 2],
                  dict(custom_call_target="__cublas$gemm", backend_config=gemm_config([1], [0])))])
    assert o.loc["mine", "unknown_reason"] == "opaque custom call my_kernel" and math.isnan(o.loc["mine", "flops"])
    s = customcalls.summary(roofline.join(tr), tr.hlo, identity.costs(tr))
    assert [t["target"] for t in s["targets"]] == ["__cublas$gemm", "my_kernel"]  # equal time: by name
    mine = s["targets"][1]
    assert mine["cost_source"] == "unknown" and mine["share"] == pytest.approx(0.5)
    assert mine["unknown_reasons"] == ["opaque custom call my_kernel"] and s["unknown_ps"] == 1_000_000
    assert set(s["models"]) == {"gemm"} and "dot_dimension_numbers" in s["models"]["gemm"]
    from tracekit import pipeline
    rep = pipeline.analyze(tr)
    assert rep.data["custom_calls"]["targets"][1]["target"] == "my_kernel"
    from tracekit.report.render import markdown, text
    assert "my_kernel" in text.render(rep) and "model:gemm" in markdown.render(rep)


def test_mlir_dictionary_attributes():
    d = parse_mlir_dict('{a = 16 : i64, f = 1.250000e-01 : f32, h = 0x3F800000 : f32, s = "x\\22y\\0A", '
                        't = true, u, w = array<i64: 1, -2>, n = {m = 3 : i32}, l = [1 : i32, "z"], '
                        'd = dense<[1, 2]> : tensor<2xi32>}')
    assert d == {"a": 16, "f": 0.125, "h": 1.0, "s": 'x"y\n', "t": True, "u": True, "w": [1, -2], "n": {"m": 3},
                 "l": [1, "z"], "d": "dense < [ 1 , 2 ] > : tensor < 2 xi32 >"}
    assert parse_mlir_dict("{a = ") == {} and parse_mlir_dict("not a dict") == {}
    ins = instr("c", "custom-call", shape("f32"), backend_config=b'{"custom_call_backend_config": '
                                                                 b'{"attributes": "{value = 42 : i32}"}}')
    assert ffi_attributes(ins) == {"value": 42}


# --- real traces --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("rel", ["gpu/mi300x_jax_gemm.xplane.pb", "gpu/mi300x8_jax_conv3d.xplane.pb"])
def test_gpu_trace_roofline_coverage(rel):
    """Share of op time (every synchronous op, runtime kernels without an HLO op included) with a finite predicted
    time from the HLO, a custom-call model or trace stats."""
    tr = tracekit.load(shared_trace(rel))
    o = roofline.join(tr)
    sync = o[~o["is_async"]]
    finite = np.isfinite(sync["roofline_ps"].to_numpy(float))
    assert sync["duration_ps"][finite].sum() / sync["duration_ps"].sum() >= 0.97
    cc = sync[sync["opcode"].astype(str) == "custom-call"]
    assert len(cc) and cc["cost_source"].astype(str).str.startswith("model:").all()
    assert timeline.is_matmul(cc).all()


# --- malformed configs --------------------------------------------------------------------------------------
def _mutations(text: str, rng, n: int):
    for _ in range(n):
        b = bytearray(text.encode())
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(3)
            i = rng.randrange(len(b))
            if op == 0:
                del b[i:i + rng.randint(1, 8)]
            elif op == 1:
                b.insert(i, rng.choice(b'{}[]<>=,:"\\- 0123456789aefx\xff'))
            else:
                b[i] = rng.randrange(256)
        yield bytes(b)


def test_malformed_backend_configs_never_raise():
    """Mutated real-format configs (typed-FFI dictionaries, GpuBackendConfig JSON) give a cost or an unknown cost
    with its reason, never an exception."""
    import random
    rng = random.Random(12)
    q = shape("bf16", [4, 256, 16, 128])
    targets = [("te_fused_attn_forward_ffi", te_attrs(s=256)), ("__cudnn$fmhaSoftmax", fmha_config("CAUSAL").decode()),
               ("__cublas$lt$matmul", gemm_config([3], [3], [0, 2], [0, 2]).decode()),
               ("__gpu$xla.gpu.triton", '{name = "flash_attention", ir = "\\00\\01", num_warps = 4 : i32}')]
    for target, text in targets:
        for cfg in _mutations(text, rng, 50):
            m = synth.module("m", 1, [instr("q", "parameter", q), instr("k", "parameter", q, parameter_number=1),
                                      instr("v", "parameter", q, parameter_number=2),
                                      instr("c", "custom-call", tup(q, shape("u8", [16])), [1, 2, 3],
                                            custom_call_target=target, backend_config=cfg)])
            r = instruction_costs(m).set_index("name").loc["c"]
            assert r["cost_known"] or r["unknown_reason"]


@pytest.mark.parametrize("case", ["fori_loop", "cond_branch", "scan_loop"])
def test_custom_call_share_is_of_op_time_counted_once(case):
    """The custom calls' share is of the op time: each op's own time, once. A loop whose body ops are traced
    (XLA:CPU thunks) held its body's time in its duration too, which doubled the denominator."""
    from conftest import cpu_fixture
    from tracekit import pipeline
    rep = pipeline.analyze(cpu_fixture(case))
    d = rep.data
    assert d["custom_calls"]["op_time_ps"] == d["summary"]["op_time_ps"] == d["summary"]["busy_ps"]
    ops = pipeline.with_roofline(tracekit.load(cpu_fixture(case)))
    sync = ~ops["is_async"]
    nested = int(ops.loc[sync, "duration_ps"].sum()) - int(ops.loc[sync, "self_ps"].sum())
    assert nested > 0  # (the case does nest: a loop or conditional holds traced body ops)
    assert d["custom_calls"]["op_time_ps"] == int(ops.loc[sync, "duration_ps"].sum()) - nested
