"""What is in a trace, for ``tracekit info``: hosts, device planes with their chip and the peaks they report, lines
with their event counts, the HLO modules' names, the time span of the device events.

Read from the headers only: the planes' metadata and stats, each line's name and event count, the events' times.
The events' stats are stepped over, not decoded (:func:`tracekit.ingest.wire.read_space` with ``stats=False``),
no frame is built, HLO is not parsed and pandas is not imported, so ``info`` costs a small fraction of
``analyze`` on every size. What needs the stats (op executions, steps, the HLO join) is ``tracekit ops`` /
``analyze``'s. Plain data (a dict) plus a text rendering.
"""
from __future__ import annotations

import os

from tracekit.ingest import formats, paths
from tracekit.options import DEFAULT_MAX_BYTES
from tracekit.ingest.xspace import device_of, parse_module_label, stat_names, stats_dict
from tracekit.units import fmt_time

PEAK_STATS = ("peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second", "clock_rate", "core_count",
              "memory_bandwidth", "memory_size", "compute_cap_major", "compute_cap_minor", "device_vendor")


def _planes(hf, max_bytes, max_events):
    """(planes, hostnames) of one host file: XSpace without event stats; trace-viewer JSON converted."""
    name = os.fspath(hf.path)
    if formats.is_json_name(name) or formats.looks_json(name):
        from tracekit.ingest import tracejson  # the JSON reader builds the same planes (and imports pandas)
        return tracejson.load(hf, [], max_bytes=max_bytes, max_events=max_events)
    return paths.load_space(hf, max_bytes, max_events, stats=False)


def _device_kind(kind: str, pstats: dict) -> str:
    """The chip as the plane names it (GPU planes without a type string: vendor and compute capability)."""
    out = str(pstats.get("device_type_string") or "")
    if kind == "GPU" and not out:
        vendor = str(pstats.get("device_vendor") or "")
        cc = (pstats.get("compute_cap_major"), pstats.get("compute_cap_minor"))
        out = f"{vendor or 'GPU'} cc{cc[0]}.{cc[1]}" if cc[0] is not None else (vendor or "GPU")
    return out or kind


def _modules(head) -> list[tuple[str, int]]:
    """(name, program id) of every module whose HLO the ``/host:metadata`` plane carries (not decoded)."""
    hlo_id = next((k for k, v in stat_names(head).items() if v == "Hlo Proto"), None)
    if hlo_id is None:
        return []
    return [tuple(parse_module_label(md.name)) for md in head.event_metadata.values()
            if any(st.metadata_id == hlo_id for st in md.stats)]


def scan(path, run: str | None = None, *, max_bytes: int | None = DEFAULT_MAX_BYTES,
         max_events: int | None = None) -> dict:
    """The inventory of a trace file, run folder or logdir (see the module docstring); the same limits and
    one-line errors as loading it."""
    chosen = paths.choose(path, run)
    files = chosen.files
    hosts, devices, lines, modules = [], [], [], set()
    lo = hi = None
    for hf in files:
        planes, hostnames = _planes(hf, max_bytes, max_events)
        host = hostnames[0] if len(files) == 1 and hostnames else hf.host
        hosts.append(host)
        seen = set()
        for p in planes:
            if p.name == "/host:metadata":
                modules.update(_modules(p.head))
            dev = device_of(p.name)
            n_dev = 0
            for ln in p.lines:
                n = ln.n_events
                if n:
                    lines.append({"host": host, "plane": p.name, "line": ln.name, "events": int(n)})
                if n and dev:
                    start = ln.timestamp_ns * 1000 + ln.offset_ps
                    a, b = int(start.min()), int((start + ln.event_duration_ps).max())
                    lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
                    n_dev += n
            if dev and p.name not in seen:  # a file may hold a plane twice: its first copy names the device
                seen.add(p.name)
                pstats = stats_dict(p.head.stats, stat_names(p.head))
                devices.append({"host": host, "device": f"{dev[0]}:{dev[1]}", "device_kind": _device_kind(dev[0], pstats),
                                "reported": {k: pstats[k] for k in PEAK_STATS if k in pstats}, "events": 0})
            if dev and n_dev:
                d = next(d for d in devices if d["host"] == host and d["device"] == f"{dev[0]}:{dev[1]}")
                d["events"] += n_dev
    return {
        "paths": [str(f.path) for f in files], "hosts": hosts, "devices": devices, "lines": lines,
        "modules": [{"module": m, "program_id": p} for m, p in sorted(modules)], "hlo_present": bool(modules),
        "device_events": sum(d["events"] for d in devices), "span_ps": (hi - lo) if lo is not None else 0,
        "host_thread_events": host_thread_events(lines), "warnings": [chosen.note] if chosen.note else [],
    }


def host_thread_events(lines: list[dict]) -> int:
    """Events on the host planes' threads (where a CPU trace's ops run), the Python tracer's line left out."""
    return sum(ln["events"] for ln in lines if ln["plane"].startswith("/host:") and ln["line"] != "python")


def render_text(inv: dict) -> str:
    out = [f"trace: {', '.join(inv['paths'])}", f"hosts: {', '.join(inv['hosts'])}"]
    if inv["devices"]:
        out.append(f"time span of device events: {fmt_time(inv['span_ps'])}; {inv['device_events']:,} device events "
                   f"on {len(inv['devices'])} device(s)")
    else:  # a CPU trace: its ops run on host threads, and which CPU device ran each is known only once ops are read
        out.append(f"no device planes: a CPU trace, its ops among {inv['host_thread_events']:,} events on host threads "
                   "(`tracekit ops` and `tracekit analyze` read its CPU devices)")
    if inv["hlo_present"]:
        out.append(f"HLO: present — {len(inv['modules'])} modules")
    else:
        out.append("HLO: unavailable (no /host:metadata 'Hlo Proto' in this trace) — ops are listed by kernel name, "
                   "and roofline costs are unknown")
    if inv["devices"]:
        out.append("devices:")
    for d in inv["devices"]:
        rep = ", ".join(f"{k}={v}" for k, v in d["reported"].items())
        out.append(f"  {d['host']} {d['device']:<7} {d['device_kind']:<14} events={d['events']:<8,}"
                   + (f"  [trace reports: {rep}]" if rep else ""))
    for m in inv.get("machines", []):  # (added by the caller: tracekit.model.machine.for_info)
        out.append(m["summary"])
    if inv["modules"]:
        out.append("modules: " + ", ".join(f"{m['module']}({m['program_id']})" for m in inv["modules"][:20])
                   + (" …" if len(inv["modules"]) > 20 else ""))
    out.append("lines with events:")
    for ln in inv["lines"][:40]:
        out.append(f"  {ln['plane']:<16} {ln['line'][:50]:<50} {ln['events']:>9,}")
    if len(inv["lines"]) > 40:
        out.append(f"  … {len(inv['lines']) - 40} more lines")
    out.append("(op executions, steps and the HLO join: `tracekit ops` / `tracekit analyze`)")
    out += [f"warning: {w}" for w in inv.get("warnings") or []]
    return "\n".join(out)
