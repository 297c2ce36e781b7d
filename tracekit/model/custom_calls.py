"""Cost models for the opaque kernels XLA reaches through custom calls: vendor GEMMs (cuBLAS, cuBLASLt, hipBLASLt,
FP8 and MX block-scaled GEMMs, grouped GEMMs for MoE), cuDNN convolutions, fused attention (in
:mod:`tracekit.model.custom_attention`), TopK, CUB radix sort, and Pallas/Mosaic TPU kernels that carry their
author's cost estimate.

Each model is a small function with its formula in the docstring; its name becomes the op's provenance
(``cost_source = model:<name>``) and :data:`ASSUMPTIONS` says, in one line each, what it assumes (the report lists
the models it used with these lines). A model also sets ``compute_dtype``: the operand element type, whose peak
the FLOPs run at (a bf16 x bf16 -> f32 GEMM runs at the bf16 peak, an FP8 one at the FP8 peak).

The backend configs are read as XLA writes them (see :mod:`tracekit.ingest.backend_config`): GPU custom calls carry a
``xla.gpu.GpuBackendConfig`` (``xla/service/gpu/backend_configs.proto``) as JSON. Targets are XLA's own names
(``xla/service/gpu/cublas_cudnn.cc``; on ROCm XLA emits hipBLASLt GEMMs under the same ``__cublas$...`` targets).
Any other target stays unknown (NaN FLOPs, operand/result bytes kept) with the reason ``opaque custom call <target>``.
"""
from __future__ import annotations

import math

from tracekit.ingest import backend_config as bc
from tracekit.ingest.hloshape import dtype_name, elements, leaves, nbytes
from tracekit.model import custom_attention as attn
from tracekit.model.cost_ops import Cost, conv_flops, dot_flops, io_cost, is_complex, ragged_dot_flops
from tracekit.proto import hlo_pb2

PT = hlo_pb2.PrimitiveType

#: GEMM targets: GpuBackendConfig.gemm_backend_config (GemmBackendConfig) carries the dot dimension numbers
GEMM_TARGETS = {"__cublas$gemm": "gemm", "__cublas$lt$matmul": "gemm", "__cublas$lt$matmul$f8": "gemm_fp8",
                "__cublas$lt$matmul$mx": "gemm_mx"}
#: grouped GEMM (ragged dot): GpuBackendConfig.grouped_gemm_backend_config
GROUPED_GEMM_TARGETS = {"__cublas$lt$groupedMatmul"}
#: cuDNN convolutions (CudnnConvKind in xla/service/gpu/cublas_cudnn.cc); window and dimension numbers are the
#: instruction's own ``window`` / ``convolution_dimension_numbers`` / ``feature_group_count``
CONV_TARGETS = {"__cudnn$convForward": "forward", "__cudnn$convBiasActivationForward": "forward",
                "__cudnn$convForwardGraph": "forward", "__cudnn$convBackwardInput": "backward_input",
                "__cudnn$convBackwardFilter": "backward_filter"}
TOPK_TARGETS = {"TopK", "__gpu$TopK"}
SORT_TARGETS = {"__cub$DeviceRadixSort"}
#: models whose ops are matrix multiplications (every matmul rule sees them: ``is_matmul``)
MATMUL_MODELS = ("gemm", "gemm_fp8", "gemm_mx", "grouped_gemm", "cudnn_conv", "pallas_matmul")
#: models whose FLOPs come from the op's own shapes: they win over a flops stat the trace states for the op (a
#: kernel author's estimate is evidence, not truth), and their bytes are a floor under the trace's bytes
SHAPE_MODELS = ("pallas_matmul",)

