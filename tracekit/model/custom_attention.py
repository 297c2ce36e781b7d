"""Cost models of fused-attention custom calls: cuDNN flash attention (``__cudnn$fmha*``), TransformerEngine's
JAX FFI kernels (``te_fused_attn_forward_ffi`` / ``te_fused_attn_backward_ffi``) and Pallas attention kernels whose
operand shapes are readable.

The formula (:func:`attention_cost`), for batch B, query heads H, S_q queries, S_kv keys, head dims D_qk and D_v:

* forward: two matmuls per (query, key) pair, S = Q·Kᵀ and O = P·V: ``FLOPs = 2·B·H·S_q·S_kv·(D_qk + D_v)``,
  i.e. ``4·B·H·S_q·S_kv·D`` when D_qk = D_v = D;
* backward: five, the recomputed Q·Kᵀ, dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q:
  ``2·B·H·S_q·S_kv·(3·D_qk + 2·D_v)`` = 2.5x the forward when D_qk = D_v;
* one exponential per (query, key) pair (transcendentals), forward and backward (recomputed);
* a causal mask halves the pairs; a sliding window of W keys caps the keys per query at W; when the HLO does not
  say whether the mask is causal the FLOPs are a range (causal .. full): the cost takes the causal (lower) end, so
  the predicted time stays a lower bound, and the note says "causality unknown" with both ends;
* bytes: the tensors the kernel reads and writes (Q, K, V, O, the softmax statistics, seqlens, bias; backward
  also dO, dQ, dK, dV, dbias), never the S_q x S_kv probability matrix, which a flash kernel keeps on chip: an
  S×S-sized statistics tensor (the softmax output of non-flash backends) and the workspace are left out.
Padding masks and packed (THD) sequences are priced at the padded/maximum lengths (an upper bound for the FLOPs).
"""
from __future__ import annotations

import math
import re

from tracekit.ingest import backend_config as bc
from tracekit.ingest.hloshape import dtype_name, elements, leaves, nbytes
from tracekit.model.cost_ops import Cost, io_cost
from tracekit.records import record
from tracekit.units import fmt_num

ASSUMPTIONS = {
    "cudnn_fmha": "B, H, S_q, S_kv from CudnnfMHABackendConfig.intermediate_tensor_shape [B, N, T, S], head dims "
                  "from the Q/K/V element counts; causal when mask_type is CAUSAL or PADDING_CAUSAL; FLOPs "
                  "2*B*H*S_q*S_kv*(D_qk+D_v) forward, 2*B*H*S_q*S_kv*(3*D_qk+2*D_v) backward (2.5x), halved when "
                  "causal; bytes from Q, K, V, O (dO, dQ, dK, dV) and the softmax statistics, no S x S matrix",
    "te_fused_attn": "B, H, S_q, S_kv, D_qk, D_v from the Q/K/V operand shapes for the qkv_layout (packed QKV, "
                     "KV-packed or separate), else the FFI attributes input_batch, attn_heads, q_max_seqlen, "
                     "kv_max_seqlen, qk_head_dim/v_head_dim (older TE: head_dim); causal for NVTE mask types 2-5; "
                     "window_size_left/right cap the keys per query; same FLOP and byte formulas as cudnn_fmha; "
                     "padded/packed sequences priced at their maximum lengths",
    "pallas_attention": "a Pallas forward kernel named like attention (flash, splash, mha, attention) with Q, K, V "
                        "as its first three operands; layout assumed [B, S, H, D] on GPU (JAX's Pallas GPU ops) "
                        "and [B, H, S, D] on TPU; causality unknown unless the name says causal (range shown)",
}

#: NVTE_Mask_Type (transformer_engine/common/include/transformer_engine/fused_attn.h): 2 causal, 3 padding+causal,
#: 4 causal bottom-right, 5 padding+causal bottom-right; 0 no mask, 1 padding
_TE_CAUSAL, _TE_NOT_CAUSAL = {2, 3, 4, 5}, {0, 1}
#: NVTE_QKV_Layout values of the packed THD formats (T3HD .. THD_THD_THD, THD_BSHD_BSHD, THD_SBHD_SBHD, paged THD)
_TE_THD = {10, 11, 12, 13, 14, 17, 18, 23, 24}
_ATTN_NAME = re.compile(r"attention|attn|flash|splash|\bmha|_mha|mha_|sdpa", re.I)
_BWD_NAME = re.compile(r"bwd|backward|grad|_dq|_dkv|dkv_|dq_", re.I)


