"""Columnar helpers every stage shares: work once per distinct value instead of once per row (:func:`codes_of`,
:func:`unique_rows`, :func:`group_index`, :func:`runs`, :func:`cat_from`, :func:`cat_apply`), and frames and
categorical columns put together without copies (:func:`with_columns`, :func:`concat_frames`,
:func:`concat_categorical`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.threads import one_shot


def gather(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a[idx]`` for indices known to be valid (0 <= idx < len(a)): NumPy's take without bounds checks, about
    twice as fast as fancy indexing on millions of rows (an invalid index would be clipped, never read outside).
    Narrower indices (int32 inverse indexes) are taken a chunk at a time: ``np.take`` first copies them to intp,
    which for the whole array is a row-sized temporary (at 17 M rows 136 MB, and 4x the time of an intp take);
    per chunk the copy stays in cache (1.7 M rows: 3.5 ms, against 2.9 with intp indices and 4.9 by fancy
    indexing)."""
    if isinstance(a, np.ndarray) and isinstance(idx, np.ndarray) and idx.ndim == 1 and len(idx) > _TAKE_CHUNK \
            and idx.dtype != np.intp:
        out = np.empty(len(idx), a.dtype)
        for c in range(0, len(idx), _TAKE_CHUNK):
            np.take(a, idx[c:c + _TAKE_CHUNK], mode="clip", out=out[c:c + _TAKE_CHUNK])
        return out
    return np.take(a, idx, mode="clip")


#: indices per pass of :func:`gather` when they are narrower than intp
_TAKE_CHUNK = 1 << 16


def code_dtype(n: int) -> np.dtype:
    """The integer dtype pandas keeps a categorical's codes in for ``n`` categories (the narrowest that fits)."""
    for dt in (np.int8, np.int16, np.int32):
        if n < np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


def _recode(codes: np.ndarray, cats, table: dict) -> np.ndarray:
    """``codes`` (into ``cats``; -1 missing) as codes into the growing ``table`` (value -> code), in one gather;
    no gather at all when the categories map to themselves."""
    remap = np.fromiter((table.setdefault(c, len(table)) for c in cats), np.int64, len(cats))
    if np.array_equal(remap, np.arange(len(remap))):
        return codes
    return np.append(remap, -1).astype(code_dtype(len(table)))[codes]  # code -1 picks the appended -1


def concat_categorical(parts: list, lens: list, order: np.ndarray | None = None) -> pd.Categorical:
    """Chunks of one column concatenated as one categorical, categories (as text) in first-seen order and codes
    remapped in one gather per chunk (codes as narrow as the categories allow, never widened on the way). A chunk
    is a (codes, categories) pair (code -1 = missing; e.g. :class:`tracekit.ingest.events.Cat`), a pandas Series
    (categorical or not), a single value for the chunk's ``lens[i]`` rows, or None (empty text). ``order``: row
    positions of the concatenation to keep, in that order."""
    table: dict = {}
    out = []
    for p, n in zip(parts, lens):
        if isinstance(p, pd.Series):
            if isinstance(p.dtype, pd.CategoricalDtype):
                codes, cats = p.array.codes, list(p.cat.categories)
            else:
                codes, cats = pd.factorize(p.astype(str), use_na_sentinel=True)
        elif isinstance(p, tuple):
            codes, cats = p
        else:
            codes, cats = np.zeros(n, np.int8), ["" if p is None else p]
        out.append(_recode(codes, [str(c) for c in cats], table))
    codes = np.concatenate(out, dtype=code_dtype(len(table)), casting="same_kind") if out else np.zeros(0, np.int8)
    if order is not None:
        codes = gather(codes, order)
    return pd.Categorical.from_codes(codes, categories=list(table))


# --------------------------------------------------------------------------- work per distinct value, not per row
def codes_of(s: pd.Series, compact: bool = False) -> tuple[np.ndarray, list]:
    """(int codes, -1 for missing; distinct values) of a column: categorical codes as they are, anything else
    factorized (integer codes, int16 or int64). Codes are int64 unless ``compact``: then categorical codes keep
    their stored width (the column's own codes, read-only) and booleans are a uint8 view (no copy), for callers
    that only read them."""
    if isinstance(s.dtype, pd.CategoricalDtype):
        codes = s.array.codes
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
    """One integer key per row combining the codes of ``cols`` (mixed radix over code + 1, so a missing value
    has a key of its own), the size of the key space, and the (codes, distinct values) of each column. The key is
    int32 while the space fits (half the memory traffic of int64). When the space would grow past
    :data:`_DENSE_SPACE` the key so far is renumbered to its distinct values first (first-seen order), so the
    space stays small whatever the number of columns; the final grouping (first-seen order) is the same."""
    parts = [codes_of(df[c], compact=True) for c in cols]
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
    parts: dict = {}
    for code, part in runs(inv):
        parts.setdefault(code, []).append(part)
    out = {}
    for code, ps in parts.items():
        if any(v is None for v in keys[code]):
            continue
        out[tuple(str(v) for v in keys[code])] = ps[0] if len(ps) == 1 else np.sort(np.concatenate(
            [np.arange(p.start, p.stop) if isinstance(p, slice) else p for p in ps]))
    return out


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


#: a mask with at most this many codes on (or off) is made of comparisons instead of a gather
_FEW = 8


