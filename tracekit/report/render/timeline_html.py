"""HTML pieces the report page adds around its charts: the per-device step timeline, what the roofline chart could
not plot, and where the chip's peaks come from.

- Step timeline (``<svg id="step-timeline">``): one row per device over a window of steps (the first
  :data:`MAX_STEPS` step numbers of the report's ``steps`` rows). Each step is drawn where it ran, split by the
  step breakdown into compute | exposed collectives | waiting on async copies | idle — the parts' lengths are the
  breakdown's, their order inside a step is not the order in time. Zoom and pan with the buttons or the mouse
  wheel (a small script moves the bars; without it the whole window shows).
- The roofline's missing points (``roofline.unplotted`` of the report): ops with no FLOPs (copies, host
  transfers), with an unknown cost, or beyond the chart's largest ops, each with its share of op time.
"""
from __future__ import annotations

import html

from tracekit.units import fmt_pct, fmt_time

MAX_STEPS = 32
MAX_DEVICES = 64
#: part of a step -> (breakdown column, color); colors as the per-device bars'
PARTS = (("compute", "compute_ps", "#3b6fd4"), ("exposed collectives", "collective_exposed_ps", "#e8590c"),
         ("waiting on async copies", "wait_ps", "#8e44ad"), ("idle", "idle_ps", "#ced4da"))
#: the plot area's background (used nowhere else on the page: the browser test finds the chart by it)
PLOT_BG = "#fbfcff"


