"""The inference section, once for every format: per serving program its facts as plain text (every number with
its unit, where it came from and its trust class), then laid out as terminal lines, Markdown or HTML.
Reads only the report's ``inference`` section (docs/report-format.md)."""
from __future__ import annotations

import html

from tracekit.report.trust import tag
from tracekit.units import fmt_num, fmt_pct, fmt_time, table

TITLE = "Inference (prefill and decode steps)"
HEADERS = ["program", "kind", "steps", "step p50", "step p90", "tokens/step", "tokens/s per chip", "roofline share"]
RIGHT = {2, 3, 4, 5, 6, 7}


def _n(x, unit: str = "") -> str:
    return fmt_num(x, unit)


def _count(x) -> str:
    return "—" if x is None else f"{x:,.0f}"


def _small_pct(x) -> str:
    """A share of memory: two significant digits below 0.1 % (never a share shown as '0.0%')."""
    if x is None:
        return "—"
    return f"{100 * x:.2g}%" if 0 < x < 0.001 else fmt_pct(x)


def _share(x) -> str:
    """A share of a roofline, flagged above 100 % (a bandwidth, peak or byte count is off: never shown as fine)."""
    if x is None:
        return "—"
    return fmt_pct(x) + (" (above the roofline: a bandwidth, peak or byte count is off)" if x > 1.0 else "")


def _t(p: dict, key: str) -> str:
    return tag((p.get("trust") or {}).get(key))


def workload_line(d: dict) -> str:
    inf = d.get("inference") or {}
    progs = inf.get("programs") or []
    src = "given by --workload" if inf.get("workload_source") == "given" else "from the trace"
    if inf.get("workload") != "serving":
        why = "no program is classed as serving" if inf.get("workload_source") == "given" else \
            "no program writes a KV cache in place, so none is a prefill or decode step"
        return f"workload: {inf.get('workload') or 'training'} ({src}): {why}"
    kinds = ", ".join(f"{p['kind']} {p['module']}" for p in progs)
    return f"workload: serving ({src}): {kinds or 'no serving program ran in the window'}"


def program_facts(p: dict) -> list[tuple[str, str]]:
    """(label, text) lines of one serving program."""
    out = []
    seqs = f" ({_count(p.get('sequences'))} sequence(s) x {_count(p.get('tokens_per_sequence'))})" \
        if p.get("sequences") is not None and p.get("tokens_per_sequence") is not None else ""
    out.append(("steps", f"{p['steps']} step(s) on {p.get('devices')} device(s), p50 "
                         f"{fmt_time(p.get('step_p50_ps'))}, p90 {fmt_time(p.get('step_p90_ps'))} (a run to the "
                         f"device's next serving run; the run itself p50 {fmt_time(p.get('run_p50_ps'))})"
                         f"{_t(p, 'step_p50_ps')}"))
    if p.get("tokens_per_step") is not None:
        out.append(("tokens", f"{_count(p['tokens_per_step'])} per step{seqs}{_t(p, 'tokens_per_step')}: "
                              f"{_count(p.get('tokens_per_s_per_chip'))} tokens/s per chip, "
                              f"{_count(p.get('tokens_per_s_per_host'))} per host{_t(p, 'tokens_per_s_per_chip')}"))
    else:
        out.append(("tokens", "unknown per step (no HLO: the shapes are not in the trace), so tokens/s unknown"))
    bw = p.get("hbm_bw_bytes_per_s")
    if p.get("kind") != "prefill" and p.get("decode_bound_ps") is not None:
        read = "unknown KV read, so weights only" if p.get("kv_bytes_read") is None else \
            f"{_n(p['kv_bytes_read'], 'B')} of KV read"
        out.append(("decode bound", f"({_n(p.get('param_bytes'), 'B')} of parameters + {read}) / "
                                    f"{_n(bw, 'B/s')} = {fmt_time(p['decode_bound_ps'])}: the step runs at "
                                    f"{_share(p.get('bound_share'))} of its memory roofline (its run alone "
                                    f"{_share(p.get('run_bound_share'))}){_t(p, 'bound_share')}"))
    if p.get("kind") == "prefill" and p.get("compute_bound_ps") is not None:
        out.append(("compute bound", f"{_n(p.get('flops_per_step'), 'FLOP')} per step at the chip's "
                                     f"{_n(p.get('peak_flops_per_s'), 'FLOP/s')} peak = "
                                     f"{fmt_time(p['compute_bound_ps'])}: the step runs at "
                                     f"{_share(p.get('compute_share'))} of its compute roofline"
                                     f"{_t(p, 'compute_share')}"))
    if p.get("kv_cache_bytes"):
        layer = (f" ({_n(p.get('kv_cache_bytes_per_layer'), 'B')} per layer x {p['kv_layers']} layers)"
                 if p.get("kv_layers") else "")
        room = ""
        if p.get("more_sequences") is not None:
            room = (f"; {_count(p['more_sequences'])} more sequence(s) would fit beside the "
                    f"{_n(p.get('live_peak_bytes'), 'B')} live peak{_t(p, 'more_sequences')}")
        out.append(("KV cache", f"{_n(p['kv_cache_bytes'], 'B')}{layer}{_t(p, 'kv_cache_bytes')}, "
                                f"{_small_pct(p.get('kv_cache_share'))} of {_n(p.get('capacity_bytes'), 'B')} device "
                                f"memory{room}"))
    if p.get("kind") == "decode" and p.get("kv_bytes_read") is not None:
        ideal = f"; {_n(p['kv_valid_bytes'], 'B')} if it read only the positions written so far" \
            if p.get("kv_valid_bytes") is not None else ""
        out.append(("KV read", f"the attention reads {_n(p['kv_bytes_read'], 'B')} of the cache per step"
                               f"{_t(p, 'kv_bytes_read')}{ideal}{_t(p, 'kv_valid_bytes') if ideal else ''}"))
    if p.get("critical_batch") is not None:
        out.append(("compute-bound past", f"{_count(p['critical_batch'])} tokens per step on this chip (peak x "
                                          f"weight bytes / (2 x HBM bandwidth), {p.get('weight_dtype') or '?'} "
                                          f"weights){_t(p, 'critical_batch')}"))
    if p.get("host_gaps"):
        out.append(("host gaps", f"{p['host_gaps']} between decode steps, {fmt_time(p.get('host_gap_ps'))} in all "
                                 f"(p50 {fmt_time(p.get('host_gap_p50_ps'))}){_t(p, 'host_gap_ps')}"))
    if p.get("interruptions"):
        out.append(("prefill between decodes", f"{p['interruptions']} time(s), the decode batch waited "
                                               f"{fmt_time(p.get('interrupted_ps'))}{_t(p, 'interrupted_ps')}"))
    if p.get("slow_ops"):
        out.append(("furthest from roofline", p["slow_ops"]))
    out.append(("evidence", "; ".join(p.get("evidence") or []) or "—"))
    return out


