"""Columnar building blocks for the frames stage: categorical chunks (:class:`Cat`) built from values given
once per distinct key, a chunk accumulator, and per-event stat columns pulled out of a line's flattened stats
(:class:`tracekit.ingest.wire.LineData`) with NumPy — no Python object per event."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.ingest.wire import KIND_BYTES, KIND_DOUBLE, KIND_INT64, KIND_REF, KIND_STR, KIND_UINT64, LineData


class Cat(NamedTuple):
    """A categorical column chunk: int codes into ``categories`` (-1 = missing)."""
    codes: np.ndarray
    categories: list


def intern(per_unique: list, inv: np.ndarray) -> Cat:
    """Values given once per unique key (``per_unique``) and the inverse index -> a Cat (duplicates merged)."""
    table: dict = {}
    codes_u = np.fromiter((table.setdefault(v, len(table)) for v in per_unique), dtype=np.int32,
                          count=len(per_unique))
    return Cat(codes_u[inv] if len(inv) else np.empty(0, np.int32), list(table))


def const(value, n: int) -> Cat:
    return Cat(np.zeros(n, np.int32), [value])


class _Acc:
    """Column accumulator of NumPy chunks and Cat chunks, concatenated once."""

    def __init__(self):
        self.chunks: list[dict] = []

    def add(self, **cols):
        n = len(cols["start_ps"])
        if n:
            self.chunks.append(cols)

    def frame(self, sch: dict) -> pd.DataFrame:
        if not self.chunks:
            return schema.empty(sch)
        n = sum(len(c["start_ps"]) for c in self.chunks)
        data = {}
        for k in self.chunks[0]:
            parts = [c[k] if k in c else None for c in self.chunks]
            if any(isinstance(p, Cat) or isinstance(p, str) for p in parts):
                data[k] = _concat_cat(parts, [len(c["start_ps"]) for c in self.chunks])
            elif all(isinstance(p, np.ndarray) for p in parts):
                data[k] = np.concatenate(parts)
            else:
                data[k] = np.concatenate([np.full(len(c["start_ps"]), p) if not isinstance(p, np.ndarray) else p
                                          for p, c in zip(parts, self.chunks)])
        assert all(len(v) == n for v in data.values())
        return schema.conform(pd.DataFrame(data, copy=False), sch)  # the arrays are new: no copy, no consolidation


def _recode(codes: np.ndarray, cats, table: dict) -> np.ndarray:
    """``codes`` (into ``cats``; -1 missing) as codes into the growing ``table`` (value -> code), in one gather;
    no gather at all when the categories map to themselves."""
    remap = np.fromiter((table.setdefault(c, len(table)) for c in cats), np.int32, len(cats))
    if np.array_equal(remap, np.arange(len(remap))):
        return codes if codes.dtype == np.int32 else codes.astype(np.int32)
    return np.append(remap, np.int32(-1))[codes]  # code -1 picks the appended -1


def _concat_cat(parts, lens) -> pd.Categorical:
    table: dict = {}
    out = []
    for p, n in zip(parts, lens):
        if not isinstance(p, Cat):
            p = const("" if p is None else p, n)
        out.append(_recode(p.codes, p.categories, table))
    cats = [str(c) for c in table]
    # keys are str already in practice; guard against duplicates after str()
    if len(set(cats)) != len(cats):
        return pd.Categorical(np.array(cats, dtype=object)[np.concatenate(out)])
    return pd.Categorical.from_codes(np.concatenate(out), categories=cats)


# ----------------------------------------------------------------------------------------- event stat columns
_INT_KINDS = (KIND_UINT64, KIND_INT64)
_NUM_KINDS = (KIND_DOUBLE, KIND_UINT64, KIND_INT64)
_STR_KINDS = (KIND_STR, KIND_BYTES, KIND_REF)


def _odd(odd, label: str, kind: np.ndarray, allowed: tuple) -> None:
    """Count, in ``odd[label]``, the values of a stat stored with a type it should not have."""
    if odd is not None:
        k = int(np.count_nonzero(~np.isin(kind, allowed)))
        if k:
            odd[label] = odd.get(label, 0) + k


def _entries(line: LineData, sid: int, odd: dict | None, label: str, allowed: tuple):
    """(mask, event index, kind) of the entries of stat ``sid`` in ``line``, or None when it has none; kinds
    outside ``allowed`` are counted in ``odd``."""
    if sid < 0 or not len(line.stat_id):
        return None
    m = line.stat_id == sid
    if not m.any():
        return None
    kind = line.stat_kind[m]
    _odd(odd, label, kind, allowed)
    return m, line.stat_event[m], kind


def stat_ints(line: LineData, sid: int, odd: dict | None = None, label: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(has, value) per event for an integer-valued stat (int64/uint64 bits/ref id); value 0 where absent. A
    value stored with another type counts when it is a number (a finite double, a numeric string); otherwise
    the event does not have the stat."""
    n = line.n_events
    has = np.zeros(n, bool)
    val = np.zeros(n, np.int64)
    found = _entries(line, sid, odd, label, _INT_KINDS)
    if found is not None:
        m, ev, kind = found
        iv = line.stat_int[m].copy()
        ok = np.ones(len(iv), bool)
        dbl = kind == KIND_DOUBLE
        if dbl.any():
            d = line.stat_double[m][dbl]
            fin = np.isfinite(d) & (np.abs(d) < 2.0**63)
            iv[dbl] = np.where(fin, d, 0).astype(np.int64)
            ok[dbl] = fin
        txt = np.nonzero((kind == KIND_STR) | (kind == KIND_BYTES))[0]
        if len(txt):
            parsed = [_int_or_none(line.stat_str[int(k)]) for k in iv[txt]]
            iv[txt] = [0 if p is None else p for p in parsed]
            ok[txt] = [p is not None for p in parsed]
        has[ev[ok]] = True
        val[ev[ok]] = iv[ok]
    return has, val