ASSUMPTIONS = {
    "gemm": "FLOPs 2*batch*M*N*K from GemmBackendConfig.dot_dimension_numbers and the operand shapes; bytes = "
            "operands (A, B, the C addend, bias) + results without the workspace; epilogue ops not counted; "
            "peak of the operand dtype",
    "gemm_fp8": "as gemm; the scale operands (a/b/c/d_scale) are read (their bytes counted) but never multiplied "
                "into the FLOPs; peak of the FP8 operand dtype",
    "gemm_mx": "as gemm for MX block-scaled operands; the block-scale tensors are read, not multiplied in",
    "grouped_gemm": "ragged dot: 2*prod(lhs dims)*N, the ragged dimension counted once (each row meets one "
                    "group's matrix); bytes = operands (all group matrices) + results without the workspace",
    "cudnn_conv": "FLOPs of the forward convolution (backward-input and backward-filter do the same MACs): "
                  "2*batch*out_features*in_features_per_group*valid window taps, padding and dilation holes "
                  "excluded, feature groups through the kernel's per-group input features; bias/activation "
                  "epilogue not counted",
    "topk": "rows*n*max(1, ceil(log2 k)) comparisons as FLOPs (a heap-style selection); bytes = input + values + "
            "indices",
    "cub_radix_sort": "no FLOPs (radix sort compares nothing); bytes = one read of the inputs and one write of "
                      "the results: a lower bound (CUB moves the keys once per radix pass)",
    "pallas_cost_estimate": "the kernel author's cost_estimate from the Pallas/Mosaic TPU custom call config "
                            "(flops, transcendentals); bytes = the larger of its bytes_accessed and one read of "
                            "the operands plus one write of the results",
    "pallas_matmul": "a Pallas/Mosaic kernel whose shapes are a matmul ([.., M, K] . [.., K, N] -> [.., M, N]): "
                     "FLOPs 2*batch*M*K*N from the shapes whatever the author's estimate says; bytes = the larger "
                     "of the estimate and one read of the operands plus one write of the result; peak of the "
                     "operand dtype (a Pallas kernel picks its own precision)",
    **attn.ASSUMPTIONS,
}


def cost(inst, oshapes) -> Cost:
    """Cost of one execution of the custom call ``inst`` (operand shapes ``oshapes``)."""
    t = inst.custom_call_target
    try:
        if t in GEMM_TARGETS:
            return gemm(inst, oshapes, GEMM_TARGETS[t])
        if t in GROUPED_GEMM_TARGETS:
            return grouped_gemm(inst, oshapes)
        if t in CONV_TARGETS and len(oshapes) >= 2 and inst.HasField("convolution_dimension_numbers"):
            return cudnn_conv(inst, oshapes, CONV_TARGETS[t])
        if t in TOPK_TARGETS:
            return topk(inst, oshapes)
        if t in SORT_TARGETS:
            return cub_radix_sort(inst, oshapes)
        c = pallas_kernel(inst, oshapes) if t == "tpu_custom_call" else None
        c = c if c is not None else attn.cost(inst, oshapes)
        if c is not None:
            return c
    except (IndexError, KeyError, ValueError, TypeError, ZeroDivisionError, OverflowError) as e:
        why = f"{type(e).__name__}: {e}"[:120]
        return io_cost(inst, oshapes).unknown(f"custom call {t}: no cost ({why})", "flops", "transcendentals")
    return io_cost(inst, oshapes, note="bytes are the operand and result sizes").unknown(
        f"opaque custom call {t}", "flops", "transcendentals")


# --- shared pieces ------------------------------------------------------------------------------------------
def results(inst, workspace: bool = True) -> list:
    """The result arrays, without the trailing scratch buffer XLA appends to library calls (a rank-1 u8/s8 array
    as the last element of a tuple result: cuBLAS workspace, cuDNN scratch) when ``workspace``."""
    out = list(leaves(inst.shape))
    if workspace and inst.shape.element_type == PT.TUPLE and len(out) > 1 and \
            out[-1].element_type in (PT.U8, PT.S8) and len(out[-1].dimensions) == 1:
        out = out[:-1]
    return out