@record(frozen=True)
class Attention:
    """The sizes an attention kernel works on (``window`` 0: no sliding window; ``causal`` None: unknown)."""
    batch: int
    heads: int
    s_q: int
    s_kv: int
    d_qk: int
    d_v: int
    causal: bool | None
    window: int = 0
    backward: bool = False


def cost(inst, oshapes) -> Cost | None:
    """The attention model for ``inst`` when it is a cuDNN or TransformerEngine fused-attention custom call, else
    None (Pallas kernels reach :func:`pallas_attention` through :func:`tracekit.model.custom_calls.pallas_kernel`)."""
    t = inst.custom_call_target
    if t.startswith("__cudnn$fmha"):
        return cudnn_fmha(inst, oshapes)
    if t.startswith("te_fused_attn_") and ("forward" in t or "backward" in t):
        return te_fused_attn(inst, oshapes)
    return None


def attention_cost(a: Attention, read: float, written: float, model: str, dtype: str, note: str = "") -> Cost:
    """FLOPs, exponentials and bytes of one attention call (formulas in the module docstring)."""
    keys = min(a.s_kv, a.window) if a.window > 0 else a.s_kv
    pairs = float(a.batch) * a.heads * a.s_q * keys
    per_pair = 2.0 * (3 * a.d_qk + 2 * a.d_v) if a.backward else 2.0 * (a.d_qk + a.d_v)
    windowed = 0 < a.window < a.s_kv
    half = 1.0 if windowed else 0.5  # a limiting window already bounds the keys per query
    full = pairs * per_pair
    sizes = (f"{'backward' if a.backward else 'forward'} B={a.batch} H={a.heads} S_q={a.s_q} S_kv={a.s_kv} "
             f"D_qk={a.d_qk} D_v={a.d_v}" + (f" window={a.window}" if a.window > 0 else ""))
    if a.causal is None and not windowed:  # the range first: it is what a reader must not miss
        frac = half
        parts = [f"causality unknown: {fmt_num(full * half, 'FLOP')} (causal) to {fmt_num(full, 'FLOP')} (no mask), "
                 "the roofline uses the lower end", sizes]
    else:
        frac = half if a.causal else 1.0
        parts = [sizes, "causal mask" if a.causal else "no causal mask"]
    if note:
        parts.append(note)
    return Cost(flops=full * frac, transcendentals=pairs * frac, bytes_read=read, bytes_written=written,
                model=model, compute_dtype=dtype, note="; ".join(parts),
                flops_hi=full if a.causal is None and not windowed else float("nan"))


def _bytes(arrays, skip: set[int], limit: float) -> float:
    """Bytes of ``arrays`` but those at the indices in ``skip`` that are S×S-sized (>= ``limit`` elements)."""
    return float(sum(nbytes(s) for i, s in enumerate(arrays) if not (i in skip and elements(s) >= limit)))


def _unknown(inst, oshapes, why: str) -> Cost:
    return io_cost(inst, oshapes).unknown(f"{inst.custom_call_target}: {why}", "flops", "transcendentals")