def rows(d: dict) -> list[list[str]]:
    return [[p["module"], p["kind"], str(p["steps"]), fmt_time(p.get("step_p50_ps")), fmt_time(p.get("step_p90_ps")),
             _count(p.get("tokens_per_step")), _count(p.get("tokens_per_s_per_chip")),
             _share(p.get("bound_share") if p.get("kind") != "prefill" else p.get("compute_share"))]
            for p in (d.get("inference") or {}).get("programs") or []]


def has(d: dict) -> bool:
    """Whether the section has anything to show: serving programs, or a workload given as serving."""
    inf = d.get("inference") or {}
    return bool(inf.get("programs")) or (inf.get("workload") == "serving")


def text(d: dict, fit=None, wrap=None) -> list[str]:
    """Terminal lines (``fit``/``wrap``: the text renderer's table and paragraph engine; without them the plain
    aligned table)."""
    if not has(d):
        return [workload_line(d)] if d.get("inference") else []
    out = [TITLE]
    para = wrap or (lambda t, indent=2: " " * indent + t)
    out.append(para(workload_line(d), indent=2))
    out.append(fit(HEADERS, rows(d), right=RIGHT, shrink=(0,), drop=(4, 2)) if fit else
               "\n".join("  " + ln for ln in table(HEADERS, rows(d), right=RIGHT)))
    for p in (d.get("inference") or {}).get("programs") or []:
        out.append(para(f"{p['kind']} {p['module']}:", indent=2))
        out += [para(f"{k}: {v}", indent=4) for k, v in program_facts(p)]
    return out


def lay_out(o, d: dict, safe) -> None:
    """The section in the terminal report: ``o`` is the text renderer's output (its ``blank``, ``para`` and
    ``table``), ``safe`` its cleaner of text from the trace."""
    if not has(d):
        return
    o.blank()
    o.para(TITLE)
    o.para(safe(workload_line(d)), indent=2)
    o.table("", HEADERS, [[safe(c) for c in r] for r in rows(d)], right=RIGHT, shrink=(0,), drop=(4, 2))
    for p in (d.get("inference") or {}).get("programs") or []:
        o.para(safe(f"{p['kind']} {p['module']}:"), indent=2)
        for k, v in program_facts(p):
            o.para(f"{k}: ", safe(v), indent=4)


def markdown(d: dict, esc, md_table) -> list[str]:
    if not has(d):
        return []
    out = [f"### {TITLE}", "", esc(workload_line(d), None), ""]
    out += md_table(HEADERS, [[esc(c) for c in r] for r in rows(d)], right=RIGHT) + [""]
    for p in (d.get("inference") or {}).get("programs") or []:
        out += [f"**{esc(p['kind'], None)} {esc(p['module'], None)}**", ""]
        out += [f"- **{esc(k, None)}:** {esc(v, None)}" for k, v in program_facts(p)] + [""]
    return out


def html_section(d: dict) -> str:
    """``<section id="inference">`` (empty string when there is nothing to show)."""
    if not has(d):
        return ""
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in HEADERS)
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in RIGHT else ""}>{e(c)}</td>' for i, c in enumerate(r))
                   + "</tr>" for r in rows(d))
    out = f'<section id="inference"><h2>{e(TITLE)}</h2><p>{e(workload_line(d))}</p>'
    out += f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    for p in (d.get("inference") or {}).get("programs") or []:
        out += f"<h3>{e(p['kind'])} {e(p['module'])}</h3><ul class=\"facts\">" + "".join(
            f"<li><b>{e(k)}:</b> {e(v)}</li>" for k, v in program_facts(p)) + "</ul>"
    return out + "</section>\n"


__all__ = ["text", "lay_out", "markdown", "html_section", "program_facts", "rows", "workload_line", "has", "HEADERS",
           "TITLE"]