def wider_dtype(*shapes) -> str:
    """The operand element type with the most bits: its peak is the one the math runs at (fp8 x bf16 -> bf16)."""
    names = [dtype_name(s.element_type) for s in shapes]
    bits = {"f8": 8, "f4": 4, "s8": 8, "u8": 8, "s4": 4, "u4": 4, "f16": 16, "bf16": 16, "f32": 32, "f64": 64,
            "c64": 32, "c128": 64, "s16": 16, "s32": 32, "u16": 16, "u32": 32}
    size = lambda n: bits.get(n, bits.get(n[:2], 32))  # noqa: E731
    return max(names, key=size) if names else ""


def _io(oshapes, outs, **kw) -> Cost:
    return Cost(bytes_read=float(sum(nbytes(s) for s in oshapes)), bytes_written=float(sum(nbytes(s) for s in outs)),
                **kw)


# --- GEMMs --------------------------------------------------------------------------------------------------
def gemm(inst, oshapes, kind: str = "gemm") -> Cost:
    """cuBLAS / cuBLASLt / hipBLASLt GEMM: ``D = alpha * op(A) @ op(B) + beta * C`` (+ epilogue).

    FLOPs = 2 * batch * M * N * K (x4 complex), with M, N, K and batch from
    ``GpuBackendConfig.gemm_backend_config.dot_dimension_numbers`` (GemmBackendConfig field 7, an
    ``xla.DotDimensionNumbers``) applied to operand 0 (A) and operand 1 (B).
    Bytes = every operand (A, B, the C addend when present, bias, FP8/MX scales) + every result but the workspace.
    FP8 (``__cublas$lt$matmul$f8``): the scalar scales are operands, so they are read; they are not multiplied
    into the FLOPs. MX (``__cublas$lt$matmul$mx``): operands (lhs, rhs, lhs_scale, rhs_scale).
    compute dtype = the wider of A's and B's element types."""
    g = bc.sub(bc.json_config(inst), "gemm_backend_config")
    dd = bc.sub(g, "dot_dimension_numbers")
    outs = results(inst)
    if not dd or len(oshapes) < 2:
        c = _io(oshapes, outs)
        return c.unknown(f"gemm custom call {inst.custom_call_target} without dot_dimension_numbers",
                         "flops", "transcendentals")
    a, b = oshapes[0], oshapes[1]
    c = _io(oshapes, outs, model=kind, compute_dtype=wider_dtype(a, b))
    c.flops = dot_flops(a, b, bc.ints(dd, "lhs_contracting_dimensions"), bc.ints(dd, "lhs_batch_dimensions"),
                        bc.ints(dd, "rhs_contracting_dimensions"), bc.ints(dd, "rhs_batch_dimensions"),
                        is_complex(outs[0]) if outs else False)
    c.note = "gemm custom call: dims from backend_config"
    if kind == "gemm_fp8":
        c.note += f"; {max(len(oshapes) - 2, 0)} more operands (C, scales, bias) read, scales not multiplied in"
    return c


def grouped_gemm(inst, oshapes) -> Cost:
    """cuBLASLt/hipBLASLt grouped GEMM (``__cublas$lt$groupedMatmul``, a lowered ragged dot: MoE experts).

    Operands (lhs, rhs, group_sizes); ``GpuBackendConfig.grouped_gemm_backend_config`` holds
    ``ragged_dot_dimension_numbers`` (``xla.RaggedDotDimensionNumbers``: dot_dimension_numbers,
    lhs_ragged_dimensions, rhs_group_dimensions). FLOPs = 2 * prod(lhs dims) * prod(rhs dims not contracting,
    batch or group) (:func:`tracekit.model.cost_ops.ragged_dot_flops`): each lhs row meets one group's matrix.
    Bytes = every operand (all G group matrices) + results but the workspace."""
    rd = bc.sub(bc.json_config(inst), "grouped_gemm_backend_config", "ragged_dot_dimension_numbers")
    dd = bc.sub(rd, "dot_dimension_numbers")
    outs = results(inst)
    if not dd or len(oshapes) < 2:
        return _io(oshapes, outs).unknown("grouped gemm custom call without ragged_dot_dimension_numbers",
                                          "flops", "transcendentals")
    a, b = oshapes[0], oshapes[1]
    c = _io(oshapes, outs, model="grouped_gemm", compute_dtype=wider_dtype(a, b))
    c.flops = ragged_dot_flops(a, b, bc.ints(dd, "rhs_contracting_dimensions"), bc.ints(dd, "rhs_batch_dimensions"),
                               bc.ints(rd, "rhs_group_dimensions"), is_complex(outs[0]) if outs else False)
    c.note = "grouped gemm: ragged dimension counted once"
    return c


