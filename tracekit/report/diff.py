"""The ``tracekit diff`` envelope (``schema: tracekit.diff/1``) and its renderings (text, JSON, Markdown).

:func:`build` turns a :class:`tracekit.analysis.diff.Comparison` into :class:`Diff`, plain JSON-ready data in the
same conventions as the report envelope (:mod:`tracekit.report.envelope`: integer picoseconds, floats to 6
significant digits, NaN as null, sorted keys); :func:`render` writes it as text, JSON or Markdown.
"""
from __future__ import annotations

from dataclasses import field

from tracekit.analysis.diff import STATUSES, Comparison
from tracekit.errors import TraceError
from tracekit.records import record
from tracekit.report.envelope import clean, display_path, version
from tracekit.report.render import markdown
from tracekit.units import fmt_num, fmt_pct, fmt_time

SCHEMA = "tracekit.diff/1"
FORMATS = ("text", "json", "markdown")


@record
class Diff:
    """What ``tracekit diff`` found. ``data`` is the JSON envelope (``schema: tracekit.diff/1``)."""

    data: dict = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return bool(self.data.get("failed"))

    def to_json(self) -> str:
        from tracekit.report import jsontext
        return jsontext.dumps(self.data) + "\n"


#: the step-breakdown buckets compared (``overview.breakdown`` of the report), in the report's order
BUCKETS = ("compute_bound_ps", "memory_bound_ps", "compute_other_ps", "collective_exposed_ps", "offload_wait_ps",
           "async_wait_ps", "host_idle_ps", "launch_idle_ps", "other_idle_ps")


#: the memory figures of a program compared (the report's ``memory.programs``), and how they read
MEMORY_FIELDS = (("argument_bytes", "arguments"), ("output_bytes", "outputs"), ("alias_bytes", "aliased"),
                 ("temp_bytes", "temporaries"), ("live_peak_bytes", "live peak"), ("undonated_bytes", "not donated"))


def _ran_programs(d: dict) -> dict:
    """(program name, memory space) -> the program of that name that ran in the window (the largest live peak
    when several of one name ran), from a report's ``memory.programs``."""
    out: dict = {}
    for p in (d.get("memory") or {}).get("programs") or []:
        if p.get("executions") is None or p["executions"] > 0:
            k = (p["module"], p["memory_space"])
            if k not in out or (p.get("live_peak_bytes") or 0) > (out[k].get("live_peak_bytes") or 0):
                out[k] = p
    return out


def memory_rows(base: dict, new: dict) -> list[dict]:
    """Each memory figure (:data:`MEMORY_FIELDS`) of a program that ran on both sides and changed, and the
    device peak (the largest of any device) when it changed: ``program``, ``memory_space``, ``what``,
    ``base_bytes``, ``new_bytes``, ``change_bytes`` (XLA's buffer assignment of each side)."""
    b, n = _ran_programs(base), _ran_programs(new)
    rows = []
    for k in sorted(set(b) & set(n)):
        for f, _ in MEMORY_FIELDS:
            vb, vn = b[k].get(f), n[k].get(f)
            if vb is not None and vn is not None and vb != vn:
                rows.append({"program": k[0], "memory_space": k[1], "what": f, "base_bytes": int(vb),
                             "new_bytes": int(vn), "change_bytes": int(vn) - int(vb)})
    peaks = [max((x.get("peak_bytes") or 0 for x in (d.get("memory") or {}).get("devices") or []), default=None)
             for d in (base, new)]
    if None not in peaks and peaks[0] != peaks[1]:
        rows.append({"program": "", "memory_space": "device", "what": "device_peak_bytes", "base_bytes": int(peaks[0]),
                     "new_bytes": int(peaks[1]), "change_bytes": int(peaks[1]) - int(peaks[0])})
    return rows


def memory_notes(rows: list[dict]) -> list[str]:
    """One sentence per program whose aliased bytes changed (donation), with its live peak."""
    out = []
    for r in [r for r in rows if r["what"] == "alias_bytes"]:
        peak = next((x for x in rows if x["program"] == r["program"] and x["what"] == "live_peak_bytes"), None)
        how = ("outputs now reuse arguments' buffers (donated)" if r["change_bytes"] > 0 else
               "outputs no longer reuse arguments' buffers (donation lost)")
        out.append(f"{r['program']}: aliased {_bytes(r['base_bytes'])} → {_bytes(r['new_bytes'])}: {how}"
                   + (f"; live peak {_bytes(peak['base_bytes'])} → {_bytes(peak['new_bytes'])} "
                      f"({_signed_pct(peak['change_bytes'] / peak['base_bytes'] if peak['base_bytes'] else None)})"
                      if peak else "; live peak unchanged"))
    return out


