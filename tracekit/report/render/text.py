"""Terminal report: chip and devices, step-time breakdown, top ops with roofline columns, findings by savings.

Laid out with rich (imported only here, when a text report is rendered): paragraphs wrap at word boundaries to the
width, tables shrink their widest columns (names end in an ellipsis) so every line fits and columns stay aligned.
Names from the trace are plain text to rich (never markup: ``[...]`` in an op name prints as it is), and every
string of the report passes through :mod:`tracekit.report.termsafe` first (control and bidi characters escaped,
newlines as ``\n``). Devices whose rows are
identical are folded into one row (``CPU:0–7 (8 devices)``). Colour only when asked (``color=True``: the CLI's
``--color always``, or ``auto`` on a terminal without ``NO_COLOR``).
"""
from __future__ import annotations

import io
import re

from tracekit.report.render import collectives as coll_section
from tracekit.report.render import inference as inference_section
from tracekit.report.render import kernels, memview
from tracekit.report.render import sections
from tracekit.report.termsafe import safe as _safe, safe_tree
from tracekit.report.trust import legend, tag
from tracekit.units import ABOVE_MARK, EFF_MARKS_NOTE, WITHIN_MARK, fmt_eff, fmt_num, fmt_pct, fmt_time

EXTENSIONS = (".txt",)
#: width of a text report written to a file or a pipe
DEFAULT_WIDTH = 100
MIN_WIDTH = 40
#: narrowest a name column gets before other columns are left out
NAME_MIN = 12
#: the space between a number and its unit is not a place to break a line
_UNIT = re.compile(r"(\d) (?=(?:[kMGTP]?(?:FLOP/s|FLOP|B/s|B)|ps|ns|µs|us|ms|s|%|device\(s\)|devices?|step\(s\))"
                   r"(?![\w/]))")
_GLUE = "\ue000"
SEVERITY_STYLE = {"error": "bold red", "warning": "bold yellow", "info": "bold cyan"}
_DEV = re.compile(r"^(.*?)(\d+)$")


def fold_devices(rows: list[list[str]], device_col: int = 0) -> list[list[str]]:
    """Consecutive rows equal but for their device become one row whose device cell names them all:
    ``CPU:0–7 (8 devices)`` for a contiguous run of one kind, ``GPU:1,4,6 (3 devices)`` otherwise."""
    out: list[list[str]] = []
    group: list[list[str]] = []

    def rest(r):
        return r[:device_col] + r[device_col + 1:]

    def flush():
        if not group:
            return
        if len(group) == 1:
            out.append(group[0])
        else:
            row = list(group[0])
            row[device_col] = device_range([g[device_col] for g in group])
            out.append(row)
        group.clear()
    for r in rows:
        if group and rest(r) != rest(group[-1]):
            flush()
        group.append(r)
    flush()
    return out


def device_range(names: list[str]) -> str:
    """'CPU:0–7 (8 devices)' for CPU:0..CPU:7 in any order (device ids sort as numbers: CPU:10 after CPU:9);
    'GPU:1,4,6 (3 devices)'; mixed kinds listed as they are."""
    parts = [_DEV.match(n) for n in names]
    if all(parts):  # per kind (and host: hostA/CPU:0–7, hostB/CPU:0–7 (16 devices))
        by: dict = {}
        for p in parts:
            by.setdefault(p.group(1), []).append(int(p.group(2)))
        out = []
        for prefix, nums in by.items():
            nums = sorted(nums)
            contiguous = len(nums) > 1 and nums == list(range(nums[0], nums[0] + len(nums)))
            out.append(f"{prefix}{nums[0]}–{nums[-1]}" if contiguous else f"{prefix}{','.join(map(str, nums))}")
        return f"{', '.join(out)} ({len(names)} devices)"
    return f"{', '.join(names)} ({len(names)} devices)"


