"""The pure-Python XSpace decoder: the C decoder (``wirec.c``) rule for rule, in Python.

:func:`read_space` takes the same arguments and returns the same layout as ``tracekit.ingest.wirec.read_space``
(planes as ``(id, name, head, lines)``, each line a tuple of scalars and column buffers; see ``wirec.c``), so that
:mod:`tracekit.ingest.wire` turns either into the same arrays. It accepts exactly the inputs the C decoder accepts,
rejects the others with the same ``ValueError`` message (same byte offset), and counts the same limits in the same
order: a file decodes, or fails, the same way whether or not the C extension was built. About 20 times slower.

The wire rules (protobuf's, stricter where no writer goes): the last occurrence of a scalar wins, the last member
set wins inside a oneof, unknown fields of wire types 0, 1, 2 and 5 are skipped; a known field with another wire
type, groups (3, 4), wire types 6 and 7, field number 0, tags longer than 5 bytes or wider than 32 bits, varints
longer than 10 bytes, lengths past the end of the enclosing message and invalid UTF-8 in string fields are errors.
"""
from __future__ import annotations

import math
import struct
from array import array


class LimitError(Exception):
    """A limit was passed while decoding. ``args``: (kind, count, limit, planes, lines, events, stats), kind
    ``"events"`` (``max_events``), ``"stats"`` (``max_stats``) or ``"work"`` (``budget``)."""


class InputChanged(Exception):
    """The input (a memory-mapped file) changed while it was being read."""


_MASK64 = (1 << 64) - 1
_NAN = math.nan
_unpack_double = struct.Struct("<d").unpack_from


def _bits(*fields: int) -> int:
    return sum(1 << f for f in fields)


KNOWN_SPACE = _bits(1, 2, 3, 4)
KNOWN_PLANE = _bits(1, 2, 3, 4, 5, 6)
KNOWN_LINE = _bits(1, 2, 3, 4, 9, 10, 11)
KNOWN_EVENT = _bits(1, 2, 3, 4, 5)
KNOWN_STAT = _bits(1, 2, 3, 4, 5, 6, 7)


def _fail(what: str, at: int):
    raise ValueError(f"corrupt XSpace: {what} at byte {at}")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _varint(buf, p: int, end: int) -> tuple[int, int]:
    """(value, next position) of the varint at ``p``, which must end before ``end``; bits past 64 are dropped."""
    if p < end:
        b = buf[p]
        if b < 0x80:
            return b, p + 1
        v, i, shift = b & 0x7F, p + 1, 7
        stop = p + 10 if end - p >= 10 else end
        while i < stop:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return v & _MASK64, i
            shift += 7
        _fail("varint longer than 10 bytes" if stop == p + 10 else "truncated varint", p)
    _fail("truncated varint", p)


def _tag(buf, p: int, end: int) -> tuple[int, int]:
    b = buf[p]
    if b < 0x80:  # one byte: field number 0 is caught by _skip (known tags are matched first)
        return b, p + 1
    t, q = _varint(buf, p, end)
    if q - p > 5:
        _fail("tag longer than 5 bytes", p)
    if t > 0xFFFFFFFF:
        _fail("tag wider than 32 bits", p)
    if t >> 3 == 0:
        _fail("field number 0", p)
    return t, q


def _length(buf, p: int, end: int) -> tuple[int, int]:
    """(payload start, payload end) of the length-delimited payload whose length prefix is at ``p``."""
    n, q = _varint(buf, p, end)
    if n > end - q:
        _fail("length runs past the end of the enclosing message", p)
    return q, q + n


