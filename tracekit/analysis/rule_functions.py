"""What a rule expression (:mod:`tracekit.analysis.rule_expr`) may call: the functions (:data:`FUNCTIONS`), the
column methods (:data:`METHODS`) and the text methods (:data:`STR_METHODS`), each with its arguments, its
implementation over pandas/NumPy values, its usage and its meaning (``docs/rules.md`` lists them from here).
``.str.contains`` runs its regular expression on RE2 (:mod:`tracekit.analysis.rule_safety`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.rule_safety import str_contains


def _nary(fn):
    def call(*args):
        out = args[0]
        for a in args[1:]:
            out = fn(out, a)
        return out
    return call


def _where(cond, a, b):
    index = next((v.index for v in (cond, a, b) if isinstance(v, pd.Series)), None)
    out = np.where(np.asarray(cond, dtype=bool), a, b)
    return out if index is None else pd.Series(out, index=index)


#: name -> (min args, max args or None, implementation, usage, meaning)
FUNCTIONS: dict[str, tuple] = {
    "abs": (1, 1, np.abs, "abs(x)", "absolute value"),
    "min": (2, None, _nary(np.minimum), "min(a, b, ...)", "element-wise minimum (NaN if any is NaN)"),
    "max": (2, None, _nary(np.maximum), "max(a, b, ...)", "element-wise maximum (NaN if any is NaN)"),
    "sqrt": (1, 1, np.sqrt, "sqrt(x)", "square root"),
    "exp": (1, 1, np.exp, "exp(x)", "e to the power x"),
    "log": (1, 1, np.log, "log(x)", "natural logarithm"),
    "log2": (1, 1, np.log2, "log2(x)", "base-2 logarithm"),
    "log10": (1, 1, np.log10, "log10(x)", "base-10 logarithm"),
    "floor": (1, 1, np.floor, "floor(x)", "round down"),
    "ceil": (1, 1, np.ceil, "ceil(x)", "round up"),
    "where": (3, 3, _where, "where(cond, a, b)", "a where cond is true, else b"),
    "isna": (1, 1, pd.isna, "isna(x)", "true where the value is missing (NaN)"),
    "notna": (1, 1, pd.notna, "notna(x)", "true where the value is present"),
}

#: method -> (min args, max args, keyword arguments, "list"/"const"/"" (what the arguments must be),
#: implementation, usage, meaning); called as ``column.method(...)``
METHODS: dict[str, tuple] = {
    "isin": (1, 1, (), "list", lambda s, v: s.isin(v), "x.isin(['a', 'b'])", "true where x is one of the constants"),
    "between": (2, 2, (), "", lambda s, lo, hi: s.between(lo, hi), "x.between(lo, hi)", "lo <= x <= hi"),
    "abs": (0, 0, (), "", lambda s: s.abs(), "x.abs()", "absolute value"),
    "isna": (0, 0, (), "", lambda s: s.isna(), "x.isna()", "true where x is missing"),
    "notna": (0, 0, (), "", lambda s: s.notna(), "x.notna()", "true where x is present"),
    "isnull": (0, 0, (), "", lambda s: s.isna(), "x.isnull()", "the same as x.isna()"),
    "notnull": (0, 0, (), "", lambda s: s.notna(), "x.notnull()", "the same as x.notna()"),
    "fillna": (1, 1, (), "", lambda s, v: s.fillna(v), "x.fillna(v)", "x with missing values replaced by v"),
}
#: text method -> the same fields; called as ``column.str.method(...)``
STR_METHODS: dict[str, tuple] = {
    "contains": (1, 1, ("case", "regex", "na"), "const",
                 str_contains,
                 "x.str.contains('pat', case=False, regex=True, na=False)",
                 "true where the text contains the pattern (a regular expression, run by RE2: no backreferences "
                 "or lookaround, unless regex=False; case=False ignores case; na: the value for missing text)"),
    "startswith": (1, 1, ("na",), "const", lambda s, p, **na: s.str.startswith(p, **na), "x.str.startswith('s')",
                   "true where the text starts with s"),
    "endswith": (1, 1, ("na",), "const", lambda s, p, **na: s.str.endswith(p, **na), "x.str.endswith('s')",
                 "true where the text ends with s"),
    "lower": (0, 0, (), "", lambda s: s.str.lower(), "x.str.lower()", "the text in lower case"),
    "upper": (0, 0, (), "", lambda s: s.str.upper(), "x.str.upper()", "the text in upper case"),
    "len": (0, 0, (), "", lambda s: s.str.len(), "x.str.len()", "length of the text"),
}
