"""The one ``Report`` every renderer reads (its ``data`` is the JSON envelope, built by the engine's reduce,
:mod:`tracekit.report.engine.reduce`), and the helpers that make values JSON-ready (:func:`clean`, :func:`records`).

The JSON envelope (``schema: tracekit.report/1``) is documented in ``docs/report-format.md``.
"""
from __future__ import annotations

import math
import os
from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, stored
from tracekit.records import record
from tracekit.version import __version__
from tracekit.model.peaks import peak_notes

SEVERITIES = ("info", "warning", "error")


def clean(v):
    """JSON-safe scalar: NaN/inf -> None, numpy -> Python, floats rounded to 6 significant digits (stable)."""
    t = type(v)
    if t is str or t is int or v is None:  # the common cases first (the checks below return them unchanged)
        return v
    if t is float:
        return _clean_float(v)
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_, bool)):
        return bool(v)
    if isinstance(v, (float, np.floating)):
        return _clean_float(float(v), _WHOLE_BELOW.get(type(v), 2**53))
    if isinstance(v, dict):
        return {str(k): clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [clean(x) for x in v]
    if isinstance(v, (int, str)):
        return v
    if v is pd.NA:
        return None
    return str(v)


#: below this magnitude an integral float is written as an int; float32 (the roofline's predictions) is integral
#: everywhere above 2**24 without being exact, so there it is rounded like any other float
_WHOLE_BELOW = {np.float32: 2**24, np.float16: 2**11}


def _clean_float(f: float, whole_below: int = 2**53):
    if not math.isfinite(f):
        return None
    if f == int(f) and abs(f) < whole_below:
        return int(f)
    return float(f"{f:.6g}")


def _clean_column(s) -> list:
    """:func:`clean` of every value of ``s`` (a Series, or a column's stored array: :func:`tracekit.columns.stored`),
    as iterating the Series gives them; NumPy integer, bool and float columns without a Python call per value where
    the result is known (ints and bools as they are; floats: None when not finite, an int when integral, else 6
    significant digits)."""
    dt = s.dtype
    kind = dt.kind if isinstance(dt, np.dtype) else ""
    if isinstance(s, pd.Series) and kind and kind in "iubf":
        s = s.to_numpy()
    if kind and kind in "iub":
        return s.tolist()
    if kind == "f":
        f = s.astype(np.float64, copy=False)
        fin = np.isfinite(f)
        whole = fin & (np.trunc(np.where(fin, f, 0.0)) == f) & \
            (np.abs(np.where(fin, f, 0.0)) < _WHOLE_BELOW.get(dt.type, 2**53))
        if whole.all():
            return f.astype(np.int64).tolist()
        code = np.where(fin, np.where(whole, 1, 2), 0).tolist()
        ints = np.where(whole, f, 0.0).astype(np.int64).tolist()
        return [None if k == 0 else i if k == 1 else float(f"{x:.6g}")
                for k, i, x in zip(code, ints, f.tolist())]
    if isinstance(s, np.ndarray) and kind not in "Mm":  # (as a Series iterates its NumPy values: Python scalars)
        return [clean(v) for v in map(s.item, range(s.size))]
    if isinstance(s, np.ndarray):  # (datetimes: as a Series of them iterates, Timestamps)
        s = pd.Series(s, copy=False)
    return [clean(v) for v in s]


def records(df: pd.DataFrame, columns: list[str] | None = None) -> list[dict]:
    """One dict per row of ``df`` (``columns`` of it when given, in that order), every value :func:`clean`."""
    cols = [c for c in (columns or df.columns.tolist()) if c in df.columns]
    if df.columns.has_duplicates:  # a name that selects several columns: the last one's value wins, as before
        return [{c: clean(v) for c, v in zip(cols, row)} for row in df[cols].itertuples(index=False, name=None)]
    if not len(df):
        return []
    values = [_clean_column(stored(df, c)) for c in cols]
    return [dict(zip(cols, row)) for row in zip(*values)]


def rows_of(frames: list, which=None, at=None) -> list[dict]:
    """:func:`records` of rows of several frames, in the order given: row ``at[i]`` of frame ``which[i]`` (default:
    every row of every frame, in order). Only the rows taken become dicts."""
    if which is None:
        return [r for f in frames for r in records(f)]
    out: list = [None] * len(which)
    for j in sorted(set(int(w) for w in which)):
        mine = np.flatnonzero(which == j)
        for k, r in zip(mine, records(frames[j].iloc[at[mine]])):
            out[k] = r
    return out


@record
class Report:
    """What ``tracekit analyze`` found. ``data`` is the JSON envelope; helpers read parts of it. In a notebook it
    shows as the HTML report (``_repr_html_``); ``findings_frame()`` and ``ops_frame()`` give DataFrames.
    ``rules``: the rules that ran (:class:`tracekit.analysis.rule_model.Rule`), for renderers that describe them
    (SARIF); empty for a report read back from its JSON."""

    data: dict = field(default_factory=dict)
    rules: tuple = ()
    #: every op aggregated (the ``op_stats`` frame) when the report was built here; not part of the JSON
    op_table: pd.DataFrame | None = field(default=None, repr=False, compare=False)
    #: one line per host of the run left out of the analysis (tracekit.ingest.badhosts.notice); not part of the
    #: JSON (the same lines are in its warnings)
    left_out: tuple = field(default=(), repr=False, compare=False)

    def __repr__(self) -> str:
        from tracekit.report import notebook
        return notebook.report_repr(self.data)

    def _repr_html_(self) -> str:
        from tracekit.report import notebook
        return notebook.report_html(self.data)

    def findings_frame(self) -> pd.DataFrame:
        """One row per finding: rule_id, name, severity, savings_ps, claimed_ps, share, evidence_count, message,
        fix (largest savings first)."""
        from tracekit.report import notebook
        return notebook.findings_frame(self.data)

    def ops_frame(self) -> pd.DataFrame:
        """One row per op (module, program, op) with time, shares and roofline columns. A report analyzed in this
        Python session holds every op, aggregated over every analyzed host, whichever engine mapped them (this
        process, ``jobs``, Dask: the hosts' per-op sums, merged); a report read back from its JSON holds its top
        ops only (``top_ops``). The per-execution frames are :func:`tracekit.load`'s."""
        if self.op_table is not None:
            return self.op_table.reset_index(drop=True)
        return pd.DataFrame(self.data.get("top_ops") or [], columns=OP_COLUMNS)

    @property
    def findings(self) -> list[dict]:
        return self.data.get("findings", [])

    def worst_severity(self) -> str | None:
        sev = [f["severity"] for f in self.findings]
        return max(sev, key=SEVERITIES.index) if sev else None

    def fails(self, fail_on: str) -> bool:
        """True when a finding reaches ``fail_on`` (``never`` never fails)."""
        if fail_on == "never":
            return False
        return any(SEVERITIES.index(f["severity"]) >= SEVERITIES.index(fail_on) for f in self.findings)

    def to_json(self) -> str:
        from tracekit.report import jsontext
        return jsontext.dumps(self.data) + "\n"


OP_COLUMNS = ["module", "program_id", "op", "opcode", "category", "occurrences", "devices", "total_ps", "mean_ps",
              "busy_share", "flops", "bytes_accessed", "net_bytes", "intensity_flops_per_byte", "compute_ps",
              "memory_ps", "network_ps", "roofline_ps", "bound_by", "efficiency", "headroom_ps", "dtype",
              "compute_dtype", "cost_source", "unknown_reason", "source_file", "source_line", "op_name", "source",
              "mxu_util", "mxu_util_source", "dma_wait_share", "dma_wait_ps", "dma_wait_source",
              "hosts"]


def chip_entry(use) -> dict:
    """A chip of the analysis as the envelope's ``chips[]`` holds it."""
    c = use.chip
    ridge = (c.ridge_flops_per_byte("bf16") if c.hbm_bw_bytes_per_s else None)
    return clean({
        "name": c.name, "family": c.family, "vendor": c.vendor, "estimated": c.estimated, "devices": list(use.devices),
        "peak_flops_per_s": {k: v for k, v in sorted(c.peak_flops_per_s.items())},
        "hbm_bw_bytes_per_s": c.hbm_bw_bytes_per_s, "link_bw_bytes_per_s": c.link_bw_bytes_per_s,
        "egress_bw_bytes_per_s": c.egress_bw_bytes_per_s, "host_link_bw_bytes_per_s": c.host_link_bw_bytes_per_s,
        "ridge_bf16_flops_per_byte": ridge, "sources": dict(sorted(c.sources.items())), "exact": c.exact,
        "trace_reported": dict(sorted(c.trace_reported.items())), "raised": dict(sorted(c.raised.items())),
        "limits": dict(sorted(c.limits.items())), "peak_notes": peak_notes(c)})


def unplotted(op_stats: pd.DataFrame, plotted: int) -> list[dict]:
    """The ops the roofline chart leaves out, by reason: ops, total_ps, share of op time, the largest op."""
    if not len(op_stats) or "flops" not in op_stats:
        return []
    t = column_numpy(op_stats, "total_ps", float)
    total = t.sum()
    f, b = column_numpy(op_stats, "flops", float), column_numpy(op_stats, "bytes_accessed", float)
    unknown = np.isnan(f) | np.isnan(b)
    nof = ~unknown & (f <= 0)
    nob = ~unknown & ~nof & (b <= 0)
    drawable = ~(unknown | nof | nob)
    rank = np.cumsum(drawable)
    beyond = drawable & (rank > plotted)
    out = []
    for reason, m in (("with no FLOPs (copies, host transfers, data movement)", nof),
                      ("with an unknown cost (see unknown_reason)", unknown),
                      ("with FLOPs but no bytes", nob), (f"beyond the {plotted} largest plotted", beyond)):
        if m.any():
            i = int(np.flatnonzero(m)[np.argmax(t[m])])
            out.append({"reason": reason, "ops": int(m.sum()), "total_ps": int(t[m].sum()),
                        "share": clean(t[m].sum() / total) if total else None,
                        "largest": str(op_stats["op"].iloc[i])})
    return out


def version() -> str:
    """tracekit's version, as every envelope states it."""
    return __version__


def display_path(p: str) -> str:
    """A path as a report shows it: relative to the working directory when it is inside it (stable across
    machines), else as given; URLs as given."""
    if "://" in p:
        return p
    try:
        rel = os.path.relpath(p)
        return rel if not rel.startswith("..") else p
    except ValueError:
        return p
