"""Opaque kernels as their libraries really emit them (issue 32): the fixtures of ``fixtures/capture_kernels.py``
hold HLO that JAX's own lowering produced (Pallas on TPU and Triton, cuDNN attention, TransformerEngine's FFI calls
through ``jax.ffi.ffi_lowering`` with TE's operands and attributes) or that XLA's GPU rewrites write (cuBLAS /
cuBLASLt / hipBLASLt GEMMs, cuDNN convolution) around a lowered dot or convolution. Every family's kernels are
100 % covered, and their FLOPs and bytes equal the arithmetic written out here from the shapes the script chose
(``fixtures/kernels/cases.json`` lists them)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import tracekit
from tracekit import pipeline
from tracekit.analysis import coverage
from tracekit.ingest.backend_config import ffi_attributes
from tracekit.model import identity, roofline
from tracekit.model.custom_attention import te_fused_attn
from tracekit.proto import hlo_pb2

KERNELS = Path(__file__).resolve().parents[1] / "fixtures" / "kernels"
RUNS = 3  #: executions of each kernel (fixtures/capture_kernels.py RUNS)
BF16, F16, F32, U32, S32, FP8 = 2, 2, 4, 4, 4, 1  #: bytes per element


def join(family: str):
    tr = tracekit.load(KERNELS / family / "kernels.xplane.pb")
    ops = roofline.join(tr)
    return tr, ops, ops[~ops["is_async"].to_numpy(bool)].drop_duplicates(["module", "op"]).set_index("module")


def expect(rows, module: str, flops: float, nbytes: float, source: str):
    r = rows.loc[module]
    assert r["cost_source"] == source, (module, r["cost_source"], r["unknown_reason"])
    assert r["flops"] == flops, (module, r["flops"], flops)
    assert r["bytes_accessed"] == nbytes, (module, r["bytes_accessed"], nbytes)
    assert np.isfinite(r["roofline_ps"]) and r["bound_by"] != "unknown"


@pytest.mark.parametrize("family", ["pallas_tpu", "triton", "cudnn_fmha", "te_attention", "cublas", "hipblaslt",
                                    "cudnn_conv"])
def test_every_family_fully_covered(family):
    _, ops, rows = join(family)
    cov = coverage.summarize(coverage.parts(ops))
    assert cov["overall"] == 1.0 and [d["coverage"] for d in cov["devices"]] == [1.0]
    assert len(ops) == RUNS * len(rows) and (ops["opcode"].astype(str) == "custom-call").all()
    rep = pipeline.analyze(KERNELS / family / "kernels.xplane.pb").data
    assert rep["summary"]["roofline_coverage"] == 1.0


def test_pallas_tpu_matmul_shapes_over_the_authors_estimate():
    """The issue's kernel: x f32[2048,1024] . y f32[1024,2048]; its author's CostEstimate (in the lowered backend
    config) and the trace's stats say 1.08 GFLOP and 0 bytes."""
    tr, ops, rows = join("pallas_tpu")
    expect(rows, "jit_pallas_matmul", 2 * 2048 * 1024 * 2048, F32 * (2048 * 1024 + 1024 * 2048 + 2048 * 2048),
           "model:pallas_matmul")
    assert rows.loc["jit_pallas_matmul", "compute_dtype"] == "f32"
    warned = {(w["module"], w["stated_source"]): w for w in roofline.joined(tr).disagreements}
    assert set(warned) == {("jit_pallas_matmul", "the trace's flops stat"),
                           ("jit_pallas_matmul", "the kernel's cost_estimate (backend config)")}
    for w in warned.values():
        assert (w["stated_flops"], w["derived_flops"], w["used"]) == (1.08e9, 2 * 2048 * 1024 * 2048, "shapes")
        assert "1.08e+09" in w["message"] and "8.59e+09" in w["message"]
    rep = pipeline.analyze(tr).data  # the warnings reach the report
    assert sum("pallas_call.1 (jit_pallas_matmul)" in w for w in rep["warnings"]) == 2


