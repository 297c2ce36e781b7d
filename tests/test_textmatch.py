"""cat_mask's kept verdicts: a matcher asked again (same or other distinct values, other rows) answers what plain
Python's ``re`` gives row by row, never a verdict kept for another column's values."""
import random
import re

import numpy as np
import pandas as pd

from tracekit.analysis.textmatch import Matcher, cat_mask

OPCODES = ["fusion", "all-reduce-start", "all-reduce-done", "ALL-GATHER", "copy", "dot", "send", "reduce-scatter",
           "collective-permute-update", "convolution", "Custom-Call", "all-to-all", "", "nccl_kernel"]


def _oracle(m: Matcher, text: str) -> bool:
    if m.kind == "has":
        return re.search(m.pattern, text, 0 if m.case else re.IGNORECASE) is not None
    low = text.lower()
    return (re.sub(r"-(start|done|update)$", "", low) if m.strip else low) in m.names


MATCHERS = [Matcher("in", names=frozenset({"all-reduce", "all-gather", "reduce-scatter"})),
            Matcher("in", names=frozenset({"copy", "send"}), strip=False),
            Matcher("has", pattern="nccl|gather"),
            Matcher("has", pattern=r"-(?:start|done)$", case=True)]


def test_kept_verdicts_match_plain_python_row_by_row():
    rng = random.Random(3)
    for _ in range(40):  # other value sets, other row orders, missing values: each answered afresh or from its own
        values = rng.sample(OPCODES, rng.randint(1, len(OPCODES)))
        rows = [rng.choice(values + [None]) for _ in range(rng.randint(0, 60))]
        col = pd.Series(pd.Categorical(rows, categories=values))
        for m in MATCHERS:
            got = cat_mask(col, m)
            want = np.array([r is not None and _oracle(m, r) for r in rows], bool)
            assert got.dtype == bool and got.tolist() == want.tolist(), (m, rows)
            assert cat_mask(col.astype(object), m).tolist() == want.tolist()  # (a plain text column alike)


def test_a_kept_verdict_is_not_changed_by_its_callers():
    col = pd.Series(pd.Categorical(["all-reduce-start", "fusion"]))
    m = MATCHERS[0]
    first = cat_mask(col, m)
    first[:] = ~first  # the caller's own array: the kept verdicts are not it
    assert cat_mask(col, m).tolist() == [True, False]


def _by_pandas(m: Matcher, s: pd.Series) -> list:
    """The match written with pandas' string methods (an oracle independent of Python's re row by row)."""
    if m.kind == "has":
        return s.str.contains(m.pattern, case=m.case, regex=True).tolist()
    low = s.str.lower()
    return (low.str.replace(r"-(start|done|update)$", "", regex=True) if m.strip else low).isin(m.names).tolist()


def test_texts_judged_as_pandas_string_methods_judge_them():
    """A matcher on texts, as a list (the kept verdicts' path) or a Series (columns with too many distinct values
    to keep), gives what pandas' string methods give."""
    texts = OPCODES + ["All-Reduce-Done", "x-start-done", "copy-update", "gather-done.1", "send-start"]
    for m in MATCHERS:
        want = _by_pandas(m, pd.Series(texts))
        assert m.on_texts(texts).tolist() == want, m
        assert np.asarray(m(pd.Series(texts)), bool).tolist() == want, m


def test_a_column_of_many_values_is_judged_as_a_kept_one():
    """Past the values whose verdicts are kept, cat_mask asks the matcher on the Series of values: the same
    verdicts as row by row."""
    from tracekit.analysis import textmatch
    values = [f"{o}.{i}" if i else o for i in range(textmatch.CACHED_VALUES // len(OPCODES) + 2) for o in OPCODES]
    col = pd.Series(pd.Categorical(values))
    assert len(col.cat.categories) > textmatch.CACHED_VALUES
    for m in MATCHERS:
        assert cat_mask(col, m).tolist() == [_oracle(m, v) for v in values], m
