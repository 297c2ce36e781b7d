"""The roofline's per-op predictions kept once per op identity in tracekit's one-shot analyses.

The roofline join (:mod:`tracekit.model.roofline`) works its predictions out once per op identity (host, device,
program, op, ...): nine of them (FLOPs, bytes, network bytes as float64; the predicted times and the intensity as
float32; the group size as int32) spread to the rows are 48 bytes a row (1.7 M rows: 78 MiB) holding only as many
distinct values as there are identities. The join reads and writes them row by row (:class:`Spread`: each row reads
its identity's entry through an int32 code; a row written to gets an entry of its own; entries that end equal are
shared again). A library caller gets them as columns (:func:`columns_of`); a process that hands no frame to a
caller (:func:`tracekit.threads.one_shot`: the ``tracekit`` command, the post-run hook's child) keeps those that
vary in a table (:func:`register`) and, in the frame, each row's code (:data:`CODE`) beside the table's number held
once (:data:`TABLE`). A frame made from that one (columns or rows selected, sorted, concatenated) keeps both
columns, and reads its predictions with :func:`has` and :func:`values` (any frame: its own column where it has
one), or :func:`materialized` (the columns themselves, for a few rows); the analysis engine lets the table go with
the host's view (:func:`release`).
"""
from __future__ import annotations

import itertools
import threading

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.columns import filled, gather, held_once, one_value, with_columns
from tracekit.grouping import group_index

#: the predictions kept per identity (the join's others vary per row, or cost a byte a row)
PER_IDENTITY = ("flops", "bytes_accessed", "net_bytes", "group_size", "compute_ps", "memory_ps", "network_ps",
                "roofline_ps", "intensity_flops_per_byte")
#: the column of each row's entry in its table
CODE = "prediction_row"
#: the column of the table's number (one value held once, unless frames of several tables were put together)
TABLE = "prediction_table"
#: both: what a frame of selected columns keeps to read its predictions
COLUMNS = (CODE, TABLE)

#: :meth:`Spread.share_equal`'s hash multiplier (2^64 / the golden ratio)
_MIX = np.uint64(0x9E3779B97F4A7C15)

_tables: dict[int, dict] = {}  #: table number -> {column: values}
_orders: dict[int, tuple] = {}  #: table number -> the frame's columns when it was stored
_numbers = itertools.count(1)
_lock = threading.Lock()


#: the roofline join's names of the :data:`PER_IDENTITY` predictions (:func:`tracekit.model.roofline._predict`)
KEYS = {"flops": "flops", "bytes_accessed": "bytes_accessed", "net": "net_bytes", "gsize": "group_size",
        "compute": "compute_ps", "memory": "memory_ps", "network": "network_ps", "roofline_ps": "roofline_ps",
        "intensity_flops_per_byte": "intensity_flops_per_byte"}


class Spread:
    """The join's :data:`KEYS` predictions as entries (their identities' first, as worked out) and one entry per
    row (``codes``): a row written to gets an entry of its own (a copy of its identity's, then changed), so its
    identity's other rows keep theirs. :meth:`rows` gives each prediction as the join reads and writes it."""

    def __init__(self, values: dict, codes: np.ndarray, shared: int):
        self.values = values  #: join key -> entries
        self.codes = codes  #: int32 per row: its entry
        self.shared = shared  #: entries below this are an identity's (several rows may read them)
        self.sealed = False  #: entries shared again (:meth:`share_equal`): no more writes

    def rows(self, key: str) -> "Rows":
        return Rows(self, key)

    def own(self, rows: np.ndarray) -> None:
        """Give each of ``rows`` (positions; a row named twice gets two, the first unread) that reads an identity's
        entry an entry of its own."""
        if self.sealed:
            raise RuntimeError("a prediction written after its rows' entries were shared again")
        rows = np.asarray(rows)
        need = rows[self.codes[rows] < self.shared] if rows.dtype != bool else \
            np.flatnonzero(rows & (self.codes < self.shared))
        if not len(need):
            return
        at = self.codes[need]
        start = len(next(iter(self.values.values())))
        for k, v in self.values.items():
            self.values[k] = np.concatenate([v, gather(v, at)])
        self.codes[need] = start + np.arange(len(need), dtype=np.int32)

    def share_equal(self) -> None:
        """Entries that ended equal bit for bit (rows written to with the same values, or with their identity's)
        become one, the first: what a row was written to without a change, or as its neighbours were, costs no
        entry of its own. Entries are matched by a hash of their bits, then compared (a collision stays apart);
        both a slice of entries at a time (the entries of 17 M rows' writes are millions)."""
        if self.shared == 0:
            return
        self.sealed = True  # (rows may share any entry from here on: a write would change its neighbours' too)
        m = len(next(iter(self.values.values())))
        h = np.empty(m, np.uint64)
        for a in range(0, m, _SLICE):
            h[a:a + _SLICE] = _hash([v[a:a + _SLICE] for v in self.values.values()])
        rep, first = group_index(pd.DataFrame({"h": h}, copy=False), ["h"])
        del h
        rep = gather(first.astype(np.int32), rep)  # each entry's first entry of its hash
        for a in range(0, m, _SLICE):
            r = rep[a:a + _SLICE]
            differ = np.zeros(len(r), bool)
            for v in self.values.values():
                b = _bits(v)
                differ |= gather(b, r) != b[a:a + _SLICE]
            r[differ] = np.flatnonzero(differ) + a  # (a collision: the entry stays its own)
        keep = np.flatnonzero(rep == np.arange(m, dtype=np.int32))
        if len(keep) == m:
            return
        renumber = np.zeros(m, np.int32)
        renumber[keep] = np.arange(len(keep), dtype=np.int32)
        self.codes = gather(gather(renumber, rep), self.codes)
        del rep, renumber
        for k, v in self.values.items():
            self.values[k] = v[keep]
        self.shared = int(np.searchsorted(keep, self.shared))  # (an entry's equal is an earlier one: kept in order)

    def full(self, key: str) -> np.ndarray:
        """The prediction ``key`` of every row: a row-sized array."""
        v = self.values[key]
        return v if self.shared == 0 else gather(v, self.codes)

    def own_share(self) -> float:
        """The share of rows with an entry of their own (1.0: every row)."""
        return 1.0 if self.shared == 0 else (len(next(iter(self.values.values()))) - self.shared) / max(
            len(self.codes), 1)


