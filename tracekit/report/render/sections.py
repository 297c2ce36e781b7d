"""The overview and memory sections, once for every format: the facts as plain text (every number with its unit
and where it came from), then laid out as terminal lines, Markdown or HTML by the functions at the bottom.
Reads only the report's data (``overview`` and ``memory`` of the envelope, docs/report-format.md)."""
from __future__ import annotations

import html
import re

from tracekit.report.render.parallelism import mfu_hfu
from tracekit.report.trust import CLASSES, tag
from tracekit.units import fmt_num, fmt_pct, fmt_time

BUCKET_LABELS = (("compute_bound_ps", "compute-bound compute"), ("memory_bound_ps", "memory-bound compute"),
                 ("compute_other_ps", "compute, roofline unknown"), ("collective_exposed_ps", "exposed collectives"),
                 ("offload_wait_ps", "waiting on host-offload copies"), ("async_wait_ps", "waiting on async copies"),
                 ("host_idle_ps", "idle between steps (no program running: host or input)"),
                 ("launch_idle_ps", "launch gaps between host-launched ops"), ("other_idle_ps", "other idle"))


def _b(x) -> str:
    return fmt_num(x, "B")


# ------------------------------------------------------------------------------------------------ host labels
def n_hosts(d: dict) -> int:
    """How many hosts the report covers."""
    return int((d.get("summary") or {}).get("hosts") or len({i.get("host") for i in d.get("inputs") or []}) or 1)


def device_name(r: dict, multi: bool) -> str:
    """A row's device, as ``host/device`` when the report covers several hosts (CPU:0 of two hosts is two
    devices)."""
    return f"{r.get('host')}/{r.get('device')}" if multi and r.get("host") is not None else str(r.get("device"))


def distinct_names(rows: list[dict], name: str, n: int, module: bool = True) -> list[str]:
    """Names of rows (``rows[i][name]``) that tell them apart: the name alone; ``module:name`` where it is in
    several modules (custom-call.1 of two programs); `` [hosts]`` after it where same-named programs of
    different hosts share it (a CPU program numbered by each process); `` [#program id]`` as the last resort."""
    from tracekit.analysis.hostcheck import hosts_label
    by: dict = {}
    for r in rows:
        by.setdefault(str(r.get(name)), []).append(r)
    out = []
    for r in rows:
        same, label = by[str(r.get(name))], str(r.get(name))
        if len(same) > 1 and module and len({x.get("module") for x in same}) > 1:
            label = f"{r.get('module')}:{label}"
        twins = {x.get("program_id"): x for x in same if not module or x.get("module") == r.get("module")}
        if len(twins) > 1:  # the same name in several programs
            hl = [hosts_label(x.get("hosts"), n) for x in twins.values()]
            mine = hosts_label(r.get("hosts"), n)
            label += f" [{mine}]" if mine and hl.count(mine) == 1 else f" [#{r.get('program_id')}]"
        out.append(label)
    return out


def fmt_util(x) -> str:
    """A utilization, flagged when above 100% (a peak or a count is off: never shown as if it were fine)."""
    if x is None:
        return "—"
    if 0 < x < 0.001:
        return f"{100 * x:.2g}%"
    return fmt_pct(x) + (" (above the peak: the peak or the byte/FLOP count is off)" if x > 1.0 else "")


#: how each step source reads in the headline
STEP_SOURCES = {"module_execution": "device runs of the step program, start to start",
                "steps_line": "the device's Steps line", "step_annotation": "host step annotations"}


def _over(st: dict) -> str:
    """How many steps the step-time figures are over: each device's last run has no next start (no step time)."""
    n, timed = st["steps"], st.get("timed_steps")
    if timed is None or timed == n:
        return f"over {n} step(s)"
    return f"over {timed} step time(s) of {n} step(s) (the last run has no next start)"


