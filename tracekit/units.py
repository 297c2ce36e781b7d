"""Formatting at the edge: times are integer picoseconds inside tracekit and get units only here; and the one
plain text table."""
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


def table(headers: list[str], rows: list[list[str]], right=frozenset()) -> list[str]:
    """A plain aligned text table as lines: a header, a rule of dashes, the rows (cells already text); the columns
    whose index is in ``right`` are right-aligned (numbers), the others left-aligned; two spaces between columns.
    The one plain table of tracekit (the command line, the diff, the memory section); the terminal report itself
    is laid out with rich."""
    w = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]

    def line(vals):
        return "  ".join(v.rjust(w[i]) if i in right else v.ljust(w[i]) for i, v in enumerate(vals)).rstrip()
    return [line(headers), line(["-" * x for x in w])] + [line(r) for r in rows]
