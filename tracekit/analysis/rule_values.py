"""What a rule expression (:mod:`tracekit.analysis.rule_expr`) reads and how its operators run at evaluation: a
frame's numeric and boolean columns as NumPy arrays, the others as Series, and each operator on arrays where the
result is pandas' own, through Series where pandas' semantics differ (methods, ``in``, text other than a text or
categorical column equal to a text, ``//``, ``%``, ``**``, logical operators on anything but booleans).
``tests/test_rule_expr.py`` holds the two paths to each other."""
from __future__ import annotations

import operator

import numpy as np
import pandas as pd

from tracekit.columns import numbers_or_series


#: the operators whose result on plain NumPy arrays is pandas' own (pandas fills division by zero for ``//`` and
#: ``%`` and refuses some on booleans: those run on Series)
PLAIN = (operator.add, operator.sub, operator.mul, operator.truediv)


class Columns:
    """The values an evaluation reads, each fetched once. A numeric or boolean column of NumPy type is read as its
    array (an operation on arrays costs a few µs, on Series tens: a small trace's rules evaluate hundreds), other
    columns as Series; :meth:`series` gives an array back its frame's index where pandas' semantics are needed
    (methods, ``in``, text, ``//``, ``%``, ``**``). Integer columns narrower than 64 bits are widened (products
    of dims must not wrap around)."""

    def __init__(self, values):
        self.values, self.seen = values, {}
        self.index = getattr(values, "index", None)

    def __getitem__(self, name):
        if name not in self.seen:
            # a frame's number column as its stored array (no Series: tracekit.columns.numbers_or_series)
            s = numbers_or_series(self.values, name) if isinstance(self.values, pd.DataFrame) else self.values[name]
            if isinstance(s, pd.Series) and self.index is not None and isinstance(s.dtype, np.dtype) and \
                    s.dtype.kind in "biuf":
                s = s.to_numpy()  # (a column of the frame: on its index)
            if isinstance(s, (pd.Series, np.ndarray)) and s.dtype.kind in "iu" and s.dtype.itemsize < 8:
                s = s.astype(np.int64 if s.dtype.kind == "i" else np.uint64)
            self.seen[name] = s
        return self.seen[name]

    def series(self, x):
        """``x`` as a Series on the frame's index when it is a row-sized array, else as it is."""
        if isinstance(x, np.ndarray) and x.ndim == 1 and self.index is not None and len(x) == len(self.index):
            return pd.Series(x, index=self.index)
        return x


def is_bools(x) -> bool:
    return isinstance(x, (bool, np.bool_)) or (isinstance(x, np.ndarray) and x.dtype == bool)


def invert(x):
    """``not`` / ``~``."""
    if isinstance(x, (bool, np.bool_)):
        return not x
    return ~x


def negate(values: Columns, x):
    """``not`` / ``~`` of an expression's value: booleans as they are, anything else through Series."""
    return invert(x if is_bools(x) else values.series(x))


def logical(op, values: Columns, x, y):
    """``&`` or ``|``: on booleans as NumPy does it (pandas' own), anything else through Series."""
    if is_bools(x) and is_bools(y):
        return op(x, y)
    return op(values.series(x), values.series(y))


def comparison(f, values: Columns, x, y):
    """A comparison: on arrays and numbers as NumPy does it (pandas' own), with text through Series, but a
    categorical or text column of a frame equal or not to a text (:func:`_text_equal`)."""
    if isinstance(x, str) or isinstance(y, str):
        col, text = (x, y) if isinstance(y, str) else (y, x)
        if (f is operator.eq or f is operator.ne) and values.index is not None and isinstance(col, pd.Series) \
                and isinstance(text, str):
            hit = _text_equal(col, text)
            if hit is not None:
                return hit if f is operator.eq else ~hit
        return f(values.series(x), values.series(y))
    return f(x, y)


def _text_equal(col: pd.Series, text: str) -> np.ndarray | None:
    """Which rows of a categorical or text (``str``) column equal ``text``, as pandas compares them (a missing
    value equals nothing), without a Series per operation; None for any other column."""
    dt = col.dtype
    if isinstance(dt, pd.CategoricalDtype):
        cats = col.cat.categories
        return col.array.codes == cats.get_loc(text) if text in cats else np.zeros(len(col), bool)
    if isinstance(dt, pd.StringDtype) and dt.na_value is np.nan:
        return np.asarray(col.to_numpy(dtype=object) == text, bool)  # (NaN == text is False, as pandas has it)
    return None