def overview_facts(d: dict) -> list[tuple[str, str]]:
    """(label, text) lines of the utilization headline; empty without steps."""
    ov = d.get("overview") or {}
    st = ov.get("step_time") or {}
    if not st.get("steps"):
        return []
    src = ", ".join(STEP_SOURCES.get(x.strip(), x.strip()) for x in (st.get("source") or "?").split(","))
    slow = f"the slowest device, {st['device']}" if st.get("device") else "the slowest device"
    out = [("step time", f"mean {fmt_time(st['mean_ps'])}, p50 {fmt_time(st['p50_ps'])}, p90 "
                         f"{fmt_time(st['p90_ps'])} {_over(st)} ({src}; {slow})" + tag(st.get("trust")))]
    f = ov.get("flops") or {}
    if f and f.get("per_step") is None:
        out.append((f["label"], "unknown: no compute op in the steps has a FLOP count (the trace has no HLO, or none "
                                "of its compute ops is priced); pass --model-flops-per-step N for MFU"
                                + tag(f.get("trust"))))
    elif f:
        src = f.get("source") or ""
        src = ("the trace's model_flops" if src.startswith("trace") else "6·N·tokens of the shapes the parallelism "
               "section recovers (--model transformer)" if src.startswith("--model transformer")
               else "given by --model-flops-per-step" if src.startswith("--") else "HLO cost model, recomputation "
               "included")
        out.append((f["label"],
                    f"{fmt_util(f.get('utilization'))}: {fmt_num(f.get('per_step'), 'FLOP')} per step "
                    f"({src}{_partial(f) if f.get('kind') == 'hardware' else ''}) on "
                    f"{fmt_num(f.get('peak_flops_per_s'), 'FLOP/s')} {f.get('dtype')} peak "
                    f"({peak_origin(f.get('peak_source'))}){tag(f.get('trust'))}"))
    if f.get("formula") and f.get("per_step") is not None and f.get("mfu") is None:  # (HFU: the line above)
        out.append(("MFU", "unknown: no model FLOP count (--model-flops-per-step N, or --model transformer for "
                           "6·N·tokens of the recovered shapes)"))
    elif f.get("formula") and f.get("per_step") is not None:
        out.append(("MFU and HFU", mfu_hfu(f) + tag(f.get("trust"))))
    bw = ov.get("bandwidth") or {}
    parts, classes = [], []
    cpu = bool(d.get("chips")) and all(c.get("family") == "cpu" for c in d["chips"])  # (a CPU's memory is DRAM)
    names = (("hbm", "memory" if cpu else "HBM"), ("interconnect", "interconnect"), ("host_link", "host link"))
    for key, name in names:
        b = bw.get(key) or {}
        if b.get("bytes_per_step"):
            parts.append(f"{name} {fmt_num(b.get('achieved_bytes_per_s'), 'B/s')} of "
                         f"{fmt_num(b.get('peak_bytes_per_s'), 'B/s')} ({fmt_util(b.get('utilization'))}"
                         f"{_partial(b, 'bytes')})")
            classes.append(b.get("trust"))
    if parts:
        out.append(("bandwidth", "; ".join(parts) + " (bytes from the cost model per step / step time)"
                    + tag(_weakest(classes))))
    r = ov.get("roofline") or {}
    if r.get("possible_step_ps"):
        ratio = r.get("ratio") or 0
        odd = (" — faster than the roofline allows, so a peak is too low (an estimate? run `tracekit calibrate` "
               "or pass --chip)") if 0 < ratio < 1 else ""
        out.append(("roofline", f"{fmt_time(r['possible_step_ps'])} per step is possible ({r.get('bound_by')} at its "
                                f"roofline, the rest hidden{_partial(r, 'a roofline', measured=True)}): the steps "
                                f"take {_times(ratio)} that{odd}; {(f.get('label') or 'utilization')} would be "
                                f"{fmt_util(r.get('utilization_at_possible'))}{tag(r.get('trust'))}"))
    elif r.get("known_share") == 0:
        out.append(("roofline", "unknown: no compute op in the steps has a roofline (the trace has no HLO, or none of "
                                "its compute ops is priced)"))
    return out


#: a peak source's kind (the text before its first ':') -> where the peak came from, as the overview says it
PEAK_ORIGINS = {"trace": "the trace's own peak stat", "table": "the chip table", "calibration": "a calibration",
                "estimate": "an estimate", "raised": "raised to a rate this trace demonstrates",
                "ceiling": "the physical ceiling", "given": "given by the user"}


