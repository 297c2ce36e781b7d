"""Text matching over a column's distinct values: :func:`cat_mask` evaluates a matcher once per distinct value of a
(categorical) column and spreads the verdicts to the rows; a :class:`Matcher`'s verdicts are kept by the distinct
values, so the stages and sections of one analysis (and every host of a pod) that ask the same question of the same
opcodes pay for it once."""
from __future__ import annotations

import functools
import re

import numpy as np
import pandas as pd

from tracekit.columns import spread_mask
from tracekit.records import record

#: what :class:`Matcher` ``"in"`` strips from an opcode before the lookup (an async op's parts)
SUFFIX = r"-(start|done|update)$"


def cat_mask(s: pd.Series, fn) -> np.ndarray:
    """``fn`` (str Series -> bool array) evaluated once per distinct value, then spread to rows (a
    :class:`Matcher`'s verdicts are kept by the distinct values and reused: :func:`_verdicts`)."""
    c = s if isinstance(s.dtype, pd.CategoricalDtype) else s.astype("category")
    values = c.cat.categories.astype(str)
    if isinstance(fn, Matcher) and len(values) <= CACHED_VALUES:
        hit = _verdicts(fn, tuple(values.tolist()))
    else:
        hit = np.asarray(fn(pd.Series(values)), dtype=bool)
    return spread_mask(hit, c.array.codes)  # missing -> False


#: columns with at most this many distinct values have their verdicts kept (opcodes, categories, kernels)
CACHED_VALUES = 1024


@functools.lru_cache(maxsize=512)
def _verdicts(matcher: "Matcher", values: tuple) -> np.ndarray:
    """``matcher``'s verdict on each of ``values`` (read-only: shared by every caller). The same few opcodes and
    categories are matched by several stages and sections of one analysis, and again on every host of a pod."""
    hit = matcher.on_texts(values)
    hit.flags.writeable = False
    return hit


@record(frozen=True)
class Matcher:
    """A text matcher ``cat_mask`` may keep verdicts of (hashable, pure): ``kind`` "in" (the lower-cased text,
    ``-start``/``-done``/``-update`` stripped when ``strip``, is one of ``names``) or "has" (the text contains the
    regular expression ``pattern``; case-insensitive unless ``case``)."""

    kind: str
    names: frozenset = frozenset()
    strip: bool = True
    pattern: str = ""
    case: bool = False

    def on_texts(self, texts) -> np.ndarray:
        """The verdict on each text of ``texts`` (strings): Python's ``re`` on each (a column's few dozen distinct
        opcodes: pandas' string methods cost more per call than the matching)."""
        if self.kind == "has":
            rx = re.compile(self.pattern, 0 if self.case else re.IGNORECASE)
            return np.fromiter((rx.search(t) is not None for t in texts), bool, len(texts))
        sx = re.compile(SUFFIX)
        return np.fromiter(((sx.sub("", t.lower()) if self.strip else t.lower()) in self.names for t in texts),
                           bool, len(texts))

    def __call__(self, s: pd.Series) -> np.ndarray:
        """The verdict on each text of a Series of texts (:meth:`on_texts`: one definition of the match)."""
        return self.on_texts(s.astype(str).tolist())
