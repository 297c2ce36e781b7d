"""tracekit.report.jsontext writes what json.dumps(indent=1, sort_keys=True, ensure_ascii=False) writes."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tracekit.report import envelope, jsontext


def _std(obj) -> str:
    return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)


CASES = [
    {}, [], (), "top", 5, 2.0, -0.0, None, True, math.nan, [math.inf, -math.inf],
    {"a": [], "b": {}, "c": [{}], "d": [[]]},
    {"b": 1, "a": [1.5, 1e300, 5e-324, True, False, None, "é \u2028 \" \\ \n \x01 \ud800"]},
    {1: "x", 2.5: "y", 0: [1]}, {True: 1}, {False: {}}, {None: [[]]}, {-0.0: [1], math.inf: {"a": 1}},
    {"a": {1: "x"}, "b": [{2: 2.0}]},
    {"k": (1, [2, {"z": {}}])}, {"a": {"b": {"c": {"d": [1, {"e": 2}]}}}}, [1, [2, [3, [4]]]],
    [{"row": 1, "v": 0.25}, {"row": 2, "v": None}, {}],
    {"n": np.float64(1.25), "s": np.str_("abc"), "l": [{"x": np.float64(2.5)}]},
]


@pytest.mark.parametrize("obj", CASES, ids=range(len(CASES)))
def test_same_text_as_json(obj):
    assert jsontext.dumps(obj) == _std(obj)


@pytest.mark.parametrize("obj", [{"i": np.int64(3)}, {"i": [np.int64(3)]}, {"i": {"j": [object()]}}, {"x": {1, 2}},
                                 {(1, 2): 3}, {"a": {(1, 2): [1]}}])
def test_same_errors_as_json(obj):
    with pytest.raises(TypeError) as theirs:
        _std(obj)
    with pytest.raises(TypeError) as ours:
        jsontext.dumps(obj)
    assert str(ours.value) == str(theirs.value)


def test_circular_reference_fails_like_json():
    loop: list = []
    loop.append({"x": loop})
    with pytest.raises(ValueError, match="Circular reference"):
        jsontext.dumps({"c": loop})


def test_records_clean_columns_like_values():
    """envelope.records cleans column by column what clean() gives value by value."""
    import pandas as pd
    df = pd.DataFrame({"i": np.array([1, -2, 3], np.int64), "u": np.array([1, 2, 2**63], np.uint64),
                       "b": [True, False, True], "f": [1.0, np.nan, 1 / 3], "g": np.array([np.inf, -0.0, 2.5e20], "f4"),
                       "h": [2.0**53, -(2.0**53) + 2, 1e-7], "c": pd.Categorical(["a", None, "a"]),
                       "o": [np.int64(4), pd.NA, {"k": np.float64(0.5)}], "n": pd.array([1, None, 3], "Int64")})
    expect = [{c: envelope.clean(v) for c, v in zip(df.columns, row)} for row in df.itertuples(index=False, name=None)]
    got = envelope.records(df)
    assert got == expect
    assert [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in expect]
    assert envelope.records(df.iloc[:0]) == []
    assert envelope.records(df, ["f", "missing", "i"]) == [{"f": r["f"], "i": r["i"]} for r in expect]


def test_float32_columns_round_to_six_digits_like_float64_ones():
    """float32 is integral everywhere above 2^24 without being exact: such a value is written rounded to 6
    significant digits, as a float64 prediction is, not as an int with digits the float32 does not hold."""
    import pandas as pd
    v = [24588444.0, 12024000.0, 0.25, float("nan")]
    as32 = envelope.records(pd.DataFrame({"x": np.array(v, np.float32)}))
    assert [r["x"] for r in as32] == [24588400.0, 12024000, 0.25, None]
    assert envelope.clean(np.float32(24588444.0)) == 24588400.0
    assert envelope.clean(np.float32(12024000.0)) == 12024000
    assert envelope.clean(np.float64(24588444.0)) == 24588444  # (float64: exact, written whole)
