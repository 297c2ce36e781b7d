"""The serving formulas (How to Scale Your Model, parts "Inference" and "Serving LLaMA 3"), as plain arithmetic.

* KV cache: ``2 (K and V) · bytes per element · layers · batch · sequence · kv_heads · head_dim``.
* A decode step reads every weight and the KV cache its attention reads from HBM once, so
  ``T_step ≥ (param_bytes + kv_bytes_read) / HBM bandwidth`` (attention in decode is always memory-bound).
* A ``[B, D] x [D, F]`` matmul does ``2·B·D·F`` FLOPs over ``w·D·F`` weight bytes (``w`` bytes per weight): its
  intensity is ``2·B / w`` FLOP/byte, so it turns compute-bound past ``B = peak · w / (2 · bandwidth)`` tokens
  (bf16 weights: ``peak / bandwidth``, ≈ 240 on TPU v5e; int8 weights with bf16 matmuls: half that).
* Free HBM over the KV bytes one sequence needs is how many more sequences fit.

Every function takes and returns plain numbers (bytes, bytes/s, FLOP/s, seconds or picoseconds); a number that
cannot be known (a zero or missing bandwidth) comes back NaN, never zero.
"""
from __future__ import annotations

import math

PS_PER_S = 1e12


def kv_cache_bytes(layers: int, batch: int, seq_len: int, kv_heads: int, head_dim: int, bytes_per_elem: float) -> float:
    """Bytes of a KV cache: 2 (K, V) · bytes · layers · batch · seq · kv_heads · head_dim."""
    return 2.0 * bytes_per_elem * layers * batch * seq_len * kv_heads * head_dim


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, bytes_per_elem: float) -> float:
    """KV bytes one token of one sequence adds to the cache."""
    return kv_cache_bytes(layers, 1, 1, kv_heads, head_dim, bytes_per_elem)


def _ok(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def memory_time_s(nbytes: float, bw_bytes_per_s: float) -> float:
    """Seconds to stream ``nbytes`` at ``bw_bytes_per_s``; NaN when the bandwidth is unknown."""
    if not _ok(bw_bytes_per_s) or nbytes is None or not math.isfinite(nbytes):
        return math.nan
    return float(nbytes) / float(bw_bytes_per_s)


def decode_bound_s(param_bytes: float, kv_bytes_read: float, bw_bytes_per_s: float) -> float:
    """The decode step's memory lower bound: (param_bytes + kv_bytes_read) / HBM bandwidth, in seconds."""
    return memory_time_s(float(param_bytes) + float(kv_bytes_read), bw_bytes_per_s)


def decode_bound_ps(param_bytes: float, kv_bytes_read: float, bw_bytes_per_s: float) -> float:
    """:func:`decode_bound_s` in picoseconds."""
    return decode_bound_s(param_bytes, kv_bytes_read, bw_bytes_per_s) * PS_PER_S


def compute_time_s(flops: float, peak_flops_per_s: float) -> float:
    """Seconds to do ``flops`` at ``peak_flops_per_s``; NaN when the peak or the count is unknown."""
    if not _ok(peak_flops_per_s) or flops is None or not math.isfinite(flops):
        return math.nan
    return float(flops) / float(peak_flops_per_s)


def critical_batch(peak_flops_per_s: float, bw_bytes_per_s: float, weight_bytes_per_param: float = 2.0) -> float:
    """Tokens per step past which a weight matmul turns compute-bound: ``peak · w / (2 · bandwidth)`` (intensity of
    ``[B, D] x [D, F]`` with ``w``-byte weights is ``2B / w``); NaN when a number is unknown."""
    if not (_ok(peak_flops_per_s) and _ok(bw_bytes_per_s) and _ok(weight_bytes_per_param)):
        return math.nan
    return float(peak_flops_per_s) * float(weight_bytes_per_param) / (2.0 * float(bw_bytes_per_s))


def sequences_that_fit(free_bytes: float, kv_bytes_per_sequence: float) -> float:
    """Whole sequences (each needing ``kv_bytes_per_sequence`` of cache) that ``free_bytes`` holds; NaN when
    either is unknown, 0 when nothing is free."""
    if free_bytes is None or not math.isfinite(free_bytes) or not _ok(kv_bytes_per_sequence):
        return math.nan
    return float(max(0, math.floor(float(free_bytes) / float(kv_bytes_per_sequence))))


def tokens_per_s(tokens_per_step: float, step_s: float) -> float:
    """Tokens per second at ``tokens_per_step`` every ``step_s`` seconds; NaN when either is unknown."""
    if not _ok(tokens_per_step) or not _ok(step_s):
        return math.nan
    return float(tokens_per_step) / float(step_s)


__all__ = ["kv_cache_bytes", "kv_bytes_per_token", "memory_time_s", "decode_bound_s", "decode_bound_ps",
           "compute_time_s", "critical_batch", "sequences_that_fit", "tokens_per_s"]