def _skip(buf, tagpos: int, p: int, end: int, tag: int, known: int) -> int:
    """Past the payload of an unknown field, or an error (see the module docstring)."""
    field, wt = tag >> 3, tag & 7
    if field == 0:
        _fail("field number 0", tagpos)
    if field < 64 and known >> field & 1:
        _fail(f"unexpected wire type for field {field} with wire type {wt}", tagpos)
    if wt == 0:
        return _varint(buf, p, end)[1]
    if wt == 1 or wt == 5:
        if end - p < (8 if wt == 1 else 4):
            _fail("truncated fixed64" if wt == 1 else "truncated fixed32", p)
        return p + (8 if wt == 1 else 4)
    if wt == 2:
        return _length(buf, p, end)[1]
    if wt in (3, 4):
        _fail(f"unsupported group: field {field} with wire type {wt}", tagpos)
    _fail(f"invalid wire type: field {field} with wire type {wt}", tagpos)


def _str(buf, p: int, end: int) -> str:
    try:
        return str(buf[p:end], "utf-8")
    except UnicodeDecodeError:
        _fail("invalid UTF-8 in a string field", p)


class _Limits:
    """What the limits count, in the C decoder's order (``count_work`` there)."""

    def __init__(self, max_events: int, budget: int, weights, max_stats: int = -1):
        self.max_events, self.budget, self.max_stats = max_events, budget, max_stats
        self.w_plane, self.w_meta, self.w_line, self.w_event, self.w_stat = (int(w) for w in weights)
        self.work = self.planes = self.lines = self.events = self.stats = 0
        self.stat_room = -1  # stats the budget and max_stats allow after the framing; -1: no limit

    def add(self, w: int, events: int = 0) -> None:
        self.events += events
        if self.max_events >= 0 and self.events > self.max_events:
            self.fail("events", self.events, self.max_events)
        self.work += w
        if self.budget >= 0 and self.work > self.budget:
            self.fail("work", self.work, self.budget)

    def fail(self, kind: str, count: int, limit: int):
        raise LimitError(kind, count, limit, self.planes, self.lines, self.events, self.stats)


# ---- phase 1: framing -----------------------------------------------------------------------------------------

def _frame_line(buf, start: int, end: int, lim: _Limits) -> tuple:
    p, n = start, 0
    lid = ts = dur = did = 0
    name = dname = ""
    while p < end:
        tp = p
        tag, p = _tag(buf, p, end)
        if tag == 0x22:  # events: counted here, decoded in phase 2
            p = _length(buf, p, end)[1]
            n += 1
        elif tag == 0x08:
            lid, p = _varint(buf, p, end)
        elif tag == 0x18:
            ts, p = _varint(buf, p, end)
        elif tag == 0x48:
            dur, p = _varint(buf, p, end)
        elif tag == 0x50:
            did, p = _varint(buf, p, end)
        elif tag == 0x12 or tag == 0x5A:
            s, p = _length(buf, p, end)
            if tag == 0x12:
                name = _str(buf, s, p)
            else:
                dname = _str(buf, s, p)
        else:
            p = _skip(buf, tp, p, end, tag, KNOWN_LINE)
    if n > 0x7FFFFFFF:
        _fail("more than 2**31 events in one line", start)
    lim.lines += 1
    lim.add(lim.w_line + n * lim.w_event, n)
    return (start, end, n, _signed(lid), name, dname, _signed(ts), _signed(dur), _signed(did))


def _frame_plane(buf, start: int, end: int, lim: _Limits) -> tuple:
    lim.planes += 1
    lim.add(lim.w_plane)
    p, seg, pid, name = start, start, 0, ""
    head, lines = [], []
    while p < end:
        tp = p
        tag, p = _tag(buf, p, end)
        if tag == 0x1A:  # a line: framed now, its bytes left out of the head
            s, e = _length(buf, p, end)
            if seg < tp:
                head.append(buf[seg:tp])
            lines.append(_frame_line(buf, s, e, lim))
            p = seg = e
        elif tag == 0x08:
            pid, p = _varint(buf, p, end)
        elif tag == 0x12:
            s, p = _length(buf, p, end)
            name = _str(buf, s, p)
        elif tag == 0x22 or tag == 0x2A or tag == 0x32:  # metadata maps, plane stats: upb's, counted here
            p = _length(buf, p, end)[1]
            lim.add(lim.w_meta)
        else:
            p = _skip(buf, tp, p, end, tag, KNOWN_PLANE)
    if seg < end:
        head.append(buf[seg:end])
    return _signed(pid), name, b"".join(head), lines


