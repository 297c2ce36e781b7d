"""The serving view of a trace: prefill and decode programs, their steps, tokens per second, the KV cache and the
decode step against its memory roofline.

Built as a map over hosts and one reduce, so that a pod runs it per host:

* :func:`host_summary` (one host's trace -> :class:`HostServing`, small: the serving programs, one row per run of
  them, their ops' roofline sums, the devices' chips and memory);
* :func:`reduce` (every host's summary -> :class:`InferenceView`: one row per serving program).

**Steps.** A serving step is a run of a serving program on its device (:func:`tracekit.ingest.steps.program_runs`
over the serving programs taken as one): it lasts until the device's next run of *any* serving program starts, so
when prefill and decode interleave, each decode step ends where the prefill that interrupts it starts. The last
run has no next start (``open_end``) and no step time. ``gap_ps`` is the idle between a run's end and the next
start: time the device waited for the host.

**Per program** (:data:`PROGRAM_COLUMNS`): step time p50/p90 (closed steps, every device), tokens per step (from
the HLO), tokens/s per chip = tokens per step / step p50, per host = that × the program's devices per host; the
KV cache, parameter bytes and KV bytes read (:mod:`tracekit.analysis.serving_hlo`); the valid-length ideal of the
KV read (the positions written since the last prefill on the device: its prompt length plus one per decode step,
including the step's own token); ``decode_bound_ps = (param_bytes + kv_bytes_read) / HBM bandwidth`` and
``bound_share`` = that / step p50; the critical batch (:func:`tracekit.model.serving.critical_batch`); the prefill's
FLOPs per step and their time at the chip's peak (``compute_share`` = that / step p50); the cache's share of device
memory and how many more sequences of the decode step's cache would fit beside the largest live peak of the
serving programs (XLA's buffer assignment); the host gaps between decode steps and the prefills that interrupt
decode.
"""
from __future__ import annotations

import math
from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.analysis import serving_hlo, serving_kind
from tracekit.model import predictions, serving as formulas
from tracekit.records import record

RUN_COLUMNS = ["host", "device", "module", "program_id", "kind", "start_ps", "step_ps", "run_ps", "gap_ps",
               "open_end", "prev_kind", "next_kind", "valid_len"]
OP_COLUMNS = ["host", "device", "module", "program_id", "op", "executions", "self_ps", "roofline_ps", "memory_ps",
              "compute_ps", "flops", "compute_dtype"]
DEVICE_COLUMNS = ["host", "device", "chip", "family", "hbm_bw_bytes_per_s", "capacity_bytes", "capacity_estimated",
                  "bw_source", "rough"]
SLOW_OPS = 3  #: ops named per decode program as not streaming at bandwidth


@record(frozen=True)
class HostServing:
    """One host's part of the serving view (:func:`host_summary`)."""

    host: str
    workload: str
    workload_source: str
    programs: tuple  #: :class:`tracekit.analysis.serving_kind.ServingProgram`
    runs: pd.DataFrame  #: :data:`RUN_COLUMNS`, one row per run of a serving program
    ops: pd.DataFrame  #: :data:`OP_COLUMNS`: the serving programs' ops, summed per device
    devices: pd.DataFrame  #: :data:`DEVICE_COLUMNS`
    live_peak: dict = field(default_factory=dict)  #: (module, program id) -> live peak bytes (buffer assignment)


def host_summary(host: str, modules: pd.DataFrame, hlo_modules: list, ops: pd.DataFrame, dchips: dict,
                 workload: str | None = None, step_program: tuple | None = None,
                 memory_programs: pd.DataFrame | None = None) -> HostServing:
    """The serving part of one host: ``modules`` (its program runs), ``hlo_modules`` (decoded HLO), ``ops`` (its ops
    frame with the roofline columns), ``dchips`` ((host, device) -> Chip), ``workload`` (``--workload``),
    ``memory_programs``: the host's memory view's programs (:attr:`tracekit.analysis.memory.MemoryView.programs`,
    whose live peaks the serving programs read), when the caller has them."""
    shapes = serving_hlo.program_shapes(hlo_modules)
    progs, wl, wsrc = serving_kind.classify(shapes, ops, modules, workload, step_program)
    runs = _runs(host, modules, progs)
    opsum = _op_sums(ops, progs)
    devs = _devices(host, dchips, runs)
    return HostServing(host, wl, wsrc, tuple(progs.values()), runs, opsum, devs,
                       _live_peaks(hlo_modules, progs, memory_programs))