class Rows:
    """One prediction of a :class:`Spread` read and written as the join's row arrays are: ``v[rows]``,
    ``v[rows] = x``, ``np.asarray(v)`` (every row)."""

    def __init__(self, spread: Spread, key: str):
        self.spread, self.key = spread, key

    def __getitem__(self, rows):
        return gather(self.spread.values[self.key], self.spread.codes[rows])

    def __setitem__(self, rows, value) -> None:
        self.spread.own(rows)
        v = self.spread.values[self.key]
        if not v.flags.writeable:  # (a column held once: an array of its own before a write)
            v = self.spread.values[self.key] = v.copy()
        v[self.spread.codes[rows]] = value

    def __array__(self, dtype=None, copy=None):
        v = self.spread.full(self.key)
        return v if dtype is None else v.astype(dtype, copy=False)


def spread(p: dict, inv: np.ndarray | None, n_identities: int) -> dict:
    """The join's prediction ``p`` with its :data:`KEYS` arrays as :class:`Rows` of one :class:`Spread`: per
    identity (``inv``: each row's identity) or, ``inv`` None, per row (every row its own entry)."""
    values = {k: p[k] for k in KEYS if k in p}
    codes = inv.astype(np.int32) if inv is not None else np.arange(len(next(iter(values.values()))), dtype=np.int32)
    s = Spread(values, codes, n_identities if inv is not None else 0)
    return {**p, **{k: s.rows(k) for k in values}}


def spread_of(p: dict) -> Spread:
    return next(v.spread for v in p.values() if isinstance(v, Rows))


#: frames shorter than this keep their predictions as columns (a few kB: the table's bookkeeping costs more)
MIN_ROWS = 1 << 16
#: a table is kept when at most this share of the rows has entries of their own (else the columns themselves: at
#: half the rows, entries and codes take 28 of the columns' 48 bytes a row)
MAX_OWN_SHARE = 0.5


def columns_of(p: dict, n: int, keep_table: bool) -> tuple[dict, dict]:
    """(frame column -> row array or value held once, the table) of the join's ``p`` (:func:`spread`): every
    prediction as a column of the frame's own, or with ``keep_table`` (a one-shot process) and few own rows those
    that vary in a table (``{column: entries}``, for :func:`register`)."""
    s = spread_of(p)
    keep_table = keep_table and n >= MIN_ROWS
    if keep_table:
        s.share_equal()
    keep_table = keep_table and s.own_share() <= MAX_OWN_SHARE
    out, table = {}, {}
    for k, v in s.values.items():
        one = one_value(v)  # (every entry one value: every row reads it, held once where the process allows)
        if one is not None:
            out[KEYS[k]] = filled(n, one, v.dtype)
        elif keep_table:
            table[KEYS[k]] = v
        else:
            out[KEYS[k]] = s.full(k)
    return out, table