def test_pallas_tpu_flash_attention_keeps_its_authors_figure():
    """JAX's Pallas TPU flash attention: its op name does not say attention, so nothing checks its author's
    CostEstimate, which prices it (read here from the raw backend config); its bytes are not below q, k, v, o."""
    tr, _, rows = join("pallas_tpu")
    call = next(i for m in tr.hlo_modules if m.name == "jit_tpu_flash_attention" for c in m.proto.computations
                for i in c.instructions if i.opcode == "custom-call")
    est = json.loads(call.backend_config)["custom_call_config"]["cost_estimate"]
    b, h, s, d = 2, 4, 512, 128
    assert est["bytes_accessed"] == 4 * b * h * s * d * BF16
    expect(rows, "jit_tpu_flash_attention", float(est["flops"]), 4 * b * h * s * d * BF16, "trace")


def test_triton_matmul_and_attention():
    tr, _, rows = join("triton")
    expect(rows, "jit_triton_matmul", 2 * 512 * 256 * 384, F16 * (512 * 256 + 256 * 384 + 512 * 384),
           "model:pallas_matmul")
    b, s, h, d = 2, 1024, 4, 64  # mha [B, S, H, D]; its name (mha_forward) does not say causal: the lower end
    expect(rows, "jit_triton_mha", 2 * b * h * s * s * (d + d) / 2, 4 * b * s * h * d * F16, "model:pallas_attention")
    costs = identity.costs(tr).set_index(["program_id", "op"])
    note = costs.loc[(22, rows.loc["jit_triton_mha", "op"]), "note"]
    assert "causality unknown" in note and "mha_forward" in note
    assert roofline.joined(tr).disagreements == ()


def test_cudnn_fmha_forward_and_backward_gqa():
    _, _, rows = join("cudnn_fmha")
    rows = rows.reset_index().set_index("op")
    b, s, h, hk, d = 2, 1024, 8, 2, 128
    q, kv, stats = b * s * h * d * BF16, b * s * hk * d * BF16, b * h * s * F32
    fwd = rows.loc[[o for o in rows.index if "fwd" in o][0]]
    bwd = rows.loc[[o for o in rows.index if "bwd" in o][0]]
    assert fwd["flops"] == 2 * b * h * s * s * (d + d) / 2  # causal
    assert fwd["bytes_accessed"] == q + 2 * kv + q + stats  # Q, K, V; O and the softmax statistics
    assert bwd["flops"] == 2 * b * h * s * s * (3 * d + 2 * d) / 2
    assert bwd["bytes_accessed"] == (q + 2 * kv + stats + q + q) + (q + 2 * kv)  # Q K V stats dO O; dQ dK dV
    assert {fwd["cost_source"], bwd["cost_source"]} == {"model:cudnn_fmha"}


def test_transformer_engine_layouts_and_generations():
    tr, _, rows = join("te_attention")
    seed, cu = 2 * U32, 3 * S32  # the seed u32[2]; each cu_seqlens s32[b + 1] (b = 2)
    # separate BSHD, 16 query / 4 K/V heads, D_qk 192, D_v 128 (MLA), causal
    b, s, h, hk = 2, 2048, 16, 4
    read = b * s * h * 192 * BF16 + b * s * hk * 192 * BF16 + b * s * hk * 128 * BF16 + seed + 2 * cu
    written = b * s * h * 128 * BF16 + b * h * s * F32 + 2 * 4 * U32
    expect(rows, "jit_te_separate_gqa_mla", 2 * b * h * s * s * (192 + 128) / 2, read + written,
           "model:te_fused_attn")
    # packed BS3HD: Q, K and V in operand 0 [b, s, 3, h, d], empty [0] K and V operands; no mask
    b, s, h, d = 4, 1024, 8, 128
    read = b * s * 3 * h * d * BF16 + seed + 2 * 5 * S32
    written = b * s * h * d * BF16 + b * h * s * F32 + 2 * 4 * U32
    expect(rows, "jit_te_packed_qkv", 2 * b * h * s * s * (d + d), read + written, "model:te_fused_attn")
    # KV-packed BSHD_BS2HD, causal sliding window (255 keys back, none ahead): 256 keys per query
    b, s, h, d = 2, 4096, 8, 64
    read = b * s * h * d * BF16 + b * s * 2 * h * d * BF16 + seed + 2 * cu
    written = b * s * h * d * BF16 + b * h * s * F32 + 2 * 4 * U32
    expect(rows, "jit_te_kvpacked_window", 2 * b * h * s * 256 * (d + d), read + written, "model:te_fused_attn")
    # the older generation: attribute head_dim, 13 operands
    b, s, h, d = 2, 1024, 16, 64
    read = 3 * b * s * h * d * BF16 + seed + 2 * cu
    written = b * s * h * d * BF16 + b * h * s * F32 + 2 * 4 * U32
    expect(rows, "jit_te_head_dim_older", 2 * b * h * s * s * (d + d) / 2, read + written, "model:te_fused_attn")
    # backward with softmax_offset (17 operands): q k v bias offset aux rng o do ...; dq dk dv dbias doffset
    b, s, h, hk, d = 2, 2048, 16, 4, 128
    q, kv = b * s * h * d * BF16, b * s * hk * d * BF16
    read = q + 2 * kv + b * h * s * F32 + 2 * 4 * U32 + 2 * q + 2 * cu
    written = q + 2 * kv
    expect(rows, "jit_te_backward", 2 * b * h * s * s * (3 * d + 2 * d) / 2, read + written, "model:te_fused_attn")
    assert roofline.joined(tr).disagreements == ()


