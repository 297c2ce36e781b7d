"""Markdown for pull-request comments (GitHub-flavoured): a headline summary, the findings by savings, the top ops
with their roofline columns (units in the headers), and a collapsible ``<details>`` per finding with its fix and
evidence. Deterministic: the output depends only on the report's data.

Every piece of trace text (op and kernel names hold ``<``, ``&``, ``|``, ``*``) is escaped for both Markdown
and the HTML that GitHub lets through."""
from __future__ import annotations

import html

from tracekit.report.render import collectives as coll_section
from tracekit.report.render import inference as inference_section
from tracekit.report.render import kernels, memview
from tracekit.report.render import sections
from tracekit.report.trust import legend, tag
from tracekit.units import EFF_MARKS_NOTE, eff_mark, fmt_num, fmt_pct, fmt_time

EXTENSIONS = (".md", ".markdown")
MAX_CELL = 70
EVIDENCE_ROWS = 10
_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|~"})
_TIME_UNITS = (("s", 1e12), ("ms", 1e9), ("µs", 1e6), ("ns", 1e3), ("ps", 1.0))
_SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))
OPS_NOTE = ("Efficiency is roofline time / measured time (100% = at the roofline); headroom is the time a perfect "
            "op would save; intensity is FLOPs per byte accessed.")
_SEVERITY_MARK = {"error": "🔴 error", "warning": "🟠 warning", "info": "🔵 info"}


def esc(text, limit: int | None = MAX_CELL) -> str:
    """Trace text made safe for a Markdown table cell: HTML-escaped, Markdown specials backslash-escaped,
    newlines folded, cut to ``limit`` characters."""
    s = " ".join(str(text).split())
    if limit and len(s) > limit:
        s = s[: limit - 1] + "…"
    return html.escape(s, quote=False).translate(_MD_SPECIAL)


def code(text, in_table: bool = True) -> str:
    """A code span (shown verbatim: no entity or backslash escapes apply inside it; in a table a ``|`` still
    needs its backslash)."""
    s = " ".join(str(text).split())
    tick = "``" if "`" in s else "`"
    s = s.replace("|", "\\|") if in_table else s
    return f"{tick} {s} {tick}" if tick == "``" else f"`{s}`"


def table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """A GFM table; ``right`` holds the indices of right-aligned (numeric) columns. Cells must be escaped."""
    align = ["---:" if i in right else "---" for i in range(len(headers))]
    return ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"] + \
        ["| " + " | ".join(r) + " |" for r in rows]


def column_unit(values, units=_SI) -> tuple[str, float]:
    """One prefix for a whole column, chosen from its largest value: (prefix, divisor)."""
    vals = [abs(float(v)) for v in values if isinstance(v, (int, float)) and v]
    top = max(vals, default=0.0)
    for name, div in units:
        if top >= div:
            return name, div
    return units[-1]


def _scaled(v, div: float) -> str:
    if v is None:
        return "—"
    x = float(v) / div
    if x and abs(x) < 0.0005:
        return "<0.001"
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def headline(d: dict) -> list[str]:
    s = d["summary"]
    lines = []
    for c in d.get("chips") or []:
        src = "; ".join((c.get("sources") or {}).get(f"peak_flops_per_s.{k}", "") for k in ("bf16", "f32"))
        peaks = ", ".join(f"{k} {fmt_num(v, 'FLOP/s')}" for k, v in (c.get("peak_flops_per_s") or {}).items()
                          if k in ("bf16", "f32"))
        est = " — **estimated peaks** (run `tracekit calibrate`)" if c.get("estimated") else ""
        lines.append(f"- **Chip:** {esc(c['name'], None)} × {len(c.get('devices') or [])}; {peaks}; memory "
                     f"{fmt_num(c.get('hbm_bw_bytes_per_s'), 'B/s')} ({esc(sections.peak_origin(src), None)}){tag(c.get('trust'))}"
                     f"{est}")
        lines += [f"  - peak {esc(note, None)}" for note in c.get("peak_notes") or []]
    prof = s.get("profiled_ps") or 0
    tr = s.get("trust") or {}
    lines.append(f"- **Profiled:** {fmt_time(prof)}{tag(tr.get('profiled_ps'))} of device time on {s['devices']} device(s); **busy** "
                 f"{fmt_time(s['busy_ps'])} ({fmt_pct(s['busy_ps'] / prof if prof else None)}), **idle** "
                 f"{fmt_time(s['idle_ps'])} ({fmt_pct(s['idle_ps'] / prof if prof else None)})")
    steps = esc(sections.steps_phrase(s), None)
    lines.append(f"- **Steps:** {steps}")
    by = s.get("time_by_bound_ps") or {}
    tot = sum(by.values()) or 1
    bound = ", ".join(f"{esc(k, None)} {fmt_pct(v / tot)}" for k, v in sorted(by.items(), key=lambda kv: (-kv[1], kv[0])))
    lines.append(f"- **Roofline coverage:** {fmt_pct(s.get('roofline_coverage'))} of op time"
                 + (f" (time by bound: {bound})" if bound else "")
                 + ("" if s.get("hlo_present") else " — no HLO in this trace: ops are kernels, with no roofline"))
    if s.get("findings"):
        lines.append(f"- **Findings:** {s['findings']}, together claiming {fmt_time(s.get('claimed_savings_ps'))}"
                     f"{tag(tr.get('claimed_savings_ps'))} "
                     f"({fmt_pct(s['claimed_savings_ps'] / prof if prof else None)} of profiled time; the union of "
                     "their overlapping estimates, not their sum)")
    if s.get("above_roofline_floor_ps") is not None:
        lines.append(f"- **Above the roofline floor:** {fmt_time(s['above_roofline_floor_ps'])}"
                     f"{tag(tr.get('above_roofline_floor_ps'))} (profiled time minus "
                     f"every op at its roofline: the most any fix could win{sections.floor_note(s)})")
    return lines


