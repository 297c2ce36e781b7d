"""Per-event columns of the frames stage: categorical chunks (:class:`Cat`) built from values given once per
distinct key, a chunk accumulator (:class:`Acc`), and per-event stat columns pulled out of a line's flattened
stats (:class:`tracekit.ingest.wire.LineData`) with NumPy — no Python object per event."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.columns import concat_categorical, gather
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


class Acc:
    """Column accumulator of NumPy chunks and Cat chunks, concatenated once."""

    def __init__(self):
        self.chunks: list[dict] = []

    def add(self, **cols):
        n = len(cols["start_ps"])
        if n:
            self.chunks.append(cols)

    def frame(self, sch: dict) -> pd.DataFrame:
        """The chunks as one frame of ``sch``. The accumulator is emptied: each chunk column is let go once its
        column of the frame is made, so the chunks and the frame are not both whole at once."""
        chunks, self.chunks = self.chunks, []
        if not chunks:
            return schema.empty(sch)
        lens = [len(c["start_ps"]) for c in chunks]
        data = {}
        for k in list(chunks[0]):
            parts = [c.pop(k, None) for c in chunks]
            if any(isinstance(p, Cat) or isinstance(p, str) for p in parts):
                data[k] = concat_categorical(parts, lens)
            elif all(isinstance(p, np.ndarray) for p in parts):
                data[k] = np.concatenate(parts)
            else:
                data[k] = np.concatenate([np.full(n, p) if not isinstance(p, np.ndarray) else p
                                          for p, n in zip(parts, lens)])
            del parts
        assert all(len(v) == sum(lens) for v in data.values())
        return schema.conform(pd.DataFrame(data, copy=False), sch)  # the arrays are new: no copy, no consolidation


_INT_KINDS = (KIND_UINT64, KIND_INT64)
_NUM_KINDS = (KIND_DOUBLE, KIND_UINT64, KIND_INT64)
_STR_KINDS = (KIND_STR, KIND_BYTES, KIND_REF)


def _odd(odd, label: str, kind: np.ndarray, allowed: tuple) -> None:
    """Count, in ``odd[label]``, the values of a stat stored with a type it should not have."""
    if odd is not None:  # (a few equality counts over the int8 kinds: far cheaper than np.isin)
        k = len(kind) - sum(int(np.count_nonzero(kind == a)) for a in allowed)
        if k:
            odd[label] = odd.get(label, 0) + k


def _entries(line: LineData, sid: int, odd: dict | None, label: str, allowed: tuple):
    """(positions, event index, kind) of the entries of stat ``sid`` in ``line`` (positions into its flattened
    stats, in order), or None when it has none; kinds outside ``allowed`` are counted in ``odd``. One pass over
    the line's stat ids, then gathers of the entries found (not a boolean mask over every entry per column)."""
    if sid < 0 or not len(line.stat_id):
        return None
    at = np.flatnonzero(line.stat_id == sid)
    if not len(at):
        return None
    kind = gather(line.stat_kind, at)
    _odd(odd, label, kind, allowed)
    return at, gather(line.stat_event, at), kind


def stat_ints(line: LineData, sid: int, odd: dict | None = None, label: str = "") -> tuple[np.ndarray, np.ndarray]:
    """(has, value) per event for an integer-valued stat (int64/uint64 bits/ref id); value 0 where absent. A
    value stored with another type counts when it is a number (a finite double, a numeric string); otherwise
    the event does not have the stat."""
    n = line.n_events
    found = _entries(line, sid, odd, label, _INT_KINDS)
    if found is None:
        return np.zeros(n, bool), np.zeros(n, np.int64)
    m, ev, kind = found
    iv = gather(line.stat_int, m)  # (a new array: written below)
    ok = np.ones(len(iv), bool)
    dbl = kind == KIND_DOUBLE
    if dbl.any():
        d = gather(line.stat_double, m)[dbl]
        fin = np.isfinite(d) & (np.abs(d) < 2.0**63)
        iv[dbl] = np.where(fin, d, 0).astype(np.int64)
        ok[dbl] = fin
    txt = np.nonzero((kind == KIND_STR) | (kind == KIND_BYTES))[0]
    if len(txt):
        parsed = [_int_or_none(line.stat_str[int(k)]) for k in iv[txt]]
        iv[txt] = [0 if p is None else p for p in parsed]
        ok[txt] = [p is not None for p in parsed]
    if not ok.all():
        ev, iv = ev[ok], iv[ok]
    if every_event_once(ev, n):  # (most stats: the entries' own array is the column, no scatter)
        return np.ones(n, bool), iv
    has = np.zeros(n, bool)
    val = np.zeros(n, np.int64)
    has[ev] = True
    val[ev] = iv
    return has, val


def every_event_once(ev: np.ndarray, n: int) -> bool:
    """Whether the entries' events ``ev`` (in entry order) are 0, 1, ..., n-1: every event of the line holds the
    stat exactly once, so a per-event column is the entries' values as they are."""
    return len(ev) == n and (n == 0 or (int(ev[0]) == 0 and int(ev[-1]) == n - 1 and
                                        bool((ev[1:] > ev[:-1]).all())))


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
    found = _entries(line, sid, odd, label, _NUM_KINDS)
    if found is None:
        return np.full(line.n_events, np.nan)
    m, ev, kind = found
    iv = gather(line.stat_int, m)
    v = np.where(kind == KIND_DOUBLE, gather(line.stat_double, m), iv.astype(np.float64))
    u = kind == 3  # uint64 bits
    if u.any():
        v[u] = iv[u].astype(np.uint64).astype(np.float64)
    v[kind == KIND_REF] = np.nan  # a name is not a number
    txt = np.nonzero((kind == KIND_STR) | (kind == KIND_BYTES))[0]
    if len(txt):  # a number stored as text counts; any other text does not
        v[txt] = [_float_or_nan(line.stat_str[int(k)]) for k in iv[txt]]
    if every_event_once(ev, line.n_events):
        return v  # (a new array: np.where's)
    out = np.full(line.n_events, np.nan)
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
        iv = gather(line.stat_int, m)
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