# --- cuDNN --------------------------------------------------------------------------------------------------
def cudnn_fmha(inst, oshapes) -> Cost:
    """cuDNN fused attention (``__cudnn$fmhaSoftmax``, ``...Dropout``, ``...ScaleBias...``, ``...F8`` and their
    ``...Backward`` targets; xla/service/gpu/cublas_cudnn.cc).

    ``GpuBackendConfig.cudnn_fmha_backend_config`` (``CudnnfMHABackendConfig``): ``intermediate_tensor_shape``
    (field 14) is the BMM1 output [B, N, T, S] = (batch, query heads, S_q, S_kv); ``mask_type`` (field 22, enum
    MaskType: CAUSAL, PADDING_CAUSAL are causal) or the older ``is_causal_mask`` (field 21);
    ``sliding_window_length`` (field 24, ignored when <= 0). Operands, as JAX lowers them
    (jax/_src/cudnn/fused_attention_stablehlo.py): forward (Q, K, V, bias?, seqlens?...), results (O, softmax
    statistics when training, workspace); backward (Q, K, V, statistics, dO, bias?, O, seqlens?...), results (dQ,
    dK, dV, dbias?, workspace) (``_dot_product_attention_fwd_cuda_lowering`` / ``..._bwd_cuda_lowering`` @ jax
    0.10.2; the config from ``create_dot_product_attention_backend_config``; fields from
    openxla/xla xla/service/gpu/backend_configs.proto @ 01631ca8, targets from xla/service/gpu/cublas_cudnn.cc
    @ 06db3c83). D_qk = |Q| / (B·H·S_q), K/V heads = |K| / (B·S_kv·D_qk), D_v = |V| / (B·H_kv·S_kv):
    element counts, so any Q/K/V layout reads."""
    t = inst.custom_call_target
    cfg = bc.sub(bc.json_config(inst), "cudnn_fmha_backend_config")
    dims = bc.ints(bc.sub(cfg, "intermediate_tensor_shape"), "dimensions")
    if len(dims) != 4 or min(dims) <= 0 or len(oshapes) < 3:
        return _unknown(inst, oshapes, "no cudnn_fmha_backend_config.intermediate_tensor_shape")
    b, h, s_q, s_kv = dims
    q, k, v = oshapes[:3]
    d_qk = elements(q) // (b * h * s_q)
    h_kv = elements(k) // max(b * s_kv * d_qk, 1)
    d_v = elements(v) // max(b * h_kv * s_kv, 1)
    if d_qk <= 0 or h_kv <= 0 or d_v <= 0:
        return _unknown(inst, oshapes, "Q/K/V sizes do not match intermediate_tensor_shape")
    mask = cfg.get("mask_type")
    if isinstance(mask, str):
        causal = mask in ("CAUSAL", "PADDING_CAUSAL")
    elif isinstance(mask, int):
        causal = mask in (2, 3)
    else:
        causal = cfg["is_causal_mask"] if isinstance(cfg.get("is_causal_mask"), bool) else None
    try:
        window = max(int(cfg.get("sliding_window_length", 0) or 0), 0)
    except (TypeError, ValueError):
        window = 0
    backward = "Backward" in t
    outs = list(leaves(inst.shape))[:-1] if len(list(leaves(inst.shape))) > 1 else list(leaves(inst.shape))
    limit = float(b) * h * s_q * s_kv
    read = _bytes(oshapes, {3} if backward else set(), limit)
    written = _bytes(outs, set() if backward else {1}, limit)
    note = "padding mask: FLOPs at the padded lengths" if isinstance(mask, str) and "PADDING" in mask else ""
    return attention_cost(Attention(b, h, s_q, s_kv, d_qk, d_v, causal, window, backward), read, written,
                          "cudnn_fmha", dtype_name(q.element_type), note)


# --- TransformerEngine --------------------------------------------------------------------------------------
# Read as TransformerEngine's JAX extension lowers its fused attention (NVIDIA/TransformerEngine
# transformer_engine/jax/cpp_extensions/attention.py @ d0067d0d, FusedAttnFwdPrimitive / FusedAttnBwdPrimitive
# ``lowering`` and ``FusedAttnHelper.parse_qkv_aval``; enums from transformer_engine/common/include/
# transformer_engine/fused_attn.h @ d0067d0d). Three generations of the FFI call are in use:
#   * 2024-10 (18c2234c) .. 2025-06: attribute ``head_dim`` (one head dim for Q·K and P·V), forward operands
#     (q, k, v, bias, seed, q_cu_seqlen, kv_cu_seqlen, q_seq_offsets, k_seq_offsets, q/kv segment ids, q/kv
#     segment pos) = 13, backward (q, k, v, bias, softmax_aux, rng_state, output, doutput, seqlens...) = 16;
#   * 2025-06 (1ddfa0c6, MLA): ``qk_head_dim`` and ``v_head_dim`` instead of ``head_dim``;
#   * 2025-11 (15cefbc5, attention sinks): a ``softmax_offset`` operand after ``bias`` (forward 14 operands,
#     backward 17: every later fixed index moves by one), attribute ``softmax_type``.
# Results: forward (output, softmax_aux, rng_state, workspace); backward (dq, dk, dv, dbias[, dsoftmax_offset],
# workspace). The layout (``qkv_layout``, NVTE_QKV_Layout) says where Q, K, V are: packed QKV (3HD: BS3HD, T3HD)
# puts all three in operand 0 as [..., S, 3, H, D] with empty ``[0]`` K and V operands; KV-packed (HD_2HD) puts K
# and V in operand 1 as [..., S_kv, 2, H_kv, D]; separate layouts have [..., S, H, D] each. JAX's TE raises on
# SBHD, so every layout it lowers is batch-first (THD layouts keep the [b, s, h, d] shape).
_TE_3HD, _TE_H3D, _TE_HD_2HD, _TE_HD_H2D = {0, 5, 10}, {1, 6, 11}, {2, 7, 12}, {3, 8, 13}
_TE_SBHD = {0, 1, 2, 3, 4, 15, 18, 20, 21, 22, 24}  #: layouts whose Q (or K/V) is sequence-first