def _bytes(x) -> str:
    return fmt_num(x, "B")


def context(base: dict, new: dict) -> dict:
    """What two analyze reports (their JSON ``data``) add to a diff, shown but not gating: each step-breakdown
    bucket as a share of the step time on both sides (``change_points``: new - base, in points of the step), the
    findings by rule id (``new``: only in NEW, ``gone``: only in BASE, ``kept``: on both), and the memory figures
    that changed (:func:`memory_rows`)."""
    rows = []
    bb, bn = base.get("overview", {}).get("breakdown", {}), new.get("overview", {}).get("breakdown", {})
    if bb.get("step_ps") and bn.get("step_ps"):
        for k in BUCKETS:
            sb, sn = bb.get(k, 0) / bb["step_ps"], bn.get(k, 0) / bn["step_ps"]
            if sb or sn:
                rows.append({"bucket": k[:-3], "base_share": sb, "new_share": sn, "change_points": sn - sb})

    def by_rule(d):
        return {f["rule_id"]: {"rule_id": f["rule_id"], "severity": f.get("severity"), "name": f.get("name", "")}
                for f in d.get("findings", [])}
    fb, fn = by_rule(base), by_rule(new)
    findings = {"new": [fn[k] for k in sorted(set(fn) - set(fb))], "gone": [fb[k] for k in sorted(set(fb) - set(fn))],
                "kept": sorted(set(fb) & set(fn))}
    return {"breakdown": rows, "findings": findings, "memory": memory_rows(base, new)}


def build(c: Comparison, base_report: dict | None = None, new_report: dict | None = None) -> Diff:
    """The envelope of a comparison; with both sides' analyze reports (their JSON ``data``), also the
    step-breakdown and findings comparison of :func:`context`."""
    m = c.ops
    counts = {s: int((m["status"] == s).sum()) for s in STATUSES}
    counts.update({f"matched_by_{k}": int((m["match"] == k).sum()) for k in ("name", "shape")})
    rows = [{k: clean(v) for k, v in r.items()} for r in m.to_dict("records")]
    for r in rows:  # NaN on a missing side reads as null; keys of the other side's name only when they differ
        if r["new_op"] is None or (r["new_module"] == r["module"] and r["new_op"] == r["op"]):
            r.pop("new_module"), r.pop("new_op")
    step = clean(c.step_time)
    data = {
        "schema": SCHEMA,
        "tool": {"name": "tracekit", "version": version()},
        "inputs": {"base": [display_path(p) for p in c.base_paths], "new": [display_path(p) for p in c.new_paths]},
        "params": clean(c.params),
        "step_time": step,
        "summary": counts,
        "ops": rows,
        "failed": counts["regression"] > 0 or step["status"] == "regression",
        **(clean(context(base_report, new_report)) if base_report is not None and new_report is not None else {}),
        "units": {"*_ps": "picoseconds", "*_share": "fraction of the step time", "change": "fraction (new / base - 1) of the mean",
                  "median_change": "fraction (new / base - 1) of the median",
                  "p_holm": "Holm-corrected p-value (null: not tested)"},
    }
    return Diff(data)


# ------------------------------------------------------------------------------------------------------ rendering
def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise TraceError(f"`tracekit diff` cannot write {fmt}", hint="use text, json or markdown (.txt .json .md)")
    return fmt


def render(diff: Diff, fmt: str, *, top: int = 20, width: int | None = None, **_) -> str:
    check_format(fmt)
    if fmt == "json":
        return diff.to_json()
    if fmt == "text":
        return render_text(diff, top=top, width=width)
    return render_markdown(diff, top=top)


def op_cells(r: dict) -> list[str]:
    """Display cells for an op row: op, module, match, occurrences, base mean, new mean, change, delta total."""
    name = r["op"] if "new_op" not in r else f"{r['op']} → {r['new_op']}"
    occ = f"{_int(r.get('base_occurrences'))} → {_int(r.get('new_occurrences'))}"
    return [name, r["module"], r["match"], occ, fmt_time(r.get("base_median_ps")), fmt_time(r.get("new_median_ps")),
            _signed_pct(r.get("median_change")), _signed_time(r.get("impact_ps")), _p(r.get("p_holm")),
            r.get("reason") or ""]