def peak_origin(source: str | None) -> str:
    """Where a peak came from, in words: 'peak from the chip table', 'peak raised to a rate this trace demonstrates'
    (several sources joined with '; ' each named once); 'peak source unknown' without one."""
    kinds = []
    for part in str(source or "").split("; "):
        m = re.search(r"(?:^|\(|: )(" + "|".join(PEAK_ORIGINS) + r")\b", part.strip().lower())
        if m and PEAK_ORIGINS[m.group(1)] not in kinds:
            kinds.append(PEAK_ORIGINS[m.group(1)])
    if not kinds:
        return "peak source unknown"
    return "peak " + " and ".join(k if k.startswith("raised") else f"from {k}" for k in kinds)


def _weakest(classes: list) -> str | None:
    known = [c for c in classes if c in CLASSES]
    return max(known, key=CLASSES.index) if known else None


def claim(f: dict) -> tuple[str, str]:
    """(the time a finding claims, its share of profiled time) as the reports show them: '~63.4 ms', '50.0%';
    a finding whose rule claims no time (memory, utilization context) says so instead of '~0 ps'; a share under
    0.05% keeps two significant digits (never a claim shown as '0.0%')."""
    if f.get("claims_time") is False:
        return "no time claimed", "—"
    x = f.get("share")
    share = f"{100 * x:.2g}%" if isinstance(x, (int, float)) and 0 < x < 0.0005 else fmt_pct(x)
    return f"~{fmt_time(f.get('savings_ps'))}", share


def steps_phrase(s: dict) -> str:
    """'5 step(s): device runs of the step program, ...', or 'no steps found' (never '0 step(s) from none')."""
    if not s.get("steps"):
        return "no steps found (no step annotation, steps line or repeated program run)"
    srcs = ", ".join(STEP_SOURCES.get(x, x) for x in s.get("step_source") or []) or "an unnamed source"
    return f"{s['steps']} step(s): {srcs}"


#: below this share of compute time with a known count, the headline says how much it covers (the op-time line
#: says it to the tenth of a percent)
_FULL = 0.98


def floor_note(summary: dict) -> str:
    """What the roofline floor stands on when part of the op time has no roofline: those ops count at their
    measured time (a trace without HLO: the floor is only the idle time); '' when nearly all op time has one."""
    cov = summary.get("roofline_coverage")
    if cov is None or cov >= _FULL:
        return ""
    return f"; ops without a roofline ({fmt_pct(1 - cov)} of op time) count at their measured time"


def _times(x: float) -> str:
    """A ratio as '1.4x', '13x', '795x' (never '8e+02x')."""
    return f"{x:,.0f}x" if x >= 100 else f"{x:.2g}x"


def _partial(d: dict, what: str = "FLOPs", measured: bool = False) -> str:
    """'; FLOPs known for 63% of compute time: a lower bound' when a count covers only part of the compute ops'
    time (``known_share``), else ''."""
    k = d.get("known_share")
    if k is None or k >= _FULL:
        return ""
    rest = "the rest at its measured time" if measured else "a lower bound"
    return f"; {what} known for {fmt_pct(k)} of compute time: {rest}"


_LEVEL = "  of which exposed collectives over "


def breakdown_rows(d: dict) -> list[tuple[str, int, float]]:
    """(label, ps, share of step time) of the step breakdown over every step and device, largest first; the
    exposed collectives' split by interconnect level follows their row (labels starting ``"  of which"``)."""
    bd = (d.get("overview") or {}).get("breakdown") or {}
    tot = bd.get("step_ps") or 0
    if not tot:
        return []
    rows = sorted([(label, int(bd.get(k) or 0), (bd.get(k) or 0) / tot) for k, label in BUCKET_LABELS if bd.get(k)],
                  key=lambda r: -r[1])
    levels = sorted([(f"{_LEVEL}{lv}", int(v), v / tot) for lv, v in (bd.get("collective_levels") or {}).items()
                     if v], key=lambda r: -r[1])
    at = next((i + 1 for i, r in enumerate(rows) if r[0] == "exposed collectives"), len(rows))
    return rows[:at] + levels + rows[at:]