class _Out:
    """A rich console writing into a string: wrapped paragraphs, tables that fit the width."""

    def __init__(self, width: int, color: bool):
        from rich.console import Console
        self.buf = io.StringIO()
        self.c = Console(file=self.buf, width=max(width, MIN_WIDTH), color_system="standard" if color else None,
                         force_terminal=color, no_color=not color, markup=False, highlight=False, emoji=False,
                         soft_wrap=False, legacy_windows=False, tab_size=4)

    def para(self, *parts, indent: int = 0, hang: int = 2) -> None:
        """One paragraph from (text, style) parts or plain strings, wrapped at word boundaries; continuation
        lines indented by ``indent + hang``."""
        from rich.padding import Padding
        from rich.text import Text
        t = Text()
        for p in parts:
            text, style = p if isinstance(p, tuple) else (p, "")
            t.append(_UNIT.sub(r"\1" + _GLUE, text), style=style or None)
        if hang:  # a hanging indent: the lines after the first start ``hang`` columns further right
            # a word longer than the width (a path) stands whole on its own line: never cut, even past the width
            lines = wrap_words(t, max(self.c.width - indent - hang, MIN_WIDTH // 2))  # (the first line too, as before)
            for i, line in enumerate(lines):
                pad = " " * (indent + (hang if i else 0))
                if len(pad) + line.cell_len > self.c.width:
                    self.c.print(Text(pad) + line, overflow="ignore", crop=False, soft_wrap=True)
                else:
                    self.c.print(Padding(line, (0, 0, 0, len(pad))), overflow="fold")
            return
        self.c.print(Padding(t, (0, 0, 0, indent)), overflow="fold")

    def blank(self) -> None:
        self.c.print()

    def table(self, title: str, headers: list[str], rows: list[list[str]], right: set[int] = frozenset(),
              shrink: tuple[int, ...] = (0,), drop: tuple[int, ...] = ()) -> None:
        """A table that fits the width: numbers (``right``) are never cut; the ``shrink`` columns (names) give
        way first, down to :data:`NAME_MIN` characters with an ellipsis; then the ``drop`` columns are left out,
        in that order, until the rest fits."""
        from rich import box
        from rich.table import Table
        from rich.text import Text
        need = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
        keep = list(range(len(headers)))
        widths = _widths(need, keep, shrink, self.c.width)
        for i in drop:
            if widths is not None:
                break
            keep.remove(i)
            widths = _widths(need, keep, shrink, self.c.width)
        widths = widths or {i: need[i] if i not in shrink else NAME_MIN for i in keep}
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True,
                  header_style="bold" if self.c.color_system else "")
        for i in keep:
            t.add_column(Text(headers[i]), justify="right" if i in right else "left", no_wrap=True,
                         overflow="ellipsis", width=widths[i])
        for r in rows:
            t.add_row(*(Text(_cut(r[i], widths[i])) for i in keep))
        if title:
            self.para(title)
        self.c.print(t)
        if len(keep) < len(headers):
            self.para("(" + ", ".join(headers[i] for i in range(len(headers)) if i not in keep)
                      + " left out to fit the width)", hang=0)

    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.buf.getvalue().replace(_GLUE, " ").split("\n"))


def fit_table(headers: list[str], rows: list[list[str]], *, width: int, right=frozenset(), shrink=(0,),
              drop=(), title: str = "", color: bool = False) -> str:
    """One table laid out by the engine of the text report (:meth:`_Out.table`), as text: every line within
    ``width``, each row on one line, numbers (``right``) never cut, the ``shrink`` columns cut in their middle
    first, then the ``drop`` columns left out in that order (with a note line). Cells pass through termsafe."""
    o = _Out(width, color)
    o.table(title, [_safe(h) for h in headers], [[_safe(c) for c in r] for r in rows], right=set(right),
            shrink=tuple(shrink), drop=tuple(drop))
    return o.text().rstrip("\n")


def wrap_words(t, width: int) -> list:
    """Rich text ``t`` cut at spaces into lines of at most ``width`` cells; a word longer than that is never cut:
    it stands whole on its line."""
    from rich.cells import cell_len
    plain, cuts = t.plain, []
    start = len(plain) - len(plain.lstrip())  # (leading spaces belong to the first line)
    for m in re.finditer(r"\S+", plain):
        if m.start() > start and cell_len(plain[start:m.end()]) > width:  # the line so far holds a word: cut here
            cuts.append(m.start())
            start = m.start()
    return [line.rstrip() or line for line in t.divide(cuts)] if plain else [t]


def fit_para(text: str, *, width: int, indent: int = 0, hang: int = 2) -> str:
    """One paragraph wrapped at word boundaries to ``width`` (never mid-word), as the text report wraps its own."""
    o = _Out(width, False)
    o.para(_safe(text), indent=indent, hang=hang)
    return o.text().rstrip("\n")