def findings_table(findings: list[dict]) -> list[str]:
    rows = [[str(i), _SEVERITY_MARK.get(f["severity"], esc(f["severity"])), f"{code(f['rule_id'])} "
             f"{esc(f['name'], None)}", *sections.claim(f), f.get("trust") or "—",
             esc(f["message"], 400)] for i, f in enumerate(findings, 1)]
    return table(["#", "severity", "rule", "savings", "of profiled", "trust", "message"], rows, right={0, 3, 4})


def evidence_table(rows: list[dict]) -> list[str]:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    if "savings_ps" in cols:  # the estimate last
        cols = [c for c in cols if c != "savings_ps"] + ["savings_ps"]
    heads = [esc(c[:-3] if c.endswith("_ps") and c != "start_ps" else c.replace("_ps", " (ps)"), None)
             for c in cols]
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = r.get(c)
            if v is None:
                cells.append("—")
            elif c.endswith("_ps") and c != "start_ps" and isinstance(v, (int, float)):
                cells.append(fmt_time(v))
            elif isinstance(v, float):
                cells.append(f"{v:.3g}")
            else:
                cells.append(esc(v))
        body.append(cells)
    right = {i for i, c in enumerate(cols) if all(isinstance(r.get(c), (int, float)) for r in rows if r.get(c)
                                                  is not None) and c not in ("step",)}
    return table(heads, body, right)


def finding_details(i: int, f: dict) -> list[str]:
    ev = f.get("evidence") or []
    n = f.get("evidence_count", len(ev))
    shown = ev[:EVIDENCE_ROWS]
    out = ["<details>", f"<summary>{i}. {html.escape(f['rule_id'])} {html.escape(f['name'])}: fix and evidence "
           f"({len(shown)} of {n} row(s))</summary>", "", f"**Fix:** {esc(f['fix'], None)}", ""]
    params = f.get("params") or {}
    if params:
        out += ["Thresholds: " + ", ".join(code(f"{k}={v}", False) for k, v in sorted(params.items())),
                ""]
    if shown:
        out += evidence_table(shown) + [""]
    return out + ["</details>", ""]


TOP_OP_COLUMNS = (  # header, key, kind (time | si | pct | text | int | float)
    ("op", "op", "text"), ("module", "module", "text"), ("hosts", "hosts", "hosts"), ("category", "category", "text"),
    ("n", "occurrences", "int"), ("total", "total_ps", "time"), ("mean", "mean_ps", "time"),
    ("busy share", "busy_share", "pct"), ("FLOPs", "flops", "si:FLOP"), ("bytes", "bytes_accessed", "si:B"),
    ("intensity (FLOP/B)", "intensity_flops_per_byte", "float"), ("bound by", "bound_by", "text"),
    ("efficiency", "efficiency", "eff"), ("headroom", "headroom_ps", "time"), ("cost from", "cost_source", "text"),
    ("source", "source_file", "source"))