def _te_instruction(module: str):
    tr = tracekit.load(KERNELS / "te_attention" / "kernels.xplane.pb")
    m = next(m for m in tr.hlo_modules if m.name == module)
    shapes = {i.id: i.shape for c in m.proto.computations for i in c.instructions}
    inst = next(i for c in m.proto.computations for i in c.instructions if i.opcode == "custom-call")
    return inst, [shapes[o] for o in inst.operand_ids]


def test_transformer_engine_attributes_when_the_shapes_do_not_read():
    """A sequence-first layout (SBHD_SBHD_SBHD, NVTE value 4) is not read from shapes: the attributes give the
    sizes, new names (qk_head_dim / v_head_dim) and old (head_dim) alike."""
    for module, d_qk, d_v in (("jit_te_separate_gqa_mla", 192, 128), ("jit_te_head_dim_older", 64, 64)):
        inst, oshapes = _te_instruction(module)
        sbhd = hlo_pb2.HloInstructionProto()
        sbhd.CopyFrom(inst)
        sbhd.backend_config = re.sub(rb"qkv_layout = \d+", b"qkv_layout = 4", inst.backend_config)
        a = ffi_attributes(sbhd)
        assert a["qkv_layout"] == 4 and (a.get("qk_head_dim", a.get("head_dim")), a.get("v_head_dim", a.get(
            "head_dim"))) == (d_qk, d_v)
        c = te_fused_attn(sbhd, oshapes)
        b, h, s_q, s_kv = a["input_batch"], a["attn_heads"], a["q_max_seqlen"], a["kv_max_seqlen"]
        assert c.flops == 2 * b * h * s_q * s_kv * (d_qk + d_v) / 2 and c.model == "te_fused_attn"


def test_transformer_engine_attributes_that_contradict_the_shapes_are_named():
    inst, oshapes = _te_instruction("jit_te_packed_qkv")
    wrong = hlo_pb2.HloInstructionProto()
    wrong.CopyFrom(inst)
    wrong.backend_config = inst.backend_config.replace(b"attn_heads = 8", b"attn_heads = 4")
    c = te_fused_attn(wrong, oshapes)
    b, s, h, d = 4, 1024, 8, 128  # the shapes' 8 heads
    assert c.flops == 2 * b * h * s * s * (d + d) and "the shapes are used" in c.note and "FFI attributes" in c.note


def test_cublas_and_cublaslt_gemms():
    _, _, rows = join("cublas")
    expect(rows, "jit_gemm_bf16", 2 * 1024 * 512 * 768, BF16 * (1024 * 512 + 512 * 768 + 1024 * 768), "model:gemm")
    expect(rows, "jit_batched_gemm_bf16", 2 * 8 * 256 * 128 * 320, BF16 * 8 * (256 * 128 + 128 * 320 + 256 * 320),
           "model:gemm")
    # FP8 e4m3 x e4m3 -> bf16: the two f32 scale operands are read, never multiplied in; the FP8 peak
    expect(rows, "jit_gemm_fp8", 2 * 2048 * 1024 * 4096,
           FP8 * (2048 * 1024 + 1024 * 4096) + 2 * F32 + BF16 * 2048 * 4096, "model:gemm_fp8")
    assert rows.loc["jit_gemm_fp8", "compute_dtype"] == "f8e4m3fn"
    expect(rows, "jit_gemm_f32", 2 * 768 * 1024 * 256, F32 * (768 * 1024 + 1024 * 256 + 768 * 256), "model:gemm")


