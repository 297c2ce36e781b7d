"""The serving view's rule frame (:func:`rule_frame`, the rules' ``serving``) and its JSON section (:func:`section`,
the report's ``inference``; docs/report-format.md). The view of a loaded trace, as the engine builds it:
:func:`tracekit.report.engine.inference.build`."""
from __future__ import annotations

import functools
import math

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.analysis import inference

#: the JSON section's columns per program, in order (docs/report-format.md "inference")
SECTION_COLUMNS = [
    "module", "program_id", "kind", "source", "steps", "step_p50_ps", "step_p90_ps", "run_p50_ps", "tokens_per_step",
    "tokens_per_sequence", "sequences", "tokens_per_s_per_chip", "tokens_per_s_per_host", "param_bytes",
    "kv_cache_bytes", "kv_layers", "kv_cache_bytes_per_layer", "cache_len", "kv_bytes_read", "kv_valid_bytes",
    "decode_bound_ps", "bound_share", "run_bound_share", "flops_per_step", "compute_bound_ps", "compute_share",
    "roofline_ps_per_step", "critical_batch", "weight_dtype", "hbm_bw_bytes_per_s", "peak_flops_per_s",
    "capacity_bytes", "kv_cache_share", "live_peak_bytes", "free_bytes", "more_sequences", "host_gap_p50_ps",
    "host_gap_ps", "host_gaps", "interruptions", "interrupted_ps", "slow_ops", "devices", "hosts", "chip",
    "evidence", "trust"]
#: each figure's trust class (tracekit.report.trust): counted, timed, or standing on a peak (set per program)
_EXACT = ("tokens_per_step", "tokens_per_sequence", "sequences", "param_bytes", "kv_cache_bytes",
          "kv_cache_bytes_per_layer", "kv_bytes_read", "flops_per_step", "live_peak_bytes")
_MEASURED = ("step_p50_ps", "step_p90_ps", "run_p50_ps", "tokens_per_s_per_chip", "tokens_per_s_per_host",
             "host_gap_ps", "interrupted_ps")
_PEAKED = ("decode_bound_ps", "bound_share", "run_bound_share", "compute_bound_ps", "compute_share",
           "roofline_ps_per_step", "critical_batch")


RULE_COLUMNS = ["host", "device", "module", "program_id", "kind", "first_run_ps", "span_ps", "steps", "step_total_ps",
                "run_total_ps", "step_p50_ps", "decode_bound_ps", "bound_share", "bound_total_ps", "tokens_per_step",
                "sequences", "critical_batch", "more_sequences", "free_bytes", "kv_cache_bytes", "capacity_bytes",
                "capacity_estimated", "host_gap_ps", "host_gaps", "interruptions", "interrupted_ps", "slow_ops",
                "chip"]