# --- convolutions -------------------------------------------------------------------------------------------
def cudnn_conv(inst, oshapes, kind: str) -> Cost:
    """cuDNN convolution custom call, forward / backward-input / backward-filter.

    The instruction's ``window`` and ``convolution_dimension_numbers`` describe the forward convolution
    input * filter -> output (XLA's GpuConvConfig): forward (input, filter) -> output; backward-input operands
    (d_output, filter) -> d_input; backward-filter operands (input, d_output) -> d_filter. All three do the same
    multiply-adds: FLOPs = 2 * batch * out_features * kernel_input_features * valid taps
    (:func:`tracekit.model.cost_ops.conv_flops`; kernel_input_features is per feature group, so feature groups
    need no term of their own). Bytes = operands (+ bias, side input) + results but the scratch buffer.
    compute dtype = operand 0's element type."""
    outs = results(inst)
    res = outs[0]
    if kind == "backward_input":
        lhs, rhs, out = res, oshapes[1], oshapes[0]
    elif kind == "backward_filter":
        lhs, rhs, out = oshapes[0], res, oshapes[1]
    else:
        lhs, rhs, out = oshapes[0], oshapes[1], res
    c = _io(oshapes, outs, model="cudnn_conv", compute_dtype=dtype_name(oshapes[0].element_type))
    c.flops = conv_flops(lhs, rhs, out, inst.window, inst.convolution_dimension_numbers)
    groups = max(inst.feature_group_count, 1)
    c.note = f"cudnn convolution ({kind}{f', {groups} feature groups' if groups > 1 else ''}): forward-convolution flops"
    return c


# --- selection and sorting ----------------------------------------------------------------------------------
def topk(inst, oshapes) -> Cost:
    """TopK custom call (``TopK``, XLA GPU's ``__gpu$TopK``): operand [rows.., n] -> (values [rows.., k], indices).

    FLOPs = rows * n * max(1, ceil(log2 k)) comparisons (a heap-style selection keeps k candidates per row);
    bytes = input + both results."""
    outs = results(inst, workspace=False)
    x = oshapes[0]
    if not x.dimensions or not outs or not outs[0].dimensions:
        return _io(oshapes, outs).unknown("TopK custom call without shapes", "flops", "transcendentals")
    n, k = x.dimensions[-1], outs[0].dimensions[-1]
    rows = elements(x) // max(n, 1)
    c = _io(oshapes, outs, model="topk")
    c.flops = float(rows * n * max(1, math.ceil(math.log2(k))) if k > 0 else 0)
    c.note = f"top-{k} of {n} per row, {rows} rows"
    return c


def cub_radix_sort(inst, oshapes) -> Cost:
    """CUB device radix sort (``__cub$DeviceRadixSort``): keys (and values) -> sorted, plus a scratch buffer.

    FLOPs = 0 (a radix sort counts digits, it compares nothing); bytes = operands + results but the scratch: one
    read and one write, a lower bound (each radix pass reads and writes the keys again)."""
    outs = results(inst)
    return _io(oshapes, outs, model="cub_radix_sort", note="radix sort: one read + one write (lower bound)")


