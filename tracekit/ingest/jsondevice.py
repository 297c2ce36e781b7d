"""The chip a trace-viewer JSON export names, where it names one: a ``process_name`` such as
``/device:TPU:0 (TPU v6 Lite)`` carries the device kind after the plane name (xprof's own legacy export of the
shared v6e trace writes the bare ``/device:TPU:0``: nothing to read, and no generation is guessed from "TPU").
The kind becomes the plane's ``device_type_string`` stat, the one the XSpace carries, so the chip table matches
it the same way (:func:`tracekit.model.chips.detect`)."""
from __future__ import annotations

import re

from tracekit.proto import xplane_pb2

_SUFFIX = re.compile(r"^(/device:[A-Za-z_]+:\d+)\s*\((.{1,80})\)\s*$")


def split_name(pname: str) -> tuple[str, str | None]:
    """(plane name, device kind or None) of a process name: ``/device:TPU:0 (TPU v6 Lite)`` ->
    (``/device:TPU:0``, ``TPU v6 Lite``)."""
    m = _SUFFIX.match(pname)
    return (m.group(1), m.group(2).strip()) if m else (pname, None)


def add_kind(head: xplane_pb2.XPlane, kind: str | None) -> None:
    """Give the plane ``head`` its ``device_type_string`` stat (when the export named a kind)."""
    if not kind:
        return
    sid = max(head.stat_metadata, default=0) + 1
    head.stat_metadata[sid].id, head.stat_metadata[sid].name = sid, "device_type_string"
    head.stats.add(metadata_id=sid, str_value=kind)
