"""The frames rules read, and the registered Python checks for rules that are not one expression.

:func:`frames_for_rules` builds every frame a rule may name (``frame:`` in a rule file):

* ``ops``: the ops frame plus ``is_collective``, ``is_matmul``, ``is_data_shuffle``, ``is_host_transfer``
  (:mod:`tracekit.analysis.timeline` classifiers) and ``in_step`` (the op starts inside a step of its device).
* ``op_stats``: sync ops aggregated per (module, op), see :func:`op_stats`.
* ``collectives``: :func:`tracekit.analysis.timeline.collective_overlap`.
* ``steps``: :func:`tracekit.analysis.timeline.step_breakdown` (``step_ps`` is the step's duration).
* ``devices``: :func:`tracekit.analysis.timeline.device_summary` (its ``span_ps`` is the profiled time of a device).
* ``gaps``: :func:`tracekit.analysis.gaps.gaps`.
* ``host_events``: host-side events (:data:`tracekit.schema.HOST_EVENTS`) when the caller has them.

A check is ``fn(frames, params) -> DataFrame`` of evidence rows, registered with :func:`check` together with the
columns it adds to the rule's frame (or, with ``replaces=True``, the only columns it returns); the engine then
evaluates the rule's ``savings`` expression on those rows. The columns each frame has are declared in
:data:`tracekit.analysis.rule_schema.RULE_FRAMES`.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields

import numpy as np
import pandas as pd

from tracekit.analysis import gaps as idle, timeline as tl
from tracekit.analysis.outliers import modified_z
from tracekit.analysis.intervals import DeviceIndex, covered, device_index, merge, rows_view
from tracekit.analysis import kernelprof
from tracekit.analysis.opstats import finish, op_stats
from tracekit.analysis.rule_safety import regex_search_mask
from tracekit.analysis.textmatch import cat_mask
from tracekit.columns import column_numpy, text_numpy, with_columns
from tracekit.grouping import cat_apply
from tracekit.model import predictions
from tracekit.options import DEFAULTS
from tracekit.records import record

CHECKS: dict = {}
#: check name -> (columns: name -> (kind, meaning), replaces): what its evidence rows hold beyond the frame's own
#: columns (``replaces``: instead of them)
CHECK_COLUMNS: dict = {}


def check(name: str, columns: dict | None = None, *, replaces: bool = False):
    """Register ``fn(frames, params) -> DataFrame`` under ``name`` for rule files' ``check:``; ``columns``
    declares the columns it adds to the frame (all the columns it returns when ``replaces``)."""
    def deco(fn):
        CHECKS[name] = fn
        CHECK_COLUMNS[name] = (dict(columns or {}), replaces)
        return fn
    return deco


def check_columns(name: str, frame_columns: dict) -> dict:
    """The columns a rule with ``check: name`` on a frame with ``frame_columns`` can read after the check."""
    cols, replaces = CHECK_COLUMNS.get(name, ({}, False))
    return dict(cols) if replaces else {**frame_columns, **cols}


def in_steps(ops, steps) -> np.ndarray:
    """True where the op starts inside a step window of its own device. ``ops``/``steps``: frames or their
    :class:`~tracekit.analysis.intervals.DeviceIndex` (shared with the timeline jobs: grouped once)."""
    ix = device_index(ops)
    ops = ix.df
    out = np.zeros(len(ops), bool)
    if steps is None or device_index(steps).df.empty:
        return out
    sx = device_index(steps)
    steps = sx.df
    st = column_numpy(ops, "start_ps", np.int64)
    dur = steps["duration_ps"] if "duration_ps" in steps.columns else steps["step_ps"]
    sg = sx.groups()
    for key, oi in ix.groups().items():
        si = sg.get(key)
        if si is None:
            continue
        ms, me = merge(column_numpy(steps, "start_ps", np.int64)[si], (steps["start_ps"] + dur).to_numpy(np.int64)[si])
        s = rows_view(st, oi)  # (a device's rows of the sorted ops frame: a view, not a copy)
        k = np.searchsorted(ms, s, "right")
        k -= 1
        out[oi] = (k >= 0) & (s < me[np.maximum(k, 0)])
    return out


#: what the timeline functions read of the ops frame
TIMELINE_COLUMNS = ("host", "device", "device_kind", "module", "op", "opcode", "category", "kernel", "step",
                    "is_async", "start_ps", "duration_ps", "network_ps", "net_bytes", "group_size", "collective",
                    "is_host_transfer", "source", "bound_by", "collective_level", "net_level", "net_fast_ps",
                    "coll_pattern", "loop_trip_count")


@record(frozen=True)
class RuleFrames(Mapping):
    """What the timeline stage hands the rules: every frame a rule may name, by attribute or by name
    (``frames.steps`` or ``frames["steps"]``; a frame the analysis does not have, such as ``host_events`` without
    host events, is absent from the mapping). Frozen: the rules read the frames, never replace them."""

    ops: pd.DataFrame
    op_stats: pd.DataFrame
    collectives: pd.DataFrame
    steps: pd.DataFrame
    devices: pd.DataFrame
    gaps: pd.DataFrame
    host_events: pd.DataFrame | None = None
    #: the memory and utilization rules' frames (:func:`tracekit.analysis.memory.rule_frames`), when built
    memory_devices: pd.DataFrame | None = None
    memory_programs: pd.DataFrame | None = None
    offload: pd.DataFrame | None = None
    overview: pd.DataFrame | None = None
    #: the mesh axes against the book's limits (:func:`tracekit.analysis.parallelism.rule_frame`), when built
    parallel_axes: pd.DataFrame | None = None
    #: the serving rules' frame (:func:`tracekit.analysis.inference_report.rule_frame`), when built
    serving: pd.DataFrame | None = None

    def _names(self) -> list[str]:
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    def __getitem__(self, name: str) -> pd.DataFrame:
        if name not in self._names():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self):
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


def frames_for_rules(ops: pd.DataFrame, steps: pd.DataFrame | None = None, host_events: pd.DataFrame | None = None,
                     *, hidden: float = DEFAULTS.hidden, exposed: float = DEFAULTS.exposed,
                     min_gap_ps: int = DEFAULTS.min_gap_ps,
                     modules: pd.DataFrame | None = None, kernel_profile: pd.DataFrame | None = None,
                     sums: tuple | None = None) -> RuleFrames:
    """Every frame the rules read (see the module docstring), from the ops frame (with roofline columns when the
    roofline stage ran), the steps frame and optional host events. ``devices`` adds ``busy_ps_z`` (modified z
    across devices of the same device_kind). ``modules``: the program executions per device, which split the
    steps' idle time (see :func:`tracekit.analysis.timeline.step_breakdown`). ``kernel_profile``: what the trace
    measured inside its kernels (``Trace.kernel_profile``), in ``op_stats`` (:func:`tracekit.analysis.kernelprof.annotate`;
    NaN columns without it). ``sums``: :func:`tracekit.analysis.opstats.op_sums` of ``ops``, when the caller has
    them (``op_stats`` is made from them instead of grouping the rows again)."""
    steps = steps if steps is not None else pd.DataFrame(
        {"host": [], "device": [], "step": [], "start_ps": [], "duration_ps": []}).astype(
        {"step": "int64", "start_ps": "int64", "duration_ps": "int64"})
    # the timeline reads a few columns: give it a narrow view so its row selections copy little
    narrow = ops[[c for c in (*TIMELINE_COLUMNS, *predictions.COLUMNS) if c in ops.columns]]
    if "net_level" in narrow.columns and "collective_level" not in narrow.columns:
        narrow = with_columns(narrow, {"collective_level": level_of(narrow["net_level"])})
    # the derived frames are built one after the other: on two threads they were no faster in CPU time and held
    # two jobs' temporaries at once (15 M events: peak RSS 4.65 -> 4.27 GB serial, kernel time 9.9 -> 5.2 s)
    # one index per frame, handed to every job that reads it by device: grouped once, dropped when this returns
    ix, sx = DeviceIndex(narrow), DeviceIndex(steps)
    # (op stats first: their grouping's temporaries come before the device index holds its parts)
    done = {"op_stats": op_stats(ops) if sums is None else finish(*sums), "devices": tl.device_summary(ix, sx),
            "collectives": tl.collective_overlap(ix, hidden, exposed),
            "steps": tl.step_breakdown(ix, sx, modules), "gaps": idle.gaps(ix, sx, min_gap_ps),
            "in_step": in_steps(ix, sx)}
    flags = {"is_collective": tl.is_collective(ops), "is_matmul": tl.is_matmul(ops),
             "is_data_shuffle": tl.is_data_shuffle(ops), "is_host_transfer": tl.is_host_transfer(ops),
             "is_host_offload": is_host_offload(ops)}
    devices = done["devices"]
    if len(devices) and devices["device_kind"].notna().all() and devices["device_kind"].nunique() == 1:
        # (one kind: one group, in frame order)
        devices["busy_ps_z"] = modified_z(devices["busy_ps"]).to_numpy()
    else:
        devices["busy_ps_z"] = devices.groupby("device_kind")["busy_ps"].transform(
            lambda s: modified_z(s).to_numpy()) if len(devices) else pd.Series(dtype="float64")
    profiled = float(devices["span_ps"].sum()) if len(devices) else np.nan
    stats = kernelprof.annotate(done["op_stats"], kernel_profile)  # MXU counters, Mosaic stages
    stats["share"] = stats["total_ps"] / profiled
    xops = with_columns(ops, {**flags, "in_step": done["in_step"]})  # shares the columns: only the flags are new
    steps_frame = with_columns(done["steps"], {"collective_level": _step_levels(done["steps"])})
    coll = done["collectives"]
    coll["overlap_advice"] = overlap_advice(coll)
    return RuleFrames(ops=xops, op_stats=stats, collectives=coll, steps=steps_frame,
                      devices=devices, gaps=done["gaps"], host_events=host_events)


def level_of(net_level: pd.Series) -> pd.Categorical:
    """The interconnect level of each op from the collective model's ``net_level`` ('ici latency' -> 'ici'; a group
    of one -> ''; a collective the model could not price -> 'unpriced'), as a categorical (per distinct value)."""
    c = net_level.astype("category") if not isinstance(net_level.dtype, pd.CategoricalDtype) else net_level
    mapped = [("" if v in ("", "none") else "unpriced" if v in ("unknown", "not priced") else
               str(v).replace(" latency", "")) for v in c.cat.categories.astype(str)]
    cats = sorted(set(mapped))
    codes = np.append(np.array([cats.index(m) for m in mapped], np.int32), cats.index("") if "" in cats else -1)
    if "" not in cats:
        cats = cats + [""]
        codes[-1] = len(cats) - 1
    return pd.Categorical.from_codes(codes[c.array.codes], categories=cats)


def _step_levels(steps: pd.DataFrame) -> pd.Categorical:
    """Per step row: the level with the most exposed collective time (step_breakdown's
    ``collective_exposed_<level>_ps``), 'none' when the step has no exposed collective time; a categorical (one
    code per step rather than a string object each)."""
    cols = [c for c in steps.columns if c.startswith("collective_exposed_") and c != "collective_exposed_ps"]
    names = [c[len("collective_exposed_"):-3] for c in cols]
    cats = names + ([] if "none" in names else ["none"])
    codes = np.full(len(steps), cats.index("none"), np.int32)
    if cols and len(steps):
        vals = steps[cols].to_numpy(np.int64)
        best = vals.argmax(axis=1)
        has = vals.max(axis=1) > 0
        codes[has] = best[has]
    return pd.Categorical.from_codes(codes, categories=cats)


def is_host_offload(ops: pd.DataFrame) -> np.ndarray:
    """Copies between device and host memory that XLA scheduled itself (host offload: memory space S(5)), which
    the roofline marks ``is_host_transfer``: deliberate, and not an input pipeline."""
    if "is_host_transfer" not in ops.columns:
        return np.zeros(len(ops), bool)
    if "opcode" not in ops.columns:
        return np.zeros(len(ops), bool)
    copy = cat_apply(ops["opcode"], lambda v: str(v) in ("copy", "copy-start", "copy-done"))
    return column_numpy(ops, "is_host_transfer", bool) & copy


#: how to let XLA overlap a collective, per platform (the rule's fix quotes the one of the evidence's device)
OVERLAP_ADVICE = {
    "TPU": "on TPU XLA's latency-hiding scheduler is on by default: make the collective async and fusible "
           "(--xla_tpu_enable_async_collective_fusion=true, --xla_tpu_enable_async_collective_fusion_fuse_all_gather"
           "=true, --xla_tpu_overlap_compute_collective_tc=true) and leave it independent work",
    "GPU": "on GPU enable the latency-hiding scheduler (--xla_gpu_enable_latency_hiding_scheduler=true) so XLA "
           "starts the collective early",
    "CPU": "XLA:CPU runs collectives as blocking thunks: only a program that gives them independent work in "
           "another thread of the same step can hide them",
}


def overlap_advice(coll: pd.DataFrame) -> np.ndarray:
    """Per collective row, the scheduling advice for its platform (from the device name: TPU:n, GPU:n, CPU:n)."""
    if not len(coll):
        return np.zeros(0, dtype=object)
    dev = coll["device"].astype(str).str.split(":").str[0].str.upper()
    return dev.map(OVERLAP_ADVICE).fillna("schedule the collective early and give it independent work").to_numpy(
        dtype=object)


# -------------------------------------------------------------------------------------------------------- checks
@check("straggler-devices", {
    "busy_ps_z": ("float64", "modified z-score of busy_ps among devices of the same device_kind"),
    "busy_ps_median": ("float64", "median busy_ps of the devices of the same device_kind")})
def _straggler(frames: dict, p: dict) -> pd.DataFrame:
    """Devices whose busy time has a modified z-score above ``threshold`` among devices of the same kind (at
    least ``min_devices`` of them) and exceeds their median by at least ``min_excess`` of it; adds busy_ps_z and
    busy_ps_median."""
    dev = frames["devices"].copy()
    if len(dev) < p["min_devices"]:  # (no kind has that many devices: a one-device host, every host of a pod)
        return dev.iloc[:0].assign(busy_ps_z=np.empty(0), busy_ps_median=np.empty(0))
    kind = dev["device_kind"].astype(str) if "device_kind" in dev.columns else pd.Series("", index=dev.index)
    kinds = kind.to_numpy()
    if (kinds == kinds[0]).all():  # one kind of device (the common case): the one group, without a groupby
        dev["busy_ps_z"] = modified_z(dev["busy_ps"]).to_numpy()
        dev["busy_ps_median"] = np.full(len(dev), dev["busy_ps"].astype("float64").median())
        size = len(dev)
    else:
        g = dev.groupby(kind)["busy_ps"]
        dev["busy_ps_z"] = g.transform(lambda s: modified_z(s).to_numpy())
        dev["busy_ps_median"] = g.transform("median")
        size = g.transform("size")
    # a robust z-score alone flags tiny spreads when the other devices agree to the microsecond: the straggler
    # must also be busy at least ``min_excess`` (a fraction) longer than the median
    excess = dev["busy_ps"] - dev["busy_ps_median"]
    return dev[(dev["busy_ps_z"] > p["threshold"]) & (size >= p["min_devices"])
               & (excess >= p.get("min_excess", 0.0) * dev["busy_ps_median"])]


@check("launch-bound", {
    "host": ("text", "host"), "device": ("text", "device id"),
    "kernels": ("int64", "sync kernels on the device"),
    "tiny_kernels": ("int64", "kernels shorter than max_kernel_ps"),
    "tiny_fraction": ("float64", "tiny_kernels / kernels"),
    "mean_kernel_ps": ("float64", "mean kernel duration"),
    "launch_gap_ps": ("int64", "idle gaps before tiny kernels that are at most max_gap_ps long"),
    "span_ps": ("int64", "first kernel start to last kernel end")}, replaces=True)
def _launch_bound(frames: dict, p: dict) -> pd.DataFrame:
    """Per GPU device (rows with a kernel name or a GPU:* device): sync kernels shorter than ``max_kernel_ps``
    are tiny; the idle gap before a tiny kernel, when shorter than ``max_gap_ps``, is launch overhead
    (``launch_gap_ps``; longer gaps are host waits). Devices with at least ``min_kernels`` tiny kernels, a tiny
    fraction of at least ``min_tiny_fraction`` and launch gaps of at least ``min_gap_share`` of their span."""
    ops = frames["ops"]
    gpu = cat_mask(ops["kernel"], lambda s: s.str.len() > 0) if "kernel" in ops.columns else \
        np.zeros(len(ops), bool)
    gpu = gpu | cat_mask(ops["device"], lambda s: s.str.upper().str.startswith("GPU"))
    rows = _kernel_rows(ops[gpu & ~column_numpy(ops, "is_async", bool)], p) if gpu.any() else []  # (else no GPU)
    out = pd.DataFrame(rows, columns=["host", "device", "kernels", "tiny_kernels", "tiny_fraction", "mean_kernel_ps",
                                      "launch_gap_ps", "span_ps"])
    return out[(out["tiny_kernels"] >= p["min_kernels"]) & (out["tiny_fraction"] >= p["min_tiny_fraction"])
               & (out["launch_gap_ps"] >= p["min_gap_share"] * out["span_ps"])]


def _kernel_rows(k: pd.DataFrame, p: dict) -> list:
    """:func:`_launch_bound`'s figures of each device of the GPU kernel rows ``k``."""
    kx = DeviceIndex(k)
    st, en = column_numpy(k, "start_ps", np.int64), kx.ends()
    rows = []
    for (h, d), idx in kx.groups().items():
        o = idx[np.argsort(st[idx], kind="stable")]
        s, e = st[o], en[o]
        gap = np.r_[0, np.maximum(s[1:] - np.maximum.accumulate(e)[:-1], 0)]
        tiny = (e - s) < p["max_kernel_ps"]
        launch = int(gap[tiny & (gap > 0) & (gap <= p["max_gap_ps"])].sum())
        rows.append({"host": h, "device": d, "kernels": o.size, "tiny_kernels": int(tiny.sum()),
                     "tiny_fraction": tiny.mean(), "mean_kernel_ps": float((e - s).mean()), "launch_gap_ps": launch,
                     "span_ps": int(e.max() - s.min())})
    return rows


