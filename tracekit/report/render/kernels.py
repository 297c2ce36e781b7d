"""What the trace measured inside kernels (``top_ops[].mxu_util`` / ``dma_wait_share``, from the TPU
``_counters_`` line and the Mosaic pipeline stages: :mod:`tracekit.analysis.kernelprof`), one line per op, once for
every format: the number, its unit, where it came from and its trust class, beside the roofline's efficiency."""
from __future__ import annotations

import html

from tracekit.report.trust import tag
from tracekit.units import fmt_pct, fmt_time

TITLE = "Measured inside kernels"


def lines(d: dict, top: int) -> list[tuple[str, str]]:
    """(op, text) for each of the first ``top`` top ops with a kernel measurement; [] when none has one."""
    trust = d.get("top_ops_trust") or {}
    out = []
    for r in (d.get("top_ops") or [])[:top]:
        parts = []
        if r.get("mxu_util") is not None:
            parts.append(f"MXU busy {fmt_pct(r['mxu_util'])} of its cycles{tag(trust.get('mxu_util', 'measured'))} "
                         f"({r.get('mxu_util_source') or ''}), beside a roofline efficiency of "
                         f"{fmt_pct(r['efficiency']) if r.get('efficiency') is not None else 'unknown'} "
                         f"({r.get('bound_by') or 'unknown'}-bound at the roofline)")
        if r.get("dma_wait_share") is not None:
            parts.append(f"waiting on block DMAs {fmt_pct(r['dma_wait_share'])} of its pipeline's wait + body "
                         f"time, {fmt_time(r.get('dma_wait_ps'))} in all{tag(trust.get('dma_wait_share', 'measured'))}"
                         f" ({r.get('dma_wait_source') or ''})")
        if parts:
            out.append((str(r["op"]), "; ".join(parts)))
    return out


def html_list(d: dict, top: int) -> str:
    """:func:`lines` as an HTML heading and list ('' when no top op has a kernel measurement)."""
    def e(x) -> str:
        return html.escape(str(x), quote=True)
    items = "".join(f"<li><code>{e(op)}</code>: {e(text)}</li>" for op, text in lines(d, top))
    return f"<h3>{e(TITLE)}</h3><ul>{items}</ul>" if items else ""