def breakdown_line(rows: list[tuple[str, int, float]]) -> str:
    """The breakdown rows as one line: 'exposed collectives 89.5% (over ici 60.1%, dcn 29.4%), other idle 10.5%'."""
    parts: list[str] = []
    for label, _, share in rows:
        if label.startswith(_LEVEL) and parts:
            lv = f"{label[len(_LEVEL):]} {fmt_pct(share)}"
            parts[-1] = parts[-1][:-1] + f", {lv})" if parts[-1].endswith(")") else parts[-1] + f" (over {lv})"
        else:
            parts.append(f"{label} {fmt_pct(share)}")
    return ", ".join(parts)


# ----------------------------------------------------------------------------------------------------- layouts
def _indented(lines: list[str]) -> list[str]:
    return ["  " + ln for ln in lines]


def text(d: dict) -> list[str]:
    """Terminal lines of the overview (empty when the trace has no steps)."""
    out = []
    facts = overview_facts(d)
    if facts:
        out += ["Overview"] + [f"  {k}: {v}" for k, v in facts]
        rows = breakdown_rows(d)
        if rows:
            out.append("  step breakdown (all steps and devices): " + breakdown_line(rows))
    return out


def markdown(d: dict, esc, table) -> list[str]:
    """Markdown lines (``esc``: the renderer's cell escaping, ``table``: its GFM table builder)."""
    out = []
    facts = overview_facts(d)
    if facts:
        out += ["### Overview", ""] + [f"- **{esc(k, None)}:** {esc(v, None)}" for k, v in facts] + [""]
        rows = breakdown_rows(d)
        if rows:
            out += table(["step time goes to", "time (all steps, devices)", "share"],
                         [[esc(lab, None), fmt_time(ps), fmt_pct(sh)] for lab, ps, sh in rows], right={1, 2}) + [""]
    return out


def html_table(headers, rows, right=frozenset()) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in right else ""}>{e(c)}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def facts_html(facts: list[tuple[str, str]]) -> str:
    """``<ul class="facts">`` of (label, text) lines, escaped."""
    e = html.escape
    return '<ul class="facts">' + "".join(f"<li><b>{e(k)}:</b> {e(v)}</li>" for k, v in facts) + "</ul>"


def overview_html(d: dict) -> str:
    """``<section id="overview">`` (empty string when it has nothing)."""
    out = ""
    facts = overview_facts(d)
    if facts:
        out += '<section id="overview"><h2>Overview</h2>' + facts_html(facts)
        rows = breakdown_rows(d)
        if rows:
            out += html_table(["step time goes to", "time (all steps, devices)", "share"],
                               [[lab, fmt_time(ps), fmt_pct(sh)] for lab, ps, sh in rows], right={1, 2})
        out += "</section>\n"
    return out


def _extra(d: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """(title, facts) of each registered section that shows itself (``TITLE`` and ``facts(data)``,
    :func:`tracekit.report.engine.rendered`) and has something to say in ``d``."""
    from tracekit.report import engine
    out = []
    for m in engine.rendered():
        facts = m.facts(d)
        if facts:
            out.append((m.TITLE, facts))
    return out


def extra_text(d: dict) -> list[str]:
    """Terminal lines of the registered sections' facts (see :func:`_extra`)."""
    return [x for title, facts in _extra(d) for x in [title, *(f"  {k}: {v}" for k, v in facts)]]


def extra_markdown(d: dict, esc) -> list[str]:
    """Markdown of the registered sections' facts (see :func:`_extra`): a fact is a paragraph, never cut (``esc``'s
    cut is for table cells)."""
    return [x for title, facts in _extra(d)
            for x in [f"### {esc(title)}", "", *(f"- **{esc(k)}:** {esc(v, None)}" for k, v in facts), ""]]


def extra_html(d: dict) -> str:
    """``<section>`` per registered section with facts (see :func:`_extra`)."""
    e = html.escape
    return "".join(f'<section class="extra"><h2>{e(title)}</h2>' + facts_html(facts) + "</section>\n"
                   for title, facts in _extra(d))