def te_shapes(oshapes, layout) -> tuple | None:
    """(B, H, H_kv, S_q, S_kv, D_qk, D_v) read from the Q/K/V operand shapes for the NVTE layout ``layout``, or
    None when the layout is not one JAX's TE lowers batch-first or the shapes do not fit it."""
    if not isinstance(layout, int) or layout in _TE_SBHD or len(oshapes) < 3:
        return None
    q, k, v = (list(s.dimensions) for s in oshapes[:3])
    try:
        if layout in _TE_3HD | _TE_H3D:  # [*b, S, 3, H, D] (or [*b, S, H, 3, D])
            *b, s, x, y, d = q
            three, h = (x, y) if layout in _TE_3HD else (y, x)
            if three != 3:
                return None
            return math.prod(b), h, h, s, s, d, d
        *bq, s_q, h, d_qk = q
        if layout in _TE_HD_2HD | _TE_HD_H2D:  # K and V together in operand 1
            *bk, s_kv, x, y, d_v = k
            two, h_kv = (x, y) if layout in _TE_HD_2HD else (y, x)
            if two != 2 or bk != bq:
                return None
        else:  # separate: [*b, S, H, D] each
            *bk, s_kv, h_kv, d_k = k
            *bv, s_v, h_v, d_v = v
            if bk != bq or bv != bq or d_k != d_qk or s_v != s_kv or h_v != h_kv:
                return None
    except ValueError:  # too few dimensions for the layout
        return None
    return math.prod(bq), h, h_kv, s_q, s_kv, d_qk, d_v


def te_attribute_sizes(a: dict) -> tuple | None:
    """(B, H, H_kv, S_q, S_kv, D_qk, D_v) from the FFI attributes, the old ``head_dim`` or the new ``qk_head_dim``
    / ``v_head_dim``; None when they are not all readable."""
    d_qk = a.get("qk_head_dim", a.get("head_dim"))
    d_v = a.get("v_head_dim", a.get("head_dim"))
    vals = (a.get("input_batch"), a.get("attn_heads"), a.get("num_gqa_groups", a.get("attn_heads")),
            a.get("q_max_seqlen"), a.get("kv_max_seqlen"), d_qk, d_v)
    return vals if all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in vals) else None


def te_fused_attn(inst, oshapes) -> Cost:
    """TransformerEngine JAX fused attention, typed FFI (``te_fused_attn_forward_ffi`` /
    ``te_fused_attn_backward_ffi``), as the comment above this function describes the lowering.

    Sizes from the Q/K/V operand shapes for the ``qkv_layout`` (:func:`te_shapes`), else from the FFI attributes
    ``input_batch``, ``attn_heads``, ``num_gqa_groups``, ``q_max_seqlen``, ``kv_max_seqlen`` and ``qk_head_dim`` /
    ``v_head_dim`` (older TE: ``head_dim`` for both); when both read and differ, the shapes win and the note says
    so. ``mask_type`` (NVTE_Mask_Type: 2-5 causal), ``window_size_left`` / ``window_size_right`` (-1: unbounded)
    cap the keys per query. Bytes: every operand and result but the workspace (the last result) and an S×S-sized
    softmax_aux (the max-512 backend's softmax; the arbitrary-seqlen backend's is [B, H, S_q, 1]): forward result
    1, backward operand 4 (older) or 5 (with ``softmax_offset``: 17 operands)."""
    t = inst.custom_call_target
    a = bc.ffi_attributes(inst)
    from_shapes = te_shapes(oshapes, a.get("qkv_layout"))
    from_attrs = te_attribute_sizes(a)
    sizes = from_shapes or from_attrs
    if sizes is None:
        return _unknown(inst, oshapes, "neither the Q/K/V shapes for its qkv_layout nor the FFI attributes "
                                       "input_batch/attn_heads/q_max_seqlen/kv_max_seqlen/qk_head_dim (head_dim) "
                                       "give the attention sizes")
    b, h, _h_kv, s_q, s_kv, d_qk, d_v = sizes
    notes = []
    if from_shapes and from_attrs and tuple(from_shapes) != tuple(from_attrs):
        notes.append(f"the FFI attributes say (B, H, H_kv, S_q, S_kv, D_qk, D_v) = {tuple(from_attrs)}, the "
                     f"operand shapes {tuple(from_shapes)}: the shapes are used")
    mask = a.get("mask_type")
    causal = True if mask in _TE_CAUSAL else False if mask in _TE_NOT_CAUSAL else None
    left, right = a.get("window_size_left", -1), a.get("window_size_right", -1)
    left, right = (left if isinstance(left, int) else -1), (right if isinstance(right, int) else -1)
    window = left + max(right, 0) + 1 if left >= 0 and (right >= 0 or causal) else 0
    backward = "backward" in t
    arrays = list(leaves(inst.shape))
    outs = arrays[:-1] if len(arrays) > 1 else arrays  # the last result is the workspace
    limit = float(b) * h * s_q * s_kv
    aux = 5 if len(oshapes) >= 17 else 4  # softmax_aux follows bias (and softmax_offset, in newer TE)
    read = _bytes(oshapes, {aux} if backward else set(), limit)
    written = _bytes(outs, set() if backward else {1}, limit)
    if mask in (1, 3, 5) or a.get("qkv_layout") in _TE_THD:
        notes.append("padded/packed sequences: FLOPs at the maximum lengths")
    dtype = dtype_name(oshapes[0].element_type) if oshapes else ""
    return attention_cost(Attention(b, h, s_q, s_kv, d_qk, d_v, causal, window, backward), read, written,
                          "te_fused_attn", dtype, "; ".join(notes))