# ---- phase 2: events and stats ---------------------------------------------------------------------------------

def _decode_line(buf, job: tuple, lim: _Limits, stats: bool = True) -> tuple:
    """One line's events and stats (the hot loop: one-byte tags and varints are read inline); ``stats`` False:
    each event's stats are stepped over (their framing checked), not decoded."""
    start, end, n, lid, name, dname, ts, dur, did = job
    mids, offs, durs = array("q", bytes(8 * n)), array("q", bytes(8 * n)), array("q", bytes(8 * n))
    s_ev, s_id, s_kind, s_int, s_dbl = array("i"), array("q"), array("b"), array("q"), array("d")
    s_str: list = []
    p, i = start, 0
    varint, tagf, length, skip = _varint, _tag, _length, _skip
    big = 1 << 63
    ln = done = 0  # the line's stats, and those of them counted; cap: where C's stat columns first grow
    cap = 2 * (n // 2 + 1) if n > 0 else 0
    while p < end:
        tp = p
        tag = buf[p]
        if tag < 0x80:
            p += 1
        else:
            tag, p = tagf(buf, p, end)
        if tag != 0x22:  # line scalars were read in phase 1: step over them
            if tag in (0x08, 0x18, 0x48, 0x50):
                p = varint(buf, p, end)[1]
            elif tag == 0x12 or tag == 0x5A:
                p = length(buf, p, end)[1]
            else:
                p = skip(buf, tp, p, end, tag, KNOWN_LINE)
            continue
        if p < end and (n1 := buf[p]) < 0x80:
            q, e = p + 1, p + 1 + n1
            if e > end:
                _fail("length runs past the end of the enclosing message", p)
        else:
            q, e = length(buf, p, end)
        p = e
        mid = off = du = 0
        while q < e:
            tq = q
            tag = buf[q]
            if tag < 0x80:
                q += 1
            else:
                tag, q = tagf(buf, q, e)
            if tag == 0x08:
                if q < e and (mid := buf[q]) < 0x80:
                    q += 1
                else:
                    mid, q = varint(buf, q, e)
            elif tag == 0x10:
                off, q = varint(buf, q, e)
            elif tag == 0x18:
                du, q = varint(buf, q, e)
            elif tag == 0x22:
                if q < e and (n1 := buf[q]) < 0x80:
                    r, se = q + 1, q + 1 + n1
                    if se > e:
                        _fail("length runs past the end of the enclosing message", q)
                else:
                    r, se = length(buf, q, e)
                q = se
                if not stats:
                    continue
                smid = iv = kind = 0
                dv, sp = _NAN, None
                while r < se:
                    tr = r
                    tag = buf[r]
                    if tag < 0x80:
                        r += 1
                    else:
                        tag, r = tagf(buf, r, se)
                    if tag == 0x08:
                        if r < se and (smid := buf[r]) < 0x80:
                            r += 1
                        else:
                            smid, r = varint(buf, r, se)
                    elif tag == 0x20 or tag == 0x18 or tag == 0x38:
                        if r < se and (iv := buf[r]) < 0x80:
                            r += 1
                        else:
                            iv, r = varint(buf, r, se)
                        kind, dv = tag >> 3, _NAN
                    elif tag == 0x11:
                        if se - r < 8:
                            _fail("truncated fixed64", r)
                        dv = _unpack_double(buf, r)[0]
                        r += 8
                        kind, iv = 2, 0
                    elif tag == 0x2A or tag == 0x32:
                        a, r = length(buf, r, se)
                        if tag == 0x2A:  # every str_value must be valid UTF-8, even one a later value replaces
                            _str(buf, a, r)
                        sp = (a, r)
                        kind, iv, dv = tag >> 3, 0, _NAN
                    else:
                        r = skip(buf, tr, r, se, tag, KNOWN_STAT)
                if ln == cap:  # where the C decoder adds the line's stats to the count: its columns growing
                    _commit_stats(lim, ln - done)
                    done, cap = ln, cap * 2 if cap else 1024
                ln += 1
                if kind == 5 or kind == 6:
                    iv = len(s_str)
                    s_str.append(str(buf[sp[0]:sp[1]], "utf-8") if kind == 5 else bytes(buf[sp[0]:sp[1]]))
                s_ev.append(i)
                s_id.append(smid - (1 << 64) if smid >= big else smid)
                s_kind.append(kind)
                s_int.append(iv - (1 << 64) if iv >= big else iv)
                s_dbl.append(dv)
            elif tag == 0x28:  # num_occurrences: same oneof as offset_ps, which then reads 0
                q = varint(buf, q, e)[1]
                off = 0
            else:
                q = skip(buf, tq, q, e, tag, KNOWN_EVENT)
        mids[i] = mid - (1 << 64) if mid >= big else mid
        offs[i] = off - (1 << 64) if off >= big else off
        durs[i] = du - (1 << 64) if du >= big else du
        i += 1
    # the line's end: the rest of its stats counted (a line that fails first leaves them out, as C does, so the
    # two decoders decide from the same counts whether a corrupt input is over a limit too)
    _commit_stats(lim, ln - done)
    return (lid, name, dname, ts, dur, did, mids, offs, durs, s_ev, s_id, s_kind, s_int, s_dbl, s_str)


def _commit_stats(lim: _Limits, k: int) -> None:
    """Add ``k`` stats of a line to the count (LimitError once it passes what max_stats and the budget leave)."""
    lim.stats += k
    if k and 0 <= lim.stat_room < lim.stats:
        if 0 <= lim.max_stats < lim.stats:
            lim.fail("stats", lim.stats, lim.max_stats)
        lim.fail("work", lim.work + lim.stats * lim.w_stat, lim.budget)


def read_space(data, threads: int = 1, max_events: int = -1, budget: int = -1, weights=(0, 0, 0, 0, 0),
               max_stats: int = -1, stats: bool = True):
    """Same arguments, result and errors as ``tracekit.ingest.wirec.read_space`` (``threads`` is ignored)."""
    buf = memoryview(data).cast("B") if not isinstance(data, bytes) else data
    lim = _Limits(max_events if max_events >= 0 else -1, budget if budget >= 0 else -1, weights,
                  max_stats if max_stats >= 0 else -1)
    planes, hostnames = [], []
    p, end = 0, len(buf)
    while p < end:  # phase 1
        tp = p
        tag, p = _tag(buf, p, end)
        if tag == 0x0A:
            s, p = _length(buf, p, end)
            planes.append(_frame_plane(buf, s, p, lim))
        elif tag == 0x12 or tag == 0x1A or tag == 0x22:  # errors, warnings: validated, not returned
            s, p = _length(buf, p, end)
            v = _str(buf, s, p)
            if tag == 0x22:
                hostnames.append(v)
        else:
            p = _skip(buf, tp, p, end, tag, KNOWN_SPACE)
    if lim.budget >= 0 and lim.w_stat:
        lim.stat_room = (lim.budget - lim.work) // lim.w_stat
    if lim.max_stats >= 0 and (lim.stat_room < 0 or lim.max_stats < lim.stat_room):
        lim.stat_room = lim.max_stats
    out = []  # phase 2, in file order: the first error is the one earliest in the input, as in C
    corrupt = None  # as in C, every line is decoded: a limit one passes outranks an earlier line's corruption
    for pid, name, head, jobs in planes:
        lines = []
        for j in jobs:
            try:
                lines.append(_decode_line(buf, j, lim, stats))
            except ValueError as e:
                corrupt = corrupt or e
        out.append((pid, name, head, lines))
    if corrupt is not None:
        raise corrupt
    return out, hostnames
