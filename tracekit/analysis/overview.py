"""The utilization headline: step time, MFU, achieved bandwidths against their peaks, and the step time the
roofline says is possible.

Definitions (all per step; a device's step is a row of the steps breakdown, an op counts when it starts inside a
step of its device: the ops frame's ``step`` >= 0):

* **step time** T: the step times of the slowest device (the largest median step time: devices run in lockstep,
  the slowest sets the pace); mean, p50 and p90 over its steps. A step is a run of the step program on the device,
  start to start (:mod:`tracekit.ingest.steps`).
* **FLOPs per step** F: the FLOPs of the ops in steps (sync ops except async ``-start``/``-done`` markers, plus
  async windows: each execution counted once), summed over devices and divided by the steps. ``model`` FLOPs come
  from the trace's ``model_flops`` stats (TPU: the compiler's count without rematerialization) when every op
  with FLOPs has one; else from the cost model (``flops``), which counts recomputed work too: then the ratio is
  labelled *hardware FLOPs utilization* (HFU). ``--model-flops-per-step N`` replaces F (N: the whole model's
  FLOPs of one step, all devices together).
* **MFU** = F / (P × T) with P = Σ over devices of the peak FLOP/s of the dtype that carries most of the FLOPs
  (``tracekit.model.chips.peak_flops``; its source is kept).
* **HBM bandwidth** = Σ ``bytes_accessed`` of the compute ops per step / T against Σ HBM peak; **interconnect** =
  Σ ``net_bytes`` of collectives per step / T against Σ egress bandwidth; **host link** = Σ bytes of host
  transfers per step / T against Σ host-link bandwidth of both directions (PCIe is full duplex; the per-op
  roofline uses the one-way rate of its direction, ``to_host``).
* **possible step time** = the largest, over devices, of max(Σ roofline time of the compute ops (measured self
  time where the roofline is unknown: a loop or conditional whose body ops are traced adds only its own time),
  Σ network time of collectives, the host link's busier direction: max(bytes to host, bytes from host) / one-way
  bandwidth (PCIe is full duplex; each transfer's own time, counted once)) per step: each resource's work at its
  roofline, everything else hidden behind the busiest. A lower bound; ``bound_by`` names the resource. Unknown
  (NaN) on a device whose compute ops have no roofline at all: it would be their measured time, not a roofline.
* **coverage** (``known_share``): the share of the compute ops' measured time whose FLOPs, bytes or roofline are
  known (the roofline's: covered as :mod:`tracekit.analysis.coverage` defines it). A trace without HLO has none: its FLOPs per step, HBM bytes and possible step time are unknown (NaN),
  never zero; a partial count is a lower bound.
"""
from __future__ import annotations

from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, self_time, stored, text_numpy
from tracekit.grouping import row_parts
from tracekit.analysis import coverage
from tracekit.analysis import timeline as tl
from tracekit.analysis import mfu as mfu_mod
from tracekit.analysis import stepstats
from tracekit.analysis.stepstats import closed_steps
from tracekit.model import precision, predictions
from tracekit.model import sharing as host_sharing
from tracekit.records import record

BUCKETS = ("compute_bound_ps", "memory_bound_ps", "compute_other_ps", "collective_exposed_ps", "offload_wait_ps",
           "async_wait_ps", "host_idle_ps", "launch_idle_ps", "other_idle_ps")
#: bucket -> the words the reports use
BUCKET_LABELS = {"compute_bound_ps": "compute-bound compute", "memory_bound_ps": "memory-bound compute",
                 "compute_other_ps": "compute, roofline unknown", "collective_exposed_ps": "exposed collectives",
                 "offload_wait_ps": "waiting on host-offload copies", "async_wait_ps": "waiting on async copies",
                 "host_idle_ps": "idle between steps (no program running: host or input)",
                 "launch_idle_ps": "launch gaps (host-launched ops)", "other_idle_ps": "other idle"}