@check("compile-in-steps", {
    "in_step_ps": ("int64", "part of the event inside steps of its host")})
def _compile_in_steps(frames: dict, p: dict) -> pd.DataFrame:
    """Host events whose name matches ``pattern`` (case-insensitive), lasting at least ``min_duration_ps``, that
    overlap a step of any device of their host; adds in_step_ps (the overlap with the union of those steps)."""
    ev, steps = frames["host_events"], frames["steps"]
    hit = cat_mask(ev["name"], lambda names: regex_search_mask(names, p["pattern"], case=False))  # RE2
    ev = ev[hit & (column_numpy(ev, "duration_ps", np.int64) >= p["min_duration_ps"])].reset_index(drop=True)
    dur = steps["step_ps"] if "step_ps" in steps.columns else steps["duration_ps"]
    s0, s1 = column_numpy(steps, "start_ps", np.int64), (steps["start_ps"] + dur).to_numpy(np.int64)
    shost = text_numpy(steps, "host")
    a = column_numpy(ev, "start_ps", np.int64)
    inside = np.zeros(len(ev), np.int64)
    for h, idx in ev.groupby(ev["host"].astype(str)).indices.items():
        m = shost == h
        inside[idx] = covered(*merge(s0[m], s1[m]), a[idx], a[idx] + column_numpy(ev, "duration_ps", np.int64)[idx])
    ev["in_step_ps"] = inside
    return ev[ev["in_step_ps"] > 0]
