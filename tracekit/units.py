"""Formatting at the edge: times are integer picoseconds inside tracekit and get units only here; and the one
plain text table."""
from __future__ import annotations

import math
import re


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


#: an efficiency above this contradicts the roofline model: shown with a mark that points at the model warnings
ABOVE_ROOFLINE = 1.05
ABOVE_MARK = " (!)"
#: an efficiency shown above 100 % but within :data:`ABOVE_ROOFLINE`: inside the model's tolerance, no warning
WITHIN_MARK = " (~)"
#: the legend of both marks, printed under every table that shows one
EFF_MARKS_NOTE = ("(!) more than 5 % above its roofline: the model is wrong for it (see the model warnings); "
                  "(~) at most 5 % above it: within the model's tolerance (timer resolution, rounded peaks)")


def eff_mark(x) -> str:
    """The mark an efficiency carries when it is shown above 100 % (never a bare number above the roofline):
    :data:`ABOVE_MARK` above :data:`ABOVE_ROOFLINE` (a model warning names the op), :data:`WITHIN_MARK` for what
    only rounds above 100 %, else ''."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return ""
    x = float(x)
    if x > ABOVE_ROOFLINE:
        return ABOVE_MARK
    return WITHIN_MARK if round(100 * x, 1) > 100.0 else ""


def fmt_eff(x) -> str:
    """An efficiency as a percentage, marked when it is shown above 100 % (:func:`eff_mark`)."""
    return fmt_pct(x) + eff_mark(x)


# ------------------------------------------------------------------------------------------------------ parsing
#: kind of a quantity -> (unit -> factor to the base unit); the base unit is what a bare number means
QUANTITY_UNITS = {
    "duration": {"ps": 1, "ns": 10**3, "us": 10**6, "µs": 10**6, "μs": 10**6, "ms": 10**9, "s": 10**12},
    "bytes": {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
              "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40},
    "fraction": {"%": 0.01},
    "count": {}, "number": {},
}
_QUANTITY = re.compile(r"^\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµμ%]*)\s*$")


def parse_quantity(text, kind: str) -> float:
    """A number written with an optional unit of ``kind`` (:data:`QUANTITY_UNITS`): ``10ms`` / ``250us`` /
    ``250µs`` / ``2s`` -> ps, ``64MiB`` / ``1.5GB`` -> bytes, ``5%`` -> 0.05, ``1.5e9`` -> 1.5e9. A bare number
    is in the base unit (ps, bytes, a plain fraction). Raises ValueError saying what is accepted."""
    if isinstance(text, bool):
        raise ValueError("expected a number, got a boolean")
    if isinstance(text, (int, float)):
        return text
    m = _QUANTITY.match(str(text))
    units = QUANTITY_UNITS.get(kind, {})
    accepted = (f"a number, or a number with one of the units {', '.join(u for u in units if u != 'μs')}" if units
                else "a number (e.g. 3, 1.5e9)")
    if not m:
        raise ValueError(f"expected {accepted}")
    number, unit = m.group(1), m.group(2)
    if not unit:
        value = float(number)
        return int(value) if value.is_integer() and abs(value) < 2**63 and "." not in number \
            and "e" not in number.lower() else value
    factor = units.get(unit.lower() if kind == "bytes" else unit)
    if factor is None:
        raise ValueError(f"unit {unit!r} does not fit a {kind} parameter: expected {accepted}")
    return float(number) / 100 if unit == "%" else float(number) * factor