DEVICE_COLUMNS = ["host", "device", "steps", "step_mean_ps", "step_total_ps", "flops_per_step",
                  "model_flops_per_step", "peak_flops_per_s", "mfu", "mfu_at_possible", "possible_step_ps", "bound_by",
                  "roofline_known_share", "host_link_per_step_ps", "offload_wait_per_step_ps"]


@record(frozen=True)
class Overview:
    """What the headline says; ``devices`` (columns :data:`DEVICE_COLUMNS`) feeds the rules."""
    step: dict = field(default_factory=dict)  #: steps, mean_ps, p50_ps, p90_ps, source
    flops: dict = field(default_factory=dict)  #: label, kind, per_step, source, dtype, peak_flops_per_s, ...
    bandwidth: dict = field(default_factory=dict)  #: hbm / interconnect / host_link -> bytes_per_step, ...
    roofline: dict = field(default_factory=dict)  #: possible_step_ps, bound_by, ratio, mfu_at_possible
    breakdown: dict = field(default_factory=dict)  #: bucket -> ps over all steps and devices; step_ps; levels
    devices: pd.DataFrame = None

    def to_dict(self) -> dict:
        return {"step_time": dict(self.step), "flops": dict(self.flops), "bandwidth": dict(self.bandwidth),
                "roofline": dict(self.roofline), "breakdown": dict(self.breakdown)}


def _dominant_dtype(df: pd.DataFrame) -> str:
    """The compute dtype (operand types and precision, :mod:`tracekit.model.precision`) that carries most of the
    FLOPs: an int8 dot with an s32 result runs at the int8 peak, a bf16 x bf16 -> f32 dot at the bf16 peak."""
    col = "compute_dtype" if "compute_dtype" in df.columns else "dtype"
    if not len(df) or col not in df.columns:
        return "bf16"
    f = pd.to_numeric(df["flops"], errors="coerce").fillna(0).to_numpy(float)
    d = df[col].astype(str).to_numpy()
    if not (f > 0).any():
        return "bf16"
    tot = pd.Series(f).groupby(d).sum()
    tot = tot[[x != "" and x != "nan" for x in tot.index]]
    return str(tot.idxmax()) if len(tot) and tot.max() > 0 else "bf16"


def _dominant_of_codes(flops: np.ndarray, codes: np.ndarray, names: list[str]) -> str:
    """:func:`_dominant_dtype` of rows with FLOPs > 0 given as a dtype column's categorical codes (-1: missing)
    and its categories as text: one weighted count per category, no string per row."""
    ok = codes >= 0
    if not ok.any():
        return "bf16"
    tot = np.bincount(codes[ok], weights=flops[ok], minlength=len(names))
    present = np.bincount(codes[ok], minlength=len(names)) > 0
    best, name = 0.0, None
    for i in sorted(range(len(names)), key=lambda i: names[i]):  # ties: the first name in text order
        if present[i] and names[i] not in ("", "nan") and tot[i] > best:
            best, name = tot[i], names[i]
    return name if name is not None else "bf16"


def _floats(ops: pd.DataFrame, c: str) -> np.ndarray | None:
    """Column ``c`` as floats (NaN where absent or not a number); a float column as it is (a view, no copy: the
    roofline's float32 predictions are summed with float64 accumulators below); None for a prediction kept per
    identity (:mod:`tracekit.model.predictions`: read a device's rows at a time, :func:`_rows_of`)."""
    if c not in ops.columns:
        return None if predictions.has(ops, c) else np.full(len(ops), np.nan)
    if ops[c].dtype in (np.float64, np.float32):
        return ops[c].to_numpy()
    return pd.to_numeric(ops[c], errors="coerce").to_numpy(float)


def _rows_of(ops: pd.DataFrame, num: dict, c: str, ix: slice) -> np.ndarray:
    """The values of ``num[c]`` (:func:`_floats`) at the rows ``ix`` (a device's slice)."""
    v = num[c]
    return v[ix] if v is not None else predictions.values(ops, c, ix)


