"""The machine a CPU trace was recorded on, kept beside the trace.

A CPU trace's ops ran on the recording machine's cores, so their roofline must use that machine's rates, not those
of the machine running tracekit. ``tracekit capture``, the post-run hook and ``fixtures/capture_cpu.py`` write
``<trace stem>.machine.json`` next to ``<trace stem>.xplane.pb``: the CPU model, core count, platform, ISA flags and
clock (for the FLOP/s ceiling, :mod:`tracekit.model.cpu_limits`), and a
calibration measured right there (:func:`tracekit.model.calibrate.measure`: achieved matmul FLOP/s and copy
bandwidth). Analysis reads it back with :func:`for_trace` and builds the CPU chip from it
(:func:`tracekit.model.calibrate.chip_from_record`).

Format (JSON object): ``format`` = :data:`FORMAT`, ``processor``, ``cpu_count``, ``platform``, ``recorded_at``
(UTC, ISO 8601), ``cpu_flags`` (the ISA flags that decide FLOP/cycle, :data:`~tracekit.model.cpu_limits.ISA_FLAGS`;
absent or null: unknown), ``clock`` (``max_hz``, ``reported_hz``, ``arch``; absent: unknown), ``cpu_identity``
(``vendor``, ``family``, ``model``, ``physical_cores``, ``llc_bytes``: :func:`tracekit.model.cpu_limits.read_identity`;
absent: unknown), ``fingerprint`` (:func:`tracekit.model.cpu_limits.fingerprint`: this boot of this machine),
``calibration`` (the calibration record, or null when it could not be measured).

Which machine's ceiling a CPU trace gets: its record's, when there is one. A record whose ``fingerprint`` is this
machine's (same machine-id and boot id: a hostname proves nothing, many VMs are called ``vm``) was written here,
so what it lacks (an older record without flags, clock or identity) is read from this machine. A trace without a
record has no known recording machine: no ceiling, so no peak is raised (:func:`tracekit.model.peaks.raise_estimates`).
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from dataclasses import replace
from pathlib import Path

FORMAT = "tracekit.machine/1"
#: the chip name of a CPU trace whose recording machine is unknown (no record beside it)
UNKNOWN_CPU = "cpu (recording machine unknown, estimate)"
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


def describe(calibrate_s: float | None = 3.0, reuse: bool = False) -> dict:
    """This machine's record; with ``calibrate_s`` a calibration of about that many seconds is measured (JAX's
    import and compile time come on top). A failed calibration leaves ``calibration`` null. ``reuse``: take the
    stored ``tracekit calibrate`` result instead when it was measured on this machine (:func:`stored_calibration`)."""
    from tracekit.model.calibrate import measure, processor_name
    from tracekit.model.cpu_limits import fingerprint, read_clock, read_flags, read_identity

    cal = stored_calibration() if reuse else None
    if cal is None and calibrate_s:
        try:
            cal = measure(calibrate_s)
        except Exception:  # noqa: BLE001 - the record is still useful without its calibration
            cal = None
    return {"format": FORMAT, "processor": processor_name(), "cpu_count": os.cpu_count() or 1,
            "platform": platform.platform(), "cpu_flags": read_flags(), "clock": read_clock(),
            "cpu_identity": read_identity(), "fingerprint": fingerprint(),
            "recorded_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "calibration": cal}


def stored_calibration() -> dict | None:
    """The stored calibration (``tracekit calibrate``: :func:`tracekit.model.calibrate.calibration_path`) when it
    describes this machine (same processor, core count and platform) and was not measured while other work ran;
    its ``stored_at`` names the file. None otherwise (never raises)."""
    from tracekit.model.calibrate import FORMAT_VERSION, calibration_path, processor_name
    from tracekit.model.cpu_limits import busy

    path = calibration_path()
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or rec.get("version") != FORMAT_VERSION:
        return None
    same = (rec.get("processor") == processor_name() and rec.get("cpu_count") == (os.cpu_count() or 1)
            and rec.get("platform") == platform.platform())
    if not same or busy(rec.get("cpu_wait_share")) is not None:
        return None
    return dict(rec, stored_at=str(path))


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
    """'AMD EPYC 7B13 (2 cores)' for messages ('cores unknown' when the record does not say)."""
    n = record.get("cpu_count")
    cores = f"{n} cores" if isinstance(n, int) and not isinstance(n, bool) and n > 0 else "cores unknown"
    return f"{record.get('processor') or 'unknown CPU'} ({cores})"


def recorded_here(record: dict) -> bool:
    """True when ``record`` was written on this machine since its last boot (its ``fingerprint`` is this
    machine's, :func:`tracekit.model.cpu_limits.fingerprint`)."""
    from tracekit.model.cpu_limits import fingerprint

    fp = record.get("fingerprint")
    return isinstance(fp, str) and bool(fp) and fp == fingerprint()


def completed(record: dict) -> dict:
    """``record`` with what it lacks (flags, clock, core count, identity) read from this machine when it was
    recorded here (:func:`recorded_here`); as it is otherwise."""
    if not recorded_here(record):
        return record
    from tracekit.model.cpu_limits import read_clock, read_flags, read_identity

    out = dict(record)
    if not isinstance(out.get("cpu_flags"), list):
        out["cpu_flags"] = read_flags()
    if not isinstance(out.get("clock"), dict):
        out["clock"] = read_clock()
    if not isinstance(out.get("cpu_count"), int) or out["cpu_count"] <= 0:
        out["cpu_count"] = os.cpu_count() or None
    if not isinstance(out.get("cpu_identity"), dict):
        out["cpu_identity"] = read_identity()
    return out


def cpu_chip_for(trace_path):
    """(Chip, note) for a CPU trace at ``trace_path``: from the record beside it (its calibration, else an
    estimate from its core count), else None and a note saying the record is missing."""
    rec = read(trace_path) if trace_path else None
    if rec is None:
        return None, "no record of the recording machine"
    rec = completed(rec)
    chip, note = _record_chip(rec, path_for(trace_path).name)
    ident = rec.get("cpu_identity") if isinstance(rec.get("cpu_identity"), dict) else {}
    llc = ident.get("llc_bytes")
    llc = float(llc) if isinstance(llc, (int, float)) and not isinstance(llc, bool) and llc > 0 else float("nan")
    return replace(chip, limits=ceilings_of(rec), cache_bytes=llc), note


def ceilings_of(record: dict) -> dict:
    """The FLOP/s ceilings (:func:`tracekit.model.cpu_limits.ceilings`) of the machine ``record`` describes."""
    from tracekit.model.cpu_limits import ceilings

    flags = record.get("cpu_flags")  # (a record is read from disk: anything but a list of names is "not recorded")
    ok = isinstance(flags, (list, tuple)) and all(isinstance(f, str) for f in flags)
    ident = record.get("cpu_identity") if isinstance(record.get("cpu_identity"), dict) else {}
    ident = dict(ident, processor=record.get("processor"))
    return ceilings(record.get("cpu_count"), list(flags) if ok else None, record.get("clock"), ident)


def _record_chip(rec: dict, where: str):
    from tracekit.model.calibrate import chip_from_record
    from tracekit.model.chips import estimate_cpu

    cal = rec.get("calibration")
    if isinstance(cal, dict):
        try:
            chip = chip_from_record(cal, where)
            return chip, f"recording machine: {summary(rec)}, calibrated there"
        except (ValueError, KeyError, TypeError):
            pass
    n = rec.get("cpu_count")
    if not (isinstance(n, int) and not isinstance(n, bool) and n > 0):
        chip = estimate_cpu(1, where=f"{rec.get('processor') or 'recording machine'}")
        # (one core's estimate: a machine of unknown size is never labelled with this machine's cores)
        chip = replace(chip, name=f"cpu ({rec.get('processor') or 'recording machine'}, cores unknown, estimate)")
        return chip, f"recording machine: {summary(rec)}, not calibrated (estimate for one core: no core count)"
    chip = estimate_cpu(n, where=f"{rec.get('processor') or 'recording machine'}")
    return chip, f"recording machine: {summary(rec)}, not calibrated (estimate from its core count)"


def record_run(run_dir, calibrate_s: float | None = None) -> list:
    """Write the record of this machine beside every trace in ``run_dir`` that has none (a capture made here);
    returns the files written. ``calibrate_s``: seconds of calibration (default ``$TRACEKIT_MACHINE_CALIBRATE_S``,
    else 3; 0 records the CPU without calibrating); a stored ``tracekit calibrate`` result of this machine is used
    instead of measuring again (:func:`stored_calibration`: the hook's child then spends no seconds calibrating).
    Never raises: a record that cannot be written is skipped."""
    if calibrate_s is None:
        try:
            calibrate_s = float(os.environ.get("TRACEKIT_MACHINE_CALIBRATE_S", "3"))
        except ValueError:
            calibrate_s = 3.0
    written = []
    rec = None
    try:
        traces = [p for p in Path(run_dir).iterdir() if p.name.endswith(_TRACE_SUFFIXES)]
    except OSError:
        return written
    for t in sorted(traces):
        if path_for(t).exists():
            continue
        try:
            rec = rec or describe(calibrate_s, reuse=True)
            written.append(write(t, rec))
        except Exception:  # noqa: BLE001 - the record helps the analysis; it must never break a capture
            continue
    return written


def for_info(paths: list, hosts: list) -> list[dict]:
    """The recording machine of each CPU trace in ``paths`` that has a record beside it, as ``tracekit info``
    shows it: processor, cores, the calibration's rates and when they were measured, the FLOP/s ceilings, and a
    one-line ``summary``."""
    out = []
    for path, host in zip(paths, hosts):
        rec = read(path)
        if rec is None:
            continue
        try:
            out.append(_info_entry(rec, path, host))
        except (TypeError, ValueError, AttributeError, KeyError):  # a record it cannot read: info shows the rest
            continue
    return out


def _info_entry(rec: dict, path, host: str) -> dict:
    """One entry of :func:`for_info` (raises on a record it cannot read)."""
    from tracekit.model.cpu_limits import busy
    from tracekit.units import fmt_num

    cal = rec.get("calibration") if isinstance(rec.get("calibration"), dict) else {}
    m = {"host": host, "record": path_for(path).name, "processor": rec.get("processor"),
         "cpu_count": rec.get("cpu_count"), "calibrated_at": cal.get("measured_at"),
         "peak_flops_per_s": dict(cal.get("peak_flops_per_s") or {}),
         "memory_bw_bytes_per_s": cal.get("hbm_bw_bytes_per_s"), "cpu_wait_share": cal.get("cpu_wait_share"),
         "ceilings": {k.split(".", 1)[1]: v["value"] for k, v in ceilings_of(rec).items()
                      if k.startswith("peak_flops_per_s.")}}
    rates = ", ".join(f"{k} {fmt_num(v, 'FLOP/s')}" for k, v in sorted(m["peak_flops_per_s"].items()))
    if m["memory_bw_bytes_per_s"]:
        rates += f", memory {fmt_num(m['memory_bw_bytes_per_s'], 'B/s')}"
    loaded = busy(m["cpu_wait_share"])
    m["summary"] = (
        f"recording machine ({m['record']}): {summary(rec)}; "
        + (f"calibrated {m['calibrated_at']}: {rates}" if m["calibrated_at"] else "not calibrated")
        + (f" (under load: its threads waited for a core {loaded:.0%} of the time)" if loaded is not None else "")
        + (f"; FLOP/s ceiling f32 {fmt_num(m['ceilings']['f32'], 'FLOP/s')}" if "f32" in m["ceilings"] else ""))
    return m


def is_cpu_trace(tr) -> bool:
    """True when every device of the loaded trace is a CPU (XLA:CPU's virtual devices)."""
    kinds = {str(k).lower() for k in tr.devices["device_kind"]} if len(tr.devices) else set()
    return bool(kinds) and all(k.startswith("cpu") for k in kinds)