def spread_mask(hit: np.ndarray, codes: np.ndarray, missing: bool = False) -> np.ndarray:
    """The rows whose code is on in ``hit`` (one bool per distinct value; code -1, a missing value, gives
    ``missing``): ``hit[codes]``, as a few equality tests when few codes are on (or off), which costs far less
    than a gather through a small table."""
    hit = np.asarray(hit, bool)
    on = np.flatnonzero(hit)
    off = np.flatnonzero(~hit)
    if len(on) <= _FEW:
        out = codes < 0 if missing else np.zeros(len(codes), bool)
        for c in on.tolist():
            out |= codes == c
        return out
    if len(off) <= _FEW:
        out = np.ones(len(codes), bool) if missing else codes >= 0
        for c in off.tolist():
            out &= codes != c
        return out
    return np.append(hit, missing)[codes]


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


def without_columns(df: pd.DataFrame, cols) -> pd.DataFrame:
    """``df`` less ``cols`` (those it has), as one new frame that shares every other column array: the dropped
    arrays are freed once nothing else holds them. ``df`` itself is left unchanged."""
    drop = set(cols)
    return pd.DataFrame({c: df[c] for c in df.columns if c not in drop}, index=df.index, copy=False)


def concat_frames(frames: list[pd.DataFrame], order: np.ndarray | None = None) -> pd.DataFrame:
    """Concatenate frames column by column (one allocation per column), keeping categorical columns categorical
    (categories unioned, codes remapped). Columns follow the first frame; a column missing from a frame is filled
    with missing values (the column then holds objects) or the empty category. ``order``: row positions of the
    concatenation to keep, in that order (a sort applied column by column, so only one column's temporary is
    alive at a time)."""
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
            data[c] = concat_categorical([f[c] if c in f.columns else None for f in frames], [len(f) for f in frames],
                                         order)
            continue
        if len(present) == len(frames) and all(isinstance(s.dtype, np.dtype) and s.dtype.kind in "biuf"
                                               for s in present):
            data[c] = np.concatenate([s.to_numpy() for s in present])
        else:  # strings, objects, or a column some frames lack: let pandas pick the dtype
            data[c] = pd.concat([f[c] if c in f.columns else pd.Series([None] * len(f)) for f in frames],
                                ignore_index=True).array
        if order is not None:  # (a gather without bounds checks)
            data[c] = gather(data[c], order) if isinstance(data[c], np.ndarray) else data[c][order]
    return pd.DataFrame(data, copy=False)


def self_time(ops: pd.DataFrame, rows: np.ndarray | None = None) -> np.ndarray:
    """Each row's own time (int64 ps): ``self_ps`` (the duration minus nested events' time) where the frame has
    it, else ``duration_ps``. Sums of op time use this, so nested events are not counted twice. ``rows``: only
    those rows (positions), without a frame-sized temporary. Read it only: it may be the frame's own column."""
    col = "self_ps" if "self_ps" in ops.columns else "duration_ps"
    s = ops[col].to_numpy(np.int64)
    if rows is not None:
        s = gather(s, rows)
    if col == "duration_ps":
        return s
    missing = s < 0  # -1: a frame without self times for these rows
    if not missing.any():
        return s  # the column itself (no copy): callers only read it
    dur = ops["duration_ps"].to_numpy(np.int64)
    return np.where(missing, gather(dur, rows) if rows is not None else dur, s)


#: a numeric column at least this long whose rows all hold one value is kept as that value seen from every row
CONSTANT_MIN_ROWS = 1 << 16
#: pandas copies a column before writing to it only with copy-on-write, always on from pandas 3
_COPY_ON_WRITE = int(pd.__version__.split(".")[0]) >= 3


def stores_constants_once() -> bool:
    """Whether :func:`constant_columns` (and the roofline's spread of per-op values) may keep a column whose rows
    all hold one value as that value seen from every row. Such a column is read-only: ``df.loc[i, col] = v`` on a
    frame that holds it raises where pandas would write in place. So only a one-shot process that hands no frame
    to a caller does it (tracekit's commands, the post-run hook's analysis child: :func:`tracekit.threads.
    mark_one_shot`), and only where pandas copies before a write; a library caller's frames stay writable."""
    return one_shot() and _COPY_ON_WRITE


def one_value(a: np.ndarray):
    """The value every element of ``a`` holds (NaN included), or None when they differ."""
    if not len(a):
        return None
    v = a[0]
    head = a[:4096]  # most columns differ early: reject them without a pass over every row
    if a.dtype.kind == "f" and np.isnan(v):
        return v if np.isnan(head).all() and np.isnan(a).all() else None
    return v if (head == v).all() and (a == v).all() else None


def constant_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every long numeric column whose rows all hold one value stored once: a read-only view of that
    value with stride 0 (8 bytes instead of 8 per row; every reader sees the same values). Traces leave many
    columns constant: no trace-reported cost on GPU and CPU traces, no collective model or
    matmul shape on most ops. ``df`` as it is unless :func:`stores_constants_once`."""
    if not stores_constants_once() or len(df) < CONSTANT_MIN_ROWS:
        return df
    new = {}
    for c in df.columns:
        s = df[c]
        if not isinstance(s.dtype, np.dtype) or s.dtype.kind not in "biuf":
            continue
        a = s.to_numpy()
        if a.ndim != 1 or a.strides[0] == 0:
            continue
        v = one_value(a)
        if v is not None:
            new[c] = np.broadcast_to(np.array([v], dtype=a.dtype), a.shape)
    return with_columns(df, new) if new else df