def top_ops_table(ops: list[dict], n_hosts: int = 1) -> list[str]:
    heads, cols, right = [], [], set()
    for j, (head, key, kind) in enumerate(TOP_OP_COLUMNS):
        vals = [r.get(key) for r in ops]
        if (kind == "source" and not any(vals)) or all(v is None for v in vals) or (kind == "hosts" and n_hosts < 2):
            continue
        if kind == "time":
            unit, div = column_unit(vals, _TIME_UNITS)
            head = f"{head} ({unit})"
        elif kind.startswith("si:"):
            prefix, div = column_unit(vals)
            head = f"{head} ({prefix}{kind[3:]})"
        elif kind in ("pct", "eff"):
            div, head = 0.01, f"{head} (%)"
        else:
            div = 1.0
        if kind not in ("text", "source", "hosts"):
            right.add(len(heads))
        heads.append(head)
        cols.append((key, kind, div))
    rows = []
    for r in ops:
        cells = []
        for key, kind, div in cols:
            v = r.get(key)
            if kind == "text":
                cells.append(esc(v) if v not in (None, "") else "—")
            elif kind == "hosts":
                cells.append(esc(v) if v else "—")
            elif kind == "source":
                cells.append(esc(f"{_basename(v)}:{r.get('source_line')}") if v else "—")
            elif kind == "int":
                cells.append("—" if v is None else f"{int(v):,}")
            elif kind == "float":
                cells.append("—" if v is None else fmt_num(v))
            elif kind == "eff":
                mark = eff_mark(v).strip()
                cells.append(_scaled(v, div) + (f" {esc(mark)}" if mark else ""))
            else:
                cells.append(_scaled(v, div))
        rows.append(cells)
    return table(heads, rows, right)


def custom_calls_section(cc: dict, top: int = 12) -> list[str]:
    """Custom calls by share of op time with the cost model of each (or why none priced it), then the models'
    assumptions."""
    targets = (cc.get("targets") or [])[:top]
    if not targets:
        return []
    op_time = cc.get("op_time_ps") or 0
    rows = [[code(t["target"]), str(t["executions"]), fmt_time(t["total_ps"]), fmt_pct(t["share"]),
             code(t["cost_source"]), esc((t["unknown_reasons"] or t["notes"] or [""])[0], 120)] for t in targets]
    out = [f"### Custom calls: {fmt_pct(cc['custom_call_ps'] / op_time if op_time else None)} of op time, "
           f"{fmt_pct(cc['unknown_ps'] / op_time if op_time else None)} without a cost model", "",
           *table(["target", "executions", "time", "share of op time", "cost from", "note"], rows, {1, 2, 3}), ""]
    for name, why in (cc.get("models") or {}).items():
        out.append(f"- {code('model:' + name, False)}: {esc(why, None)}")
    return out + [""] if cc.get("models") else out


def _basename(path: str) -> str:
    return str(path).replace("\\", "/").rsplit("/", 1)[-1]


def render(report, *, top: int = 12, **_) -> str:
    d = report.data if hasattr(report, "data") else report
    inputs = ", ".join(code(i["path"], False) for i in d.get("inputs") or [])
    out = [f"## tracekit report: {inputs}", "", *sections.markdown(d, esc, table), *memview.markdown(d, esc, table),
           *inference_section.markdown(d, esc, table),
           *sections.extra_markdown(d, esc), *headline(d), ""]
    f = d.get("findings") or []
    if f:
        out += [f"### Findings ({len(f)}), by the time they would win back", "", *findings_table(f), ""]
        if any("trust" in x for x in f):
            out += [esc(legend(), None), ""]
        for i, x in enumerate(f, 1):
            out += finding_details(i, x)
    else:
        out += ["### Findings", "", "No rule fired.", ""]
    ops = (d.get("top_ops") or [])[:top]
    if ops:
        out += [f"### Top {len(ops)} ops by time (of {d['summary']['op_executions']:,} executions)", "",
                OPS_NOTE, "", *top_ops_table(ops, sections.n_hosts(d)), ""]
        if any(eff_mark(o.get("efficiency")) for o in ops):
            out += [esc(EFF_MARKS_NOTE, None), ""]
        measured = kernels.lines(d, top)  # the trace's own counters and pipeline stages, beside the roofline
        if measured:
            out += [f"**{kernels.TITLE}**", "", *[f"- {code(op, False)}: {esc(text, None)}" for op, text in measured], ""]
    out += custom_calls_section(d.get("custom_calls") or {})
    out += coll_section.markdown_lines(d, esc, table)
    for w in d.get("warnings") or []:
        out.append(f"> **warning:** {esc(w, None)}")
    g = d.get("gate") or {}
    if g.get("fail_on", "never") != "never":
        out += ["", f"**Gate** {code('--fail-on ' + g['fail_on'], False)}: {'❌ failed' if g['failed'] else '✅ passed'}"]
    out += ["", f"<sub>tracekit {esc(d['tool']['version'], None)} · report schema {esc(d['schema'], None)} · "
            "times summed over devices</sub>"]
    return "\n".join(out).rstrip("\n") + "\n"
