"""What a TPU trace measured inside its kernels: the ``_counters_`` line (matrix-unit busy cycles) and the Mosaic
pipeline stages on the ``XLA TraceMe`` line, each joined to the ``XLA Ops`` execution it ran in and summed per op
(one row per (program, op) of a device: :data:`tracekit.schema.KERNEL_PROFILE`).

Traces get these lines when captured with the kernel-profiling flags (``LIBTPU_INIT_ARGS=
--xla_enable_custom_call_region_trace=true --xla_xprof_register_llo_debug_info=true``). Two forms of counter line
are read:

* **Hardware counters** (xprof's ``kernel_utilization`` tool reads these: ``ConvertXSpaceToKernelUtilization`` in
  openxla/xprof ``xprof/convert/xplane_to_utilization_viewer.cc``, the version shipped in xprof 2.24.2; its formulas
  are ``ComputeTpuGenericTcUnitUtilization`` in ``xprof/convert/tpu_generic_utilization_utils.cc`` @ a27d00aa, the
  counter ids ``xprof/utils/tpu_counter_ids_v6e.h`` / ``tpu_counter_ids_v7x.h`` @ a27d00aa). A line named
  ``_counters_``, ``counters`` or ``counters_<kernel>`` on a ``TPU v6 Lite`` or ``TPU v7x`` plane; each event
  carries ``performance_counter_id`` and ``counter_value`` (on the event, else its metadata; an id of 0 falls back
  to the event's metadata id, a double value of 0 to the integer value). Values are truncated to whole counts (NaN
  and negatives count 0) and summed per counter. MXU busy = 0.5 x MXU_BUSY_1 + MXU_BUSY_2 (cycles with one or both
  of the core's two matrix units busy) over the core's cycles; v7x adds its two TensorCores (dies). A kernel whose
  cycle counter is absent gets its duration times the TensorCore clock (1.75 GHz v6e, 1.9 GHz v7x), as xprof does.
* **LLO slot occupancy** (``% util`` per ~1 us window on events named after the unit, ``MXU`` among them): the
  compiler's static slot use laid over measured windows, not a hardware count. MXU busy = the windows' durations
  weighted by their ``% util``, over the windows' durations.

The stage names are Pallas's own (``jax/_src/pallas/mosaic/pipeline.py``, jax 0.10.2: ``emit_pipeline`` wraps
each step in ``jax.named_scope``): ``ep_wait_in`` waits for an input block's DMA, ``ep_copy_in`` starts the next
one, ``ep_run_kernel`` is the kernel body, ``ep_copy_out`` starts an output block's DMA, ``ep_wait_out`` and
``ep_finalize`` wait for one, ``ep_initialize_N`` starts the first fetches.

A counter sample or stage event belongs to the op execution on the same plane whose span (the line's host-clock
times, both read before :mod:`tracekit.ingest.devclock` moves the op starts) holds its midpoint; events outside
every op are not counted. A ``counters_<kernel>`` line none of whose events falls inside an op is taken whole for
the op named ``<kernel>`` when the plane has one (xprof reads such a line whole).
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.ingest.events import stat_floats, stat_ints
from tracekit.ingest.xspace import as_float, as_int, stats_dict

#: Mosaic ``emit_pipeline`` stage scopes -> the KERNEL_PROFILE column their time is added to
STAGES = {"ep_wait_in": "ep_wait_in_ps", "ep_wait_out": "ep_wait_out_ps", "ep_finalize": "ep_wait_out_ps",
          "ep_copy_in": "ep_copy_in_ps", "ep_copy_out": "ep_copy_out_ps", "ep_run_kernel": "ep_run_kernel_ps"}
_INIT = re.compile(r"^ep_initialize_\d+$")
STAGE_COLUMNS = ("ep_wait_in_ps", "ep_wait_out_ps", "ep_copy_in_ps", "ep_copy_out_ps", "ep_run_kernel_ps",
                 "ep_initialize_ps")
TRACEME = "XLA TraceMe"

# Counter ids (xprof/utils/tpu_counter_ids_v6e.h, tpu_counter_ids_v7x.h @ a27d00aa)
_V6E = {"cycles": 3257466888, "mxu_busy_1": 3257467408, "mxu_busy_2": 3257467416}
_V7X_CORES = ({"cycles": 2847490056, "mxu_busy_1": 2791875024, "mxu_busy_2": 2791875032},  # die 0
              {"cycles": 3384360968, "mxu_busy_1": 3328745936, "mxu_busy_2": 3328745944})  # die 1
#: device_type_string -> (per-core counter ids, TensorCore clock in Hz): the chips xprof's reader supports
COUNTER_CHIPS = {"TPU v6 Lite": ((_V6E,), 1.75e9), "TPU v7x": (_V7X_CORES, 1.9e9)}
HW_BASIS, LLO_BASIS = "hw_counters", "llo_util"


def is_counter_line(name: str) -> bool:
    return name in ("_counters_", "counters") or name.startswith("counters_")


def wanted(name: str) -> bool:
    """Whether a TPU line is one this module reads."""
    return name == TRACEME or is_counter_line(name)


class PlaneProfile:
    """The profile lines of one TPU plane, read while the lines are alive (:meth:`read`), joined to the plane's op
    executions once they are all read (:meth:`frame`)."""

    def __init__(self, device_kind: str):
        self.chip = COUNTER_CHIPS.get(device_kind)
        self.samples: list = []  # (line name, mid ps, duration ps, counter id, value) arrays per counter line
        self.llo: list = []  # (mid, duration, util %) of MXU windows
        self.stages: list = []  # (mid, duration, column index) of stage events

    def read(self, head, line, names: dict, odd: dict | None = None) -> None:
        if not line.n_events:
            return
        mid = line.offset_ps + line.timestamp_ns * 1000 + line.event_duration_ps // 2
        md = head.event_metadata
        uniq, inv = np.unique(line.metadata_id, return_inverse=True)
        md_names = [(md[int(u)].display_name or md[int(u)].name) if int(u) in md else "" for u in uniq]
        if line.name == TRACEME:
            col = np.array([_stage_col(n) for n in md_names], np.int64)[inv]
            keep = col >= 0
            if keep.any():
                self.stages.append((mid[keep], line.event_duration_ps[keep], col[keep]))
            return
        ids = {v: k for k, v in names.items()}
        util = stat_floats(line, ids.get("% util", -1), odd, "% util")
        mxu = (np.array([n == "MXU" for n in md_names], bool)[inv]) & ~np.isnan(util)
        if mxu.any():
            self.llo.append((mid[mxu], line.event_duration_ps[mxu], util[mxu]))
        if self.chip is None:
            return
        has_id, cid = stat_ints(line, ids.get("performance_counter_id", -1), odd, "performance_counter_id")
        val = stat_floats(line, ids.get("counter_value", -1), odd, "counter_value")
        md_stats = [stats_dict(md[int(u)].stats, names) if int(u) in md else {} for u in uniq]
        md_id = np.array([as_int(s.get("performance_counter_id", 0)) for s in md_stats], np.int64)[inv]
        md_val = np.array([as_float(s.get("counter_value", np.nan)) for s in md_stats], float)[inv]
        cid = np.where(has_id & (cid != 0), cid, md_id)
        cid = np.where(cid == 0, line.metadata_id, cid)  # (xprof: the event's id when the counter id is 0)
        val = np.where(np.isnan(val), md_val, val)
        ok = ~np.isnan(val)
        if ok.any():  # whole counts, as xprof keeps them (NaN and negatives: 0)
            v = np.floor(np.clip(np.nan_to_num(val[ok], nan=0.0), 0, 2.0**64))
            self.samples.append((line.name, mid[ok], line.event_duration_ps[ok], cid[ok], v))

    def frame(self, op_chunks: list, host: str, device: str) -> pd.DataFrame | None:
        """Per (program, op) of the plane's ``XLA Ops`` chunks (:class:`tracekit.ingest.events.Acc` chunks, before
        the device clock moves their starts): the profile's sums, or None when the plane has none."""
        if not (self.samples or self.llo or self.stages) or not op_chunks:
            return None
        start = np.concatenate([c["start_ps"] for c in op_chunks])
        dur = np.concatenate([c["duration_ps"] for c in op_chunks])
        pid = np.concatenate([np.asarray(c["program_id"], np.uint64) for c in op_chunks])
        names = np.concatenate([np.array(c["op"].categories + [""], dtype=object)[c["op"].codes] for c in op_chunks])
        order = np.argsort(start, kind="stable")
        s_sorted, e_sorted = start[order], (start + dur)[order]
        n = len(start)

        def owner(mid):
            k = np.searchsorted(s_sorted, mid, "right") - 1
            inside = (k >= 0) & (mid < e_sorted[np.maximum(k, 0)])
            return np.where(inside, order[np.maximum(k, 0)], -1)

        cols: dict = {c: np.zeros(n) for c in STAGE_COLUMNS}
        staged = np.zeros(n, bool)
        for mid, d, col in self.stages:
            o = owner(mid)
            m = o >= 0
            for j in np.unique(col[m]):
                sel = m & (col == j)
                cols[STAGE_COLUMNS[j]] += np.bincount(o[sel], weights=d[sel], minlength=n)
            staged[o[m]] = True
        busy, span = np.zeros(n), np.zeros(n)
        basis = np.full(n, "", dtype=object)
        counted = self._counters(owner, names, dur, busy, span)
        basis[counted] = HW_BASIS
        for mid, d, u in self.llo:
            o = owner(mid)
            m = (o >= 0) & ~counted[np.maximum(o, 0)]  # (hardware counts win where both are there)
            busy += np.bincount(o[m], weights=d[m] * u[m] / 100.0, minlength=n)
            span += np.bincount(o[m], weights=d[m].astype(float), minlength=n)
            basis[o[m]] = LLO_BASIS
        has = staged | (span > 0)
        if not has.any():
            return None
        rows = pd.DataFrame({"program_id": pid[has], "op": names[has].astype(str), "kernel_ps": dur[has],
                             "mxu_busy": busy[has], "mxu_span": span[has], "mxu_basis": basis[has],
                             "counted": (span[has] > 0).astype(np.int64), "staged": staged[has].astype(np.int64),
                             **{c: v[has] for c, v in cols.items()}})
        g = rows.groupby(["program_id", "op"], sort=False)
        out = g.agg(profiled_executions=("kernel_ps", "size"), kernel_ps=("kernel_ps", "sum"),
                    mxu_busy=("mxu_busy", "sum"), mxu_span=("mxu_span", "sum"),
                    mxu_basis=("mxu_basis", lambda s: ",".join(sorted(set(s) - {""}))),
                    counted_executions=("counted", "sum"), staged_executions=("staged", "sum"),
                    **{c: (c, "sum") for c in STAGE_COLUMNS}).reset_index()
        out["mxu_busy"] = out["mxu_busy"].where(out["mxu_span"] > 0)
        out["mxu_span"] = out["mxu_span"].where(out["mxu_span"] > 0)
        for c in STAGE_COLUMNS:
            out[c] = out[c].where(out["staged_executions"] > 0)
        out["host"], out["device"] = host, device
        return schema.conform(out, schema.KERNEL_PROFILE, extra=False)

    def _counters(self, owner, names, dur, busy, span) -> np.ndarray:
        """Add each op execution's MXU busy and cycles from the hardware counters (in place); which executions
        had any."""
        n = len(dur)
        counted = np.zeros(n, bool)
        if self.chip is None or not self.samples:
            return counted
        cores, clock = self.chip
        wanted_ids = np.array(sorted({v for core in cores for v in core.values()}), np.int64)
        sums = {int(c): np.zeros(n) for c in wanted_ids}
        nominal = np.zeros(n)  # the longest sample per execution (for a named line taken whole)
        for lname, mid, d, cid, v in self.samples:
            o = owner(mid)
            if not (o >= 0).any() and lname.startswith("counters_"):  # a per-kernel line without times
                hit = np.flatnonzero(names == lname[len("counters_"):])
                if not len(hit):
                    continue
                o = np.full(len(mid), hit[0])
                nominal[hit[0]] = max(nominal[hit[0]], float(d.max()) if len(d) else 0.0)
            m = o >= 0
            counted[o[m]] = True
            for c in wanted_ids:
                sel = m & (cid == c)
                if sel.any():
                    sums[int(c)] += np.bincount(o[sel], weights=v[sel], minlength=n)
        length = np.where(nominal > 0, nominal, dur)
        for core in cores:
            cyc = sums[core["cycles"]].copy()
            missing = counted & (cyc == 0)  # xprof: the duration times the TensorCore clock (whole cycles)
            cyc[missing] = np.floor(length[missing] / 1e12 * clock)
            achieved = 0.5 * sums[core["mxu_busy_1"]] + sums[core["mxu_busy_2"]]
            ok = counted & (cyc > 0)
            busy[ok] += achieved[ok]
            span[ok] += cyc[ok]
        return counted & (span > 0)


def _stage_col(name: str) -> int:
    col = STAGES.get(name) or ("ep_initialize_ps" if _INIT.match(name or "") else None)
    return STAGE_COLUMNS.index(col) if col else -1


def combine(parts: list) -> pd.DataFrame:
    """The planes' rows as one frame (empty when none had a profile)."""
    parts = [p for p in parts if p is not None and len(p)]
    return schema.conform(pd.concat(parts, ignore_index=True), schema.KERNEL_PROFILE, extra=False) if parts else \
        schema.empty(schema.KERNEL_PROFILE)
