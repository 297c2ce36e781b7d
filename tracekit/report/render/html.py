"""One self-contained HTML page: no network, no external scripts, styles or fonts.

The report's JSON envelope is inlined in ``<script type="application/json" id="tracekit-data">`` (every ``<``,
``>`` and ``&`` written as a ``\\u`` escape, so no string can close the block). The charts are inline SVG drawn
here, so the page reads without JavaScript; a small hand-written script adds hover tooltips, sortable tables and
a "download JSON" link. Deterministic: the bytes depend only on the report's data.

- Roofline (``<svg id="roofline-chart">``): one ``<circle class="op-point">`` per op of ``roofline.points`` at
  (arithmetic intensity in FLOP/byte, achieved FLOP/s) on log-log axes, area proportional to the op's time,
  colored by ``bound_by``, under each chip's memory roof (bandwidth x intensity) and compute roof (peak FLOP/s
  of the dtypes the ops use, and the chip's highest).
- Device time (``<svg id="device-breakdown">``): one stacked bar per device, from ``steps`` (compute, exposed
  collectives, idle inside steps, time outside steps) or else from ``devices`` (busy, idle).
- The top ops table and the findings with their fix and evidence rows.
"""
from __future__ import annotations

import html
import json
import math

from tracekit.report.render import collectives as coll_section, inference as inference_section
from tracekit.report.render import kernels, memview
from tracekit.report.render import sections
from tracekit.report.trust import legend, tag
from tracekit.report.render import timeline_html as tlh
from tracekit.units import EFF_MARKS_NOTE, fmt_eff, fmt_num, fmt_pct, fmt_time

EXTENSIONS = (".html", ".htm")
COLORS = {"compute": "#3b6fd4", "memory": "#d9480f", "network": "#2b8a3e", "host_link": "#8e44ad",
          "unknown": "#868e96"}
BAR_COLORS = {"compute": "#3b6fd4", "exposed collectives": "#e8590c", "waiting on async copies": "#8e44ad", "idle in steps": "#ced4da",
              "outside steps": "#f1f3f5", "busy": "#3b6fd4", "idle": "#ced4da"}
MAX_DEVICES = 64
EVIDENCE_ROWS = 10


