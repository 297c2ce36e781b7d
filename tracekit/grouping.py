"""Work once per distinct value instead of once per row: the codes and distinct values of a column
(:func:`codes_of`), group keys and inverse indexes (:func:`group_index`, :func:`unique_rows`, :func:`distinct_rows`;
of chosen rows, :func:`key_codes`),
the rows of each group (:func:`runs`, :func:`rows_per_code`, :func:`row_parts`, :func:`rows_by_text`), sorted distinct values
(:func:`unique`, :func:`distinct_values`), exact integer sums per group (:func:`int_sums`) and values computed per
distinct value spread to the rows (:func:`cat_from`, :func:`cat_apply`; of plain arrays, :func:`per_value`, :func:`per_pair`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import gather, spread_mask, stored


def codes_of(s, compact: bool = False) -> tuple[np.ndarray, list]:
    """(int codes, -1 for missing; distinct values) of a column (a Series, or its stored array:
    :func:`tracekit.columns.stored`): categorical codes as they are, anything else factorized (integer codes,
    int16 or int64). Codes are int64 unless ``compact``: then categorical codes keep their stored width (the
    column's own codes, read-only) and booleans are a uint8 view (no copy), for callers that only read them."""
    dt = s.dtype
    if isinstance(dt, pd.CategoricalDtype):
        codes = s.array.codes if isinstance(s, pd.Series) else s.codes
        return (codes if compact else codes.astype(np.int64)), dt.categories.tolist()
    if dt == bool:
        v = s.to_numpy() if isinstance(s, pd.Series) else np.asarray(s)
        return (v.view(np.uint8) if compact else v.astype(np.int64)), [False, True]
    v = s.to_numpy() if isinstance(s, pd.Series) else np.asarray(s)
    if v.dtype.kind in "iu" and len(v) > 1024:
        # columns such as program_id change rarely from row to row: factorize the runs, then repeat the codes
        starts = np.r_[0, np.nonzero(v[1:] != v[:-1])[0] + 1]
        if len(starts) * 8 < len(v):
            codes, uniq = pd.factorize(v[starts])
            small = np.int16 if len(uniq) < 1 << 15 else np.int64  # a quarter of the memory when it fits
            return np.repeat(codes.astype(small), np.diff(np.r_[starts, len(v)])), uniq.tolist()
    codes, uniq = pd.factorize(s, use_na_sentinel=True)
    # (as a Series' factorize gives them: an Index, whose NumPy values iterate as Python scalars)
    return codes.astype(np.int64), (uniq.tolist() if isinstance(uniq, np.ndarray) else list(uniq))


def _key(df: pd.DataFrame, cols) -> tuple[np.ndarray, int, list]:
    """One integer key per row combining the codes of ``cols`` (mixed radix over code + 1, so a missing value
    has a key of its own), the size of the key space, and the (codes, distinct values) of each column. The key is
    int32 while the space fits (half the memory traffic of int64). When the space would grow past
    :data:`_DENSE_SPACE` the key so far is renumbered to its distinct values first (first-seen order), so the
    space stays small whatever the number of columns; the final grouping (first-seen order) is the same."""
    parts = [codes_of(stored(df, c), compact=True) for c in cols]
    key, space, offset = None, 1, 0
    for codes, uniq in parts:
        radix = len(uniq) + 1
        if key is not None and space * radix > _DENSE_SPACE and space > 1:
            key += offset  # the +1 of every column so far, added once
            key, first = _factorize(key, space)
            space, offset = len(first), 0
        if key is None:
            key = codes.astype(np.int32 if radix < 1 << 31 else np.int64)
        else:
            if space * radix >= 1 << 31 and key.dtype != np.int64:
                key = key.astype(np.int64)
            key *= radix
            key += codes
        offset = offset * radix + 1
        space *= radix
    if key is None:
        return np.zeros(len(df), np.int32), 1, parts
    key += offset
    return key, space, parts


#: key spaces up to this size are factorized with a dense table (no hashing)
_DENSE_SPACE = 1 << 20


def _first_rows(key: np.ndarray, space: int) -> np.ndarray:
    """For each value in [0, space): the first row holding it (``len(key)`` when none). A value first appears at
    the start of a run of equal keys: when runs are long (a sorted frame) only their starts are scattered."""
    n = len(key)
    first_at = np.full(space, n, np.int64)
    if not n:
        return first_at
    change = key[1:] != key[:-1]
    if np.count_nonzero(change) * 4 < n:
        starts = np.flatnonzero(change)
        del change
        rows = np.empty(len(starts) + 1, np.int64)
        rows[0] = 0
        np.add(starts, 1, out=rows[1:])
        first_at[key[rows[::-1]]] = rows[::-1]  # duplicates: the last write (the first row) wins
        return first_at
    del change
    # short runs: every row is scattered, the last chunk first, so that earlier rows overwrite later ones (chunks
    # bound the row numbers' temporary: a row-sized one was the rule stage's peak on large traces)
    for a in range(((n - 1) // _CHUNK) * _CHUNK, -1, -_CHUNK):
        b = min(a + _CHUNK, n)
        first_at[key[a:b][::-1]] = np.arange(b - 1, a - 1, -1, dtype=np.int64)
    return first_at


#: rows per pass of :func:`_first_rows`' scatter
_CHUNK = 1 << 20


def _factorize(key: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """(inverse index, first row of each distinct key), distinct keys in first-seen order. A dense table when
    the key space is no larger than the rows (its cost and memory grow with the space: at most those of a row-sized
    column; at 1.7 M rows in 1.4 M possible groups it takes half the time of the hash table), else a hash table."""
    n = len(key)
    if 0 < space <= max(_DENSE_SPACE, n) and space < (1 << 31):
        first_at = _first_rows(key, space)
        seen = np.nonzero(first_at < n)[0]
        first = first_at[seen]
        rank = np.argsort(first, kind="stable")
        code = np.empty(space, _inverse_dtype(len(seen)))
        code[seen[rank]] = np.arange(len(seen))
        return gather(code, key), first[rank]
    inv, ku = pd.factorize(key)  # hash-based, first-seen order
    first = np.zeros(len(ku), np.int64)
    first[inv[::-1]] = np.arange(n)[::-1]  # the first row of each distinct key
    return inv.astype(_inverse_dtype(len(ku))), first


def _inverse_dtype(groups: int) -> np.dtype:
    """An inverse index's dtype: int32 while the groups fit (half the memory of a row-sized index: the rule and
    overview stages group the whole ops frame), else int64."""
    return np.dtype(np.int32 if groups < (1 << 31) else np.int64)


def runs(codes: np.ndarray) -> list[tuple[int, slice | np.ndarray]]:
    """(code, rows) per group of equal codes. A frame sorted by the key has one run per value, and its rows are a
    slice (a view, no copy); otherwise (many short runs) the rows of each code are an index array."""
    if not len(codes):
        return []
    cut = np.r_[0, np.nonzero(codes[1:] != codes[:-1])[0] + 1, len(codes)]
    if len(cut) - 1 <= 64 + 4 * len(unique(codes[cut[:-1]])):
        return [(int(codes[a]), slice(int(a), int(b))) for a, b in zip(cut[:-1], cut[1:])]
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    cut = np.r_[0, np.nonzero(sc[1:] != sc[:-1])[0] + 1, len(sc)]
    return [(int(sc[a]), order[a:b]) for a, b in zip(cut[:-1], cut[1:])]


def group_index(df: pd.DataFrame, cols) -> tuple[np.ndarray, np.ndarray]:
    """(inverse index (int32 while the groups fit), first row of each group) of ``df[cols]``, groups in first-seen
    order."""
    key, space, _ = _key(df, cols)
    return _factorize(key, space)


def key_codes(df: pd.DataFrame, cols, *rows: np.ndarray) -> tuple[list, int]:
    """(for each of ``rows`` (position arrays), one int64 number per row combining the values of ``cols``; how many
    numbers there can be): equal values, equal numbers, across every array of ``rows`` (mixed radix over code + 1:
    a missing value is a value of its own). Only the chosen rows are read: a categorical or boolean column's codes
    are gathered, another column's values gathered and factorized run by run, one numbering for every array of
    ``rows`` (never a code per row of ``df``: at 15 M rows that was 240 MB).
    Over 2**62 numbers: ValueError."""
    keys, space = [np.zeros(len(r), np.int64) for r in rows], 1
    for c in cols:
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype) or s.dtype == bool:
            codes, uniq = codes_of(s, compact=True)  # (the column's own codes, or a view of the booleans)
            parts, radix = [gather(codes, r) for r in rows], len(uniq) + 1
        else:  # the rows' values, factorized run by run (a program id changes rarely from row to row)
            parts, radix = _run_codes([gather(s.to_numpy(), r) for r in rows])
        space *= radix
        if space >= 1 << 62:
            raise ValueError(f"the values of {list(cols)} do not fit one int64")
        for k, p in zip(keys, parts):
            k *= radix
            k += p
            k += 1
    return keys, space


def _run_codes(arrays: list) -> tuple[list, int]:
    """(int32 codes of each array's values, -1 missing, one numbering across the arrays; distinct values + 1):
    only the first value of each run of equal values is factorized."""
    heads = [np.flatnonzero(np.r_[True, x[1:] != x[:-1]]) if len(x) else np.zeros(0, np.int64) for x in arrays]
    codes, uniq = pd.factorize(np.concatenate([x[h] for x, h in zip(arrays, heads)]) if arrays else np.zeros(0))
    codes = codes.astype(np.int32)
    out, at = [], 0
    for x, h in zip(arrays, heads):
        out.append(np.repeat(codes[at:at + len(h)], np.diff(np.r_[h, len(x)])))
        at += len(h)
    return out, len(uniq) + 1


def unique_rows(df: pd.DataFrame, cols) -> tuple[np.ndarray, list[tuple]]:
    """(inverse index, distinct value tuples) of ``df[cols]``: callers compute once per distinct tuple and spread
    the result back with the inverse index."""
    inv, _, tuples = distinct_rows(df, cols)
    return inv, tuples


def distinct_rows(df: pd.DataFrame, cols) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    """:func:`unique_rows` plus the first row of each distinct tuple."""
    key, space, parts = _key(df, cols)
    inv, first = _factorize(key, space)
    return inv, first, _tuples(parts, first)


def _tuples(parts: list, rows) -> list[tuple]:
    """The value tuple of each of ``rows`` from :func:`_key`'s per-column (codes, distinct values); None where a
    value is missing."""
    return [tuple((u[codes[i]] if codes[i] >= 0 else None) for codes, u in parts) for i in rows]


def rows_by_text(df: pd.DataFrame, cols, keep: np.ndarray | None = None) -> dict:
    """(value of each of ``cols`` as text) -> sorted row indices of ``df`` (only rows where ``keep``; a group with
    none is left out): :func:`row_parts` as index arrays. What ``df.groupby([df[c].astype(str) for c in cols])``
    gives, without a string per row. Rows with a missing value in ``cols`` are left out."""
    out: dict = {}
    for k, part in row_parts(df, cols).items():
        idx = np.arange(part.start, part.stop) if isinstance(part, slice) else part
        if keep is not None:
            idx = idx[keep[idx]]
        if len(idx):
            out[k] = idx
    return out


def int_sums(inv: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """Exact int64 sums of ``v`` per group (``inv``: each value's group, in [0, ``n``)): no float rounding, as a
    weighted ``np.bincount`` would give past 2**53."""
    out = np.zeros(n, np.int64)
    np.add.at(out, inv, np.asarray(v).astype(np.int64, copy=False))
    return out


def sorted_group_numbers(*cols: np.ndarray) -> np.ndarray:
    """Each row's group number, groups numbered in the sorted order of their keys (``cols``: integer or boolean
    arrays, the first the most significant): ``DataFrame.groupby(cols, sort=True).ngroup()`` without a frame."""
    n = len(cols[0]) if cols else 0
    if not n:
        return np.zeros(0, np.int64)
    order = np.lexsort(cols[::-1])
    new = np.zeros(n, bool)
    new[0] = True
    for c in cols:
        sc = np.asarray(c)[order]
        new[1:] |= sc[1:] != sc[:-1]
    out = np.empty(n, np.int64)
    out[order] = np.cumsum(new) - 1
    return out


def unique(a) -> np.ndarray:
    """``np.unique(a)`` (the sorted distinct values) for integer and boolean arrays by one sort: NumPy 2.3+ finds
    them with a hash table, which on picosecond times (round multiples: the hash collides) is tens of times slower
    (a 400 k-step trace: 441 ms against 9 ms). Other dtypes go to ``np.unique``."""
    a = np.asarray(a).ravel()
    if a.dtype.kind not in "iub" or a.size < 2:
        return np.unique(a)
    s = np.sort(a)
    return s[np.r_[True, s[1:] != s[:-1]]]


def distinct_values(a: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted (``np.unique``), read from its runs of equal values when they
    are few (the ids of a frame sorted by device): no hash table or sorted copy of every row."""
    a = np.asarray(a)
    if len(a) < 2 or a.strides == (0,):
        return unique(a[:1])
    starts = np.flatnonzero(a[1:] != a[:-1])
    if len(starts) * 8 < len(a):
        return unique(np.concatenate([a[:1], a[starts + 1]]))
    return unique(a)


def row_parts(df: pd.DataFrame, cols) -> dict:
    """(value of each of ``cols`` as text) -> the rows of that group: a slice (a view of every column, no copy)
    when they are contiguous, as in a frame sorted by ``cols``, else their sorted positions. Rows with a missing
    value in ``cols`` are left out."""
    key, space, cp = _key(df, cols)
    starts = np.r_[0, np.flatnonzero(key[1:] != key[:-1]) + 1] if len(key) else np.zeros(0, np.int64)
    if len(unique(key[starts])) == len(starts):  # one run per group (a frame sorted by ``cols``): no inverse index
        del key
        out = {}
        for k, a, b in zip(_tuples(cp, starts), starts.tolist(), np.r_[starts[1:], len(df)].tolist()):
            if not any(v is None for v in k):
                out[tuple(str(v) for v in k)] = slice(a, b)
        return out
    inv, first = _factorize(key, space)
    del key
    keys = _tuples(cp, first)
    return {tuple(str(v) for v in keys[code]): rows for code, rows in rows_per_code(inv).items()
            if not any(v is None for v in keys[code])}


def rows_per_code(codes: np.ndarray) -> dict:
    """code -> its rows: a slice when they are contiguous, else their sorted positions (from :func:`runs`)."""
    parts: dict = {}
    for code, part in runs(codes):
        parts.setdefault(code, []).append(part)
    return {code: ps[0] if len(ps) == 1 else np.sort(np.concatenate(
        [np.arange(p.start, p.stop) if isinstance(p, slice) else p for p in ps])) for code, ps in parts.items()}


def cat_from(per_unique: list, inv: np.ndarray) -> pd.Categorical:
    """A categorical column from values given once per distinct key."""
    table: dict = {}  # text -> code, in first-seen order
    codes = np.fromiter((table.setdefault("" if v is None else str(v), len(table)) for v in per_unique), np.int32,
                        count=len(per_unique))
    return pd.Categorical.from_codes(codes[inv] if len(inv) else np.empty(0, np.int32), categories=list(table))


def cat_apply(s: pd.Series, fn) -> np.ndarray:
    """``fn(value)`` evaluated once per distinct value of ``s`` and spread to every row (NumPy array)."""
    codes, uniq = codes_of(s, compact=True)
    vals = np.array([fn(u) for u in uniq] + [fn("")])  # the last entry serves missing values
    if vals.dtype == bool:
        return spread_mask(vals[:-1], codes, bool(vals[-1]))
    return vals[codes]  # code -1 picks the last entry


def per_value(fn, values: np.ndarray, dtype) -> np.ndarray:
    """``fn`` of each value of ``values``, worked out once per distinct value (a graph's rows repeat a few names)."""
    codes, firsts = _distinct(values)
    return np.fromiter((fn(values[i]) for i in firsts.tolist()), dtype, len(firsts))[codes]


def per_pair(fn, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``fn(a[i], b[i])`` of each row (objects, a tuple as one value), worked out once per distinct pair."""
    ac, _ = _distinct(a)
    bc, _ = _distinct(b)
    space = int(bc.max(initial=0)) + 1
    codes, firsts = _factorize(ac * space + bc, (int(ac.max(initial=0)) + 1) * space)
    return np.fromiter((fn(a[i], b[i]) for i in firsts.tolist()), object, len(firsts))[codes]


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int64 code of each value, first-seen order; the first row of each code): the values are read back from
    those rows (factorize's own distinct values turn None into NaN)."""
    codes, uniq = pd.factorize(values, use_na_sentinel=False)
    codes = codes.astype(np.int64)
    return codes, _first_rows(codes, len(uniq))
