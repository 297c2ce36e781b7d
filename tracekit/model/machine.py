"""The machine a CPU trace was recorded on, kept beside the trace.

A CPU trace's ops ran on the recording machine's cores, so their roofline must use that machine's rates, not those
of the machine running tracekit. ``tracekit capture``, the post-run hook and ``fixtures/capture_cpu.py`` write
``<trace stem>.machine.json`` next to ``<trace stem>.xplane.pb``: the CPU model, core count, platform, and a
calibration measured right there (:func:`tracekit.model.calibrate.measure`: achieved matmul FLOP/s and copy
bandwidth). Analysis reads it back with :func:`for_trace` and builds the CPU chip from it
(:func:`tracekit.model.calibrate.chip_from_record`).

Format (JSON object): ``format`` = :data:`FORMAT`, ``processor``, ``cpu_count``, ``platform``, ``recorded_at``
(UTC, ISO 8601), ``calibration`` (the calibration record, or null when it could not be measured).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path

FORMAT = "tracekit.machine/1"
SUFFIX = ".machine.json"
_TRACE_SUFFIXES = (".xplane.pb.gz", ".xplane.pb")


def path_for(trace_path) -> Path:
    """``run/host.xplane.pb`` -> ``run/host.machine.json`` (``.gz`` traces too)."""
    p = Path(str(trace_path))
    name = p.name
    for suf in _TRACE_SUFFIXES:
        if name.endswith(suf):
            return p.with_name(name[: -len(suf)] + SUFFIX)
    return p.with_name(name + SUFFIX)


def describe(calibrate_s: float | None = 3.0) -> dict:
    """This machine's record; with ``calibrate_s`` a calibration of about that many seconds is measured (JAX's
    import and compile time come on top). A failed calibration leaves ``calibration`` null."""
    from tracekit.model.calibrate import measure, processor_name

    cal = None
    if calibrate_s:
        try:
            cal = measure(calibrate_s)
        except Exception:  # noqa: BLE001 - the record is still useful without its calibration
            cal = None
    return {"format": FORMAT, "processor": processor_name(), "cpu_count": os.cpu_count() or 1,
            "platform": platform.platform(),
            "recorded_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "calibration": cal}


def write(trace_path, record: dict) -> Path:
    """Write ``record`` beside ``trace_path`` (atomically); returns the file written."""
    from tracekit.model.calibrate import write_json_atomic

    target = path_for(trace_path)
    write_json_atomic(target, record)
    return target


def read(trace_path) -> dict | None:
    """The record beside ``trace_path``: None when there is none or it cannot be read as one (never raises)."""
    try:
        rec = json.loads(path_for(trace_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        return None
    return rec


def summary(record: dict) -> str:
    """'AMD EPYC 7B13 (2 cores)' for messages."""
    return f"{record.get('processor') or 'unknown CPU'} ({record.get('cpu_count') or '?'} cores)"
