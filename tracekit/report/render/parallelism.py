"""The parallelism section's words: the facts as plain text (each number with its unit and where it came from), a
row per mesh axis, and the layouts of ``tracekit parallelism`` (terminal lines or Markdown). Reads only the report's data
(``parallelism`` of the envelope, docs/report-format.md). The report shows :func:`report_facts` under the engine
section's title (:mod:`tracekit.report.engine.parallelism`); ``tracekit parallelism`` lays the axes out as a table
(:func:`command_text`, :func:`markdown`)."""
from __future__ import annotations

from tracekit.report.trust import tag
from tracekit.units import fmt_num

TITLE = "Parallelism"
HEADERS = ["mesh axis", "role", "devices", "link", "against the book's limit"]
RIGHT = {2}


def _n(x) -> str:
    if x is None:
        return "unknown"
    return f"{x:,.0f}" if isinstance(x, (int, float)) and abs(x) >= 10 else f"{x:.3g}" if isinstance(x, float) \
        else str(x)


def _size(d: dict, what: str, unit: str = "") -> str:
    v = d.get("value")
    if v is None:
        return f"{what} unknown ({d.get('source') or 'not recovered'})"
    cands = [c for c in d.get("candidates") or [] if c != v]
    alt = f"; other candidates {', '.join(_n(c) for c in cands[:4])}" if cands else ""
    return f"{what} {_n(v)}{unit}{alt}"


def mfu_hfu(f: dict) -> str:
    """The overview's ``MFU and HFU`` line: both utilizations with their formula (``overview.flops``); HFU - MFU: the
    executed FLOPs the model does not count."""
    line = f["formula"]
    if f.get("hfu_minus_mfu") is not None:
        line += (f"; HFU - MFU = {100 * f['hfu_minus_mfu']:.3g} points ({fmt_num(f.get('recompute_per_step'), 'FLOP')} "
                 "per step the model does not count: recomputation (remat), a pipeline's bubble, elementwise work; "
                 "negative: fewer executed than the formula counts)")
    return line


def title(d: dict) -> str:
    p = d.get("parallelism") or {}
    if not p.get("module"):
        return TITLE
    return f"{TITLE} (step program {p.get('module')}: read from its collectives and dots; the HLO has no axis names)"


def facts(d: dict) -> list[tuple[str, str]]:
    """(label, text) lines; empty when the section has no program."""
    p = d.get("parallelism") or {}
    if not p.get("module"):
        notes = p.get("notes") or []
        return [("parallelism", "unknown: " + "; ".join(notes))] if notes else []
    axes = p.get("axes") or []
    mesh = " x ".join(str(a["size"]) for a in axes)
    roles = ", ".join(f"axis {a['index']} {a['role']} ({a['size']})" for a in axes)
    out = [("mesh", f"{mesh} over {p.get('devices')} device(s): {roles}" if axes else
            f"no axis: {p.get('devices')} device(s) ran the step program without a collective")]
    pb, split = p.get("per_device_batch_tokens") or {}, (p.get("batch_split") or {}).get("value")
    g = (p.get("global_batch_tokens") or {}).get("value")
    batch = _size(pb, "per-device batch", " tokens") + (f" ({pb.get('source')})" if pb.get("value") else "")
    if pb.get("gradient_dot_tokens"):
        batch += f"; the weight-gradient dots contract {', '.join(_n(x) for x in pb['gradient_dot_tokens'])} tokens"
    if g:
        why = (p.get("batch_split") or {}).get("source")
        batch += f"; global batch {_n(g)} tokens = per-device x {split} (the batch split: {why})"
    out.append(("batch", batch + tag(pb.get("trust"))))
    out.append(("model", _size(p.get("d_model") or {}, "d_model") + "; " + _size(p.get("d_ff") or {}, "d_ff")
                + "; " + _size(p.get("params") or {}, "parameters N (per token)")
                + _experts(p.get("params") or {}) + tag((p.get("d_ff") or {}).get("trust"))))
    mf = p.get("model_flops_per_step") or {}
    if mf.get("value"):
        out.append(("model FLOPs", f"{fmt_num(mf['value'], 'FLOP')} per step: {mf.get('formula')} (used for MFU with "
                                   "--model transformer)"))
    for n in p.get("notes") or []:
        out.append(("note", n))
    return out


def _experts(params: dict) -> str:
    e, k = params.get("experts") or [], params.get("top_k") or []
    if not e:
        return ""
    total = _n(params.get("total"))
    return f" ({', '.join(map(str, e))} experts, {', '.join(_n(x) for x in k)} per token; total {total})"


