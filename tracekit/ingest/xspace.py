"""Small helpers over upb XSpace messages: stat values, plane names and devices. The per-event hot path is in
:mod:`tracekit.ingest.wire` and :mod:`tracekit.columns`."""
from __future__ import annotations

import math
import re
from typing import NamedTuple


from tracekit.proto import xplane_pb2

DEVICE_RE = re.compile(r"^/device:(TPU|GPU|CPU|TPU_SYSTEM|CUSTOM)[:_]?(\d+)?")


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




class ModuleLabel(NamedTuple):
    """A module as an ``XLA Modules`` event (or the ``/host:metadata`` entry holding its HLO) names it."""
    name: str
    program_id: int


_NAME_ID = re.compile(r"^(.*)\((\d+)\)$")


def parse_module_label(label: str) -> ModuleLabel:
    """'jit_f(1219...)' -> ('jit_f', 1219...); a label without an id gives program id 0."""
    m = _NAME_ID.match(label.strip())
    if m:
        return ModuleLabel(m.group(1), int(m.group(2)) & 0xFFFFFFFFFFFFFFFF)
    return ModuleLabel(label.strip(), 0)


def stat_names(plane: xplane_pb2.XPlane) -> dict[int, str]:
    """Stat metadata id -> stat name of a plane."""
    return {k: v.name for k, v in plane.stat_metadata.items()}


def profile_span(planes) -> tuple[int, int] | None:
    """(start, stop) in wall-clock ns of the profile, from the ``Task Environment`` plane's
    ``profile_start_time``/``profile_stop_time`` stats (the profiler writes them); None without them.
    ``planes``: the decoded planes (each with ``name`` and ``head``, the plane message)."""
    for p in planes:
        if p.name == "Task Environment":
            st = stats_dict(p.head.stats, stat_names(p.head))
            a, b = st.get("profile_start_time"), st.get("profile_stop_time")
            if isinstance(a, int) and isinstance(b, int) and 0 < a <= b:
                return a, b
    return None
