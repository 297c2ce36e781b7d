"""MFU and HFU side by side, each with its formula and numbers (the ``overview.flops`` figures beside the headline
``utilization``).

* **HFU** (hardware FLOPs utilization) = executed FLOPs per step / (P x T): the FLOPs the HLO says ran (the cost
  model of every op in the steps, recomputation included), P the summed peak FLOP/s of the chips of the dtype
  that carries most of them, T the mean step time of the slowest device.
* **MFU** (model FLOPs utilization) = model FLOPs per step / (P x T), with the model's FLOPs from, in order: the
  user (``--model-flops-per-step``), the trace's ``model_flops`` stats (TPU: the compiler's count without
  rematerialization), or ``6 x N x tokens`` from the shapes the parallelism section recovers when the user
  declares a transformer (``--model transformer``). Without one, MFU is unknown (never the HFU relabelled).
* **HFU - MFU**: the executed FLOPs the model does not count, as a share of the peak: rematerialization's
  recomputation, a pipeline's bubble, elementwise work; negative when the HLO runs fewer FLOPs than the formula
  counts (6·N·tokens counts an input gradient the first layer never computes).
"""
from __future__ import annotations

import math

from tracekit.units import fmt_num, fmt_time


def _pct(x) -> str:
    """A utilization with three significant digits (0.0512%, 31.4%): a small one is not shown as 0.0%."""
    return f"{100 * x:.3g}%" if isinstance(x, (int, float)) and math.isfinite(x) else "unknown"


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def figures(hardware_per_step: float, model_per_step: float | None, model_source: str, peak: float,
            step_ps: float, model_formula: str = "") -> dict:
    """{hfu, mfu, hfu_minus_mfu, model_per_step, model_source, recompute_per_step, formula}: see the module
    docstring (NaN where a count, the peak or the step time is unknown)."""
    t = step_ps / 1e12 if _ok(step_ps) else math.nan
    denom = peak * t if _ok(peak) and _ok(t) else math.nan
    hw = hardware_per_step if isinstance(hardware_per_step, (int, float)) else math.nan
    hfu = hw / denom if _ok(denom) and math.isfinite(hw) else math.nan
    mf = float(model_per_step) if model_per_step is not None and math.isfinite(model_per_step) else math.nan
    mfu = mf / denom if _ok(denom) and math.isfinite(mf) else math.nan
    at = f"({fmt_num(peak, 'FLOP/s')} x {fmt_time(step_ps)})" if _ok(denom) else "(peak x step time: unknown)"
    parts = [f"HFU = executed FLOPs per step / (peak x step time) = {fmt_num(hw, 'FLOP')} / {at} = {_pct(hfu)}"]
    if math.isfinite(mf):
        parts.append(f"MFU = model FLOPs per step / (peak x step time) = {fmt_num(mf, 'FLOP')} / {at} = "
                     f"{_pct(mfu)}" + (f"; model FLOPs: {model_formula}" if model_formula else ""))
    else:
        parts.append("MFU unknown: no model FLOP count (pass --model-flops-per-step N, or --model transformer for "
                     "6·N·tokens from the recovered shapes)")
    return {"hfu": hfu, "mfu": mfu, "hfu_minus_mfu": hfu - mfu if math.isfinite(hfu) and math.isfinite(mfu)
            else math.nan, "model_per_step": mf, "model_source": model_source if math.isfinite(mf) else "",
            "recompute_per_step": hw - mf if math.isfinite(hw) and math.isfinite(mf) else math.nan,
            "formula": "; ".join(parts)}
