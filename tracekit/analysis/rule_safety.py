"""What keeps the text of a rule file cheap to use, whatever it holds: regular expressions run on RE2, and the
format specs of message templates have bounded widths and precisions.

* **Regular expressions** (``.str.contains(pat)`` in an expression, a ``kind: regex`` parameter, ``--param``) are
  compiled and matched by RE2 (the ``google-re2`` package): matching takes time linear in the text whatever the
  pattern (no catastrophic backtracking: ``(a+)+$`` on a long line of ``a``s returns at once), memory is bounded
  by :data:`REGEX_MAX_MEM`, and every machine gives the same result. RE2's syntax is Python's without
  backreferences (``\\1``) and lookaround (``(?=``, ``(?!``, ``(?<=``, ``(?<!``); a pattern RE2 cannot compile
  is refused with :class:`RegexError` (one line) before any row is read. Groups are fine (no warning: nothing is
  extracted). A column is matched once per distinct value, then spread to its rows.
* **Format specs** (``{share:.1%}``): the width at most :data:`MAX_WIDTH`, the precision at most
  :data:`MAX_PRECISION`, and the spec must be one Python's format mini-language reads; checked for every field
  of every template when the rule loads (:func:`format_spec_problem`).
"""
from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd

#: the largest width a template field may ask for (``{count:>200}``)
MAX_WIDTH = 200
#: the largest precision a template field may ask for (``{share:.20f}``)
MAX_PRECISION = 20
#: memory RE2 may use for one compiled pattern (bytes); a larger program is refused when it compiles
REGEX_MAX_MEM = 8 << 20
#: the longest pattern accepted (characters)
REGEX_MAX_LENGTH = 4000

# [[fill]align][sign][z][#][0][width][grouping][.precision][type] (Python's format-spec mini-language)
_SPEC = re.compile(r"(?:(?P<fill>.)?(?P<align>[<>=^]))?(?P<sign>[-+ ])?z?#?0?(?P<width>\d+)?[_,]?"
                   r"(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?", re.DOTALL)


def format_spec_problem(spec: str) -> str | None:
    """Why ``spec`` (the part of a template field after ``:``) is refused, or None when it is fine: one the
    mini-language does not read, a width above :data:`MAX_WIDTH` or a precision above :data:`MAX_PRECISION`
    (a ``{x:>999999999}`` would build a string of a billion spaces, ``{x:.99999999f}`` as many digits)."""
    m = _SPEC.fullmatch(spec)
    shown = spec if len(spec) <= 40 else spec[:24] + f"...({len(spec)} characters)"
    if m is None:
        return f"the format spec {shown!r} is not one Python reads ([[fill]align][sign][width][,][.precision][type])"
    width, precision = (None if d is None else d.lstrip("0") or "0" for d in m.group("width", "precision"))
    if width is not None and (len(width) > 4 or int(width) > MAX_WIDTH):
        return f"the format spec {shown!r} asks for width {_short(width)}; at most {MAX_WIDTH}"
    if precision is not None and (len(precision) > 4 or int(precision) > MAX_PRECISION):
        return f"the format spec {shown!r} asks for precision {_short(precision)}; at most {MAX_PRECISION}"
    return None


def _short(digits: str) -> str:
    return digits if len(digits) <= 12 else f"{digits[:6]}...({len(digits)} digits)"


class RegexError(ValueError):
    """A pattern RE2 cannot run: the message says which pattern and why, in one line."""


@functools.lru_cache(maxsize=256)
def compile_regex(pattern: str, case: bool = True):
    """``pattern`` compiled by RE2 (case-insensitive unless ``case``); raises :class:`RegexError`. RE2 logs
    nothing on stderr (``log_errors`` off)."""
    import re2  # google-re2: linear-time matching (see the module docstring)
    if not isinstance(pattern, str):
        raise RegexError(f"a regular expression must be text, got {type(pattern).__name__}")
    shown = pattern if len(pattern) <= 80 else pattern[:77] + "..."
    if len(pattern) > REGEX_MAX_LENGTH:
        raise RegexError(f"the regular expression {shown!r} is longer than {REGEX_MAX_LENGTH} characters")
    opts = re2.Options()
    opts.log_errors = False
    opts.case_sensitive = bool(case)
    opts.max_mem = REGEX_MAX_MEM
    try:
        return re2.compile(pattern, opts)
    except re2.error as e:
        why = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise RegexError(f"the regular expression {shown!r} is not one RE2 runs ({why}); RE2 has no "
                         "backreferences (\\1) or lookaround ((?=, (?!, (?<=, (?<!); write the pattern without them "
                         "(docs/rules.md#expressions)") from None


def regex_contains(s: pd.Series, pattern: str, case: bool = True, na=None) -> pd.Series:
    """What ``s.str.contains(pattern, case=case, regex=True, na=na)`` gives, matched by RE2 once per distinct
    value: true where the text contains a match. Missing (or non-text) values give ``na`` when it is given, else
    False for a categorical column and missing (NA, a nullable boolean) for any other."""
    codes, uniques = pd.factorize(s, use_na_sentinel=True)
    texts = uniques.astype(str) if isinstance(s.dtype, pd.CategoricalDtype) else np.asarray(uniques, dtype=object)
    hit = regex_search_mask(texts, pattern, case)
    text_ok = np.fromiter((isinstance(t, str) for t in texts), dtype=bool, count=len(texts))
    codes = np.asarray(codes)
    missing = codes < 0
    safe = np.where(missing, 0, codes)
    out = hit[safe] if len(texts) else np.zeros(len(codes), dtype=bool)
    missing = missing | (~text_ok[safe] if len(texts) else missing)
    nullable = isinstance(s.dtype, pd.StringDtype)  # pandas answers a string column with a nullable boolean
    if not missing.any() or na is not None:
        out = np.where(missing, na, out) if missing.any() else out
        return pd.Series(pd.array(out, dtype="boolean") if nullable else out, index=s.index)
    if isinstance(s.dtype, pd.CategoricalDtype):
        return pd.Series(out & ~missing, index=s.index)
    return pd.Series(pd.array(out, dtype="boolean"), index=s.index).mask(missing)


def str_contains(s: pd.Series, pattern, case: bool = True, regex: bool = True, na=None) -> pd.Series:
    """``.str.contains`` of a rule expression: a regular expression on RE2 (:func:`regex_contains`), or with
    ``regex=False`` pandas' plain substring test."""
    if not regex:
        return s.str.contains(pattern, case=case, regex=False, **({} if na is None else {"na": na}))
    return regex_contains(s, pattern, case=case, na=na)


def regex_search_mask(texts: pd.Series, pattern: str, case: bool = True) -> np.ndarray:
    """A boolean array: where each text of ``texts`` (one per distinct value, e.g. a column's categories)
    contains a match of ``pattern`` (RE2)."""
    rx = compile_regex(pattern, case)
    return np.fromiter((isinstance(t, str) and rx.search(t) is not None for t in texts), dtype=bool,
                       count=len(texts))