def build(ops: pd.DataFrame, steps: pd.DataFrame, device_chips: dict, *, step_source: str = "",
          model_flops_per_step: float | None = None, model_flops: tuple | None = None) -> Overview:
    """The headline from the roofline-joined ops, the steps breakdown (:func:`tracekit.analysis.timeline.
    step_breakdown`) and each device's :class:`tracekit.model.chips.Chip` ((host, device) -> Chip)."""
    return finish(stepstats.summary(steps), device_parts(ops, steps, device_chips), step_source=step_source,
                  model_flops_per_step=model_flops_per_step, model_flops=model_flops)


#: what each device adds to the pod's totals (:func:`device_parts`), beside :data:`DEVICE_COLUMNS`
TOTALS = ("flops", "model", "model_rows", "flop_rows", "hbm", "net", "hostb", "peak", "bw", "egress", "hostw",
          "work_ps", "flops_known_ps", "bytes_known_ps", "roof_known_ps")


def device_parts(ops: pd.DataFrame, steps: pd.DataFrame, device_chips: dict) -> pd.DataFrame:
    """Per device with steps, sorted: :data:`DEVICE_COLUMNS`, what it adds to each of :data:`TOTALS`
    (``tot_<name>``), the source of its peak (``peak_source``) and its dominant dtype (``dominant_dtype``). The
    parts of disjoint devices concatenate (in device order) into the parts of their union: :func:`finish`
    reads only them and the steps."""
    cols = DEVICE_COLUMNS + [f"tot_{t}" for t in TOTALS] + ["peak_source", "dominant_dtype"]
    if steps is None or not len(steps):
        return pd.DataFrame(columns=cols)
    in_step = column_numpy(ops, "step") >= 0 if "step" in ops.columns else np.zeros(len(ops), bool)
    sync = ~column_numpy(ops, "is_async", bool)
    marker = tl.is_async_marker(ops)
    coll = tl.is_collective(ops)
    hostx = ops["is_host_transfer"].fillna(False).to_numpy(bool) if "is_host_transfer" in ops.columns else \
        np.zeros(len(ops), bool)
    tohost = ops["to_host"].fillna(False).to_numpy(bool) if "to_host" in ops.columns else np.zeros(len(ops), bool)
    once = in_step & ~marker  # sync ops but the markers, and async windows: one row per execution
    work = once & sync & ~coll & ~hostx  # the compute path
    num = {c: _floats(ops, c) for c in ("flops", "bytes_accessed", "net_bytes", "roofline_ps", "network_ps",
                                       "trace_model_flops")}
    # an op of a virtual CPU device is judged at its share of the host (its roofline times the host's devices in
    # flight with it, tracekit.model.sharing): the possible step adds the devices' work at the whole host's peak
    conc = host_sharing.concurrency(ops) if "start_ps" in ops.columns else None
    own = self_time(ops)  # (a while or conditional whose body ops are traced: only the time outside them)
    cov = coverage.covered(ops)
    dev_rows = row_parts(ops, ["host", "device"])  # one slice per device of a frame sorted by device
    dcol = "compute_dtype" if "compute_dtype" in ops.columns else "dtype" if "dtype" in ops.columns else None
    by_codes = dcol is not None and isinstance(ops[dcol].dtype, pd.CategoricalDtype)
    if by_codes:
        dcodes = ops[dcol].array.codes
        dnames = [str(c) for c in ops[dcol].cat.categories.tolist()]
    # each device's steps (text order, as a groupby of the names sorts them) read from arrays: its closed steps'
    # mean (stepstats.closed_steps: every step where none is closed)
    per_device = stepstats.device_rows(steps)
    step_ps = column_numpy(steps, "step_ps")
    open_end = column_numpy(steps, "open_end", bool) if "open_end" in steps.columns else np.zeros(len(steps), bool)
    offload = column_numpy(steps, "offload_wait_ps") if "offload_wait_ps" in steps.columns else None
    sharing = shared_chips(device_chips, [k for k, _ in per_device])
    rows = []
    for (h, d), srow in per_device:
        n = len(srow)
        ix = dev_rows.get((h, d), slice(0, 0))
        ch = device_chips.get((h, d))
        w, o = work[ix], once[ix]
        nf, nm, nr, nn, nb, nnet = (_rows_of(ops, num, c, ix) for c in (
            "flops", "trace_model_flops", "roofline_ps", "network_ps", "bytes_accessed", "net_bytes"))
        if conc is not None:
            nr = nr / conc[ix]
        cl, hx = coll[ix], hostx[ix]
        # how much of the compute path's measured time has a FLOP count, a byte count, a roofline (a trace without
        # HLO has none: its FLOPs, bytes and roofline are unknown, not zero)
        wd = own[ix][w]
        known = {k: int(wd[~np.isnan(v[w])].sum()) for k, v in (("flops", nf), ("bytes", nb))}
        known["roof"] = int(wd[cov[ix][w]].sum())  # covered: tracekit.analysis.coverage, the one definition
        work_ps = int(wd.sum())
        fl = nf[o & ~np.isnan(nf)]
        mf = nm[o]
        with_flops = o & (nf > 0)  # (NaN compares False: no NaN-free copy; the rows with flops have no NaN)
        if by_codes:
            dtype = _dominant_of_codes(nf[with_flops], dcodes[ix][with_flops], dnames)
        else:
            dcols = [c for c in ("flops", "compute_dtype", "dtype") if c in ops.columns]
            dtype = _dominant_dtype(ops.iloc[np.arange(len(ops))[ix][with_flops]][dcols])
        peak, psrc = precision.peak(ch, dtype) if ch is not None else (np.nan, "unknown: no chip")
        # a chip its devices share (XLA:CPU's virtual devices of a host): each has its share of the peaks, and the
        # totals count the chip once
        nsh = len(sharing.get((h, d), ((h, d),)))
        peak /= nsh
        # the roofline time of the compute path, the measured (own) time where it is unknown (in float64: exact)
        comp = nr[w].astype(np.float64)
        np.copyto(comp, wd.astype(float), where=np.isnan(comp))
        comp = comp.sum(dtype=np.float64)
        netw = np.nansum(nn[o & cl], dtype=np.float64)
        # host link: full duplex, one-way peak each way: the busier direction's bytes set its time. Each
        # transfer's own time (bytes / bandwidth), not its network_ps: that one includes its wait behind the
        # transfers in flight before it (work counted once)
        xb, xout = nnet[o & hx], tohost[ix][o & hx]
        hostb = np.nansum(xb, dtype=np.float64)
        busier = max(np.nansum(xb[xout], dtype=np.float64), np.nansum(xb[~xout], dtype=np.float64))
        one_way = ch.host_link_bw_bytes_per_s if ch is not None else np.nan
        hostt = busier / one_way * 1e12 if busier > 0 and one_way > 0 else 0.0
        parts = {"compute": comp, "interconnect": netw, "host link": hostt}
        bound = max(parts, key=lambda k: parts[k])
        tot = {"flops": fl.sum(), "model": np.nansum(mf),
               "model_rows": int((~np.isnan(nm) & with_flops).sum()),
               "flop_rows": int(with_flops.sum()), "hbm": np.nansum(nb[w]),
               "net": np.nansum(nnet[o & cl]), "hostb": hostb,
               "peak": 0.0, "bw": 0.0, "egress": 0.0, "hostw": 0.0, "work_ps": work_ps,
               "flops_known_ps": known["flops"], "bytes_known_ps": known["bytes"], "roof_known_ps": known["roof"]}
        if ch is not None:
            tot["peak"] = peak if peak == peak else 0.0
            tot["bw"] = ch.hbm_bw_bytes_per_s if ch.hbm_bw_bytes_per_s == ch.hbm_bw_bytes_per_s else 0.0
            tot["egress"] = ch.egress_bw_bytes_per_s if ch.egress_bw_bytes_per_s == ch.egress_bw_bytes_per_s else 0
            tot["hostw"] = 2 * ch.host_link_bw_bytes_per_s if ch.host_link_bw_bytes_per_s == \
                ch.host_link_bw_bytes_per_s else 0.0  # both directions
            for k in ("bw", "egress", "hostw"):
                tot[k] /= nsh
        closed = srow[~open_end[srow]]  # (the last run's own execution is not a step time)
        closed = closed if len(closed) else srow
        mean = _mean(step_ps[closed])
        unknown = work_ps > 0 and not known["flops"]  # compute ran, none of it with a FLOP count
        f_step = np.nan if unknown else fl.sum() / n
        no_roof = work_ps > 0 and not known["roof"]  # the "possible" step would be measured time, not a roofline
        step_total = step_ps[srow]
        step_total = int(step_total.sum()) if step_total.dtype.kind in "iu" else int(pd.Series(step_total).sum())
        rows.append({"host": h, "device": d, "steps": n, "step_mean_ps": mean, "step_total_ps": step_total,
                     "flops_per_step": f_step, "model_flops_per_step": np.nansum(mf) / n if np.isfinite(mf).any()
                     else np.nan, "peak_flops_per_s": peak,
                     "mfu": f_step / (peak * mean / 1e12) if peak == peak and peak > 0 and mean > 0 else np.nan,
                     "possible_step_ps": np.nan if no_roof else parts[bound] / n, "bound_by": "" if no_roof else bound,
                     "roofline_known_share": known["roof"] / work_ps if work_ps else np.nan,
                     "host_link_per_step_ps": hostt / n, "offload_wait_per_step_ps": _mean(offload[srow])
                     if offload is not None else 0.0,
                     **{f"tot_{k}": v for k, v in tot.items()}, "peak_source": psrc, "dominant_dtype": dtype})
    # devices sharing one chip run their work on it one after the other: each one's possible step is theirs added
    # up (unknown when any is)
    at = {(r["host"], r["device"]): r for r in rows}
    for r in rows:
        r["mfu_at_possible"] = _util(r["flops_per_step"], r["peak_flops_per_s"], r["possible_step_ps"])
    for members in {tuple(m) for m in sharing.values() if len(m) > 1}:
        total = float(sum(at[k]["possible_step_ps"] for k in members))
        # the chip's utilization, not one device's share of it: every member's FLOPs over the whole chip's peak
        # (a device that does more than its share would read above 100 % of its part of the peak)
        flops = float(sum(at[k]["flops_per_step"] for k in members))
        peak = float(sum(at[k]["peak_flops_per_s"] for k in members))
        # the chip's step time: its slowest member's, as the overview reads it (slowest_device_steps)
        mine = np.sort(np.concatenate([r for k, r in per_device if k in members]))
        chip_step = float(slowest_device_steps(steps.iloc[mine])[0].mean())
        for k in members:
            at[k]["possible_step_ps"] = total
            at[k]["mfu"] = _util(flops, peak, chip_step)
            at[k]["mfu_at_possible"] = _util(flops, peak, total)
    return pd.DataFrame(rows, columns=cols)