def render(report, *, top: int = 12, color: bool = False, width: int | None = None, **_) -> str:
    d = safe_tree(report.data if hasattr(report, "data") else report)  # nothing from the trace drives the terminal
    s = d["summary"]
    o = _Out(width or DEFAULT_WIDTH, color)
    o.para(f"tracekit {d['tool']['version']} — ", _safe(", ".join(i["path"] for i in d["inputs"])))
    _overview(o, d)
    for c in d["chips"]:
        peaks = ", ".join(f"{k} {fmt_num(v, 'FLOP/s')}" for k, v in c["peak_flops_per_s"].items()
                          if k in ("bf16", "f32"))
        src = "; ".join(c["sources"].get(f"peak_flops_per_s.{k}", "") for k in ("bf16", "f32"))
        est = (" (ESTIMATED — run `tracekit calibrate`)", "bold yellow") if c["estimated"] else ""
        o.para("chip: ", _safe(c["name"]), est, f" × {len(c['devices'])} device(s); {peaks}; memory "
               f"{fmt_num(c['hbm_bw_bytes_per_s'], 'B/s')}  [{sections.peak_origin(src)}]{tag(c.get('trust'))}")
        for note in c.get("peak_notes") or []:  # which number was used, what the trace said, what was raised
            o.para("peak ", _safe(note), indent=2)
    busy = fmt_pct(s["busy_ps"] / s["profiled_ps"]) if s["profiled_ps"] else "—"
    o.para(f"profiled: {fmt_time(s['profiled_ps'])}{tag((s.get('trust') or {}).get('profiled_ps'))} device time "
           f"over {s['devices']} device(s); busy {fmt_time(s['busy_ps'])} ({busy}), idle {fmt_time(s['idle_ps'])}; "
           f"{sections.steps_phrase(s)}")
    if s["time_by_bound_ps"]:
        from tracekit.analysis import coverage  # (here: `tracekit info` renders text without pandas)
        tot = sum(s["time_by_bound_ps"].values()) or 1
        o.para("op time by bound: " + ", ".join(f"{k} {fmt_pct(v / tot)}" for k, v in
                                                sorted(s["time_by_bound_ps"].items(), key=lambda kv: -kv[1]))
               + f"; roofline known for {fmt_pct(s['roofline_coverage'])} of op time"
               + "".join(f" ({x})" for x in [coverage.spread({"devices": s.get("roofline_coverage_by_device")})] if x)
               + ("; chip unknown — pass --chip NAME" if any(_no_peaks(c) for c in d.get("chips") or []) else "")
               + tag((s.get("trust") or {}).get("time_by_bound_ps")))
    if not s["hlo_present"]:
        o.para("HLO: not in this trace — ops are listed by kernel name and have no roofline")
    _steps(o, d)
    _ops(o, d, s, top)
    _custom_calls(o, d.get("custom_calls") or {})
    _collectives(o, d)
    inference_section.lay_out(o, d, _safe)  # the serving programs (render/inference.py)
    for line in sections.extra_text(d):  # (the registered sections that show themselves)
        o.para(line)
    _findings(o, d)
    _memory(o, d)  # after the findings, laid out as `tracekit memory` lays it out
    if any("trust" in x for x in d.get("findings") or []) or (s.get("trust")):
        o.para(legend())
    for w in d.get("warnings") or []:
        o.para(("warning: ", "yellow" if color else ""), _safe(w))
    g = d["gate"]
    if g["fail_on"] != "never":
        o.para(f"gate: --fail-on {g['fail_on']}: ", ("FAILED", "bold red") if g["failed"] else ("passed", "green"))
    return o.text().rstrip("\n") + "\n"


def _steps(o: _Out, d: dict) -> None:
    st = d.get("step_stats") or []
    if not st:
        return
    o.blank()
    multi = sections.n_hosts(d) > 1  # CPU:0 of two hosts is two devices: host/device
    rows = [[_safe(sections.device_name(r, multi)), str(r["steps"]), fmt_time(r["mean_ps"]), fmt_time(r["median_ps"]),
             fmt_time(r["p90_ps"]), fmt_time(r["max_ps"])] for r in st]
    rows = fold_devices(rows)
    shown = rows[:16]
    o.table("Step time per device" + (f" (first 16 of {len(rows)} rows)" if len(rows) > 16 else ""),
            ["device", "steps", "mean", "median", "p90", "max"], shown, right={1, 2, 3, 4, 5})
    steps = d.get("device_steps") or []
    if steps:
        tot = {k: sum(r.get(k) or 0 for r in steps) for k in ("step_ps_sum", "compute_ps", "collective_exposed_ps",
                                                              "collective_hidden_ps", "wait_ps", "idle_ps")}
        if tot["step_ps_sum"]:
            parts = [(name, k) for name, k in (("compute", "compute_ps"), ("exposed collectives",
                                                                          "collective_exposed_ps"),
                                               ("waiting on async copies", "wait_ps"), ("idle", "idle_ps"))
                     if k != "wait_ps" or tot[k]]
            o.para("step breakdown (all devices): " + ", ".join(
                f"{name} {fmt_pct(tot[k] / tot['step_ps_sum'])}" for name, k in parts)
                + f" (collectives hidden under compute: {fmt_time(tot['collective_hidden_ps'])})")