def _runs(host: str, modules: pd.DataFrame, progs: dict) -> pd.DataFrame:
    """One row per run of a serving program, start to the device's next serving start (module docstring)."""
    from tracekit.ingest import steps as steps_mod
    if modules is None or not len(modules) or not progs:
        return pd.DataFrame(columns=RUN_COLUMNS)
    mod = text_numpy(modules, "module")
    pid = column_numpy(modules, "program_id", np.uint64)
    keys = list(zip(mod.tolist(), pid.tolist()))
    serving = np.array([k in progs for k in keys], bool)
    if not serving.any():
        return pd.DataFrame(columns=RUN_COLUMNS)
    m = modules[serving]
    one = m.assign(module=pd.Categorical(["<serving>"] * len(m)), program_id=np.zeros(len(m), np.uint64))
    st = steps_mod.program_runs(one, ("<serving>", 0))
    key = pd.DataFrame({"device": text_numpy(m, "device"), "start_ps": column_numpy(m, "start_ps", np.int64),
                        "module": mod[serving], "program_id": pid[serving]}).drop_duplicates(["device", "start_ps"])
    st = st.assign(device=st["device"].astype(str)).merge(key, on=["device", "start_ps"], how="left")
    st = st.sort_values(["device", "start_ps"], kind="stable").reset_index(drop=True)
    st["kind"] = [progs[(a, int(b))].kind for a, b in zip(st["module"], st["program_id"])]
    st["gap_ps"] = np.where(column_numpy(st, "open_end", bool), np.nan,
                            (st["duration_ps"] - st["run_ps"]).to_numpy(float))
    dev = column_numpy(st, "device")
    same_prev = np.r_[False, dev[1:] == dev[:-1]]
    same_next = np.r_[dev[:-1] == dev[1:], False]
    kinds = column_numpy(st, "kind", object)
    st["prev_kind"] = np.where(same_prev, np.r_[[""], kinds[:-1]], "")
    st["next_kind"] = np.where(same_next, np.r_[kinds[1:], [""]], "")
    st["valid_len"] = _valid_len(st, progs)
    st = st.rename(columns={"duration_ps": "step_ps"}).assign(host=host)
    return st[RUN_COLUMNS]


def _valid_len(st: pd.DataFrame, progs: dict) -> np.ndarray:
    """Per run: the cache positions a decode step attends to if it read only what is written (the positions of the
    last prefill on the device + one per decode step since, its own included); -1 when unknown."""
    out = np.full(len(st), -1, np.int64)
    cur, dev_prev = -1, None
    for i, (d, k, m, p) in enumerate(zip(st["device"], st["kind"], st["module"], st["program_id"])):
        if d != dev_prev:
            cur, dev_prev = -1, d
        shape = progs[(m, int(p))].shape
        t = shape.tokens_per_sequence if shape is not None else -1
        if k == "prefill":
            cur = t if t > 0 else -1
        elif k == "decode" and cur >= 0:
            cur += 1
            out[i] = cur
        elif k != "prefill":
            cur = -1
    return out