# --- Pallas -------------------------------------------------------------------------------------------------
def kernel_name(inst) -> str:
    """What names a Pallas kernel in the HLO: the Triton call's ``name`` attribute, the frontend attributes, the
    op_name of the metadata."""
    parts = []
    if inst.custom_call_target in ("__gpu$xla.gpu.triton",):
        n = bc.ffi_attributes(inst).get("name")
        if isinstance(n, str):
            parts.append(n)
    parts.extend(str(v) for v in inst.frontend_attributes.map.values())
    parts.append(inst.metadata.op_name)
    return " ".join(p for p in parts if p)


def pallas_attention(inst, oshapes, platform: str) -> Cost | None:
    """A Pallas (Triton / Mosaic GPU / Mosaic TPU) forward attention kernel: named like attention, its first
    three operands Q, K, V of rank 4 (or 3, one batch) with Q and K sharing the head dim and K, V the same keys.
    Layout [B, S, H, D] on GPU (JAX's Pallas GPU attention ops), [B, H, S, D] on TPU (Pallas TPU flash/splash);
    causal only when the name says so, else unknown (range). None when the kernel does not look like attention;
    a backward kernel stays unknown (how the backward work is split over its kernels is not readable)."""
    name = kernel_name(inst)
    if not _ATTN_NAME.search(name) or len(oshapes) < 3:
        return None
    if _BWD_NAME.search(name):
        return _unknown(inst, oshapes, "Pallas attention backward kernel (its share of the backward work is not "
                                       "readable)")
    q, k, v = (list(s.dimensions) for s in oshapes[:3])
    if len(q) not in (3, 4) or len(k) != len(q) or len(v) != len(q) or q[-1] != k[-1] or k[:-1] != v[:-1]:
        return None
    if len(q) == 3:
        q, k, v = [1] + q, [1] + k, [1] + v
    if platform == "gpu":   # [B, S, H, D]
        b, s_q, h, s_kv, h_kv = q[0], q[1], q[2], k[1], k[2]
    else:                   # [B, H, S, D]
        b, h, s_q, h_kv, s_kv = q[0], q[1], q[2], k[1], k[2]
    if b != k[0] or h_kv <= 0 or h % h_kv:
        return None
    causal = True if re.search(r"causal", name, re.I) else None
    outs = list(leaves(inst.shape))
    read = float(sum(nbytes(s) for s in oshapes))
    written = float(sum(nbytes(s) for s in outs))
    return attention_cost(Attention(b, h, s_q, s_kv, q[3], v[3], causal), read, written, "pallas_attention",
                          dtype_name(oshapes[0].element_type), f"kernel {name.split()[0] if name else '?'}; "
                          f"layout {'[B, S, H, D]' if platform == 'gpu' else '[B, H, S, D]'} assumed")
