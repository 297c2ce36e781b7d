"""A Report in a notebook: a short ``repr``, the HTML report's body as ``_repr_html_`` (its styles scoped to the
output cell, no scripts, no external resources) and the findings as a DataFrame."""
from __future__ import annotations

import hashlib
import re

import pandas as pd

from tracekit.report.render.sections import claim
from tracekit.units import fmt_pct, fmt_time

FINDING_COLUMNS = ["rule_id", "name", "severity", "savings_ps", "claimed_ps", "share", "evidence_count", "message",
                   "fix"]
_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")


def report_repr(d: dict) -> str:
    """One line: inputs, chips, profiled/busy time, steps, findings (the largest named)."""
    s = d.get("summary") or {}
    paths = ", ".join(i.get("path", "") for i in d.get("inputs") or []) or "?"
    chips = ", ".join(f"{c.get('name')} x{len(c.get('devices') or [])}" for c in d.get("chips") or []) or "no chip"
    prof = s.get("profiled_ps") or 0
    busy = f"busy {fmt_pct(s.get('busy_ps', 0) / prof)}" if prof else "busy —"
    f = d.get("findings") or []
    top = f"; largest: {f[0]['rule_id']} {f[0]['name']} {claim(f[0])[0]}" if f else ""
    return (f"<tracekit Report {paths}: {chips}; profiled {fmt_time(prof)}, {busy}; {s.get('steps', 0)} step(s); "
            f"{len(f)} finding(s){top}>")


def findings_frame(d: dict) -> pd.DataFrame:
    rows = [{k: f.get(k) for k in FINDING_COLUMNS} for f in d.get("findings") or []]
    df = pd.DataFrame(rows, columns=FINDING_COLUMNS)
    return df.astype({"savings_ps": "int64", "claimed_ps": "int64", "evidence_count": "int64",
                      "share": "float64"}) if len(df) else df


def scope_css(css: str, scope: str) -> str:
    """Every rule's selectors prefixed with ``scope`` (``body`` becomes the scope itself), so the report's styles
    reach nothing else in the notebook."""
    out = []
    for sel, decl in _RULE.findall(css):
        parts = []
        for one in sel.split(","):
            one = one.strip()
            if not one:
                continue
            parts.append(scope if one == "body" else f"{scope} {one}")
        out.append(",".join(parts) + "{" + decl + "}")
    return "".join(out)


def report_html(d: dict) -> str:
    """The HTML report's body for a notebook cell: scoped styles, no scripts, ids unique to this report."""
    from tracekit.report.render import html, timeline_html
    tag = "tk" + hashlib.sha1(html.inline_json(d).encode()).hexdigest()[:8]
    content = html.body(d)
    for ident in ("plot-clip", "tl-clip"):  # SVG clip paths are looked up by id in the whole page
        content = content.replace(f'id="{ident}"', f'id="{ident}-{tag}"').replace(f"url(#{ident})",
                                                                                  f"url(#{ident}-{tag})")
    css = scope_css(html.CSS + timeline_html.CSS, f".{tag}")
    return f'<div class="{tag} tracekit-report"><style>{css}</style>{content}</div>'