def _op_sums(ops: pd.DataFrame, progs: dict) -> pd.DataFrame:
    if ops is None or not len(ops) or not progs:
        return pd.DataFrame(columns=OP_COLUMNS)
    o = ops[~column_numpy(ops, "is_async", bool)]
    key = list(zip(o["module"].astype(str), column_numpy(o, "program_id", np.uint64).tolist()))
    o = o[np.array([k in progs for k in key], bool)]
    if not len(o):
        return pd.DataFrame(columns=OP_COLUMNS)
    cols = {c: predictions.values(o, c).astype(float) if predictions.has(o, c) else np.full(len(o), np.nan)
            for c in ("roofline_ps", "memory_ps", "compute_ps", "flops")}
    f = pd.DataFrame({"host": text_numpy(o, "host"), "device": text_numpy(o, "device"),
                      "module": text_numpy(o, "module"),
                      "program_id": column_numpy(o, "program_id", np.uint64),
                      "op": text_numpy(o, "op"), "self_ps": column_numpy(o, "self_ps", float), **cols,
                      "compute_dtype": text_numpy(o, "compute_dtype") if "compute_dtype" in o else ""})
    g = f.groupby(["host", "device", "module", "program_id", "op"], sort=True)
    out = g.agg(executions=("self_ps", "size"), self_ps=("self_ps", "sum"), roofline_ps=("roofline_ps", "sum"),
                memory_ps=("memory_ps", "sum"), compute_ps=("compute_ps", "sum"), flops=("flops", "sum"),
                compute_dtype=("compute_dtype", "first"))
    return out.reset_index()[OP_COLUMNS]


