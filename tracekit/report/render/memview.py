"""The memory view's renderings (XLA's buffer assignment): facts, program and buffer tables, as text, Markdown and
HTML; shared by the report renderers and ``tracekit memory``."""
from __future__ import annotations

from tracekit.report.render.sections import (device_name, distinct_names, facts_html, fmt_util, html_table,
                                             n_hosts)
from tracekit.units import fmt_num, fmt_pct, fmt_time, table

BUFFER_ROWS = 8


def _b(x) -> str:
    return fmt_num(x, "B")


def _indented(lines: list[str]) -> list[str]:
    return ["  " + ln for ln in lines]


def memory_facts(d: dict) -> list[tuple[str, str]]:
    m = d.get("memory") or {}
    if not m.get("programs"):
        return []
    cap = m.get("capacity_bytes")
    out = [("device memory", f"{_b(cap)} per device ({(m.get('capacity_source') or 'unknown').split(' (')[0]})")]
    devs = m.get("devices") or []
    if devs:
        top = max(devs, key=lambda r: (r.get("peak_bytes") or 0))
        out.append(("device peak", f"{_b(top['peak_bytes'])} ({fmt_util(top.get('share'))} of device memory) on "
                                   f"{device_name(top, n_hosts(d) > 1)} "
                                   f"while {top['programs_at_peak']} runs; up to {_b(top.get('upper_bytes'))} if the "
                                   "other programs' arguments stay live"))
    for o in m.get("offload") or []:
        verdict = "fits" if o.get("fits") else "does not fit"
        line = (f"{o['module']} keeps {_b(o['host_bytes'])} in host memory; kept in HBM it needs "
                f"{_b(o['need_bytes'])} of {_b(o.get('capacity_bytes'))} ({fmt_pct(o.get('share'))}): {verdict}")
        if o.get("wait_per_step_ps") is not None:
            line += (f". The steps wait {fmt_time(o['wait_per_step_ps'])} per step on its copies (host-link roofline "
                     f"of the copies {fmt_time(o.get('host_link_per_step_ps'))} per step)")
            if o.get("fits"):
                line += f": keeping the arrays on the device would save about {fmt_time(o['wait_per_step_ps'])} per step"
        out.append(("host offload", line))
    al = m.get("allocators") or []
    if al:
        out.append(("allocator events", "peak bytes in use during the trace: " + ", ".join(
            f"{a['allocator']} {_b(a.get('peak_in_trace_bytes'))}" for a in al[:8]) + (", …" if len(al) > 8 else "")))
    return out


PROGRAM_HEADERS = ["program", "space", "arguments", "outputs", "aliased", "temporaries", "live peak",
                   "of device memory"]
BUFFER_HEADERS = ["size", "kind", "program", "instruction", "shape", "source"]


def _ran(p: dict) -> bool:
    """Whether a program ran in the window (unknown counts as ran)."""
    return p.get("executions") is None or p["executions"] > 0


def program_rows(d: dict, n: int = 8) -> list[list[str]]:
    m = d.get("memory") or {}
    cap = m.get("capacity_bytes")
    rows = []
    ran = [p for p in (m.get("programs") or []) if _ran(p) and p["memory_space"] in ("device", "host")][:n]
    names = distinct_names([{**p, "op": p["module"]} for p in ran], "op", n_hosts(d), module=False)
    for p, name in zip(ran, names):  # only programs run in the window
        share = p["live_peak_bytes"] / cap if cap and p["memory_space"] == "device" else None
        rows.append([name, p["memory_space"], _b(p["argument_bytes"]), _b(p["output_bytes"]),
                     _b(p["alias_bytes"]), _b(p["temp_bytes"]),
                     _b(p["live_peak_bytes"]) + (" (heap sim)" if p.get("live_peak_source") == "heap simulator" else ""),
                     fmt_pct(share) if share is not None else "—"])
    return rows


def buffer_rows(d: dict, n: int = BUFFER_ROWS) -> list[list[str]]:
    """The largest buffers of the programs that ran in the window."""
    m = d.get("memory") or {}
    idle = {(p.get("module"), p.get("program_id")) for p in m.get("programs") or [] if not _ran(p)}
    progs = [p for p in m.get("programs") or [] if _ran(p)]
    label = dict(zip([(p.get("module"), p.get("program_id")) for p in progs],
                     distinct_names([{**p, "op": p["module"]} for p in progs], "op", n_hosts(d), module=False)))
    rows = []
    for b in [b for b in m.get("buffers") or [] if (b.get("module"), b.get("program_id")) not in idle][:n]:
        src = f"{str(b.get('source_file') or '').rsplit('/', 1)[-1]}:{b.get('source_line')}" if b.get("source_file") \
            else "—"
        rows.append([_b(b["size_bytes"]), f"{b['kind']} ({b['memory_space']})",
                     label.get((b.get("module"), b.get("program_id")), b["module"]), b.get("instruction") or "",
                     b.get("shape") or "", src])
    return rows


def memory_text(d: dict, buffers: int = BUFFER_ROWS, fit=None, wrap=None) -> list[str]:
    """Terminal lines of the memory view. ``fit(headers, rows, right, shrink, drop, width)`` and ``wrap(text,
    width)``: the text renderer's table and paragraph engine, laid out to the width (``tracekit memory``); without
    them, the plain aligned tables."""
    facts = memory_facts(d)
    if not facts:
        return []
    out = ["Memory (XLA's buffer assignment)"]
    if fit is None:
        out += [f"  {k}: {v}" for k, v in facts]
        out += _indented(table(PROGRAM_HEADERS, program_rows(d)))
        if buffers and (d.get("memory") or {}).get("buffers"):
            out += ["  largest buffers:"] + _indented(table(BUFFER_HEADERS, buffer_rows(d, buffers)))
        return out
    out += [wrap(f"{k}: {v}", indent=2) for k, v in facts]
    out.append(fit(PROGRAM_HEADERS, program_rows(d), right={2, 3, 4, 5, 6, 7}, shrink=(0,), drop=(1, 4, 3, 2)))
    if buffers and (d.get("memory") or {}).get("buffers"):
        out += ["", "largest buffers:", fit(BUFFER_HEADERS, buffer_rows(d, buffers), right={0}, shrink=(3, 4, 5, 2),
                                        drop=(4, 1, 2))]
    return out


def markdown(d: dict, esc, table) -> list[str]:
    """Markdown lines of the memory view (``esc``: the renderer's cell escaping, ``table``: its GFM table builder)."""
    out = []
    facts = memory_facts(d)
    if facts:
        out += ["### Memory (XLA's buffer assignment)", ""] + [f"- **{esc(k, None)}:** {esc(v, None)}"
                                                               for k, v in facts] + [""]
        out += table(PROGRAM_HEADERS, [[esc(c) for c in r] for r in program_rows(d)], right={2, 3, 4, 5, 6, 7})
        b = buffer_rows(d)
        if b:
            out += ["", "Largest buffers:", ""] + table(BUFFER_HEADERS, [[esc(c) for c in r] for r in b], right={0})
        out.append("")
    return out


def memory_html(d: dict) -> str:
    """``<section id="memory">`` (empty string when it has nothing)."""
    out = ""
    facts = memory_facts(d)
    if facts:
        out += '<section id="memory"><h2>Memory (XLA\'s buffer assignment)</h2>' + facts_html(facts)
        out += html_table(PROGRAM_HEADERS, program_rows(d), right={2, 3, 4, 5, 6, 7})
        b = buffer_rows(d)
        if b:
            out += "<p>Largest buffers</p>" + html_table(BUFFER_HEADERS, b, right={0})
        out += "</section>\n"
    return out