_BOUND = {"compute": "compute-bound", "communication": "comms-bound"}


def _verdict(lim: dict) -> str:
    """'communication-bound: 32 < 1,275 tokens per device', 'compute-bound: Y = 2 <= 65', 'no limit', 'unknown'."""
    kind, bound = lim.get("kind", "none"), lim.get("bound")
    if kind == "none":
        return "no book limit"
    if bound not in ("compute", "communication"):
        return "unknown"
    v, t = lim.get("value"), lim.get("threshold")
    if kind == "tensor":
        rel = ">" if bound == "communication" else "<="
        return f"{_BOUND[bound]}: Y {_n(v)} {rel} {_n(t)}"
    rel = "<=" if bound == "communication" else ">"
    per = "/slice" if kind == "dcn" else "/device"
    return f"{_BOUND[bound]}: {_n(v)} {rel} {_n(t)} tokens{per}"


def rows(d: dict) -> list[list[str]]:
    """One row per axis: index, role, devices per group (and the first group), link, the verdict."""
    out = []
    for a in (d.get("parallelism") or {}).get("axes") or []:
        lim = a.get("limit") or {}
        group = (a.get("devices") or [[]])[0]
        first = " ".join(map(str, group[:8])) + (" …" if len(group) > 8 else "")
        link = lim.get("level") or "—"
        if (lim.get("axes_spanned") or 1) > 1:
            link += f" x {lim['axes_spanned']} torus axes"
        out.append([f"axis {a['index']}", a["role"], f"{a['size']} ({first})", link,
                    _verdict(lim) + tag(lim.get("trust"))])
    return out


def details(d: dict) -> list[tuple[str, str]]:
    """(axis label, its limit's formula, remedy and what its role rests on) per axis."""
    out = []
    for a in (d.get("parallelism") or {}).get("axes") or []:
        lim = a.get("limit") or {}
        parts = []
        if lim.get("formula"):
            parts.append(lim["formula"])
        elif lim.get("note"):
            parts.append(lim["note"])
        if lim.get("remedy"):
            parts.append(f"remedy: {lim['remedy']}")
        parts.append("rests on: " + "; ".join(a.get("evidence") or ["nothing"]))
        out.append((f"axis {a['index']} {a['role']}", ". ".join(parts)))
    return out


def report_facts(d: dict) -> list[tuple[str, str]]:
    """The section's lines in the text, Markdown and HTML reports (the engine's ``facts``: the report lays them out
    under the title): the step program, the facts, then one line per axis with its verdict against the book's limit,
    the link, the limit's formula, the remedy and what the role rests on."""
    f = facts(d)
    if not f:
        return []
    p = d.get("parallelism") or {}
    out = [("step program", f"{p['module']} (read from its collectives and dots; the HLO has no axis names)")] \
        if p.get("module") else []
    out += f
    for row, (_, detail) in zip(rows(d), details(d)):
        over = f" over {row[3]}" if row[3] != "—" else ""
        out.append((f"{row[0]} {row[1]}", f"{row[4]}; {row[2]} devices per group{over}. {detail}"))
    return out


# ----------------------------------------------------------------------------------------------------- layouts
def command_text(d: dict, fit, wrap, flops: list | None = None) -> str:
    """``tracekit parallelism``'s text: ``fit(headers, rows, right, shrink, drop)`` and ``wrap(text, indent)`` are the
    text report's table and paragraph engine at the terminal's width; ``flops``: (label, text) lines of the
    overview's MFU and HFU to show first."""
    f = facts(d)
    if not f:
        return "no parallelism to show: the trace has no HLO, or no device op ran\n"
    out = [wrap(title(d))] + [wrap(f"{k}: {v}", indent=2) for k, v in (flops or []) + f]
    r = rows(d)
    if r:
        out.append(fit(HEADERS, r, right=RIGHT, shrink=(4, 2), drop=(3,)))
    out += [wrap(f"{k}: {v}", indent=2) for k, v in details(d)]
    return "\n".join(out) + "\n"


def markdown(d: dict, esc, table) -> list[str]:
    f = facts(d)
    if not f:
        return []
    out = [f"### {esc(title(d), None)}", ""] + [f"- **{esc(k, None)}:** {esc(v, None)}" for k, v in f] + [""]
    r = rows(d)
    if r:
        out += table(HEADERS, [[esc(c, 400) for c in row] for row in r], right=RIGHT) + [""]
    out += [f"- **{esc(k, None)}:** {esc(v, None)}" for k, v in details(d)] + [""]
    return out
