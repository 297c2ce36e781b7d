"""Columnar helpers every stage shares (grouping, work once per distinct value: :mod:`tracekit.grouping`): gathers
without bounds checks (:func:`gather`), masks spread from codes (:func:`spread_mask`), and frames and
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
                codes, cats = p.array.codes, p.dtype.categories.tolist()
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


#: rows per slice when :func:`member_mask` searches a sorted table (bounds its temporaries to a few MB)
_CHUNK = 1 << 18


def member_mask(key: np.ndarray, values) -> np.ndarray:
    """``np.isin(key, values)`` for an integer ``key`` column of a whole frame and a few wanted ``values``, without
    isin's temporaries (it sorts the column with the values: ~4 row-sized arrays): a few equality tests, or a
    binary search slice by slice."""
    key = np.asarray(key)
    want = np.unique(np.asarray(values, key.dtype if key.dtype.kind in "iu" else np.int64))
    out = np.zeros(len(key), bool)
    if len(want) <= _FEW:
        for v in want.tolist():
            out |= key == v
        return out
    for a in range(0, len(key), _CHUNK):
        k = key[a:a + _CHUNK]
        pos = np.minimum(np.searchsorted(want, k), len(want) - 1)
        out[a:a + _CHUNK] = want[pos] == k
    return out


#: frames of at most this many rows take pandas' own ``assign``, which copies the new columns (at most 512 kB each)
#: but reads no column of ``df``: rebuilding a wide frame column by column costs ~20-30 µs a column whatever its
#: length (a 27 k-row frame of 60 columns: 1.2 ms, against 0.3 ms for assign with two new columns), and a small
#: trace's analysis makes hundreds of such frames; the op frames of large traces (millions of rows) stay shared.
#: Below :data:`CONSTANT_MIN_ROWS`: a column held once (:func:`filled`, :func:`constant_columns`) is never copied
SMALL_ROWS = (1 << 16) - 1


def with_columns(df: pd.DataFrame, new: dict) -> pd.DataFrame:
    """``df`` with the columns of ``new`` added or replaced, as one new frame that shares every column array:
    ``df[k] = v`` copies ``v`` (and, on a wide frame, costs a page-faulting allocation per column); this does
    not (a frame of at most :data:`SMALL_ROWS` rows copies the new columns: the same frame, faster). ``df`` itself
    is left unchanged. New columns come after ``df``'s, in ``new``'s order."""
    new = {c: (np.full(len(df), v) if np.ndim(v) == 0 and not isinstance(v, pd.Series) else v)
           for c, v in new.items()}
    if len(df) <= SMALL_ROWS and all(isinstance(c, str) for c in new) and df.columns.is_unique:
        return df.assign(**new)
    cols = {c: (new[c] if c in new else df[c]) for c in df.columns.tolist()}
    for c, v in new.items():
        if c not in cols:
            cols[c] = v
    return pd.DataFrame(cols, index=df.index, copy=False)


#: pandas' accessor of a column's stored array (pandas 1.3 to 3.x), None where this pandas has none
_COLUMN_ARRAY = getattr(pd.DataFrame, "_get_column_array", None)


def stored(df: pd.DataFrame, name):
    """The array column ``name`` of ``df`` is stored in, without the Series ``df[name]`` builds: a NumPy array
    (read-only, as ``df[name].to_numpy()`` gives it) for a NumPy dtype, else the column's ExtensionArray (a
    Categorical, a string array: ``df[name].array``). ``df[name]`` costs ~70 k instructions under pandas 3 (the
    Series, its index, copy-on-write references), more than most operations on a small column: a small trace's
    analysis reads columns ~2,000 times. Read through pandas' ``DataFrame._get_column_array`` (a view of the
    block, for read-only use, which the read-only flag enforces) where pandas has it and the name is one column;
    else through the Series. A missing column raises KeyError, as ``df[name]`` does; a name several columns share
    gives their frame, as ``df[name]`` does."""
    if _COLUMN_ARRAY is not None and isinstance(df, pd.DataFrame):
        loc = df.columns.get_loc(name)
        if isinstance(loc, int):
            a = _COLUMN_ARRAY(df, loc)
            if isinstance(a, np.ndarray):
                if a.flags.writeable:
                    a = a.view()
                    a.flags.writeable = False
                return a
            if not isinstance(a.dtype, np.dtype):  # (datetimes are stored as arrays of a NumPy dtype: the Series')
                return a
    s = df[name]
    if not isinstance(s, pd.Series):
        return s
    return s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array


def numbers_or_series(df: pd.DataFrame, name):
    """Column ``name`` of ``df`` as its stored NumPy array (:func:`stored`, read-only) where it holds booleans or
    numbers, else ``df[name]`` (a Series, where pandas' semantics for text and categories count): what a rule
    expression reads of a frame."""
    a = stored(df, name)
    return a if isinstance(a, np.ndarray) and a.dtype.kind in "biuf" else df[name]


def column_numpy(df: pd.DataFrame, name, dtype=None) -> np.ndarray:
    """``df[name].to_numpy(dtype)``, the same array, without the Series for a NumPy column of a frame
    (:func:`stored`): the stored values as they are (read-only) or converted to ``dtype`` (a new array). ``df`` may
    be any mapping of Series (then ``df[name].to_numpy(dtype)`` itself)."""
    if not isinstance(df, pd.DataFrame):
        return df[name].to_numpy(dtype)
    a = stored(df, name)
    if isinstance(a, np.ndarray) and a.dtype.kind not in "Mm":
        return a if dtype is None else np.asarray(a, dtype)
    return df[name].to_numpy(dtype)


def text_numpy(df: pd.DataFrame, name) -> np.ndarray:
    """``df[name].astype(str).to_numpy()``, the same values: for a categorical column of a frame, each category's
    text worked out once (by pandas, on the categories) and spread to the rows by their codes, instead of a text per
    row and a Series; any other column (or a mapping that is not a frame) through pandas itself."""
    a = stored(df, name) if isinstance(df, pd.DataFrame) else None
    if not isinstance(a, pd.Categorical):
        return df[name].astype(str).to_numpy()
    codes = a.codes
    # each category once (and a missing value where the column has one: code -1 picks the last), made text by
    # pandas' own Categorical.astype, which pads missing values in the categories' type as it does for the rows
    once = np.arange(len(a.categories), dtype=codes.dtype)
    if len(codes) and codes.min() < 0:
        once = np.append(once, np.array([-1], codes.dtype))
    per = pd.Series(pd.Categorical.from_codes(once, dtype=a.dtype)).astype(str).to_numpy(object)
    return per[codes] if len(per) else np.empty(len(codes), object)


def take_rows(df: pd.DataFrame, cols: list, rows: np.ndarray, extra: dict | None = None) -> pd.DataFrame:
    """Rows ``rows`` (positions) of the columns ``cols`` of ``df``, then of the row-aligned Series ``extra``
    (name -> Series; a name of ``cols`` replaced where it is, as ``assign`` does), as a new frame on a fresh
    0..n-1 index, each column its own type: ``df.take(cols, axis=1).take(rows)`` without pandas' two block
    selections (on a small frame they cost more than the rows copied)."""
    data = {}
    for c, s in [*((c, stored(df, c)) for c in cols), *(extra or {}).items()]:
        if isinstance(s, pd.Series):
            s = s.to_numpy() if isinstance(s.dtype, np.dtype) else s.array
        if isinstance(s, np.ndarray):
            a = s[rows]
            data[c] = pd.Series(a, dtype=object, copy=False) if a.dtype == object else a  # (not inferred as text)
        else:
            data[c] = s.take(rows)
    return pd.DataFrame(data, copy=False)


def without_columns(df: pd.DataFrame, cols) -> pd.DataFrame:
    """``df`` less ``cols`` (those it has), as one new frame that shares every other column array: the dropped
    arrays are freed once nothing else holds them. ``df`` itself is left unchanged. (pandas' ``drop`` shares them
    only with copy-on-write, pandas 3; pandas 2 copies every column kept.)"""
    drop = set(cols)
    if df.columns.is_unique and _COPY_ON_WRITE:
        return df.drop(columns=[c for c in df.columns.tolist() if c in drop])
    return pd.DataFrame({c: df[c] for c in df.columns.tolist() if c not in drop}, index=df.index, copy=False)


def concat_frames(frames: list[pd.DataFrame], order: np.ndarray | None = None, *,
                  consume: bool = False) -> pd.DataFrame:
    """Concatenate frames column by column (one allocation per column), keeping categorical columns categorical
    (categories unioned, codes remapped). Columns follow the first frame; a column missing from a frame is filled
    with missing values (the column then holds objects) or the empty category. ``order``: row positions of the
    concatenation to keep, in that order (a sort applied column by column, so only one column's temporary is
    alive at a time). ``consume``: the caller hands the frames over (``frames`` is emptied, and the caller keeps
    no other reference to them): each input column is let go once its output column is made, so the inputs and
    the output are not all alive at once (the loader's op rows and async windows)."""
    given, frames = frames, [f for f in frames if len(f)]
    if consume:
        given.clear()
    if not frames:
        return pd.DataFrame()
    if len(frames) == 1:
        return (frames[0].take(order) if order is not None else frames[0]).reset_index(drop=True)
    cols = frames[0].columns.tolist() + [c for f in frames[1:] for c in f.columns.tolist()
                                         if c not in frames[0].columns]
    cols = list(dict.fromkeys(cols))
    lens = [len(f) for f in frames]
    parts = [{c: f[c] for c in f.columns.tolist()} for f in frames]  # column -> Series (each holds its column's array)
    del frames, given
    data = {}
    for c in cols:
        present = [p[c] for p in parts if c in p]
        arrays = [s.to_numpy() for s in present] if len(present) == len(parts) and all(
            isinstance(s.dtype, np.dtype) and s.dtype.kind in "biuf" for s in present) else None
        if arrays and all(held_once(a) and a.dtype == arrays[0].dtype for a in arrays) and \
                one_value(np.array([a[0] for a in arrays], arrays[0].dtype)) is not None:
            # one value in every frame: still held once (as many rows as ``order`` keeps)
            out = filled(sum(lens) if order is None else len(order), arrays[0][0], arrays[0].dtype)
            del present, arrays
            if consume:
                for p in parts:
                    p.pop(c, None)
            data[c] = out
            continue
        if any(isinstance(s.dtype, pd.CategoricalDtype) for s in present):
            out = concat_categorical([p.get(c) for p in parts], lens, order)
        elif arrays is not None:
            out = np.concatenate(arrays)
        else:  # strings, objects, or a column some frames lack: let pandas pick the dtype
            out = pd.concat([p[c] if c in p else pd.Series([None] * n) for p, n in zip(parts, lens)],
                            ignore_index=True).array
        del present, arrays
        if consume:
            for p in parts:
                p.pop(c, None)
        if order is not None and not isinstance(out, pd.Categorical):  # (a gather without bounds checks)
            out = gather(out, order) if isinstance(out, np.ndarray) else out[order]
        data[c] = out
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


def filled(n: int, value, dtype) -> np.ndarray:
    """``n`` rows of ``value`` (of ``dtype``): ``np.full``, or where :func:`stores_constants_once` allows it and the
    column is long, the value stored once (a read-only view with stride 0). The loader's placeholder columns (run
    ids and steps before they are assigned, the self times before they are worked out) are such columns: filled,
    concatenated and sorted, they were three row-sized int64 arrays each (1.7 M rows: 39 MB at the load's peak)."""
    if n >= CONSTANT_MIN_ROWS and stores_constants_once():
        return np.broadcast_to(np.array([value], dtype=dtype), (n,))
    return np.full(n, value, dtype=dtype)


def held_once(a) -> bool:
    """Whether ``a`` is a NumPy column stored once (a stride-0 view: :func:`filled`, :func:`constant_columns`)."""
    return isinstance(a, np.ndarray) and a.ndim == 1 and len(a) > 0 and a.strides == (0,)


def narrow_int(v: np.ndarray) -> np.ndarray:
    """``v`` as int32 when every value fits (half the bytes per row), else as it is: a cast would wrap a value past
    2^31 (a matmul dimension, a run id) into a wrong, perhaps negative, one. A constant held once stays so."""
    if v.dtype.kind != "i" or v.dtype.itemsize <= 4:
        return v
    if v.ndim == 1 and len(v) and v.strides == (0,):
        return v if not (_I32.min <= int(v[0]) <= _I32.max) else np.broadcast_to(v[:1].astype(np.int32), v.shape)
    return v.astype(np.int32) if not len(v) or (int(v.min()) >= _I32.min and int(v.max()) <= _I32.max) else v


_I32 = np.iinfo(np.int32)


def constant_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every long numeric column whose rows all hold one value stored once: a read-only view of that
    value with stride 0 (8 bytes instead of 8 per row; every reader sees the same values); a categorical column
    with one code on every row keeps its categories and holds that code once. Traces leave many
    columns constant: no trace-reported cost on GPU and CPU traces, no collective model or
    matmul shape on most ops. ``df`` as it is unless :func:`stores_constants_once`."""
    if not stores_constants_once() or len(df) < CONSTANT_MIN_ROWS:
        return df
    new = {}
    for c in df.columns.tolist():
        s = df[c]
        if isinstance(s.dtype, pd.CategoricalDtype):  # one code on every row (one host, one line, one dtype)
            codes = s.array.codes
            v = one_value(codes) if codes.ndim == 1 and codes.strides[0] != 0 else None
            if v is not None:
                new[c] = pd.Categorical.from_codes(filled(len(codes), v, codes.dtype), dtype=s.dtype)
            continue
        if not isinstance(s.dtype, np.dtype) or s.dtype.kind not in "biuf":
            continue
        a = s.to_numpy()
        if a.ndim != 1 or a.strides[0] == 0:
            continue
        v = one_value(a)
        if v is not None:
            new[c] = filled(len(a), v, a.dtype)
    return with_columns(df, new) if new else df


def stack(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Many small frames (one per host) as one, fast: one array per column, built with one ``np.concatenate``
    (pandas' concat pays per frame and per categorical column: seconds at hundreds of hosts). Categorical columns
    become their values (objects); a column missing from a frame is missing there (None, NaN for numbers). Columns
    follow the first frame, then the others' new ones."""
    frames = [f for f in frames if f is not None]
    if not frames:
        return pd.DataFrame()
    cols = list(dict.fromkeys(c for f in frames for c in f.columns.tolist()))
    data = {}
    for c in cols:
        parts = []
        for f in frames:
            if c not in f.columns:
                parts.append(np.full(len(f), None, object))
                continue
            s = f[c]
            if isinstance(s.dtype, pd.CategoricalDtype):
                codes = s.array.codes
                vals = np.append(s.cat.categories.to_numpy(dtype=object), None)
                parts.append(vals[codes])
            else:
                parts.append(s.to_numpy())
        full = [p for p in parts if len(p)]
        kinds = {p.dtype.kind for p in full}
        if not full:
            data[c] = parts[0][:0]
        elif len(kinds) == 1 or kinds in ({"i", "f"}, {"u", "f"}):
            data[c] = np.concatenate(full)
        else:
            data[c] = np.concatenate([p.astype(object) for p in full])
    return pd.DataFrame(data, copy=False)