# --- Pallas / Mosaic on TPU ---------------------------------------------------------------------------------
def shape_matmul(oshapes, outs) -> tuple[float, tuple] | None:
    """(2*batch*M*K*N, (batch, M, K, N)) when two operands and one result have a matmul's shapes,
    [.., M, K] . [.., K, N] -> [.., M, N] (equal batch dims, or a 2-D right operand shared by the batch); else
    None. A kernel with more operands or results is not taken for a matmul."""
    if len(oshapes) != 2 or len(outs) != 1:
        return None
    a, b, o = (list(s.dimensions) for s in (oshapes[0], oshapes[1], outs[0]))
    if len(a) < 2 or len(b) < 2 or len(o) != len(a) or a[:-2] != o[:-2] or (len(b) != 2 and b[:-2] != a[:-2]):
        return None
    m, k, n = a[-2], a[-1], b[-1]
    if b[-2] != k or o[-2:] != [m, n]:
        return None
    batch = math.prod(a[:-2])
    return 2.0 * batch * m * k * n, (batch, m, k, n)


def pallas_kernel(inst, oshapes) -> Cost | None:
    """A Pallas/Mosaic TPU kernel (``tpu_custom_call``): FLOPs from its shapes when they are a matmul
    (:func:`shape_matmul`, model ``pallas_matmul``), else the author's ``cost_estimate``
    (:func:`pallas_cost_estimate`); bytes never below one read of the operands and one write of the results.
    compute dtype = the operands' (a Pallas kernel picks its own precision: f32 operands run at the f32 peak).
    The note names the author's flops beside the shapes' when they differ by more than 2x. None when neither."""
    outs = results(inst, workspace=False)
    est = pallas_cost_estimate(inst, oshapes)
    mm = shape_matmul(oshapes, outs)
    if mm is None:
        return est
    flops, (batch, m, k, n) = mm
    c = _io(oshapes, outs, model="pallas_matmul", compute_dtype=wider_dtype(oshapes[0], oshapes[1]))
    c.flops = flops
    c.note = f"pallas matmul from shapes: 2*{batch}*{m}*{k}*{n} flops"
    if est is not None:
        c.bytes_read = max(c.bytes_read, est.bytes_read + est.bytes_written - c.bytes_written)
        if disagrees(est.flops, flops):
            c.note += f"; the kernel's cost_estimate says {est.flops:.4g} flops, more than 2x off: not used"
    return c


def disagrees(stated: float, derived: float, factor: float = 2.0) -> bool:
    """Whether a stated cost and one derived from shapes differ by more than ``factor`` (either way)."""
    if not (math.isfinite(stated) and math.isfinite(derived)) or derived <= 0:
        return False
    return stated <= 0 or stated * factor < derived or stated > derived * factor


def pallas_cost_estimate(inst, oshapes) -> Cost | None:
    """A Pallas/Mosaic TPU kernel (``tpu_custom_call``) whose config carries the author's ``cost_estimate``
    (``custom_call_config.cost_estimate``: flops, transcendentals, bytes_accessed; jax/_src/tpu_custom_call.py,
    ``CostEstimate``): its flops and transcendentals; bytes = the larger of its bytes_accessed and one read of the
    operands plus one write of the results (an author's 0 moves nothing, which no kernel does). None when there
    is none."""
    est = bc.sub(bc.json_config(inst), "custom_call_config", "cost_estimate")
    if not est or "flops" not in est or "bytes_accessed" not in est:
        return None
    outs = results(inst, workspace=False)
    io = float(sum(nbytes(s) for s in oshapes)) + float(sum(nbytes(s) for s in outs))
    stated = float(est["bytes_accessed"])
    return Cost(flops=float(est["flops"]), transcendentals=float(est.get("transcendentals", 0)),
                bytes_read=max(stated, io), model="pallas_cost_estimate",
                note="the kernel's own cost_estimate" + (
                    "" if stated >= io else f"; its bytes_accessed {stated:.4g} raised to its operands + results"))