def _devices(host: str, dchips: dict, runs: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for d in sorted(set(runs["device"].astype(str))) if len(runs) else []:
        c = dchips.get((host, d)) or next((v for (h, dd), v in dchips.items() if dd == d), None)
        if c is None:
            continue
        rough = bool(c.estimated or c.raised or c.family == "cpu")
        rows.append({"host": host, "device": d, "chip": c.name, "family": c.family,
                     "hbm_bw_bytes_per_s": float(c.hbm_bw_bytes_per_s or np.nan),
                     "capacity_bytes": float(c.hbm_bytes or np.nan),
                     "capacity_estimated": str(c.sources.get("hbm_bytes", "")).startswith("estimate") or c.estimated,
                     "bw_source": c.sources.get("hbm_bw_bytes_per_s", ""), "rough": rough, "chip_obj": c})
    return pd.DataFrame(rows, columns=DEVICE_COLUMNS + ["chip_obj"])


def _live_peaks(hlo_modules: list, progs: dict, memory_programs: pd.DataFrame | None = None) -> dict:
    """(module, program id) -> device live peak (bytes) of the serving programs ``progs`` whose HLO has buffer
    assignments: a program's row of :func:`tracekit.analysis.memory.programs` depends on its own buffers only, so
    the memory view's rows (``memory_programs``) are those of the serving modules' tables."""
    from tracekit.analysis import memory
    from tracekit.ingest import buffers as buf
    mods = [m for m in hlo_modules if (m.name, int(m.program_id)) in progs and m.buffers is not None]
    if not mods:
        return {}
    p = memory_programs if memory_programs is not None else memory.programs(buf.tables(mods))[0]
    p = p[p["memory_space"] == "device"]
    keys = {(m.name, int(m.program_id)) for m in mods}
    return {(str(a), int(b)): int(c) for a, b, c in zip(p["module"], p["program_id"], p["live_peak_bytes"])
            if (str(a), int(b)) in keys}


# ------------------------------------------------------------------------------------------------------- reduce
PROGRAM_COLUMNS = [
    "module", "program_id", "kind", "source", "hosts", "devices", "steps", "step_p50_ps", "step_p90_ps",
    "run_p50_ps", "tokens_per_step", "tokens_per_sequence", "sequences", "tokens_per_s_per_chip",
    "tokens_per_s_per_host", "param_bytes", "kv_cache_bytes", "kv_layers", "kv_cache_bytes_per_layer", "cache_len",
    "kv_bytes_read", "kv_valid_bytes", "decode_bound_ps", "bound_share", "run_bound_share", "flops_per_step",
    "compute_bound_ps", "compute_share", "roofline_ps_per_step", "critical_batch", "weight_dtype",
    "hbm_bw_bytes_per_s", "peak_flops_per_s", "capacity_bytes", "capacity_estimated", "kv_cache_share",
    "live_peak_bytes", "free_bytes", "more_sequences", "host_gap_p50_ps", "host_gap_ps", "host_gaps",
    "interruptions", "interrupted_ps", "slow_ops", "chip", "rough", "evidence"]


@record(frozen=True)
class InferenceView:
    """The serving view of a trace (:func:`reduce`)."""

    workload: str  #: serving | training
    workload_source: str  #: trace | given
    programs: pd.DataFrame  #: :data:`PROGRAM_COLUMNS`, one row per serving program (prefill first, then decode)
    runs: pd.DataFrame  #: every host's :data:`RUN_COLUMNS`
    devices: pd.DataFrame  #: every host's :data:`DEVICE_COLUMNS`
    #: the rule frame ``serving`` (:func:`tracekit.analysis.inference_report.rule_frame`), once built
    per_device: pd.DataFrame = None


def _pct(x: np.ndarray, q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else math.nan


def reduce(summaries: list) -> InferenceView:
    """Every host's :class:`HostServing` -> the :class:`InferenceView` (module docstring)."""
    wl = "serving" if any(s.workload == "serving" for s in summaries) else "training"
    src = "given" if any(s.workload_source == "given" for s in summaries) else "trace"
    runs = pd.concat([s.runs for s in summaries if len(s.runs)], ignore_index=True) if any(
        len(s.runs) for s in summaries) else pd.DataFrame(columns=RUN_COLUMNS)
    ops = pd.concat([s.ops for s in summaries if len(s.ops)], ignore_index=True) if any(
        len(s.ops) for s in summaries) else pd.DataFrame(columns=OP_COLUMNS)
    devs = pd.concat([s.devices for s in summaries if len(s.devices)], ignore_index=True) if any(
        len(s.devices) for s in summaries) else pd.DataFrame(columns=DEVICE_COLUMNS + ["chip_obj"])
    progs, live = {}, {}
    for s in summaries:
        for p in s.programs:
            progs.setdefault((p.module, p.program_id), p)
        for k, v in s.live_peak.items():
            live[k] = max(live.get(k, 0), v)
    rows = [_program_row(p, runs, ops, devs, live) for p in progs.values()]
    order = {"prefill": 0, "decode": 1, "unknown": 2}
    rows.sort(key=lambda r: (order.get(r["kind"], 3), r["module"], r["program_id"]))
    table = pd.DataFrame(rows, columns=PROGRAM_COLUMNS)
    return InferenceView(wl, src, table, runs, devs.drop(columns=["chip_obj"], errors="ignore"))


def _program_row(p, runs: pd.DataFrame, ops: pd.DataFrame, devs: pd.DataFrame, live: dict) -> dict:
    from tracekit.model import chips as chips_mod
    key = (p.module, p.program_id)
    s = p.shape
    r = runs[(runs["module"] == p.module) & (runs["program_id"] == p.program_id)] if len(runs) else runs
    closed = r[~column_numpy(r, "open_end", bool)] if len(r) else r
    step = column_numpy(closed, "step_ps", float) if len(closed) else np.zeros(0)
    nd = r.groupby(["host", "device"]).size() if len(r) else pd.Series(dtype=int)
    hosts = r["host"].nunique() if len(r) else 0
    on = len(r) and len(devs)
    d = devs[devs["device"].isin(set(r["device"])) & devs["host"].isin(set(r["host"]))] if on else devs.iloc[:0]
    bw = float(d["hbm_bw_bytes_per_s"].max()) if len(d) else math.nan
    cap = float(d["capacity_bytes"].min()) if len(d) else math.nan
    p50 = _pct(step, 50)
    row = {c: math.nan for c in PROGRAM_COLUMNS}
    tps = s.tokens_per_step if s is not None and s.tokens_per_step > 0 else math.nan
    tpsq = s.tokens_per_sequence if s is not None and s.tokens_per_sequence > 0 else math.nan
    per_chip = formulas.tokens_per_s(tps, p50 / formulas.PS_PER_S)
    row.update({"module": p.module, "program_id": p.program_id, "kind": p.kind, "source": p.source, "hosts": hosts,
                "devices": int(len(nd)), "steps": int(nd.max()) if len(nd) else 0, "step_p50_ps": p50,
                "step_p90_ps": _pct(step, 90), "run_p50_ps": _pct(column_numpy(r, "run_ps", float), 50) if len(r) else
                math.nan, "tokens_per_step": tps, "tokens_per_sequence": tpsq,
                "sequences": tps / tpsq if tps == tps and tpsq == tpsq else math.nan,
                "tokens_per_s_per_chip": per_chip,
                "tokens_per_s_per_host": per_chip * len(nd) / hosts if hosts else math.nan,
                "hbm_bw_bytes_per_s": bw, "capacity_bytes": cap,
                "capacity_estimated": bool(d["capacity_estimated"].any()) if len(d) else True,
                "chip": ", ".join(sorted(set(d["chip"]))) if len(d) else "",
                "rough": bool(d["rough"].any()) if len(d) else True, "evidence": list(p.evidence)})
    if s is not None:
        _bytes(row, s, r, bw)
    _costs(row, ops, key, r, d, s, chips_mod)
    _memory(row, s, cap, live)
    _gaps(row, r, runs)
    return row


def _bytes(row: dict, s, r: pd.DataFrame, bw: float) -> None:
    row["param_bytes"] = s.param_bytes if s.param_bytes >= 0 else math.nan
    row["kv_cache_bytes"] = s.kv_cache_bytes
    row["kv_layers"] = s.kv_layers if s.kv_layers > 0 else math.nan
    row["kv_cache_bytes_per_layer"] = s.kv_cache_bytes / s.kv_layers if s.kv_layers > 0 else math.nan
    row["cache_len"] = s.cache_len if s.cache_len > 0 else math.nan
    row["kv_bytes_read"] = s.kv_bytes_read if s.kv_bytes_read >= 0 else math.nan
    row["weight_dtype"] = s.weight_dtype
    valid = column_numpy(r, "valid_len", float) if len(r) else np.zeros(0)
    valid = valid[valid > 0]
    if len(valid) and s.cache_len > 0 and s.kind == "decode":
        row["kv_valid_bytes"] = s.kv_cache_bytes * min(1.0, float(valid.mean()) / s.cache_len)
    read = s.kv_bytes_read if s.kv_bytes_read >= 0 else 0  # unknown reads: the weights alone are still a bound
    if s.param_bytes >= 0 and row["kind"] != "prefill":  # (a prefill is held to its compute roofline)
        row["decode_bound_ps"] = formulas.decode_bound_ps(s.param_bytes, read, bw)
        for col, den in (("bound_share", row["step_p50_ps"]), ("run_bound_share", row["run_p50_ps"])):
            row[col] = row["decode_bound_ps"] / den if den and den == den else math.nan


def _costs(row: dict, ops: pd.DataFrame, key: tuple, r: pd.DataFrame, d: pd.DataFrame, s, chips_mod) -> None:
    o = ops[(ops["module"] == key[0]) & (ops["program_id"] == key[1])] if len(ops) else ops
    runs = len(r)
    if runs and len(o):
        for col, out in (("flops", "flops_per_step"), ("compute_ps", "compute_bound_ps"),
                         ("roofline_ps", "roofline_ps_per_step")):
            v = o[col].to_numpy(float)
            row[out] = float(np.nansum(v)) / runs if np.isfinite(v).any() else math.nan
        if row["step_p50_ps"] == row["step_p50_ps"] and row["compute_bound_ps"] == row["compute_bound_ps"]:
            row["compute_share"] = row["compute_bound_ps"] / row["step_p50_ps"]
        head = (o.groupby("op", sort=True)[["self_ps", "roofline_ps", "memory_ps", "executions"]].sum())
        head["headroom"] = head["self_ps"] - head["roofline_ps"].fillna(0)
        head = head[head["headroom"] > 0].sort_values(["headroom"], ascending=False, kind="stable").head(SLOW_OPS)
        row["slow_ops"] = "; ".join(
            f"{op} {_eff(x.roofline_ps, x.self_ps)} of its roofline" for op, x in head.iterrows())
        dt = o.loc[o["flops"].fillna(0) > 0, "compute_dtype"]
        dtype = str(dt.mode().iloc[0]) if len(dt) else (s.weight_dtype if s is not None else "")
    else:
        row["slow_ops"] = ""
        dtype = s.weight_dtype if s is not None else ""
    chip = d["chip_obj"].iloc[0] if len(d) and "chip_obj" in d else None
    if chip is not None and dtype:
        peak, _ = chips_mod.peak_flops(chip, dtype)
        row["peak_flops_per_s"] = peak
        w = s.weight_bytes_per_param if s is not None else math.nan
        row["critical_batch"] = formulas.critical_batch(peak, row["hbm_bw_bytes_per_s"], w)


def _eff(roof: float, measured: float) -> str:
    if not measured or roof != roof:
        return "(roofline unknown)"
    return f"at {100 * roof / measured:.0f}%"


def _memory(row: dict, s, cap: float, live: dict) -> None:
    if s is None or not s.kv_cache_bytes:
        return
    row["kv_cache_share"] = s.kv_cache_bytes / cap if cap == cap and cap else math.nan
    peak = max(live.values()) if live else math.nan
    row["live_peak_bytes"] = peak
    free = cap - peak if cap == cap and peak == peak else math.nan
    row["free_bytes"] = free
    seqs = row["sequences"]
    if seqs == seqs and seqs > 0:
        row["more_sequences"] = formulas.sequences_that_fit(free, s.kv_cache_bytes / seqs)


def _gaps(row: dict, r: pd.DataFrame, runs: pd.DataFrame) -> None:
    """A decode program's host gaps (idle between its run's end and the next decode start) and the prefills that
    interrupt it on its devices."""
    if not len(r) or row["kind"] != "decode":
        return
    g = r[(r["next_kind"] == "decode") & r["gap_ps"].notna()]["gap_ps"].to_numpy(float)
    row["host_gaps"] = int(len(g))
    row["host_gap_ps"] = float(g.sum()) if len(g) else 0.0
    row["host_gap_p50_ps"] = _pct(g, 50)
    on = runs.merge(r[["host", "device"]].drop_duplicates(), on=["host", "device"])
    it = interruptions(on)
    row["interruptions"] = int(it["interruptions"].sum()) if len(it) else 0
    row["interrupted_ps"] = float(it["interrupted_ps"].sum()) if len(it) else 0.0


def interruptions(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (host, device): prefill runs that start between two decode runs, and the time from each one's start to
    the next serving start (the decode stream waits that long)."""
    if not len(runs):
        return pd.DataFrame(columns=["host", "device", "interruptions", "interrupted_ps"])
    r = runs.sort_values(["host", "device", "start_ps"], kind="stable")
    out = []
    for (h, d), g in r.groupby(["host", "device"], sort=True):
        kinds = g["kind"].tolist()
        seen_decode = np.cumsum([k == "decode" for k in kinds]) > 0
        later_decode = np.cumsum([k == "decode" for k in kinds[::-1]])[::-1] > 0
        m = np.array([k == "prefill" for k in kinds]) & np.r_[False, seen_decode[:-1]] & np.r_[later_decode[1:], False]
        out.append({"host": h, "device": d, "interruptions": int(m.sum()),
                    "interrupted_ps": float(column_numpy(g, "step_ps", float)[m].sum())})
    return pd.DataFrame(out)


__all__ = ["host_summary", "reduce", "interruptions", "HostServing", "InferenceView", "PROGRAM_COLUMNS",
           "RUN_COLUMNS"]