def rule_frame(view: inference.InferenceView) -> pd.DataFrame:
    """The rules' ``serving`` frame: one row per (host, device, serving program) with the program's figures
    (:data:`PROGRAM_COLUMNS`) and that device's own: its steps, their total time (``step_total_ps``), the runs'
    time (``run_total_ps``), the decode bound over its steps (``bound_total_ps``), the host gaps between its
    decode steps and the prefills interrupting them; ``span_ps``: first run start to last run end."""
    r, p = view.runs, view.programs
    if not len(r) or not len(p):
        return _no_rows().copy()  # (a deep copy: see tracekit.schema.empty)
    inter = inference.interruptions(r)
    out = []
    for (h, d, m, pid), g in r.groupby(["host", "device", "module", "program_id"], sort=True):
        row = p[(p["module"] == m) & (p["program_id"] == pid)]
        if not len(row):
            continue
        x = row.iloc[0]
        closed = g[~column_numpy(g, "open_end", bool)]
        gaps = g[(g["next_kind"] == "decode") & g["gap_ps"].notna()] if x["kind"] == "decode" else g.iloc[:0]
        it = inter[(inter["host"] == h) & (inter["device"] == d)] if x["kind"] == "decode" else inter.iloc[:0]
        bound = x["decode_bound_ps"] if x["kind"] == "decode" else math.nan
        out.append({"host": h, "device": d, "module": m, "program_id": int(pid), "kind": x["kind"],
                    "first_run_ps": int(g["start_ps"].min()), "span_ps": int((g["start_ps"] + g["run_ps"]).max()
                                                                         - g["start_ps"].min()),
                    "steps": int(len(g)), "step_total_ps": int(closed["step_ps"].sum()),
                    "run_total_ps": int(g["run_ps"].sum()), "step_p50_ps": x["step_p50_ps"],
                    "decode_bound_ps": bound, "bound_share": x["bound_share"] if x["kind"] == "decode" else math.nan,
                    "bound_total_ps": bound * len(g) if bound == bound else math.nan,
                    "tokens_per_step": x["tokens_per_step"], "sequences": x["sequences"],
                    "critical_batch": x["critical_batch"], "more_sequences": x["more_sequences"],
                    "free_bytes": x["free_bytes"], "kv_cache_bytes": x["kv_cache_bytes"],
                    "capacity_bytes": x["capacity_bytes"], "capacity_estimated": bool(x["capacity_estimated"]),
                    "host_gap_ps": int(gaps["gap_ps"].sum()), "host_gaps": int(len(gaps)),
                    "interruptions": int(it["interruptions"].sum()) if len(it) else 0,
                    "interrupted_ps": int(it["interrupted_ps"].sum()) if len(it) else 0,
                    "slow_ops": x["slow_ops"] or "", "chip": x["chip"]})
    return pd.DataFrame(out, columns=RULE_COLUMNS).astype(_kinds())


def _kinds() -> dict:
    from tracekit.analysis import rule_schema
    return {c: k for c, (k, _) in rule_schema.RULE_FRAMES["serving"].items() if k != "text"}


@functools.lru_cache(maxsize=1)
def _no_rows() -> pd.DataFrame:
    """The ``serving`` frame of a trace that serves nothing (built once, only ever copied: a pod asks per host)."""
    return pd.DataFrame(columns=RULE_COLUMNS).astype(_kinds())


def _clean(v):
    """A JSON-ready value: NaN -> None, NumPy -> Python, floats to 6 significant digits (ints when integral), as
    the envelope writes every number."""
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if not math.isfinite(f):
            return None
        return int(f) if f == int(f) and abs(f) < 2**53 else float(f"{f:.6g}")
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


def section(view: inference.InferenceView) -> dict:
    """The envelope's ``inference`` section: the workload, where that came from, one entry per serving program
    (:data:`SECTION_COLUMNS`; unknown numbers are null) with the trust class of each figure."""
    progs = []
    for r in view.programs.to_dict("records"):
        rough = "indicative" if r.get("rough") else "modelled"
        trust = {**{k: "exact" for k in _EXACT}, **{k: "measured" for k in _MEASURED}, **{k: rough for k in _PEAKED}}
        trust["kv_valid_bytes"] = "modelled"  # an ideal: what a read of only the written positions would be
        trust["more_sequences"] = "indicative" if r.get("capacity_estimated") else "exact"
        trust["kv_cache_share"] = trust["more_sequences"]
        e = {k: _clean(r.get(k)) for k in SECTION_COLUMNS if k != "trust"}
        for k in ("tokens_per_step", "tokens_per_sequence", "kv_layers", "cache_len", "param_bytes", "kv_bytes_read",
                  "kv_cache_bytes", "more_sequences", "host_gaps", "interruptions", "steps", "devices", "hosts"):
            if isinstance(e.get(k), float) and e[k] == int(e[k]):
                e[k] = int(e[k])
        e["evidence"] = list(r.get("evidence") or [])
        e["trust"] = trust
        progs.append(e)
    return {"workload": view.workload, "workload_source": view.workload_source, "programs": progs,
            "units": {"*_ps": "picoseconds", "*_bytes": "bytes", "tokens_per_s_*": "tokens per second",
                      "*_share": "fraction", "critical_batch": "tokens per step", "peak_flops_per_s": "FLOP/s"}}


__all__ = ["section", "rule_frame", "SECTION_COLUMNS", "RULE_COLUMNS"]
