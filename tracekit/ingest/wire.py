"""Bulk XSpace decoding: every line's events (and their stats) as NumPy arrays, without a Python object per event.

Two implementations with identical results, that accept exactly the same inputs:

* the C extension ``tracekit.ingest.wirec`` (built by ``pip install`` when a C compiler is present; about 15 M
  events/s per thread, GIL released, lines decoded on :func:`tracekit.threads.default_threads` threads), used by
  :func:`read_space` when it is importable and ``TRACEKIT_NO_C`` is unset, empty or ``0``;
* :mod:`tracekit.ingest.pywire`, the same decoder rule for rule in Python (slow, ~0.1-0.2 M events/s).

The arrays are writable and own their memory (they do not refer to the input buffer).

Planes keep their metadata as a upb ``XPlane`` (``PlaneData.head``: the plane without its lines), so callers
go on using upb for ``event_metadata``, ``stat_metadata`` and plane ``stats``.

Event stats are flattened per line, one entry per stat of every event, in file order:
``stat_event[k]`` is the index of the event that carries entry ``k`` (within the line), ``stat_id[k]`` its
stat metadata id, ``stat_kind[k]`` which value it holds (:data:`KIND_DOUBLE` ... :data:`KIND_REF`, 0 for a
stat without a value) and the value is in ``stat_double[k]`` (kind 2; NaN otherwise) or ``stat_int[k]``
(kinds 3, 4, 7: the int64 value, the uint64 value's bits as int64, or the ref id; 0 for kinds 0 and 2). For
kinds 5 (str) and 6 (bytes) ``stat_int[k]`` is an index into ``stat_str``, the line's list of those values
(``str`` for kind 5, ``bytes`` for kind 6) in order.

Corrupt input raises ``ValueError`` saying at which byte (the same message from both). Both are stricter than upb
on input that no profiler writes (a known field with an unexpected wire type, groups); neither ever accepts a file
that upb rejects.

Limits are counted while decoding, before the memory they stand for is allocated (:func:`read_space`'s
``max_events``, which also allows :data:`STATS_PER_EVENT` stats per event, and ``budget``): planes, metadata
entries, lines and events as the framing is read, stats as they are decoded, each weighted by :data:`WEIGHTS`.
Over a limit: :class:`tracekit.ingest.pywire.LimitError`.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.proto import xplane_pb2
from tracekit.threads import default_threads

from tracekit.ingest import pywire

try:  # pragma: no cover - depends on the build
    from tracekit.ingest import wirec
except ImportError:  # pragma: no cover
    wirec = None

_NO_C = os.environ.get("TRACEKIT_NO_C", "") not in ("", "0")
HAVE_C: bool = wirec is not None and not _NO_C
#: the C decoder turns a SIGBUS on a memory-mapped input that shrinks into InputChanged (POSIX builds)
HAVE_BUS_GUARD: bool = HAVE_C and bool(getattr(wirec, "HAVE_BUS_GUARD", 0))

KIND_UNSET, KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = 0, 2, 3, 4, 5, 6, 7

#: Work each decoded item costs, in bytes: about the memory one takes through the whole pipeline (measured with
#: crafted traces of a single kind of item: `tracekit analyze` peak RSS over the start-up's, per item).
WORK_PLANE, WORK_META, WORK_LINE, WORK_EVENT, WORK_STAT = 1024, 256, 3072, 320, 32
WEIGHTS = (WORK_PLANE, WORK_META, WORK_LINE, WORK_EVENT, WORK_STAT)
#: With ``max_events`` N, at most this many stats per allowed event (N * 64 in all): the stats are most of the work
#: of an event, and real traces carry 1-5 per event on average.
STATS_PER_EVENT = 64


@dataclass(eq=False)
class LineData:
    """One decoded XLine: its identity and its events as columns."""

    id: int
    name: str
    display_name: str
    timestamp_ns: int
    duration_ps: int
    metadata_id: np.ndarray        # int64, one per event
    offset_ps: np.ndarray          # int64, 0 for events that use num_occurrences
    event_duration_ps: np.ndarray  # int64
    stat_event: np.ndarray         # int32, event index of each flattened stat
    stat_id: np.ndarray            # int64, stat metadata id
    stat_kind: np.ndarray          # int8, KIND_*
    stat_int: np.ndarray           # int64: int64/uint64 bits/ref id; index into stat_str for kinds 5, 6
    stat_double: np.ndarray        # float64, NaN unless kind 2
    stat_str: list = field(default_factory=list)  # str (kind 5) / bytes (kind 6) values, in order
    display_id: int = 0

    @property
    def n_events(self) -> int:
        return len(self.metadata_id)


@dataclass(eq=False)
class PlaneData:
    """One decoded XPlane: its identity, its metadata head and its lines."""

    id: int
    name: str
    head: xplane_pb2.XPlane  # the plane without its lines (metadata maps, plane stats)
    lines: list[LineData]


# ---- C path ------------------------------------------------------------------------------------------------

def _line_from_c(t) -> LineData:
    (lid, name, dname, ts, dur, did, m, o, d, sev, sid, skind, sint, sdbl, sstr) = t
    return LineData(
        id=lid, name=name, display_name=dname, timestamp_ns=ts, duration_ps=dur,
        metadata_id=np.frombuffer(m, np.int64), offset_ps=np.frombuffer(o, np.int64),
        event_duration_ps=np.frombuffer(d, np.int64),
        stat_event=np.frombuffer(sev, np.int32), stat_id=np.frombuffer(sid, np.int64),
        stat_kind=np.frombuffer(skind, np.int8), stat_int=np.frombuffer(sint, np.int64),
        stat_double=np.frombuffer(sdbl, np.float64), stat_str=sstr, display_id=did,
    )


def _planes(raw_planes) -> list[PlaneData]:
    planes = []
    gc_was_on = gc.isenabled()
    gc.disable()  # the result is a few thousand containers: no point in collecting while building it
    try:
        for pid, name, head_bytes, raw_lines in raw_planes:
            try:
                head = xplane_pb2.XPlane.FromString(head_bytes)
            except DecodeError as e:
                raise ValueError(f"corrupt XSpace: plane {name!r}: {e}") from None
            planes.append(PlaneData(pid, name, head, [_line_from_c(t) for t in raw_lines]))
    finally:
        if gc_was_on:
            gc.enable()
    return planes


def _limits(max_events: int | None, budget: int | None) -> dict:
    return {"max_events": -1 if max_events is None else int(max_events),
            "max_stats": -1 if max_events is None else int(max_events) * STATS_PER_EVENT,
            "budget": -1 if budget is None else int(budget), "weights": WEIGHTS}


def read_space_c(data, threads: int | None = None, *, max_events: int | None = None,
                 budget: int | None = None, stats: bool = True) -> tuple[list[PlaneData], list[str]]:
    """The C decoder (RuntimeError when the extension is not built). ``data``: any bytes-like object (bytes,
    mmap, memoryview); the event columns do not refer to it. ``threads``: lines decoded in parallel (the GIL is
    released meanwhile); default :func:`tracekit.threads.default_threads`. ``max_events`` / ``budget`` (work, see
    :data:`WEIGHTS`): :class:`tracekit.ingest.pywire.LimitError` past them. A memory map whose file shrinks meanwhile:
    :class:`tracekit.ingest.pywire.InputChanged`."""
    if wirec is None:
        raise RuntimeError("tracekit.ingest.wirec is not built")
    if threads is None:
        threads = default_threads()
    raw_planes, hostnames = wirec.read_space(data, threads, **_limits(max_events, budget), stats=stats)
    return _planes(raw_planes), hostnames


def read_space_python(data, *, max_events: int | None = None, budget: int | None = None,
                      stats: bool = True) -> tuple[list[PlaneData], list[str]]:
    """The pure-Python decoder (:mod:`tracekit.ingest.pywire`): the same result and errors as the C one, slower."""
    raw_planes, hostnames = pywire.read_space(data, 1, **_limits(max_events, budget), stats=stats)
    return _planes(raw_planes), hostnames


def read_space(data, threads: int | None = None, *, max_events: int | None = None,
               budget: int | None = None, stats: bool = True) -> tuple[list[PlaneData], list[str]]:
    """(planes, hostnames) of a serialized XSpace; the C decoder when available, else the Python one. ``stats``
    False: the events' stats are stepped over, not decoded (every line's stat columns are empty).
    Corrupt input: ValueError; over ``max_events`` or the work ``budget``: :class:`tracekit.ingest.pywire.LimitError`."""
    if HAVE_C:
        return read_space_c(data, threads, max_events=max_events, budget=budget, stats=stats)
    return read_space_python(data, max_events=max_events, budget=budget, stats=stats)