def _float_or_nan(v) -> float:
    try:
        return float(v)
    except ValueError:
        return np.nan


def _int_or_none(v):
    """A numeric str/bytes stat value as an int64, else None."""
    try:
        f = int(v)
    except ValueError:
        try:
            f = float(v)
        except ValueError:
            return None
        if not np.isfinite(f):
            return None
    f = int(f)
    return f if -(2**63) <= f < 2**63 else None


def stat_floats(line: LineData, sid: int, odd: dict | None = None, label: str = "") -> np.ndarray:
    """Per event float value of a numeric stat; NaN where absent."""
    out = np.full(line.n_events, np.nan)
    found = _entries(line, sid, odd, label, _NUM_KINDS)
    if found is not None:
        m, ev, kind = found
        v = np.where(kind == KIND_DOUBLE, line.stat_double[m], line.stat_int[m].astype(np.float64))
        u = kind == 3  # uint64 bits
        if u.any():
            v[u] = line.stat_int[m][u].astype(np.uint64).astype(np.float64)
        v[kind == KIND_REF] = np.nan  # a name is not a number
        txt = np.nonzero((kind == KIND_STR) | (kind == KIND_BYTES))[0]
        if len(txt):  # a number stored as text counts; any other text does not
            v[txt] = [_float_or_nan(line.stat_str[int(k)]) for k in line.stat_int[m][txt]]
        out[ev] = v
    return out


def stat_strings(line: LineData, sid: int, names: dict, odd: dict | None = None,
                 label: str = "") -> tuple[np.ndarray, Cat]:
    """(has, Cat) per event for a string stat stored as ref_value (into stat metadata names) or str_value."""
    n = line.n_events
    has = np.zeros(n, bool)
    keys = np.full(n, -1, np.int64)
    found = _entries(line, sid, odd, label, _STR_KINDS)
    if found is not None:
        m, ev, kind = found
        iv = line.stat_int[m]
        has[ev] = (kind == KIND_REF) | (kind == KIND_STR) | (kind == KIND_BYTES)  # a number is not a name
        # encode: ref ids as themselves (>= 0), inline strings as -(index+2)
        keys[ev] = np.where(kind == KIND_REF, iv, np.where((kind == KIND_STR) | (kind == KIND_BYTES), -(iv + 2), -1))
    uniq, inv = np.unique(keys, return_inverse=True)

    def name(k):
        if k >= 0:
            return names.get(int(k), "")
        if k == -1:
            return ""
        v = line.stat_str[int(-k - 2)]
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    return has, intern([name(k) for k in uniq], inv)