def register(df: pd.DataFrame, p: dict, table: dict, order: list) -> pd.DataFrame:
    """``df`` with the join's ``p`` (:func:`spread`) ``table`` (:func:`columns_of`) kept under a number of its own
    and read through :data:`CODE` and :data:`TABLE`; ``order``: the frame's columns with the table's among them
    (where :func:`materialized` puts them back)."""
    if not table:
        return df
    with _lock:
        number = next(_numbers)
        _tables[number] = table
        _orders[number] = tuple(order)
    return with_columns(df, {CODE: spread_of(p).codes, TABLE: filled(len(df), number, np.int32)})


def release(df: pd.DataFrame) -> None:
    """Forget the tables ``df``'s rows point into (the analysis of its host is done)."""
    if TABLE in df.columns and len(df):
        with _lock:
            for number in _numbers_of(df):
                _tables.pop(int(number), None)
                _orders.pop(int(number), None)


def has(df: pd.DataFrame, name: str) -> bool:
    """Whether ``df`` has column ``name``, as a column of its own or in its table."""
    return name in df.columns or (CODE in df.columns and name in PER_IDENTITY and name in _table_columns(df))


def values(df: pd.DataFrame, name: str, rows: np.ndarray | slice | None = None) -> np.ndarray:
    """The values of column ``name`` of ``df`` (of ``rows`` only: positions or a slice) as an array, a prediction
    kept in a table included (a new array; a column of the frame's own as it is, a view where it can be)."""
    if name in df.columns or CODE not in df.columns or name not in PER_IDENTITY:
        return _at(df[name].to_numpy(), rows)
    codes, numbers = _at(df[CODE].to_numpy(), rows), _at(df[TABLE].to_numpy(), rows)
    if not len(numbers):
        return np.empty(0, schema.ROOFLINE[name][0])
    if held_once(numbers) or (numbers == numbers[0]).all():
        return gather(_table(numbers[0], name, df), codes)
    out = None
    for number in np.unique(numbers):
        at = np.flatnonzero(numbers == number)
        part = gather(_table(number, name, df), codes[at])
        out = np.empty(len(codes), part.dtype) if out is None else out
        out[at] = part
    return out


def materialized(df: pd.DataFrame, names=PER_IDENTITY) -> pd.DataFrame:
    """``df`` with the predictions of ``names`` it keeps in a table as columns of its own, where the frame the
    table was made from held them (the table's columns gone when every one is back), for frames of a few rows
    read as a whole."""
    if CODE not in df.columns:
        return df
    have = _table_columns(df)
    missing = [c for c in names if c in have and c not in df.columns]
    if not missing:
        return df
    out = with_columns(df, {c: values(df, c) for c in missing})
    done = not set(have) - set(out.columns)
    cols = [c for c in df.columns.tolist() if not (done and c in (CODE, TABLE))]
    before = _orders.get(_numbers_of(df)[0], ())
    for c in missing:  # each after the column it followed (the one before it that is here), else first
        at = before.index(c) if c in before else len(before)
        prev = next((p for p in reversed(before[:at]) if p in cols), None)
        cols.insert(cols.index(prev) + 1 if prev is not None else 0, c)
    return out[cols]


def _hash(columns: list) -> np.ndarray:
    """A 64-bit hash per entry of the bits of every column (equal entries hash alike)."""
    h = np.zeros(len(columns[0]), np.uint64)
    for v in columns:
        h ^= _bits(v).astype(np.uint64)
        h *= _MIX  # (wraps around: a multiplicative hash)
        h ^= h >> np.uint64(29)
    return h


#: entries per slice of :meth:`Spread.share_equal`
_SLICE = 1 << 20


def _at(v: np.ndarray, rows) -> np.ndarray:
    return v if rows is None else v[rows] if isinstance(rows, slice) else gather(v, rows)


def _bits(v: np.ndarray) -> np.ndarray:
    """``v`` as unsigned integers of its width: equal exactly when the values are the same bits (NaN included)."""
    return v.view(f"u{v.dtype.itemsize}") if v.dtype.kind == "f" else v


def _numbers_of(df: pd.DataFrame) -> list:
    t = df[TABLE].to_numpy()
    return [int(t[0])] if held_once(t) else [int(x) for x in np.unique(t)]


def _table(number, name: str, df: pd.DataFrame) -> np.ndarray:
    t = _tables.get(int(number))
    if t is None:
        raise LookupError(f"prediction table {int(number)} was released while a frame still points into it")
    if name not in t:
        raise KeyError(name)
    return t[name]


def _table_columns(df: pd.DataFrame) -> list:
    if not len(df):
        return []
    cols: dict = {}
    for number in _numbers_of(df):
        cols.update(dict.fromkeys(_tables.get(number, {})))
    return list(cols)
