"""Per op, what the trace measured inside a kernel (:mod:`tracekit.ingest.kernelprof`), beside the roofline's
verdict: the matrix unit's measured utilization and the share of the Mosaic pipeline's time spent waiting on DMAs.

* ``mxu_util`` (fraction): MXU busy over its span, summed over the profiled executions and devices. From the
  hardware counters it is xprof's ``mxu_utilization`` (``kernel_utilization`` tool) as a fraction: cycles with
  both matrix units busy, plus half those with one, over the TensorCore's cycles (trust ``measured``). From the
  ``% util`` windows it is the compiler's static slot occupancy laid over the windows' measured times, not a count
  (``indicative``). It counts matrix-unit cycles, whatever the precision: an f32 matmul keeps the MXU busy for
  several bf16 passes per multiply, so a high ``mxu_util`` can sit beside a low roofline efficiency.
* ``dma_wait_share`` (fraction): time waiting for block DMAs (``ep_wait_in`` + ``ep_wait_out`` + ``ep_finalize``)
  over that plus the kernel body (``ep_run_kernel``), summed over the executions with stages (``measured``). Near
  1: the body mostly waits for its data (more pipeline buffers or larger blocks hide the copies; a kernel that
  moves more than it computes stays waiting); near 0: the copies are hidden behind the body.

Each value comes with a ``*_source`` text saying what it was read from and over how many executions; ops without
a profile have NaN and an empty source.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import text_numpy

#: the columns :func:`annotate` adds (units: tracekit.analysis.rule_schema.UNITS; trust: :func:`trust`)
COLUMNS = ("mxu_util", "mxu_util_source", "dma_wait_share", "dma_wait_ps", "dma_wait_source")
_KEY = ["program_id", "op"]
_BASIS_TEXT = {"hw_counters": "hardware counters: (0.5 x MXU_BUSY_1 + MXU_BUSY_2) / TensorCore cycles",
               "llo_util": "LLO static slot occupancy over measured windows (% util, not a hardware count)"}


def per_op(profile: pd.DataFrame | None) -> pd.DataFrame:
    """One row per (program_id, op) of the profile (summed over devices) with :data:`COLUMNS`."""
    if profile is None or not len(profile):
        return pd.DataFrame(columns=_KEY + list(COLUMNS))
    p = profile.assign(op=profile["op"].astype(str), mxu_basis=profile["mxu_basis"].astype(str),
                       program_id=profile["program_id"].astype(np.uint64))
    p = p.assign(wait=p["ep_wait_in_ps"] + p["ep_wait_out_ps"])
    g = p.groupby(_KEY, sort=False)
    out = g.agg(busy=("mxu_busy", "sum"), span=("mxu_span", lambda s: s.sum(min_count=1)),
                counted=("counted_executions", "sum"), staged=("staged_executions", "sum"),
                executions=("profiled_executions", "sum"),
                wait=("wait", lambda s: s.sum(min_count=1)), run=("ep_run_kernel_ps", lambda s: s.sum(min_count=1)),
                basis=("mxu_basis", lambda s: ",".join(sorted({b for v in s for b in v.split(",") if b})))
                ).reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        out["mxu_util"] = np.where(out["span"] > 0, out["busy"] / out["span"], np.nan)
        both = out["wait"] + out["run"]
        out["dma_wait_share"] = np.where(both > 0, out["wait"] / both, np.nan)
    out["dma_wait_ps"] = out["wait"]
    out["mxu_util_source"] = [
        f"_counters_ line, {_basis_text(b)}; {int(c)} of {int(n)} profiled execution(s)" if np.isfinite(u) else ""
        for u, b, c, n in zip(out["mxu_util"], out["basis"], out["counted"], out["executions"])]
    out["dma_wait_source"] = [
        f"Mosaic pipeline stages (XLA TraceMe): ep_wait_in + ep_wait_out + ep_finalize over that plus "
        f"ep_run_kernel; {int(s)} of {int(n)} profiled execution(s)" if np.isfinite(w) else ""
        for w, s, n in zip(out["dma_wait_share"], out["staged"], out["executions"])]
    return out[_KEY + list(COLUMNS)]


def _basis_text(basis: str) -> str:
    return " and ".join(_BASIS_TEXT.get(b, b) for b in basis.split(",") if b) or "unknown"


def annotate(table: pd.DataFrame, profile: pd.DataFrame | None) -> pd.DataFrame:
    """``table`` (an op table or op_stats: one row per (module, program_id, op)) with :data:`COLUMNS` (NaN and ''
    for ops without a profile). The table's own columns and row order are kept."""
    if table is None:
        return table
    prof = per_op(profile)
    out = table.copy()
    if not len(prof) or not len(out):
        for c in COLUMNS:
            out[c] = "" if c.endswith("_source") else np.nan
        return out
    key = pd.DataFrame({"program_id": out["program_id"].astype(np.uint64).to_numpy(),
                        "op": text_numpy(out, "op")})
    joined = key.merge(prof, on=_KEY, how="left")
    for c in COLUMNS:
        v = joined[c].to_numpy()
        out[c] = np.where(pd.isna(v), "", v).astype(object) if c.endswith("_source") else v.astype(float)
    return out


def trust(table: pd.DataFrame) -> dict:
    """column -> trust class of :data:`COLUMNS`' numbers in ``table`` (an annotated op table; the report's
    ``top_ops_trust``): the MXU utilization is ``measured`` from hardware counters, ``indicative`` when an op's rests
    on the LLO's static occupancy; {} when no op has a profile."""
    if table is None or "mxu_util_source" not in table.columns:
        return {}
    if not (table["mxu_util_source"].astype(bool).any() or table["dma_wait_source"].astype(bool).any()):
        return {}
    llo = table["mxu_util_source"].astype(str).str.contains("LLO").any()
    return {"mxu_util": "indicative" if llo else "measured", "dma_wait_share": "measured", "dma_wait_ps": "measured"}