OP_HEADERS = ["op", "module", "matched by", "n (base → new)", "median base", "median new", "change", "impact",
              "p (Holm)", "why"]


def _p(x) -> str:
    return "—" if x is None else f"{x:.2g}"


def _int(x) -> str:
    return "—" if x is None else f"{int(x):,}"


def _signed_pct(x) -> str:
    return "—" if x is None else ("+" if x > 0 else "") + fmt_pct(x)  # fmt_pct writes the minus sign


def _signed_time(x) -> str:
    return "—" if x is None else ("+" if x > 0 else "-" if x < 0 else "") + fmt_time(abs(x))


def headline(d: dict) -> list[str]:
    """The lines every diff rendering starts with (plain text, no markup)."""
    s, st, p = d["summary"], d["step_time"], d["params"]
    out = [f"base: {', '.join(d['inputs']['base'])}", f"new:  {', '.join(d['inputs']['new'])}",
           f"test: {p['test']}, alpha {p['alpha']:g}; at least {p['min_executions']} executions a side",
           f"minimum effect: median x{1 + p['threshold']:g} (or /{1 + p['threshold']:g}) and "
           f">= {fmt_time(p['min_time_ps'])} of total time in NEW"]
    if st["status"] == "unknown":
        out.append("step time: unknown (no steps on " + ("either side" if not st["base"]["steps"] and
                                                           not st["new"]["steps"] else "one side") + ")")
    else:
        out.append(f"step time (median): {fmt_time(st['base']['median_ps'])} → {fmt_time(st['new']['median_ps'])} "
                   f"({_signed_pct(st['change'])}; mean {fmt_time(st['base']['mean_ps'])} → "
                   f"{fmt_time(st['new']['mean_ps'])}; p {_p(st.get('p_value'))}): {st['status']} "
                   f"({st.get('reason', '')})")
    out.append(f"ops: {s['regression']} regressed, {s['improvement']} improved, {s['added']} added, "
               f"{s['removed']} removed, {s['unchanged']} unchanged (matched {s['matched_by_name']} by name, "
               f"{s['matched_by_shape']} by opcode and shape)")
    return out


def verdict(d: dict) -> str:
    if not d["failed"]:
        return "passed: no regression"
    parts = [f"{d['summary']['regression']} op(s) regressed"] if d["summary"]["regression"] else []
    parts += ["the step time regressed"] if d["step_time"]["status"] == "regression" else []
    return "FAILED: " + " and ".join(parts)


TITLES = {"regression": "Regressions", "added": "Added (only in NEW)", "removed": "Removed (only in BASE)",
          "improvement": "Improvements"}


def render_text(diff: Diff, *, top: int = 20, width: int | None = None) -> str:
    """The text diff laid out to ``width`` (a file or pipe: the text report's default) by the text report's
    engine: paragraphs wrap between words, each table row is one line, numbers are never cut (names give way,
    then columns are left out with a note)."""
    import functools
    from tracekit.report.render.text import DEFAULT_WIDTH, fit_para, fit_table
    from tracekit.report.termsafe import safe_tree
    w = width or DEFAULT_WIDTH
    fit, wrap = functools.partial(fit_table, width=w), functools.partial(fit_para, width=w)
    d = safe_tree(diff.data)  # names from the traces, printed on a terminal
    out = [f"tracekit {d['tool']['version']} diff", *map(wrap, headline(d))]
    for status in STATUSES[:-1]:
        rows = [r for r in d["ops"] if r["status"] == status]
        if rows:
            out += ["", f"{TITLES[status]}: {len(rows)}"]
            out.append(fit(OP_HEADERS, [op_cells(r) for r in rows[:top]], right={4, 5, 6, 7, 8}, shrink=(0, 9, 1),
                           drop=(9, 2, 8, 1, 3)))
            if len(rows) > top:
                out.append(f"… and {len(rows) - top} more")
    out += context_lines(d, fit, wrap)
    out += ["", verdict(d)]
    return "\n".join(out) + "\n"


def _breakdown_cells(r: dict) -> list[str]:
    pts = 100 * r["change_points"]
    return [r["bucket"].replace("_", " "), fmt_pct(r["base_share"]), fmt_pct(r["new_share"]),
            ("+" if pts > 0 else "") + f"{pts:.1f}"]


BREAKDOWN_HEADERS = ["step breakdown", "base", "new", "change (points)"]


def _finding_names(rows: list) -> str:
    return ", ".join(f"{f['rule_id']} {f['name']} ({f['severity']})" for f in rows) or "none"


