"""The collectives section of every report format (the report's ``interconnect`` data): the topology the
collectives were priced on and, per collective op, measured vs predicted time, algbw / busbw, start skew and the
level that bounds the prediction. Each renderer calls the function for its format."""
from __future__ import annotations

import html as _html

from tracekit.units import EFF_MARKS_NOTE, fmt_eff, fmt_num, fmt_time

ROWS = 12
HEADERS = ["op", "kind", "N", "span", "n", "time", "skew", "algbw", "busbw", "predicted", "eff", "bound"]
KEYS = ["op", "kind", "group_size", "span", "executions", "time_ps", "skew_ps", "algbw_bytes_per_s",
        "busbw_bytes_per_s", "predicted_ps", "efficiency", "bound"]  # the raw value behind each column
NOTE = ("time = mean per execution; skew = waiting for the last participant to arrive (not bandwidth); algbw = "
        "size / (time - skew), busbw = algbw x 2(N-1)/N (all-reduce) or (N-1)/N (nccl-tests); predicted from the "
        "chip table's links on this topology; eff = predicted / (time - skew); " + EFF_MARKS_NOTE)


RIGHT = {2, 4, 5, 6, 7, 8, 9, 10}


def names(ic: dict, limit: int = ROWS, hosts: int = 1) -> list[str]:
    """The first ``limit`` collective ops' names, told apart where they collide: ``module:op`` across modules,
    ``op [host]`` across same-named programs of different hosts (``hosts``: how many the report covers)."""
    from tracekit.report.render.sections import distinct_names
    return distinct_names((ic.get("collectives") or [])[:limit], "op", hosts)


def rows(ic: dict, limit: int = ROWS, hosts: int = 1) -> list[list[str]]:
    """The table's cells (text) for the first ``limit`` collective ops of the report's ``interconnect`` data."""
    out = []
    for r, name in zip((ic.get("collectives") or [])[:limit], names(ic, limit, hosts)):
        out.append([name, str(r.get("kind") or ""), str(r.get("group_size") or "—"),
                    str(r.get("span") or "—"), str(r.get("executions") or 0), fmt_time(r.get("time_ps")),
                    fmt_time(r.get("skew_ps")), fmt_num(r.get("algbw_bytes_per_s"), "B/s"),
                    fmt_num(r.get("busbw_bytes_per_s"), "B/s"), fmt_time(r.get("predicted_ps")),
                    fmt_eff(r.get("efficiency")), str(r.get("bound") or "—")])
    return out


def topology_line(ic: dict) -> str:
    """'chip: description [source]' of the topology the collectives were priced on ('' when none)."""
    t = ic.get("topology") or {}
    if not t:
        return ""
    chip = f"{t['chip']}: " if t.get("chip") else ""
    return f"{chip}{t.get('description', '')} [{t.get('source', '')}]"


def notes(ic: dict, limit: int = ROWS, hosts: int = 1) -> list[tuple[str, str]]:
    """(op, note) for the ops whose row carries a note (the op named as in :func:`rows`)."""
    return [(name, str(r["note"])) for r, name in zip((ic.get("collectives") or [])[:limit], names(ic, limit, hosts))
            if r.get("note")]


def title(ic: dict, shown: int) -> str:
    return (f"Collectives: measured vs predicted ({ic.get('collective_ops', shown)} op(s)); "
            f"topology: {topology_line(ic)}")


def markdown_lines(d: dict, esc, table, limit: int = ROWS) -> list[str]:
    """Markdown lines (``esc`` and ``table`` are the Markdown renderer's escaping and table helpers)."""
    from tracekit.report.render.sections import n_hosts
    ic = d.get("interconnect") or {}
    cells = rows(ic, limit, n_hosts(d))
    if not cells:
        return []
    out = [f"### Collectives: measured vs predicted ({ic.get('collective_ops', len(cells))} op(s))", "",
           f"Topology: {esc(topology_line(ic), None)}", "", esc(NOTE, None), "",
           *table(HEADERS, [[esc(c) for c in r] for r in cells], RIGHT), ""]
    for r, name in zip((ic.get("collectives") or [])[:limit], names(ic, limit, n_hosts(d))):
        if r.get("phases"):
            out.append(f"- {esc(name)}: {esc(r['phases'], 300)}" + (f" — {esc(r['note'], 300)}" if r.get("note")
                                                                        else ""))
    return out + [""]


def html_section(d: dict, limit: int = 50) -> str:
    """An HTML ``<section>`` (empty string when there are no collectives)."""
    ic = d.get("interconnect") or {}
    recs = (ic.get("collectives") or [])[:limit]
    if not recs:
        return ""
    from tracekit.report.render.sections import n_hosts
    e = _html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in HEADERS + ["phases", "note"])
    body = []
    for r, cells in zip(recs, rows(ic, limit, n_hosts(d))):
        raw = [("" if r.get(k) is None else str(r.get(k))) for k in KEYS]  # what the table sorts by
        tds = "".join(f'<td class="n" data-v="{e(v)}">{e(c)}</td>' if i in RIGHT
                      else f'<td data-v="{e(v)}">{e(c)}</td>' for i, (c, v) in enumerate(zip(cells, raw)))
        body.append(f"<tr>{tds}<td data-v=\"\">{e(str(r.get('phases') or ''))}</td>"
                    f"<td data-v=\"\">{e(str(r.get('note') or ''))}</td></tr>")
    return (f'<section id="collectives"><h2>Collectives: measured vs predicted</h2>'
            f'<p class="params">topology: {e(topology_line(ic))}</p><div class="scroll">'
            f'<table class="sortable collectives"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            f'</table></div><p class="params">{e(NOTE)}</p></section>\n')