def e(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _dev_key(name: str):
    kind, _, num = name.rpartition(":")
    return (kind, int(num) if num.isdigit() else -1, name)


def step_window(d: dict) -> tuple[list[tuple[str, list[dict]]], list[int]]:
    """(rows, steps): per device (label, its step rows in the window), and the step numbers shown."""
    rows = d.get("steps") or []
    nums = sorted({int(r["step"]) for r in rows if r.get("step") is not None})[:MAX_STEPS]
    keep = set(nums)
    multi = len({r.get("host") for r in rows}) > 1
    per: dict = {}
    for r in rows:
        if r.get("step") in keep and r.get("start_ps") is not None and r.get("step_ps"):
            label = f"{r.get('host')}/{r.get('device')}" if multi else str(r.get("device"))
            per.setdefault(label, []).append(r)
    return sorted(per.items(), key=lambda kv: _dev_key(kv[0])), nums


def timeline_svg(d: dict) -> str:
    rows, nums = step_window(d)
    if not rows:
        return ""
    shown = rows[:MAX_DEVICES]
    t0 = min(r["start_ps"] for _, rs in shown for r in rs)
    t1 = max(r["start_ps"] + r["step_ps"] for _, rs in shown for r in rs)
    span = max(t1 - t0, 1)
    W, L, R, T, bh, gap = 1200, 110, 12, 26, 16, 5
    pw = W - L - R
    H = T + len(shown) * (bh + gap) + 24
    s = [f'<svg id="step-timeline" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
         f'aria-label="step timeline per device" data-t0="{t0}" data-span="{span}" data-l="{L}" data-pw="{pw}">',
         f'<clipPath id="tl-clip"><rect x="{L}" y="0" width="{pw}" height="{H}"/></clipPath>',
         f'<rect x="{L}" y="{T - 4}" width="{pw}" height="{H - T - 16}" class="tl-plot" fill="{PLOT_BG}"/>',
         f'<g class="tl-ticks">{_ticks(0, span, L, pw, H)}</g><g clip-path="url(#tl-clip)">']
    labels = []
    for i, (label, rs) in enumerate(shown):
        y = T + i * (bh + gap)
        labels.append(f'<text x="{L - 8}" y="{y + bh - 4}" class="tick" text-anchor="end">{e(label)}</text>')
        for r in sorted(rs, key=lambda r: r["start_ps"]):
            a, step = r["start_ps"] - t0, r["step_ps"]
            parts = [(name, r.get(col) or 0, color) for name, col, color in PARTS]
            tip_parts = "\n".join(f"{n} {fmt_time(v)} ({fmt_pct(v / step)})" for n, v, _ in parts if v)
            tip = f"{label} step {r['step']}: {fmt_time(step)}\n{tip_parts}"
            for name, v, color in parts:
                if v <= 0:
                    continue
                b = a + v
                x, w = L + a / span * pw, max(v / span * pw, 0.0)
                s.append(f'<rect class="tl-seg" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bh}" fill="{color}" '
                         f'data-a="{a}" data-b="{b}" data-tip="{e(tip)}"><title>{e(tip)}</title></rect>')
                a = b
    s.append("</g>" + "".join(labels) + "</svg>")
    legend = "".join(f'<span><i style="background:{c}"></i>{e(n)}</span>' for n, _, c in PARTS)
    more = f"<span>(first {MAX_DEVICES} of {len(rows)} devices)</span>" if len(rows) > MAX_DEVICES else ""
    window = f"steps {nums[0]}–{nums[-1]}" if len(nums) > 1 else f"step {nums[0]}"
    total = (d.get("summary") or {}).get("steps") or len(nums)
    return (f'<div class="tl-tools"><button type="button" data-zoom="in">zoom in</button>'
            f'<button type="button" data-zoom="out">zoom out</button><button type="button" data-zoom="left">◀'
            f'</button><button type="button" data-zoom="right">▶</button><button type="button" data-zoom="reset">'
            f'all</button> <span class="params">{e(window)} ({len(nums)} of {total} step(s)); wheel to zoom'
            f'</span></div><div class="scroll">' + "".join(s) + "</div>"
            f'<p class="legend">{legend}{more}<span>each step split by its breakdown (lengths, not the order in '
            f'time)</span></p>')


def _ticks(v0: float, v1: float, L: int, pw: int, H: int) -> str:
    out = []
    for k in range(6):
        t = v0 + (v1 - v0) * k / 5
        x = L + pw * k / 5
        out.append(f'<line x1="{x:.1f}" y1="18" x2="{x:.1f}" y2="{H - 20}" class="grid"/><text x="{x:.1f}" '
                   f'y="{H - 6}" class="tick" text-anchor="middle">{e(fmt_time(t))}</text>')
    return "".join(out)


#: the timeline's zoom: moves the bars to the view [v0, v1) (ps from the window's start) and redraws the ticks
JS = """
(function(){var svg=document.getElementById('step-timeline');if(!svg)return;
var span=+svg.dataset.span,L=+svg.dataset.l,pw=+svg.dataset.pw,v0=0,v1=span,H=+svg.getAttribute('height');
var segs=Array.prototype.slice.call(svg.querySelectorAll('.tl-seg')),ticks=svg.querySelector('.tl-ticks');
function ft(ps){var a=Math.abs(ps),u=[['s',1e12],['ms',1e9],['\\u00b5s',1e6],['ns',1e3]];
for(var i=0;i<u.length;i++){if(a>=u[i][1]){var v=ps/u[i][1];return (Math.abs(v)<100?v.toPrecision(3):v.toFixed(0))+' '+u[i][0];}}
return ps.toFixed(0)+' ps';}
function draw(){var k=pw/(v1-v0);segs.forEach(function(r){var a=+r.dataset.a,b=+r.dataset.b;
r.setAttribute('x',(L+(a-v0)*k).toFixed(2));r.setAttribute('width',Math.max((b-a)*k,0).toFixed(2));});
var h='';for(var i=0;i<6;i++){var x=L+pw*i/5;h+='<line x1="'+x+'" y1="18" x2="'+x+'" y2="'+(H-20)+
'" class="grid"/><text x="'+x+'" y="'+(H-6)+'" class="tick" text-anchor="middle">'+ft(v0+(v1-v0)*i/5)+'</text>';}
ticks.innerHTML=h;}
function zoom(f,c){var w=(v1-v0)*f;c=(c===undefined)?(v0+v1)/2:c;w=Math.min(Math.max(w,span/1e6),span);
v0=Math.max(0,Math.min(c-w*(c-v0)/(v1-v0),span-w));v1=v0+w;draw();}
document.querySelectorAll('[data-zoom]').forEach(function(b){b.addEventListener('click',function(){
var z=b.dataset.zoom,w=v1-v0;if(z==='in')zoom(0.5);else if(z==='out')zoom(2);else if(z==='reset'){v0=0;v1=span;draw();}
else{var d=(z==='left'?-0.4:0.4)*w;v0=Math.max(0,Math.min(v0+d,span-w));v1=v0+w;draw();}});});
svg.addEventListener('wheel',function(ev){var box=svg.getBoundingClientRect(),x=(ev.clientX-box.left)*
svg.viewBox.baseVal.width/box.width;if(x<L)return;ev.preventDefault();zoom(ev.deltaY<0?0.8:1.25,v0+(x-L)/pw*(v1-v0));},
{passive:false});svg.setAttribute('data-ready','1');})();
"""

CSS = """.tl-tools button{font-size:12px;margin-right:4px}#step-timeline .tl-seg{stroke:#fff;stroke-width:.4}
#step-timeline .tl-seg:hover{stroke:#000;stroke-width:1.5}"""


def unplotted_html(d: dict) -> str:
    """What the roofline chart could not plot, with each reason's share of op time."""
    rows = (d.get("roofline") or {}).get("unplotted") or []
    if not rows:
        return ""
    items = "".join(f"<li>{e(fmt_pct(r.get('share')))} of op time — {r.get('ops', 0):,} op(s) {e(r['reason'])}"
                    + (f" (largest: <code>{e(r['largest'])}</code>)" if r.get("largest") else "") + "</li>"
                    for r in rows)
    total = sum(r.get("share") or 0 for r in rows)
    return (f'<div class="unplotted"><p><b>Not on the chart: {e(fmt_pct(total))} of op time.</b></p>'
            f"<ul>{items}</ul></div>")


def peak_sources_html(d: dict) -> str:
    """Each chip's numbers and where they come from (trace stat, chip table, calibration, estimate)."""
    out = []
    for c in d.get("chips") or []:
        src = c.get("sources") or {}
        items = "".join(f"<li><code>{e(k)}</code>: {e(v)}</li>" for k, v in sorted(src.items()))
        notes = c.get("peak_notes") or []  # a peak the trace contradicts or raised: open, never hidden
        items = "".join(f"<li><b>peak</b> {e(n)}</li>" for n in notes) + items
        est = " — ESTIMATED (run <code>tracekit calibrate</code> or pass <code>--chip</code>)" if c.get("estimated") \
            else ""
        out.append(f"<details{' open' if notes else ''}><summary>{e(c.get('name'))}: where the peaks come from{est}"
                   f"</summary><ul>{items}</ul></details>")
    return "".join(out)
