"""Low-level XSpace reading: plane classification, stat decoding, and bulk extraction of a line's events into
NumPy arrays. Nothing here keeps a Python object per event."""
from __future__ import annotations

import math
import re

import numpy as np

from tracekit.proto import xplane_pb2

DEVICE_RE = re.compile(r"^/device:(TPU|GPU|CPU|TPU_SYSTEM|CUSTOM)[:_]?(\d+)?")


def stat_names(plane: xplane_pb2.XPlane) -> dict[int, str]:
    return {k: v.name for k, v in plane.stat_metadata.items()}


def stat_ids(plane: xplane_pb2.XPlane, *names: str) -> dict[str, int]:
    """Stat metadata id of each wanted name present in the plane (-1 when absent)."""
    want = {n: -1 for n in names}
    for k, v in plane.stat_metadata.items():
        if v.name in want:
            want[v.name] = k
    return want


def stat_value(st: xplane_pb2.XStat, names: dict[int, str]):
    kind = st.WhichOneof("value")
    if kind is None:
        return None
    v = getattr(st, kind)
    if kind == "ref_value":
        return names.get(v, "")
    return v


def as_int(v, default: int = 0) -> int:
    """A stat value as an integer whatever type the trace stored it with (int, finite float, numeric str or
    bytes); ``default`` when it is not a number."""
    if isinstance(v, (bool, int)):
        return int(v)
    if isinstance(v, (str, bytes)):
        try:
            return int(v)
        except ValueError:
            pass
    try:
        f = float(v)
    except (TypeError, ValueError):
        return default
    return int(f) if math.isfinite(f) else default


def as_float(v) -> float:
    """A stat value as a float (NaN when it is not a number)."""
    try:
        return float(v)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def stats_dict(stats, names: dict[int, str]) -> dict:
    return {names.get(s.metadata_id, str(s.metadata_id)): stat_value(s, names) for s in stats}


def device_of(plane_name: str) -> tuple[str, str] | None:
    """('TPU', '0') for '/device:TPU:0'; None for host and other planes."""
    m = DEVICE_RE.match(plane_name)
    if not m or m.group(1) in ("TPU_SYSTEM", "CUSTOM"):
        return None
    return m.group(1), m.group(2) or "0"


def line_arrays(line: xplane_pb2.XLine) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(metadata_id, start_ps, duration_ps) of every event on the line, start in ps since the host epoch."""
    n = len(line.events)
    mids = np.empty(n, np.int64)
    offs = np.empty(n, np.int64)
    durs = np.empty(n, np.int64)
    for i, e in enumerate(line.events):
        mids[i] = e.metadata_id
        offs[i] = e.offset_ps
        durs[i] = e.duration_ps
    offs += line.timestamp_ns * 1000
    return mids, offs, durs


def line_arrays_with_stats(line, wanted: dict[str, int], names: dict[int, str]):
    """Like :func:`line_arrays` plus, for each wanted stat (name -> stat id), a list of per-event values
    (None where the event lacks it). Only events that carry stats pay for the stat loop."""
    n = len(line.events)
    mids = np.empty(n, np.int64)
    offs = np.empty(n, np.int64)
    durs = np.empty(n, np.int64)
    by_id = {sid: name for name, sid in wanted.items() if sid >= 0}
    vals = {name: [None] * n for name in wanted}
    for i, e in enumerate(line.events):
        mids[i] = e.metadata_id
        offs[i] = e.offset_ps
        durs[i] = e.duration_ps
        if e.stats:
            for s in e.stats:
                name = by_id.get(s.metadata_id)
                if name is not None:
                    vals[name][i] = stat_value(s, names)
    offs += line.timestamp_ns * 1000
    return mids, offs, durs, vals
