"""The rate a matmul-like op computes at: its *compute dtype*, from its operands and precision config, and the
chip's peak for it.

A dot's output type says nothing about its speed: ``bf16 x bf16 -> f32`` (JAX's
``preferred_element_type=jnp.float32``, GPU ``gemm_fusion`` dots) runs on the bf16 units and accumulates in f32.
So the compute dtype of a dot / convolution / GEMM custom call is decided by

1. the ``PrecisionConfig.algorithm`` when set (``ALG_DOT_BF16_BF16_F32`` -> bf16, ``..._X3``/``X6``/``X9`` -> that
   many bf16 passes, ``ALG_DOT_TF32_TF32_F32`` -> tf32, ``ALG_DOT_F32_F32_F32`` -> full f32, ``ALG_DOT_ANY_F8_*`` ->
   fp8, ...);
2. else the operand element types: any f8 operand -> ``fp8``; 8/4-bit integers -> ``int8``; bf16 / f16 -> ``bf16``
   / ``f16``; f32 -> ``f32``, or ``f32_highest`` / ``f32_high`` when an operand asks for ``HIGHEST`` / ``HIGH``
   precision; f64 -> ``f64``. Mixed operands compute at the wider type (XLA converts the narrower one).

:func:`peak` maps a compute dtype to the chip's rate. ``f32`` is the chip's default f32 *dot* rate (see
``chips.yaml``: one bf16 pass on TPU, TF32 on NVIDIA Ampere+); ``f32_highest`` / ``f32_full`` is full f32 (TPU:
six bf16 passes, NVIDIA: the CUDA-core rate ``f32_simt``, elsewhere ``f32``); ``f32_high`` is three bf16 passes on
TPU and the default f32 rate elsewhere; ``bf16xN`` is the bf16 rate / N, ``tf32x3`` the tf32 rate / 3.
"""
from __future__ import annotations

import math

from tracekit.ingest.hloshape import dtype_name
from tracekit.model import chips

#: PrecisionConfig.Algorithm (xla_data.proto) -> compute dtype
ALGORITHMS = {1: "fp8", 2: "fp8", 3: "f16", 4: "f16", 5: "bf16", 6: "bf16", 7: "bf16x3", 8: "bf16x6", 9: "tf32",
              10: "tf32x3", 11: "f32_full", 12: "f64", 13: "bf16x9"}
#: PrecisionConfig.Precision values
HIGH, HIGHEST = 1, 2
#: wider compute types win when operands differ (the narrower operand is converted)
_RANK = {"int8": 0, "fp8": 1, "f16": 2, "bf16": 2, "f32": 3, "f64": 4}


def _class(element_type: int) -> str | None:
    name = dtype_name(element_type)
    if name.startswith(("f8", "f4")):
        return "fp8"
    if name in ("s8", "u8", "s4", "u4", "s2", "u2"):
        return "int8"
    if name in ("bf16", "f16", "f32", "f64"):
        return name
    if name in ("c64",):
        return "f32"
    if name in ("c128",):
        return "f64"
    return None


def dot_compute_dtype(operand_types, precision_config=None) -> str:
    """Compute dtype of a dot-like op from its operands' element types (``PrimitiveType`` values) and its
    ``PrecisionConfig`` (or None). '' when the operands have no peak class (e.g. s32 x s32)."""
    if precision_config is not None and precision_config.algorithm in ALGORITHMS:
        return ALGORITHMS[precision_config.algorithm]
    classes = [c for c in (_class(t) for t in operand_types) if c is not None]
    if not classes:
        return ""
    best = max(classes, key=lambda c: _RANK[c])
    if best == "f32" and precision_config is not None:
        prec = set(precision_config.operand_precision)
        if HIGHEST in prec:
            return "f32_highest"
        if HIGH in prec:
            return "f32_high"
    return best


def result_compute_dtype(element_type_name: str) -> str:
    """Compute dtype of a non-matmul op: the peak class of its result type, else the type as it is."""
    c = chips.canonical_dtype(element_type_name)
    return c if c is not None else (element_type_name or "")


def peak(chip: chips.Chip, compute_dtype: str) -> tuple[float, str]:
    """Peak FLOP/s of ``chip`` for ``compute_dtype`` and the source of that number (see the module docstring)."""
    d = compute_dtype or ""
    if d.startswith("bf16x"):
        n = int(d[5:])
        v, src = chips.peak_flops(chip, "bf16")
        return v / n, f"{n} bf16 passes: bf16 peak / {n} ({src})"
    if d == "tf32x3":
        v, src = chips.peak_flops(chip, "tf32")
        return v / 3, f"3 tf32 passes: tf32 peak / 3 ({src})"
    if d in ("f32_highest", "f32_full", "f32_high"):
        passes = 3 if d == "f32_high" else 6
        if chip.family == "tpu":
            v, src = chips.peak_flops(chip, "bf16")
            return v / passes, f"f32 at {d[4:]} precision on TPU = {passes} bf16 passes: bf16 peak / {passes} ({src})"
        if d != "f32_high" and chip.vendor == "nvidia":
            simt = chip.peak_flops_per_s.get("f32_simt")
            if simt is not None and math.isfinite(simt):
                return float(simt), chip.sources.get("peak_flops_per_s.f32_simt", "table") + \
                    " (full f32: no TF32 tensor cores)"
        v, src = chips.peak_flops(chip, "f32")
        return v, src
    return chips.peak_flops(chip, d or "bf16")