def _mean(v: np.ndarray) -> float:
    """``pd.Series(v).mean()``: integers (picoseconds, as the breakdown's columns are) summed as pandas sums them
    (NumPy's sum into float64, the same rounding past 2**53) over their count; other values (missing ones skipped)
    by pandas itself."""
    if v.dtype.kind in "iu" and len(v):
        return float(v.sum(dtype=np.float64) / len(v))
    return float(pd.Series(v).mean())


def _util(flops_per_step: float, peak: float, step_ps: float) -> float:
    """FLOPs per step / (peak x step time); NaN when the peak or the time is unknown or 0."""
    if not (peak == peak and peak > 0 and step_ps == step_ps and step_ps > 0):
        return np.nan
    return flops_per_step / (peak * step_ps / 1e12)


def shared_chips(device_chips: dict, devices: list) -> dict:
    """(host, device) -> the ``devices`` that share its chip (itself included), for devices that share one: XLA:CPU's
    virtual devices of one host run on the same cores and memory, one chip however many devices. Every other
    device is a chip of its own (absent)."""
    group: dict = {}
    for h, d in devices:
        ch = device_chips.get((h, d))
        if ch is not None and (ch.family == "cpu" or getattr(ch, "host_shared", False)):
            group.setdefault((h, ch.name), []).append((h, d))
    return {k: tuple(m) for m in group.values() if len(m) > 1 for k in m}


