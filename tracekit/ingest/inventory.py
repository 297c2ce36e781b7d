"""What is in a trace: hosts, devices and chips, the peaks the trace reports, lines with event counts, modules,
time span, HLO presence. Plain data (a dict) plus a text rendering for ``tracekit info``."""
from __future__ import annotations

from tracekit.ingest.trace import Trace
from tracekit.units import fmt_time

PEAK_STATS = ("peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second", "clock_rate", "core_count",
              "memory_bandwidth", "memory_size", "compute_cap_major", "compute_cap_minor", "device_vendor")


def summarize(tr: Trace) -> dict:
    ops = tr.device_ops
    span = (int(ops["start_ps"].min()), int((ops["start_ps"] + ops["duration_ps"]).max())) if len(ops) else (0, 0)
    devices = []
    for r in tr.devices.itertuples(index=False):
        st = tr.device_stats.get((r.host, r.device), {})
        d = ops[(ops["host"].astype(str) == r.host) & (ops["device"].astype(str) == r.device)]
        devices.append({"host": r.host, "device": r.device, "device_kind": r.device_kind,
                        "reported": {k: st[k] for k in PEAK_STATS if k in st},
                        "ops": int(len(d)), "busy_ps": int(d["duration_ps"].sum())})
    lines = [{"host": r.host, "plane": r.plane, "line": r.line, "events": int(r.events)}
             for r in tr.lines.itertuples(index=False) if r.events]
    mods = (tr.hlo[["module", "program_id"]].drop_duplicates() if tr.has_hlo else None)
    return {
        "paths": tr.paths, "hosts": tr.hosts, "devices": devices, "lines": lines,
        "modules": [{"module": str(m), "program_id": int(p)} for m, p in mods.itertuples(index=False)] if mods is not None else [],
        "hlo_present": tr.has_hlo,
        "hlo_instructions": int(len(tr.hlo)),
        "op_executions": int(len(ops)), "async_windows": int(tr.ops["is_async"].sum()),
        "ops_joined_to_hlo_time_share": float((ops["duration_ps"] * ops["in_hlo"]).sum() / ops["duration_ps"].sum())
        if len(ops) and ops["duration_ps"].sum() else 0.0,
        "span_ps": span[1] - span[0],
        "steps": int(tr.steps["step"].nunique()) if len(tr.steps) else 0,
        "step_source": sorted(set(tr.steps["step_source"].astype(str))) if len(tr.steps) else [],
        "warnings": tr.warnings,
    }


def render_text(inv: dict) -> str:
    out = [f"trace: {', '.join(inv['paths'])}", f"hosts: {', '.join(inv['hosts'])}",
           f"time span of device ops: {fmt_time(inv['span_ps'])}; {inv['op_executions']:,} op executions, "
           f"{inv['async_windows']:,} async windows; steps: {inv['steps']} ({', '.join(inv['step_source']) or 'none'})"]
    if inv["hlo_present"]:
        out.append(f"HLO: present — {len(inv['modules'])} modules, {inv['hlo_instructions']:,} instructions; "
                   f"{100 * inv['ops_joined_to_hlo_time_share']:.1f}% of device op time joins to an HLO instruction")
    else:
        out.append("HLO: unavailable (no /host:metadata 'Hlo Proto' in this trace) — ops are listed by kernel name, "
                   "and roofline costs are unknown")
    out.append("devices:")
    for d in inv["devices"]:
        rep = ", ".join(f"{k}={v}" for k, v in d["reported"].items())
        out.append(f"  {d['host']} {d['device']:<7} {d['device_kind']:<14} ops={d['ops']:<7} busy={fmt_time(d['busy_ps'])}"
                   + (f"  [trace reports: {rep}]" if rep else ""))
    if inv["modules"]:
        out.append("modules: " + ", ".join(f"{m['module']}({m['program_id']})" for m in inv["modules"][:20])
                   + (" …" if len(inv["modules"]) > 20 else ""))
    out.append("lines with events:")
    for ln in inv["lines"][:40]:
        out.append(f"  {ln['plane']:<16} {ln['line'][:50]:<50} {ln['events']:>9,}")
    if len(inv["lines"]) > 40:
        out.append(f"  … {len(inv['lines']) - 40} more lines")
    for w in inv["warnings"]:
        out.append(f"warning: {w}")
    return "\n".join(out)