# --------------------------------------------------------------------------- work per distinct value, not per row
def codes_of(s: pd.Series, compact: bool = False) -> tuple[np.ndarray, list]:
    """(int codes, -1 for missing; distinct values) of a column: categorical codes as they are, anything else
    factorized (integer codes, int16 or int64). Codes are int64 unless ``compact``: then categorical codes keep
    their stored width and booleans are a uint8 view (no copy), for callers that only add them up."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.cat.codes.to_numpy()
        return (codes if compact else codes.astype(np.int64)), list(s.cat.categories)
    if s.dtype == bool:
        v = s.to_numpy()
        return (v.view(np.uint8) if compact else v.astype(np.int64)), [False, True]
    v = s.to_numpy()
    if v.dtype.kind in "iu" and len(v) > 1024:
        # columns such as program_id change rarely from row to row: factorize the runs, then repeat the codes
        starts = np.r_[0, np.nonzero(v[1:] != v[:-1])[0] + 1]
        if len(starts) * 8 < len(v):
            codes, uniq = pd.factorize(v[starts])
            small = np.int16 if len(uniq) < 1 << 15 else np.int64  # a quarter of the memory when it fits
            return np.repeat(codes.astype(small), np.diff(np.r_[starts, len(v)])), uniq.tolist()
    codes, uniq = pd.factorize(s, use_na_sentinel=True)
    return codes.astype(np.int64), list(uniq)


def _key(df: pd.DataFrame, cols) -> tuple[np.ndarray, int, list]:
    """One int64 key per row combining the codes of ``cols`` (mixed radix), the size of the key space, and the
    (codes, distinct values) of each column. When the space would grow past :data:`_DENSE_SPACE` the key so far
    is renumbered to its distinct values first (first-seen order), so the space stays small whatever the number
    of columns; the final grouping (first-seen order) is the same."""
    key = np.zeros(len(df), np.int64)
    space = 1
    parts = []
    for c in cols:
        codes, uniq = codes_of(df[c], compact=True)
        parts.append((codes, uniq))
        if space * (len(uniq) + 1) > _DENSE_SPACE and space > 1:
            key, first = _factorize(key, space)
            space = len(first)
        key *= len(uniq) + 1
        key += codes
        key += 1
        space *= len(uniq) + 1
    return key, space, parts


#: key spaces up to this size are factorized with a dense table (no hashing)
_DENSE_SPACE = 1 << 20


_CHUNK = 1 << 20


def _first_rows(key: np.ndarray, space: int) -> np.ndarray:
    """For each value in [0, space): the first row holding it (``len(key)`` when none). Scans in chunks (no
    row-sized temporaries) and stops once every value present has been met."""
    n = len(key)
    first_at = np.full(space, n, np.int64)
    # the early stop needs a count per value: worth it for small spaces only
    want = int(np.count_nonzero(np.bincount(key, minlength=space))) if space <= _CHUNK else -1
    for lo in range(0, n, _CHUNK):
        kc = key[lo:lo + _CHUNK]
        new = np.nonzero(first_at[kc] == n)[0]  # rows whose value was not met in an earlier chunk
        if len(new):
            first_at[kc[new[::-1]]] = lo + new[::-1]  # duplicates: the last write (the first row) wins
            if want >= 0 and int(np.count_nonzero(first_at < n)) == want:
                break
    return first_at


def _factorize(key: np.ndarray, space: int) -> tuple[np.ndarray, np.ndarray]:
    """(inverse index, first row of each distinct key), distinct keys in first-seen order. A dense table when
    the key space is small next to the rows (its cost grows with the space), else a hash table."""
    n = len(key)
    if 0 < space <= max(_DENSE_SPACE, n // 2) and space < (1 << 31):
        first_at = _first_rows(key, space)
        seen = np.nonzero(first_at < n)[0]
        first = first_at[seen]
        rank = np.argsort(first, kind="stable")
        code = np.empty(space, np.int64)
        code[seen[rank]] = np.arange(len(seen))
        return code[key], first[rank]
    inv, ku = pd.factorize(key)  # hash-based, first-seen order
    first = np.zeros(len(ku), np.int64)
    first[inv[::-1]] = np.arange(n)[::-1]  # the first row of each distinct key
    return inv.astype(np.int64), first


def runs(codes: np.ndarray) -> list[tuple[int, slice | np.ndarray]]:
    """(code, rows) per group of equal codes. A frame sorted by the key has one run per value, and its rows are a
    slice (a view, no copy); otherwise (many short runs) the rows of each code are an index array."""
    if not len(codes):
        return []
    cut = np.r_[0, np.nonzero(codes[1:] != codes[:-1])[0] + 1, len(codes)]
    if len(cut) - 1 <= 64 + 4 * len(np.unique(codes[cut[:-1]])):
        return [(int(codes[a]), slice(int(a), int(b))) for a, b in zip(cut[:-1], cut[1:])]
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    cut = np.r_[0, np.nonzero(sc[1:] != sc[:-1])[0] + 1, len(sc)]
    return [(int(sc[a]), order[a:b]) for a, b in zip(cut[:-1], cut[1:])]


def group_index(df: pd.DataFrame, cols) -> tuple[np.ndarray, np.ndarray]:
    """(inverse index, first row of each group) of ``df[cols]``, groups in first-seen order."""
    key, space, _ = _key(df, cols)
    return _factorize(key, space)


def unique_rows(df: pd.DataFrame, cols) -> tuple[np.ndarray, list[tuple]]:
    """(inverse index, distinct value tuples) of ``df[cols]``: callers compute once per distinct tuple and spread
    the result back with the inverse index."""
    inv, _, tuples = distinct_rows(df, cols)
    return inv, tuples


def distinct_rows(df: pd.DataFrame, cols) -> tuple[np.ndarray, np.ndarray, list[tuple]]:
    """:func:`unique_rows` plus the first row of each distinct tuple."""
    key, space, parts = _key(df, cols)
    inv, first = _factorize(key, space)
    tuples = [tuple((u[codes[i]] if codes[i] >= 0 else None) for codes, u in parts) for i in first]
    return inv, first, tuples


def cat_from(per_unique: list, inv: np.ndarray) -> pd.Categorical:
    """A categorical column from values given once per distinct key."""
    c = intern([("" if v is None else str(v)) for v in per_unique], inv)
    return pd.Categorical.from_codes(c.codes, categories=c.categories) if len(set(c.categories)) == len(c.categories) \
        else pd.Categorical(np.array(c.categories, dtype=object)[c.codes])


def cat_apply(s: pd.Series, fn) -> np.ndarray:
    """``fn(value)`` evaluated once per distinct value of ``s`` and spread to every row (NumPy array)."""
    codes, uniq = codes_of(s)
    vals = np.array([fn(u) for u in uniq] + [fn("")])  # the last entry serves missing values
    return vals[np.where(codes >= 0, codes, len(uniq))]


def with_columns(df: pd.DataFrame, new: dict) -> pd.DataFrame:
    """``df`` with the columns of ``new`` added or replaced, as one new frame that shares every column array:
    ``df[k] = v`` copies ``v`` (and, on a wide frame, costs a page-faulting allocation per column); this does
    not. ``df`` itself is left unchanged. New columns come after ``df``'s, in ``new``'s order."""
    cols = {c: (new[c] if c in new else df[c]) for c in df.columns}
    for c, v in new.items():
        if c not in cols:
            cols[c] = v
    return pd.DataFrame({c: (np.full(len(df), v) if np.ndim(v) == 0 and not isinstance(v, pd.Series) else v)
                         for c, v in cols.items()}, index=df.index, copy=False)


def concat_frames(frames: list[pd.DataFrame], order: np.ndarray | None = None) -> pd.DataFrame:
    """Concatenate frames column by column (one allocation per column), keeping categorical columns categorical
    (categories unioned, codes remapped). Columns follow the first frame; a column missing from a frame is filled
    with NaN (numbers) or the empty category. ``order``: row positions of the concatenation to keep, in that
    order (a sort applied column by column, so only one column's temporary is alive at a time)."""
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame()
    if len(frames) == 1:
        return (frames[0].take(order) if order is not None else frames[0]).reset_index(drop=True)
    cols = list(frames[0].columns) + [c for f in frames[1:] for c in f.columns if c not in frames[0].columns]
    cols = list(dict.fromkeys(cols))
    data = {}
    for c in cols:
        present = [f[c] for f in frames if c in f.columns]
        if any(isinstance(s.dtype, pd.CategoricalDtype) for s in present):
            data[c] = _concat_series_cat([f[c] if c in f.columns else None for f in frames], [len(f) for f in frames])
        elif len(present) == len(frames) and all(isinstance(s.dtype, np.dtype) and s.dtype.kind in "biuf"
                                                 for s in present):
            data[c] = np.concatenate([s.to_numpy() for s in present])
        else:  # strings, objects, or a column some frames lack: let pandas pick the dtype
            data[c] = pd.concat([f[c] if c in f.columns else pd.Series([None] * len(f)) for f in frames],
                                ignore_index=True).array
        if order is not None:
            data[c] = data[c][order]
    return pd.DataFrame(data, copy=False)


def _concat_series_cat(parts: list, lens: list) -> pd.Categorical:
    """Concatenate categorical (or string) series as one categorical: categories in first-seen order."""
    table: dict = {}
    out = []
    for s, n in zip(parts, lens):
        if s is None:
            codes, cats = np.zeros(n, np.int32), [""]
        elif isinstance(s.dtype, pd.CategoricalDtype):
            codes, cats = s.cat.codes.to_numpy(), [str(c) for c in s.cat.categories]
        else:
            codes, cats = pd.factorize(s.astype(str), use_na_sentinel=True)
            cats = list(cats)
        out.append(_recode(codes, cats, table))
    return pd.Categorical.from_codes(np.concatenate(out), categories=list(table))


def self_time(ops: pd.DataFrame) -> np.ndarray:
    """Each row's own time (int64 ps): ``self_ps`` (the duration minus nested events' time) where the frame has
    it, else ``duration_ps``. Sums of op time use this, so nested events are not counted twice."""
    dur = ops["duration_ps"].to_numpy(np.int64)
    if "self_ps" not in ops.columns:
        return dur
    s = ops["self_ps"].to_numpy(np.int64)
    return np.where(s >= 0, s, dur)