def _ops(o: _Out, d: dict, s: dict, top: int) -> None:
    ops = d.get("top_ops") or []
    if not ops:
        return
    o.blank()
    names = sections.distinct_names(ops[:top], "op", sections.n_hosts(d))  # module:op, op [host] where names collide
    rows = [[_safe(name), _safe(r["category"]), str(r["occurrences"]), fmt_time(r["total_ps"]),
             fmt_pct(r["busy_share"]), fmt_num(r.get("flops")), fmt_num(r.get("bytes_accessed"), "B"),
             _safe(r.get("bound_by") or "—"), fmt_eff(r.get("efficiency")), fmt_time(r.get("headroom_ps")),
             _safe(r.get("cost_source") or "")] for r, name in zip(ops[:top], names)]
    o.table(f"Top ops by time (of {s['op_executions']:,} executions)",
            ["op", "category", "n", "time", "share", "flops", "bytes", "bound", "eff", "headroom", "src"], rows,
            right={2, 3, 4, 5, 6, 8, 9}, shrink=(0, 1), drop=(10, 1, 6, 5, 9))
    if any(ABOVE_MARK in r[8] or WITHIN_MARK in r[8] for r in rows):
        o.para(EFF_MARKS_NOTE)
    measured = kernels.lines(d, top)  # the trace's own counters and pipeline stages, beside the roofline
    if measured:
        o.para(kernels.TITLE + ":")
        for op, text in measured:
            o.para(f"{_safe(op)}: ", _safe(text), indent=2)


def _collectives(o: _Out, d: dict) -> None:
    """Per collective op: measured vs predicted on the topology (:mod:`tracekit.report.render.collectives`)."""
    ic = d.get("interconnect") or {}
    cells = coll_section.rows(ic, hosts=sections.n_hosts(d))  # (op [host]: same-named programs of two hosts)
    if not cells:
        return
    o.blank()
    o.table(_safe(coll_section.title(ic, len(cells))), coll_section.HEADERS, [[_safe(c) for c in r] for r in cells],
            right=coll_section.RIGHT, shrink=(0, 3), drop=(3, 1, 8))
    for op, note in coll_section.notes(ic, hosts=sections.n_hosts(d))[:5]:
        o.para(f"{_safe(op)}: ", _safe(note), indent=2)


def _custom_calls(o: _Out, cc: dict, top: int = 8) -> None:
    """Custom calls by share of op time, the cost model of each (or why none priced it), the models' assumptions."""
    targets = cc.get("targets") or []
    if not targets:
        return
    op_time = cc.get("op_time_ps") or 0
    o.blank()
    rows = [[_safe(t["target"]), str(t["executions"]), fmt_time(t["total_ps"]), fmt_pct(t["share"]),
             _safe(t["cost_source"])] for t in targets[:top]]
    o.table(f"Custom calls: {fmt_pct(cc['custom_call_ps'] / op_time if op_time else None)} of op time; no cost "
            f"model for {fmt_pct(cc['unknown_ps'] / op_time if op_time else None)}",
            ["target", "n", "time", "share", "cost from"], rows, right={1, 2, 3}, shrink=(0, 4))
    for t in targets[:top]:  # the note (why no model priced it, or the model's note) in full, wrapped
        note = (t["unknown_reasons"] or t["notes"] or [""])[0]
        if note:
            o.para(f"{_safe(t['target'])}: ", _safe(note), indent=2)
    for name, why in (cc.get("models") or {}).items():
        o.para(f"model:{_safe(name)}: ", _safe(why), indent=2)


def _overview(o: _Out, d: dict) -> None:
    """The headline block (:mod:`tracekit.report.render.sections`): MFU/utilization facts and the step split."""
    facts = sections.overview_facts(d)
    if not facts:
        return
    o.para("Overview")
    for k, v in facts:
        o.para(f"{k}: ", _safe(v), indent=2)
    rows = sections.breakdown_rows(d)
    if rows:
        o.para("step breakdown (all steps and devices): " + sections.breakdown_line(rows), indent=2)
    o.blank()