def slowest_device_steps(steps: pd.DataFrame, column: str = "step_ps") -> tuple[pd.Series, str]:
    """The step times (``column``: ``step_ps`` of the breakdown, ``duration_ps`` of the steps frame) of the slowest
    device, the one with the largest median step time (then the largest mean; then the first in host, device
    order), and its name as ``host/device``; over the :func:`tracekit.analysis.stepstats.closed_steps` only."""
    steps = closed_steps(steps)
    g = steps.assign(host=steps["host"].astype(str), device=steps["device"].astype(str)).groupby(
        ["host", "device"], sort=True)[column]
    rank = pd.DataFrame({"median": g.median(), "mean": g.mean()})
    key = rank.sort_values(["median", "mean"], ascending=False, kind="stable").index[0]
    mine = (text_numpy(steps, "host") == key[0]) & (text_numpy(steps, "device") == key[1])
    return steps[column][mine].astype("float64"), f"{key[0]}/{key[1]}"


def finish(ss: stepstats.StepSummary, parts: pd.DataFrame, *, step_source: str = "",
           model_flops_per_step: float | None = None, model_flops: tuple | None = None) -> Overview:
    """The headline from the steps breakdown's :class:`tracekit.analysis.stepstats.StepSummary` and the devices'
    :func:`device_parts` (of one host, or of every host merged); ``model_flops``: (per step, source, formula) of
    the model's FLOPs recovered from the trace's shapes (``--model transformer``), used for MFU when neither the
    user nor the trace gives them (:mod:`tracekit.analysis.mfu`)."""
    if not ss.rows:
        return Overview(devices=pd.DataFrame(columns=DEVICE_COLUMNS))
    times = ss.slowest[4]  # (the slowest device's step-time statistics, worked out where its steps are)
    t_mean = times["mean_ps"]
    step = {"steps": ss.steps, "timed_steps": times["timed_steps"], "mean_ps": t_mean, "p50_ps": times["p50_ps"],
            "p90_ps": times["p90_ps"], "min_ps": times["min_ps"], "max_ps": times["max_ps"],
            "source": step_source, "device": f"{ss.slowest[2]}/{ss.slowest[3]}",
            "definition": "the step times of the slowest device (the largest median step time)"}
    tot = {}
    for k in TOTALS:
        acc = 0.0 if k not in ("model_rows", "flop_rows") else 0
        for v in stored(parts, f"tot_{k}").tolist():  # (in row order, as Python numbers: as the Series iterates)
            acc += v
        tot[k] = acc
    srcs, dtypes = set(parts["peak_source"]), set(parts["dominant_dtype"])
    dev = parts[DEVICE_COLUMNS].reset_index(drop=True)
    n_steps = step["steps"]
    t_s = t_mean / 1e12
    mformula = ""
    if model_flops_per_step is not None:
        per, kind, label = float(model_flops_per_step), "model", "MFU"
        src = "--model-flops-per-step (given by the user)"
    elif tot["flop_rows"] and tot["model_rows"] == tot["flop_rows"]:
        per, kind, label = tot["model"] / n_steps, "model", "MFU"
        src = "trace: model_flops stats of the ops (the compiler's model FLOPs, rematerialization excluded)"
    elif model_flops is not None and np.isfinite(model_flops[0]):
        per, kind, label, src = float(model_flops[0]), "model", "MFU", model_flops[1]
        mformula = model_flops[2]
    else:
        per, kind, label = tot["flops"] / n_steps, "hardware", "hardware FLOPs utilization"
        src = ("HLO cost model / trace flops stats: counts every executed FLOP, recomputation (rematerialization) "
               "included, which the trace cannot tell apart — pass --model-flops-per-step N for MFU")
    work = tot["work_ps"]

    def share(k):  # of the compute path's measured time, the part with a known count (NaN: no compute at all)
        return tot[k] / work if work else np.nan
    hw = tot["flops"] / n_steps
    if work and not tot["flops_known_ps"]:  # compute ran and none of it has a FLOP count: unknown, not zero
        hw = np.nan
        if kind == "hardware":
            per = np.nan
            src = ("unknown: no compute op in the steps has a FLOP count (no flops stats, and no HLO or none of its "
                   "compute ops priced) — pass --model-flops-per-step N for MFU")
    util = per / (tot["peak"] * t_s) if tot["peak"] > 0 and t_s > 0 else np.nan
    flops = {"label": label, "kind": kind, "per_step": per, "source": src, "dtype": ", ".join(sorted(dtypes)),
             "peak_flops_per_s": tot["peak"], "peak_source": "; ".join(sorted(srcs)), "utilization": util,
             "hardware_per_step": hw, "known_share": share("flops_known_ps")}
    flops.update(mfu_mod.figures(hw, per if kind == "model" else None, src, tot["peak"], t_mean, mformula))

    def bw(total_bytes, peak, what, src, known=np.nan):
        per_b = total_bytes / n_steps
        ach = per_b / t_s if t_s > 0 else np.nan
        return {"bytes_per_step": per_b, "achieved_bytes_per_s": ach, "peak_bytes_per_s": peak or np.nan,
                "utilization": ach / peak if peak else np.nan, "what": what, "source": src, "known_share": known}
    hbm_bytes = np.nan if work and not tot["bytes_known_ps"] else tot["hbm"]  # (no byte count at all: unknown)
    band = {"hbm": bw(hbm_bytes, tot["bw"], "bytes_accessed of the compute ops", "cost model / trace stats; "
                      "peak: chip table or trace", share("bytes_known_ps")),
            "interconnect": bw(tot["net"], tot["egress"], "bytes each device sends in collectives",
                               "collective cost model; peak: chip egress bandwidth"),
            "host_link": bw(tot["hostb"], tot["hostw"], "bytes of host transfers (host offload, infeed)",
                            "HLO shapes; peak: chip host-link bandwidth, both directions (full duplex)")}
    ps = pd.to_numeric(dev["possible_step_ps"], errors="coerce") if len(dev) else pd.Series(dtype=float)
    possible = float(ps.max()) if ps.notna().any() else np.nan  # (NaN: no device's compute has a roofline)
    bound = str(dev.loc[ps.idxmax(), "bound_by"]) if ps.notna().any() else ""
    roof = {"possible_step_ps": possible, "bound_by": bound, "ratio": t_mean / possible if possible > 0 else np.nan,
            "utilization_at_possible": per / (tot["peak"] * possible / 1e12) if possible > 0 and tot["peak"] > 0
            else np.nan, "hfu_at_possible": hw / (tot["peak"] * possible / 1e12) if possible > 0 and tot["peak"] > 0
            else np.nan, "known_share": share("roof_known_ps"),
            "definition": "max over compute ops' roofline time (their measured time where the roofline is "
            "unknown), collectives' network time and host transfers' host-link time per step (each resource at its "
            "roofline, the rest hidden); devices that share one chip (XLA:CPU's virtual devices of a host) add "
            "theirs up; unknown when no compute op has a roofline"}
    bd = {c: ss.sums[c] for c in BUCKETS if c in ss.sums}
    bd["step_ps"] = ss.sums["step_ps"]
    bd["collective_levels"] = {c[len("collective_exposed_"):-3]: v for c, v in ss.sums.items()
                               if c.startswith("collective_exposed_") and c != "collective_exposed_ps"}
    return Overview(step=step, flops=flops, bandwidth=band, roofline=roof, breakdown=bd, devices=dev)
