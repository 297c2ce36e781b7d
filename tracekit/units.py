"""Formatting at the edge: times are integer picoseconds inside tracekit and get units only here."""
from __future__ import annotations

import math


def fmt_time(ps) -> str:
    if ps is None or (isinstance(ps, float) and math.isnan(ps)):
        return "—"
    ps = float(ps)
    a = abs(ps)
    for unit, div in (("s", 1e12), ("ms", 1e9), ("µs", 1e6), ("ns", 1e3)):
        if a >= div:
            return f"{ps / div:.3g} {unit}" if a / div < 100 else f"{ps / div:.0f} {unit}"
    return f"{ps:.0f} ps"


def fmt_num(x, unit: str = "") -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    x = float(x)
    a = abs(x)
    for suf, div in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= div:
            return f"{x / div:.3g} {suf}{unit}".strip()
    return f"{x:.3g} {unit}".strip()


def fmt_pct(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return f"{100 * float(x):.1f}%"


#: an efficiency above this contradicts the roofline model: shown with a mark that points at the model warnings
ABOVE_ROOFLINE = 1.05
ABOVE_MARK = " (!)"


def fmt_eff(x) -> str:
    """An efficiency as a percentage, marked when it is above the roofline (a model warning names the op)."""
    text = fmt_pct(x)
    if x is not None and not (isinstance(x, float) and math.isnan(x)) and float(x) > ABOVE_ROOFLINE:
        text += ABOVE_MARK
    return text