MEMORY_HEADERS = ["program", "bytes", "base", "new", "change"]


def _memory_cells(r: dict) -> list[str]:
    label = dict(MEMORY_FIELDS).get(r["what"], "device peak")
    pct = r["change_bytes"] / r["base_bytes"] if r["base_bytes"] else None
    return [r["program"] or "—", label, _bytes(r["base_bytes"]), _bytes(r["new_bytes"]),
            ("+" if r["change_bytes"] > 0 else "-") + _bytes(abs(r["change_bytes"]))
            + (f" ({_signed_pct(pct)})" if pct is not None else "")]


def context_lines(d: dict, fit, wrap) -> list[str]:
    """The text lines of the step breakdown, findings and memory comparison (shown, not gating; empty without
    it), laid out by ``fit`` (tables) and ``wrap`` (paragraphs)."""
    out = []
    if d.get("breakdown"):
        out += ["", "Step breakdown (share of the step time; shown, not tested):"]
        out.append(fit(BREAKDOWN_HEADERS, [_breakdown_cells(r) for r in d["breakdown"]], right={1, 2, 3}))
    if "findings" in d:
        f = d["findings"]
        out += ["", wrap(f"Findings: new in NEW: {_finding_names(f['new'])}; gone: {_finding_names(f['gone'])}; "
                         f"on both: {', '.join(f['kept']) or 'none'}")]
    if d.get("memory"):
        out += ["", "Memory (XLA's buffer assignment of the programs that ran; shown, not tested):"]
        out.append(fit(MEMORY_HEADERS, [_memory_cells(r) for r in d["memory"]], right={2, 3, 4}, shrink=(0,)))
        out += [wrap(line, indent=2) for line in memory_notes(d["memory"])]
    return out


def _md_line(line: str) -> str:
    """A headline line for Markdown: escaped, but ``>`` kept (it reads ``&gt;`` wherever entities are shown as
    typed; with ``<`` escaped and the line inside a list item it can start neither a tag nor a quote)."""
    return markdown.esc(line, None).replace("&gt;", ">")


def render_markdown(diff: Diff, *, top: int = 20) -> str:
    """Markdown (GitHub-flavoured, trace text escaped as :mod:`tracekit.report.render.markdown` does)."""
    d = diff.data
    esc = markdown.esc
    st = d["step_time"]
    mark = "❌" if d["failed"] else "✅"
    out = [f"## tracekit diff: {mark} {esc(verdict(d), None)}", ""]
    out += [f"- {_md_line(line)}" for line in headline(d)]
    if st["status"] != "unknown":
        out += ["", *markdown.table(["", "steps", "mean step", "median step"],
                                    [[side, str(st[side]["steps"]), fmt_time(st[side]["mean_ps"]),
                                      fmt_time(st[side]["median_ps"])] for side in ("base", "new")], right={1, 2, 3})]
    for status, title in TITLES.items():
        rows = [r for r in d["ops"] if r["status"] == status]
        if not rows:
            continue
        out += ["", f"### {title}: {len(rows)}", ""]
        out += markdown.table(OP_HEADERS, [[esc(c) for c in op_cells(r)] for r in rows[:top]], right={3, 4, 5, 6, 7, 8})
        if len(rows) > top:
            out.append(f"\n…and {len(rows) - top} more (see the JSON output).")
    if d.get("breakdown"):
        out += ["", "### Step breakdown (share of the step time; shown, not tested)", ""]
        out += markdown.table(BREAKDOWN_HEADERS, [[esc(c) for c in _breakdown_cells(r)] for r in d["breakdown"]],
                              right={1, 2, 3})
    if "findings" in d:
        f = d["findings"]
        out += ["", "### Findings", "", f"- new in NEW: {esc(_finding_names(f['new']))}",
                f"- gone: {esc(_finding_names(f['gone']))}", f"- on both: {esc(', '.join(f['kept']) or 'none')}"]
    if d.get("memory"):
        out += ["", "### Memory (XLA's buffer assignment of the programs that ran; shown, not tested)", ""]
        out += markdown.table(MEMORY_HEADERS, [[esc(c) for c in _memory_cells(r)] for r in d["memory"]],
                              right={2, 3, 4})
        out += [""] + [f"- {esc(line, None)}" for line in memory_notes(d["memory"])]
    out += ["", f"<sub>tracekit {esc(d['tool']['version'], None)} · diff schema {esc(d['schema'], None)} · impact = "
            "change of the mean × executions in NEW; change = of the median</sub>"]
    return "\n".join(out) + "\n"
