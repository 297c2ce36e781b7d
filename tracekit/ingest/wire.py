"""Bulk XSpace decoding: every line's events (and their stats) as NumPy arrays, without a Python object per event.

Two implementations with identical results:

* the C extension ``tracekit.ingest._wire`` (built by ``pip install`` when a C compiler is present; about 15 M
  events/s per thread, GIL released, lines decoded on :func:`tracekit.threads.default_threads` threads), used by
  :func:`read_space` when it is importable and ``TRACEKIT_NO_C`` is unset, empty or ``0``;
* :func:`read_space_python`, which walks upb's ``XEvent`` objects (slow, ~0.3-0.5 M events/s).

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

Corrupt input raises ``ValueError`` in both paths (the C path says at which byte). The C decoder is stricter
than upb on input that no profiler writes (a known field with an unexpected wire type, groups); it never
accepts a file that upb rejects.
"""
from __future__ import annotations

import gc
import os
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import DecodeError

from tracekit.proto import xplane_pb2
from tracekit.threads import default_threads

try:  # pragma: no cover - depends on the build
    from tracekit.ingest import _wire
except ImportError:  # pragma: no cover
    _wire = None

_NO_C = os.environ.get("TRACEKIT_NO_C", "") not in ("", "0")
HAVE_C: bool = _wire is not None and not _NO_C

KIND_UNSET, KIND_DOUBLE, KIND_UINT64, KIND_INT64, KIND_STR, KIND_BYTES, KIND_REF = 0, 2, 3, 4, 5, 6, 7
_KIND_OF = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5, "bytes_value": 6,
            "ref_value": 7}


@dataclass(eq=False)
class LineData:
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


def read_space_c(data, threads: int | None = None) -> tuple[list[PlaneData], list[str]]:
    """The C decoder (RuntimeError when the extension is not built). ``data``: any bytes-like object (bytes,
    mmap, memoryview); the event columns do not refer to it. ``threads``: lines decoded in parallel (the GIL is
    released meanwhile); default :func:`tracekit.threads.default_threads`."""
    if _wire is None:
        raise RuntimeError("tracekit.ingest._wire is not built")
    if threads is None:
        threads = default_threads()
    gc_was_on = gc.isenabled()
    gc.disable()  # the result is a few thousand containers: no point in collecting while building it
    try:
        raw_planes, hostnames = _wire.read_space(data, threads)
        planes = []
        for pid, name, head_bytes, raw_lines in raw_planes:
            try:
                head = xplane_pb2.XPlane.FromString(head_bytes)
            except DecodeError as e:
                raise ValueError(f"corrupt XSpace: plane {name!r}: {e}") from None
            planes.append(PlaneData(pid, name, head, [_line_from_c(t) for t in raw_lines]))
    finally:
        if gc_was_on:
            gc.enable()
    return planes, hostnames


# ---- Python path -------------------------------------------------------------------------------------------

def _line_python(line: xplane_pb2.XLine) -> LineData:
    events = line.events
    n = len(events)
    mids = np.empty(n, np.int64)
    offs = np.empty(n, np.int64)
    durs = np.empty(n, np.int64)
    s_ev, s_id, s_kind, s_int, s_dbl, s_str = [], [], [], [], [], []
    nan = float("nan")
    kind_of = _KIND_OF
    for i, e in enumerate(events):
        mids[i] = e.metadata_id
        offs[i] = e.offset_ps
        durs[i] = e.duration_ps
        if e.stats:
            for s in e.stats:
                s_ev.append(i)
                s_id.append(s.metadata_id)
                which = s.WhichOneof("value")
                k = kind_of[which] if which else 0
                s_kind.append(k)
                if k == 2:
                    s_int.append(0)
                    s_dbl.append(s.double_value)
                    continue
                s_dbl.append(nan)
                if k == 0:
                    s_int.append(0)
                elif k == 5 or k == 6:
                    s_int.append(len(s_str))
                    s_str.append(s.str_value if k == 5 else s.bytes_value)
                elif k == 4:
                    s_int.append(s.int64_value)
                else:  # uint64 / ref: keep the bits
                    v = s.uint64_value if k == 3 else s.ref_value
                    s_int.append(v - (1 << 64) if v >= 1 << 63 else v)
    return LineData(
        id=line.id, name=line.name, display_name=line.display_name, timestamp_ns=line.timestamp_ns,
        duration_ps=line.duration_ps, metadata_id=mids, offset_ps=offs, event_duration_ps=durs,
        stat_event=np.array(s_ev, np.int32),
        stat_id=np.array(s_id, np.int64),
        stat_kind=np.array(s_kind, np.int8),
        stat_int=np.array(s_int, np.int64),
        stat_double=np.array(s_dbl, np.float64),
        stat_str=s_str, display_id=line.display_id,
    )


def read_space_python(data) -> tuple[list[PlaneData], list[str]]:
    """The pure-Python decoder, through upb's objects: same result as the C one, much slower."""
    try:
        space = xplane_pb2.XSpace.FromString(bytes(data))
    except DecodeError as e:
        raise ValueError(f"corrupt XSpace: {e}") from None
    planes = []
    for plane in space.planes:
        lines = [_line_python(line) for line in plane.lines]
        plane.ClearField("lines")
        planes.append(PlaneData(plane.id, plane.name, plane, lines))
    return planes, list(space.hostnames)


def read_space(data, threads: int | None = None) -> tuple[list[PlaneData], list[str]]:
    """(planes, hostnames) of a serialized XSpace; the C decoder when available, else the Python one.
    Corrupt input: ValueError."""
    return read_space_c(data, threads) if HAVE_C else read_space_python(data)