def test_hipblaslt_gemm_on_mi300x():
    _, _, rows = join("hipblaslt")
    expect(rows, "jit_gemm_f32", 2 * 768 * 1024 * 256, F32 * (768 * 1024 + 1024 * 256 + 768 * 256), "model:gemm")
    assert str(rows.loc["jit_gemm_f32", "device_kind"]).lower().startswith("amd")


def test_cudnn_convolution_forward():
    _, _, rows = join("cudnn_conv")
    # 3x3 SAME over 56x56: per spatial dimension 56 * 3 - 2 (output, tap) pairs land on the image, not the padding
    taps = (56 * 3 - 2) ** 2
    expect(rows, "jit_conv_nhwc", 2 * 8 * 128 * 64 * taps,
           BF16 * (8 * 56 * 56 * 64 + 3 * 3 * 64 * 128 + 8 * 56 * 56 * 128), "model:cudnn_conv")


def test_uncosted_custom_kernel_rule():
    """TK025 names the kernel priced only by its author (the flash attention, 40 of the 116 us of op time per run),
    and stays silent where every custom kernel is priced from its shapes."""
    rep = pipeline.analyze(KERNELS / "pallas_tpu" / "kernels.xplane.pb").data
    f = [x for x in rep["findings"] if x["rule_id"] == "TK025"]
    assert len(f) == 1 and "pallas_call.1" in f[0]["message"] and "34.5%" in f[0]["message"], f
    assert "CostEstimate" in f[0]["fix"]
    for family in ("triton", "cudnn_fmha", "te_attention", "cublas", "cudnn_conv"):
        rep = pipeline.analyze(KERNELS / family / "kernels.xplane.pb").data
        assert not [x for x in rep["findings"] if x["rule_id"] == "TK025"], family


def test_pod_report_names_the_disagreement(tmp_path):
    """The author-versus-shapes warning reaches a pod's report too, once however many hosts ran the kernel."""
    from tracekit.run import pod
    data = (KERNELS / "pallas_tpu" / "kernels.xplane.pb").read_bytes()
    for host in ("h0", "h1"):
        (tmp_path / f"{host}.xplane.pb").write_bytes(data)
    rep = pod.analyze(tmp_path, jobs=1).data
    single = pipeline.analyze(tmp_path).data
    mine = [w for w in rep["model_warnings"] if "jit_pallas_matmul" in w.get("message", "")]
    assert len(mine) == 2 and mine == [w for w in single["model_warnings"] if "jit_pallas_matmul" in
                                       w.get("message", "")]


def test_transformer_engine_attributes_inside_a_gpu_backend_config():
    """XLA may hold a typed-FFI call's attributes inside GpuBackendConfig.custom_call_backend_config.attributes
    (backend_configs.proto) instead of the raw dictionary JAX writes: the same cost either way."""
    inst, oshapes = _te_instruction("jit_te_separate_gqa_mla")
    wrapped = hlo_pb2.HloInstructionProto()
    wrapped.CopyFrom(inst)
    wrapped.backend_config = json.dumps({"operation_queue_id": "0", "custom_call_backend_config": {
        "attributes": inst.backend_config.decode()}}).encode()
    a, b = te_fused_attn(inst, oshapes), te_fused_attn(wrapped, oshapes)
    assert (b.flops, b.bytes_read, b.bytes_written) == (a.flops, a.bytes_read, a.bytes_written)
    assert a.flops == 2 * 2 * 16 * 2048 * 2048 * (192 + 128) / 2


def test_transformer_engine_softmax_matrix_never_counted():
    """TE's max-512 backend (removed since) returned the S×S softmax as softmax_aux ([b, h, s_q, s_kv] in Q's
    dtype): a flash kernel's bytes never include it. The fixture's older-generation call with that result."""
    inst, oshapes = _te_instruction("jit_te_head_dim_older")
    ss = hlo_pb2.HloInstructionProto()
    ss.CopyFrom(inst)
    aux = ss.shape.tuple_shapes[1]
    b, s, h, d = 2, 1024, 16, 64
    aux.element_type, aux.dimensions[:] = hlo_pb2.PrimitiveType.BF16, [b, h, s, s]
    c, full = te_fused_attn(ss, oshapes), te_fused_attn(inst, oshapes)
    assert c.bytes_written == full.bytes_written - b * h * s * F32  # the [b, h, s, 1] statistics gone, no S×S
    assert c.flops == full.flops == 2 * b * h * s * s * (d + d) / 2