def _memory(o: _Out, d: dict) -> None:
    """XLA's buffer assignment (:func:`tracekit.report.render.sections.memory_text`, as ``tracekit memory``
    shows it): facts, the programs that ran in the window, their largest buffers; laid out to the width by this
    module's engine (columns left out with a note, numbers never cut)."""
    import functools
    from rich.text import Text
    lines = memview.memory_text(d, fit=functools.partial(fit_table, width=o.c.width),
                                 wrap=functools.partial(fit_para, width=o.c.width))
    if not lines:
        return
    o.blank()
    for line in lines:
        o.c.print(Text(line), overflow="ignore", crop=False, soft_wrap=True)


def _findings(o: _Out, d: dict) -> None:
    f = d.get("findings") or []
    o.blank()
    o.para(f"Findings ({len(f)}), by time they would win back" if f else "Findings: none")
    if f:
        o.para(claims_line(d["summary"]))
    for i, x in enumerate(f, 1):
        time, share = sections.claim(x)
        share = f" ({share} of profiled time)" if x.get("share") is not None and x.get("claims_time") is not False \
            else ""
        replayed = f"; replayed: {fmt_time(x['replay_savings_ps'])} per step" if "replay_savings_ps" in x else ""
        o.para(f"{i}. ", (f"[{x['severity']}]", SEVERITY_STYLE.get(x["severity"], "")),
               f" {x['rule_id']} ", _safe(x["name"]), f": {time}{share}{tag(x.get('trust'))}{replayed}", hang=3)
        o.para(_safe(x["message"]), indent=3, hang=0)
        o.para("fix: ", _safe(x["fix"]), indent=3, hang=5)


def claims_line(s: dict) -> str:
    """The headline's two labelled numbers: the union of the findings' claims and the time above the roofline
    floor (the most any fix could win); never the sum of overlapping claims."""
    prof = s.get("profiled_ps") or 0
    claimed = s.get("claimed_savings_ps")
    line = (f"together the findings claim {fmt_time(claimed)}{tag((s.get('trust') or {}).get('claimed_savings_ps'))} "
            f"({fmt_pct(claimed / prof if prof and claimed is not None else None)} of profiled time; the union of "
            "their overlapping estimates, not their sum)")
    rep = s.get("replay_savings") or {}
    if s.get("savings_basis") == "replay":  # (issue 36) what the replay along the critical path says
        line = (f"replayed along the critical path, fixing every finding it can play takes the step from "
                f"{fmt_time(rep.get('step_ps'))} to {fmt_time(rep.get('all_fixed_step_ps'))} "
                f"({fmt_pct(rep['savings_ps'] / rep['step_ps'] if rep.get('step_ps') else None)} per step)"
                + (f"; not replayed: {', '.join(rep['not_replayed'])}" if rep.get("not_replayed") else "")
                + "; " + line)
    if s.get("above_roofline_floor_ps") is not None:
        line += (f"; time above the roofline floor: {fmt_time(s['above_roofline_floor_ps'])}"
                 f"{tag((s.get('trust') or {}).get('above_roofline_floor_ps'))} (profiled time minus "
                 f"every op at its roofline: the most any fix could win{sections.floor_note(s)})")
    return line


def _cut(v: str, w: int) -> str:
    """``v`` in ``w`` characters: the middle replaced by an ellipsis, so the ends (``fusion.1`` vs ``fusion.2``)
    still tell names apart."""
    if len(v) <= w:
        return v
    if w < 6:
        return v[:max(w - 1, 0)] + "…"
    tail = (w - 1) // 2
    return v[:w - 1 - tail] + "…" + v[-tail:]


def _widths(need: list[int], keep: list[int], shrink: tuple, width: int) -> dict | None:
    """Column widths that fit ``width`` (two spaces between columns): fixed columns their full need, the
    ``shrink`` columns at least :data:`NAME_MIN` (or their need), the space left given to them in order; None
    when even that does not fit."""
    avail = width - 2 * (len(keep) - 1)
    out = {i: need[i] for i in keep if i not in shrink}
    names = [i for i in shrink if i in keep]
    for i in names:
        out[i] = min(need[i], NAME_MIN)
    left = avail - sum(out.values())
    if left < 0:
        return None
    for i in names:
        extra = min(need[i] - out[i], left)
        out[i] += extra
        left -= extra
    return out


def _no_peaks(c: dict) -> bool:
    """A chip entry with neither a FLOP/s peak nor an HBM bandwidth (an export that names no chip)."""
    def finite(v):
        return isinstance(v, (int, float)) and v == v and v > 0
    return not any(finite(v) for v in (c.get("peak_flops_per_s") or {}).values()) \
        and not finite(c.get("hbm_bw_bytes_per_s"))