def e(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _log(v: float) -> float:
    return math.log10(v)


# ----------------------------------------------------------------------------------------------------- roofline
def _roof_lines(chips: list[dict], dtypes: set[str]) -> list[dict]:
    """Per chip: the memory bandwidth and the compute roofs to draw (peaks of the ops' dtypes and the highest),
    dtypes with the same peak merged into one line."""
    out = []
    for c in chips:
        peaks, bw = c.get("peak_flops_per_s") or {}, c.get("hbm_bw_bytes_per_s")
        if not peaks or not bw:
            continue
        want = {k: v for k, v in peaks.items() if (k in dtypes or v == max(peaks.values())) and v}
        by_value: dict[float, list[str]] = {}
        for k, v in sorted(want.items()):
            by_value.setdefault(float(v), []).append(k)
        out.append({"chip": c["name"], "bw": float(bw), "roofs": sorted(by_value.items(), reverse=True)[:4]})
    return out


def roofline_svg(d: dict) -> str:
    pts = [p for p in (d.get("roofline") or {}).get("points") or []
           if (p.get("intensity_flops_per_byte") or 0) > 0 and (p.get("achieved_flops_per_s") or 0) > 0]
    roofs = _roof_lines((d.get("roofline") or {}).get("roofs") or [], {p.get("dtype") for p in pts})
    if not pts:
        return ""
    ops = {(o.get("module"), o.get("op")): o for o in d.get("top_ops") or []}
    xs = [p["intensity_flops_per_byte"] for p in pts]
    ys = [p["achieved_flops_per_s"] for p in pts]
    ridges = [v / r["bw"] for r in roofs for v, _ in r["roofs"]]
    peaks = [v for r in roofs for v, _ in r["roofs"]]
    x0, x1 = math.floor(_log(min(xs + ridges) / 3)), math.ceil(_log(max(xs + ridges) * 3))
    y0, y1 = math.floor(_log(min(ys) / 3)), math.ceil(_log(max(ys + peaks) * 2))
    W, H, L, R, T, B = 760, 460, 74, 150, 12, 52
    pw, ph = W - L - R, H - T - B

    def X(v):
        return L + (_log(v) - x0) / (x1 - x0) * pw

    def Y(v):
        return T + ph - (_log(v) - y0) / (y1 - y0) * ph

    s = [f'<svg id="roofline-chart" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
         f'aria-label="roofline chart">', f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" class="plot"/>']
    for k in range(x0, x1 + 1):
        x = X(10.0 ** k)
        s.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{T + ph}" class="grid"/>'
                 f'<text x="{x:.1f}" y="{T + ph + 16}" class="tick" text-anchor="middle">{e(fmt_num(10.0 ** k))}'
                 f'</text>')
    for k in range(y0, y1 + 1):
        y = Y(10.0 ** k)
        s.append(f'<line x1="{L}" y1="{y:.1f}" x2="{L + pw}" y2="{y:.1f}" class="grid"/>'
                 f'<text x="{L - 6}" y="{y + 4:.1f}" class="tick" text-anchor="end">{e(fmt_num(10.0 ** k))}</text>')
    s.append(f'<text x="{L + pw / 2:.1f}" y="{H - 12}" class="axis" text-anchor="middle">arithmetic intensity '
             f'(FLOP/byte)</text><text transform="translate(16 {T + ph / 2:.1f}) rotate(-90)" class="axis" '
             f'text-anchor="middle">achieved performance (FLOP/s)</text>')
    s.append(f'<clipPath id="plot-clip"><rect x="{L}" y="{T}" width="{pw}" height="{ph}"/></clipPath>')
    lo, hi = 10.0 ** x0, 10.0 ** x1
    for i, r in enumerate(roofs):
        dash = ' stroke-dasharray="6 4"' if i else ""
        top = r["roofs"][0][0]
        s.append(f'<line x1="{X(lo):.1f}" y1="{Y(r["bw"] * lo):.1f}" x2="{X(top / r["bw"]):.1f}" '
                 f'y2="{Y(top):.1f}" class="roof" clip-path="url(#plot-clip)"{dash}>'
                 f'<title>{e(r["chip"])} memory roof: {e(fmt_num(r["bw"], "B/s"))} × intensity</title></line>')
        lx = max(lo, 10.0 ** y0 / r["bw"]) * 1.6
        if lx < top / r["bw"]:
            ang = -math.degrees(math.atan2(ph / (y1 - y0), pw / (x1 - x0)))
            s.append(f'<text x="{X(lx):.1f}" y="{Y(r["bw"] * lx) - 6:.1f}" class="roof-label" transform="rotate('
                     f'{ang:.1f} {X(lx):.1f} {Y(r["bw"] * lx) - 6:.1f})">{e(fmt_num(r["bw"], "B/s"))}</text>')
        for v, names in r["roofs"]:
            label = f"{'/'.join(names)} {fmt_num(v, 'FLOP/s')}" + (f" ({r['chip']})" if len(roofs) > 1 else "")
            s.append(f'<line x1="{X(v / r["bw"]):.1f}" y1="{Y(v):.1f}" x2="{X(hi):.1f}" y2="{Y(v):.1f}" '
                     f'class="roof"{dash}><title>{e(r["chip"])} compute roof, {e(label)}</title></line>'
                     f'<text x="{X(hi) + 6:.1f}" y="{Y(v) + 4:.1f}" class="roof-label">{e(label)}</text>')
    tmax = max(p.get("total_ps") or 0 for p in pts) or 1
    for p in sorted(pts, key=lambda p: (-(p.get("total_ps") or 0), p["op"])):
        r = max(2.5, 22 * math.sqrt((p.get("total_ps") or 0) / tmax))
        o = ops.get((p.get("module"), p.get("op")), {})
        attain = [min(next((v for v, n in rf["roofs"] if p.get("dtype") in n), rf["roofs"][0][0]),
                      rf["bw"] * p["intensity_flops_per_byte"]) for rf in roofs[:1]]
        tip = (f"{p['op']} ({p.get('module')})\ntime {fmt_time(p.get('total_ps'))} · {p.get('bound_by')}-bound · "
               f"{p.get('dtype') or '?'}\nintensity {fmt_num(p['intensity_flops_per_byte'], 'FLOP/B')} · achieved "
               f"{fmt_num(p['achieved_flops_per_s'], 'FLOP/s')}"
               + (f"\n{fmt_pct(p['achieved_flops_per_s'] / attain[0])} of the roof at this intensity" if attain else "")
               + (f" · efficiency {fmt_eff(o['efficiency'])}" if o.get("efficiency") is not None else ""))
        s.append(f'<circle class="op-point" cx="{X(p["intensity_flops_per_byte"]):.1f}" '
                 f'cy="{Y(p["achieved_flops_per_s"]):.1f}" r="{r:.1f}" fill="{COLORS.get(p.get("bound_by"), "#868e96")}"'
                 f' data-tip="{e(tip)}"><title>{e(tip)}</title></circle>')
    s.append("</svg>")
    legend = "".join(f'<span><i style="background:{c}"></i>{e(k)}-bound</span>' for k, c in COLORS.items()
                     if any(p.get("bound_by") == k for p in pts))
    return "".join(s) + f'<p class="legend">{legend}<span>circle area ∝ op time</span></p>'


# -------------------------------------------------------------------------------------------------- device time
def device_parts(d: dict) -> tuple[str, list[tuple[str, dict]]]:
    """Per device, the parts of its time: from steps when there are some, else busy/idle from devices."""
    devs = {(x.get("host"), x.get("device")): x for x in d.get("devices") or []}
    steps = d.get("device_steps") or []
    out: dict = {}
    if steps:
        for r in steps:
            p = out.setdefault((r.get("host"), r.get("device")), dict.fromkeys(
                ("compute", "exposed collectives", "waiting on async copies", "idle in steps", "outside steps"), 0))
            p["compute"] += r.get("compute_ps") or 0
            p["exposed collectives"] += r.get("collective_exposed_ps") or 0
            p["waiting on async copies"] += r.get("wait_ps") or 0
            p["idle in steps"] += r.get("idle_ps") or 0
        for k, p in out.items():
            span = (devs.get(k) or {}).get("span_ps")
            p["outside steps"] = max(0, span - sum(p.values())) if span else 0
        kind = "steps"
    else:
        for k, x in devs.items():
            out[k] = {"busy": x.get("busy_ps") or 0, "idle": x.get("idle_ps") or 0}
        kind = "devices"
    multi = len({h for h, _ in out}) > 1
    return kind, [(f"{h}/{dv}" if multi else str(dv), p) for (h, dv), p in out.items()]


def device_svg(d: dict) -> str:
    kind, rows = device_parts(d)
    if not rows:
        return ""
    shown = rows[:MAX_DEVICES]
    W, L, R, bh, gap = 500, 110, 10, 18, 6
    H = 30 + len(shown) * (bh + gap)
    tmax = max(sum(p.values()) for _, p in shown) or 1
    s = [f'<svg id="device-breakdown" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
         f'aria-label="time per device">']
    for i, (name, parts) in enumerate(shown):
        y, x = 24 + i * (bh + gap), float(L)
        s.append(f'<text x="{L - 8}" y="{y + bh - 5}" class="tick" text-anchor="end">{e(name)}</text>')
        total = sum(parts.values())
        for part, v in parts.items():
            w = v / tmax * (W - L - R)
            if w <= 0:
                continue
            tip = f"{name}: {part} {fmt_time(v)} ({fmt_pct(v / total if total else None)})"
            s.append(f'<rect class="bar-seg" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{bh}" '
                     f'fill="{BAR_COLORS[part]}" data-tip="{e(tip)}"><title>{e(tip)}</title></rect>')
            x += w
    s.append(f'<text x="{L}" y="14" class="tick">longest bar: {e(fmt_time(tmax))}</text></svg>')
    names = list(shown[0][1])
    legend = "".join(f'<span><i style="background:{BAR_COLORS[k]}"></i>{e(k)}</span>' for k in names)
    more = f"<span>(first {MAX_DEVICES} of {len(rows)} devices)</span>" if len(rows) > MAX_DEVICES else ""
    src = "summed over the steps (from <code>device_steps</code>)" if kind == "steps" else "busy and idle (no steps)"
    return "".join(s) + f'<p class="legend">{legend}{more}<span>{src}</span></p>'


# ------------------------------------------------------------------------------------------------------- tables
def _cell(v, kind: str) -> str:
    if v is None or v == "":
        return '<td class="na" data-v="">—</td>'
    if kind == "text":
        return f'<td data-v="{e(v)}">{e(v)}</td>'
    text = {"time": fmt_time, "pct": fmt_pct, "eff": fmt_eff, "num": fmt_num, "bytes": lambda b: fmt_num(b, "B"),
            "int": lambda n: f"{int(n):,}", "float": lambda f: f"{float(f):.3g}"}[kind](v)
    return f'<td class="n" data-v="{e(v)}">{e(text)}</td>'


OP_COLUMNS = (("op", "op", "text"), ("module", "module", "text"), ("category", "category", "text"),
              ("n", "occurrences", "int"), ("total", "total_ps", "time"), ("mean", "mean_ps", "time"),
              ("busy share", "busy_share", "pct"), ("FLOPs", "flops", "num"), ("bytes", "bytes_accessed", "bytes"),
              ("FLOP/byte", "intensity_flops_per_byte", "num"), ("bound by", "bound_by", "text"),
              ("efficiency", "efficiency", "eff"), ("headroom", "headroom_ps", "time"),
              ("cost from", "cost_source", "text"), ("source", "source", "text"))


def ops_table(ops: list[dict], n_hosts: int = 1) -> str:
    rows = [dict(o, source=f"{o['source_file']}:{o.get('source_line')}" if o.get("source_file") else None,
                 hosts=o.get("hosts") or None) for o in ops]
    cols = [c for c in OP_COLUMNS if any(r.get(c[1]) not in (None, "") for r in rows)]
    if n_hosts > 1:  # a trace of several hosts: which hosts ran the row's program
        cols.insert(2, ("hosts", "hosts", "text"))
    head = "".join(f"<th>{e(h)}</th>" for h, _, _ in cols)
    body = "".join("<tr>" + "".join(_cell(r.get(k), kind) for _, k, kind in cols) + "</tr>" for r in rows)
    return f'<table class="sortable ops"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def evidence_table(rows: list[dict]) -> str:
    cols = list(dict.fromkeys(k for r in rows for k in r))
    if "savings_ps" in cols:
        cols = [c for c in cols if c != "savings_ps"] + ["savings_ps"]
    kinds = {c: "time" if c.endswith("_ps") and c != "start_ps" else
             "float" if all(isinstance(r.get(c), float) for r in rows if r.get(c) is not None) else "text"
             for c in cols}
    head = "".join(f"<th>{e(c[:-3] if kinds[c] == 'time' else c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(_cell(r.get(c), kinds[c]) for c in cols) + "</tr>" for r in rows)
    return f'<table class="sortable evidence"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def findings_html(findings: list[dict]) -> str:
    if not findings:
        return "<p>No rule fired.</p>"
    out = []
    for i, f in enumerate(findings, 1):
        ev = (f.get("evidence") or [])[:EVIDENCE_ROWS]
        params = ", ".join(f"{k}={v}" for k, v in sorted((f.get("params") or {}).items()))
        time, share = sections.claim(f)
        share = f" · {share} of profiled time" if f.get("share") is not None and f.get("claims_time") is not False \
            else ""
        share += tag(f.get("trust"))
        out.append(
            f'<div class="finding sev-{e(f["severity"])}"><h3><span class="badge">{e(f["severity"])}</span> '
            f'{i}. <code>{e(f["rule_id"])}</code> {e(f["name"])} <span class="save">{e(time)}'
            f'{e(share)}</span></h3><p>{e(f["message"])}</p><p class="fix"><b>Fix:</b> {e(f["fix"])}</p>'
            + (f'<p class="params">thresholds: {e(params)}</p>' if params else "")
            + (f'<details><summary>evidence: {len(ev)} of {f.get("evidence_count", len(ev))} row(s)</summary>'
               f'{evidence_table(ev)}</details>' if ev else "") + "</div>")
    return "".join(out)


def summary_html(d: dict) -> str:
    s = d["summary"]
    prof = s.get("profiled_ps") or 0
    items = []
    for c in d.get("chips") or []:
        peaks = ", ".join(f"{k} {fmt_num(v, 'FLOP/s')}" for k, v in (c.get("peak_flops_per_s") or {}).items()
                          if k in ("bf16", "f32"))
        items.append(("chip", f"{c['name']} × {len(c.get('devices') or [])}",
                      f"{peaks}; {fmt_num(c.get('hbm_bw_bytes_per_s'), 'B/s')}"
                      + (" (ESTIMATED peaks)" if c.get("estimated") else "")
                      + (f"; {len(c['peak_notes'])} peak note(s) below" if c.get("peak_notes") else "")))
    tr = s.get("trust") or {}
    items += [("profiled", fmt_time(prof) + tag(tr.get("profiled_ps")), f"device time on {s['devices']} device(s)"),
              ("busy", fmt_time(s["busy_ps"]), fmt_pct(s["busy_ps"] / prof if prof else None)),
              ("idle", fmt_time(s["idle_ps"]), fmt_pct(s["idle_ps"] / prof if prof else None)),
              ("roofline coverage", fmt_pct(s.get("roofline_coverage")),
               "of op time" if s.get("hlo_present") else "no HLO in this trace"),
              ("steps", str(s.get("steps", 0)), ", ".join(s.get("step_source") or []) or "no steps found"),
              ("findings", str(s.get("findings", 0)),
               f"claim {fmt_time(s.get('claimed_savings_ps'))}{tag(tr.get('claimed_savings_ps'))} together "
               "(union, not sum)"),
              ("above roofline floor",
               fmt_time(s.get("above_roofline_floor_ps")) + tag(tr.get("above_roofline_floor_ps")),
               "the most any fix could win" + sections.floor_note(s))]
    return '<div class="cards">' + "".join(
        f'<div class="card"><div class="k">{e(k)}</div><div class="v">{e(v)}</div><div class="sub">{e(sub)}</div>'
        f"</div>" for k, v, sub in items) + "</div>"


def custom_calls_html(cc: dict, top: int = 12) -> str:
    """Custom calls by share of op time, their cost model (or why none), and the models' assumptions."""
    targets = (cc.get("targets") or [])[:top]
    if not targets:
        return ""
    rows = "".join(f"<tr><td>{e(t['target'])}</td><td>{t['executions']}</td><td>{e(fmt_time(t['total_ps']))}</td>"
                   f"<td>{e(fmt_pct(t['share']))}</td><td>{e(t['cost_source'])}</td>"
                   f"<td>{e((t['unknown_reasons'] or t['notes'] or [''])[0])}</td></tr>" for t in targets)
    models = "".join(f"<li><b>model:{e(k)}</b>: {e(v)}</li>" for k, v in (cc.get("models") or {}).items())
    return (f'<section id="custom-calls"><h2>Custom calls by share of op time</h2><div class="scroll"><table>'
            f"<thead><tr><th>target</th><th>executions</th><th>time</th><th>share</th><th>cost from</th>"
            f"<th>note</th></tr></thead><tbody>{rows}</tbody></table></div>"
            f"{f'<ul class=params>{models}</ul>' if models else ''}</section>\n")


def inline_json(data: dict) -> str:
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    for ch, rep in (("&", "\\u0026"), ("<", "\\u003c"), (">", "\\u003e"), ("\u2028", "\\u2028"),
                    ("\u2029", "\\u2029")):
        text = text.replace(ch, rep)
    return text


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0 auto;max-width:1360px;
padding:16px 24px;color:#212529;background:#fff}h1{font-size:22px;margin:4px 0}h2{font-size:17px;
margin:26px 0 8px;border-bottom:1px solid #dee2e6;padding-bottom:4px}h3{font-size:14px;margin:0 0 4px}
code{font:12px ui-monospace,Menlo,Consolas,monospace}.inputs{color:#495057;margin:0}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #dee2e6;border-radius:6px;padding:8px 12px;
flex:1 1 0;min-width:110px}.card:first-child{flex:2 1 0;min-width:230px}
.charts{display:flex;flex-wrap:wrap;gap:0 28px}#roofline{width:760px}#devices{width:500px}
.charts svg{max-width:100%;height:auto}.card .k{color:#868e96;font-size:12px;text-transform:uppercase}.card .v{font-size:18px;
font-weight:600}.card .sub{color:#495057;font-size:12px}
.finding{border-left:4px solid #868e96;background:#f8f9fa;padding:8px 12px;margin:8px 0;border-radius:3px}
.finding p{margin:4px 0}.sev-error{border-color:#c92a2a}.sev-warning{border-color:#e8590c}
.sev-info{border-color:#1c7ed6}.badge{font-size:11px;text-transform:uppercase;color:#fff;background:#868e96;
border-radius:3px;padding:1px 5px}.sev-error .badge{background:#c92a2a}.sev-warning .badge{background:#e8590c}
.sev-info .badge{background:#1c7ed6}.save{float:right;font-weight:400;color:#495057}.params{color:#868e96;
font-size:12px}table{border-collapse:collapse;font-size:12px;margin:6px 0}th,td{border-bottom:1px solid #e9ecef;
padding:3px 7px;text-align:left;white-space:nowrap}td.n{text-align:right;font-variant-numeric:tabular-nums}
td.na{color:#adb5bd}th{background:#f1f3f5;cursor:pointer;position:sticky;top:0}table.ops td:first-child{
max-width:420px;overflow:hidden;text-overflow:ellipsis}.scroll{overflow-x:auto}
svg .plot{fill:#fcfcfd;stroke:#adb5bd}svg .grid{stroke:#e9ecef}svg .tick{font-size:11px;fill:#495057}
svg .axis{font-size:12px;fill:#212529}svg .roof{stroke:#212529;stroke-width:2;fill:none}
svg .roof-label{font-size:11px;fill:#212529}.op-point{fill-opacity:.6;stroke:#212529;stroke-width:.7}
.op-point:hover,.bar-seg:hover{stroke:#000;stroke-width:2}.legend span{margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px}
#tip{position:absolute;background:#212529;color:#fff;font-size:12px;padding:5px 8px;border-radius:4px;
white-space:pre;pointer-events:none;max-width:600px}.empty{color:#495057;background:#f8f9fa;padding:10px}
footer{color:#868e96;font-size:12px;margin:30px 0 10px}
"""

JS = """
(function(){
var data=JSON.parse(document.getElementById('tracekit-data').textContent);window.tracekitReport=data;
var tip=document.getElementById('tip');
document.querySelectorAll('[data-tip]').forEach(function(el){var t=el.querySelector('title');if(t)t.remove();});
document.addEventListener('mousemove',function(ev){var el=ev.target.closest?ev.target.closest('[data-tip]'):null;
if(!el){tip.hidden=true;return;}tip.textContent=el.getAttribute('data-tip');tip.hidden=false;
tip.style.left=(ev.pageX+14)+'px';tip.style.top=(ev.pageY+14)+'px';});
document.querySelectorAll('table.sortable').forEach(function(tb){
tb.querySelectorAll('th').forEach(function(th,i){var asc=false;th.addEventListener('click',function(){
asc=!asc;var body=tb.tBodies[0],rows=Array.prototype.slice.call(body.rows);rows.sort(function(a,b){
var x=a.cells[i].getAttribute('data-v'),y=b.cells[i].getAttribute('data-v'),nx=parseFloat(x),ny=parseFloat(y);
var c=(isNaN(nx)||isNaN(ny))?String(x).localeCompare(String(y)):nx-ny;return asc?c:-c;});
rows.forEach(function(r){body.appendChild(r);});});});});
var a=document.getElementById('download');a.addEventListener('click',function(){
a.href=URL.createObjectURL(new Blob([JSON.stringify(data,null,1)],{type:'application/json'}));});
})();
"""


def body(d: dict, *, top: int = 25) -> str:
    """The report's content (everything inside ``<body>`` but the data block and the scripts): it reads without
    JavaScript (tooltips are SVG titles)."""
    paths = ", ".join(i["path"] for i in d.get("inputs") or [])
    chart = roofline_svg(d)
    if not chart:
        why = ("this trace has no HLO (ops are kernels without FLOP or byte counts)" if not
               d["summary"].get("hlo_present") else "no op has both a FLOP count and a byte count")
        chart = f'<p class="empty">No roofline chart: {e(why)}.</p>'
    chart += tlh.unplotted_html(d)
    dev = device_svg(d) or '<p class="empty">No device time in this trace.</p>'
    timeline = tlh.timeline_svg(d) or '<p class="empty">No steps in this trace: no step timeline.</p>'
    ops = (d.get("top_ops") or [])[:top]
    warn = "".join(f'<p class="empty">warning: {e(w)}</p>' for w in d.get("warnings") or [])
    g = d.get("gate") or {}
    gate = (f"<p><b>gate</b> --fail-on {e(g['fail_on'])}: {'FAILED' if g.get('failed') else 'passed'}</p>"
            if g.get("fail_on", "never") != "never" else "")
    return (
        f"<h1>tracekit report</h1><p class=\"inputs\">{e(paths)}</p>\n"
        f"<section id=\"summary\">{summary_html(d)}{tlh.peak_sources_html(d)}{warn}{gate}</section>\n"
        f"<section id=\"findings\"><h2>Findings, by the time they would win back</h2>"
        f"{findings_html(d.get('findings') or [])}"
        f"{'<p class=params>' + e(legend()) + '</p>' if any('trust' in x for x in d.get('findings') or []) else ''}"
        f"</section>\n"
        f"{sections.overview_html(d)}{memview.memory_html(d)}{inference_section.html_section(d)}"
        f"{sections.extra_html(d)}"  # findings first, then overview, then memory
        f"<div class=\"charts\"><section id=\"roofline\"><h2>Roofline</h2>{chart}</section>\n"
        f"<section id=\"devices\"><h2>Time per device</h2>{dev}</section></div>\n"
        f"<section id=\"timeline\"><h2>Steps on each device</h2>{timeline}</section>\n"
        f"{custom_calls_html(d.get('custom_calls') or {})}"
        f"<section id=\"ops\"><h2>Top {len(ops)} ops by time</h2><div class=\"scroll\">{ops_table(ops, sections.n_hosts(d))}</div>"
        f"<p class=\"params\">efficiency = roofline time / measured time; headroom = measured - roofline time; "
        f"click a header to sort. {e(EFF_MARKS_NOTE)}</p>{kernels.html_list(d, top)}</section>\n"
        f"{coll_section.html_section(d)}")


def render(report, *, top: int = 25, **_) -> str:
    d = report.data if hasattr(report, "data") else report
    paths = ", ".join(i["path"] for i in d.get("inputs") or [])
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>tracekit report: {e(paths)}</title><style>{CSS}{tlh.CSS}</style></head><body>\n"
        + body(d, top=top) +
        f'<footer>tracekit {e(d["tool"]["version"])} · {e(d["schema"])} · <a id="download" '
        f'download="tracekit-report.json" href="#">download the report JSON</a></footer>\n'
        f'<div id="tip" hidden></div>\n'
        f'<script type="application/json" id="tracekit-data">{inline_json(d)}</script>\n'
        f"<script>{JS}{tlh.JS}</script>\n</body></html>\n")
