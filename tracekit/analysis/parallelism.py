"""The parallelism a trace ran: its mesh axes and what each does, the model's sizes, and where each axis stands
against the book's limits ("How to Scale Your Model"). ``tracekit parallelism PATH`` and the ``parallelism``
section of every report.

Map and reduce (the report's section: :mod:`tracekit.report.engine.parallelism`): :func:`host_summary` reads one
host (its step program's HLO facts, typed and small: :class:`HostParallelism`); :func:`reduce` takes the hosts'
summaries, the chip and the topology and gives the :class:`Parallelism`. The step program is the one with the most op time inside steps (every host runs the same
SPMD program; its facts are taken from the first host that has them).

How the axes and roles are found: :mod:`tracekit.analysis.parallel_axes`; the HLO facts they rest on:
:mod:`tracekit.analysis.parallel_hlo`; the sizes: :mod:`tracekit.analysis.parallel_dims`; the limits:
:mod:`tracekit.analysis.parallel_limits`. The HLO has no axis names, no model code and no optimizer: every
inference says what it rests on, and an axis whose collectives say nothing is ``unknown``.

Model FLOPs for MFU (``--model transformer``): ``6 x N x tokens`` per step, N the weights' parameters a token
passes through (dense weights, and an expert weight's share), tokens the global batch (per-device batch x the
batch split): the book's dense-transformer count without the attention term (12·L·d·S per token).
"""
from __future__ import annotations

import math
from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.analysis import parallel_axes, parallel_dims, parallel_hlo, parallel_limits
from tracekit.grouping import codes_of, distinct_rows, distinct_values, int_sums
from tracekit.model import precision
from tracekit.records import record

#: the columns of the rule frame ``parallel_axes`` (one row per axis with a limit)
FRAME_COLUMNS = ["axis", "size", "role", "limit_kind", "level", "bound", "value", "threshold", "intensity",
                 "axes_spanned", "peak_flops_per_s", "bandwidth_bytes_per_s", "per_device_batch_tokens", "d_ff",
                 "formula", "remedy", "time_ps"]


@record(frozen=True)
class HostParallelism:
    """One host's part: the step program's facts (None without HLO or steps), its op time in steps, the steps."""

    host: str
    program: parallel_hlo.ProgramFacts | None
    program_time_ps: int = 0
    steps: int = 0
    note: str = ""
    devices: int = 0  #: devices of this host that ran the step program


@record
class Parallelism:
    """The parallelism of a trace (:func:`reduce`)."""

    module: str = ""
    program_id: int = 0
    devices: int = 0
    axes: list = field(default_factory=list)  #: parallel_axes.Axis, each with .limit (parallel_limits.Limit)
    sizes: dict = field(default_factory=dict)  #: parallel_dims.dims
    dtype: str = ""
    peak: tuple = (math.nan, "")
    chip: str = ""
    topology: str = ""
    notes: list = field(default_factory=list)

    @property
    def known(self) -> bool:
        return bool(self.module)

    def model_flops(self) -> tuple[float, str]:
        """(6 x N x tokens per step, the formula with its numbers); NaN when N or the batch is unknown."""
        n = (self.sizes.get("params") or {}).get("value")
        t = (self.sizes.get("global_batch_tokens") or {}).get("value")
        if not n or not t:
            return math.nan, "unknown: the weights or the batch are not recovered from the HLO"
        return 6.0 * n * t, (f"6 x N x tokens = 6 x {n:,.0f} x {t:,.0f} (N: parameters a token passes through, "
                             "recovered from the weights' shapes; tokens: the global batch per step)")

    def to_dict(self) -> dict:
        axes = []
        for a in self.axes:
            lim = a.limit.to_dict() if getattr(a, "limit", None) is not None else {}
            axes.append({"index": a.index, "size": a.size, "devices": [list(g) for g in a.groups],
                         "role": a.role, "evidence": list(a.evidence),
                         "collectives": dict(sorted(a.collectives.items())),
                         "spans_with": sorted(a.spans), "derived": a.derived, "limit": lim})
        s = self.sizes

        def part(k):
            v = dict(s.get(k) or {})
            return v
        out = {"module": self.module, "program_id": self.program_id, "devices": self.devices, "axes": axes,
               "per_device_batch_tokens": part("per_device_batch_tokens"), "d_model": part("d_model"),
               "d_ff": part("d_ff"), "batch_split": part("batch_split"),
               "global_batch_tokens": part("global_batch_tokens"), "params": part("params"), "dtype": self.dtype,
               "peak_flops_per_s": self.peak[0], "peak_source": self.peak[1], "chip": self.chip,
               "topology": self.topology, "notes": list(self.notes)}
        if self.known:
            v, formula = self.model_flops()
            out["model_flops_per_step"] = {"value": v, "formula": formula}
        return out


def step_program(ops: pd.DataFrame) -> tuple[tuple[str, int] | None, int, int, int]:
    """((module, program id), its op time in steps, steps, devices that ran it) of the program with the most op time
    inside steps (the most op time overall when no op is in a step); (None, 0, 0, 0) without ops."""
    if ops is None or not len(ops):
        return None, 0, 0, 0
    sync = ~column_numpy(ops, "is_async", bool)
    step = column_numpy(ops, "step") if "step" in ops.columns else np.full(len(ops), -1)
    use = sync & (step >= 0) if (sync & (step >= 0)).any() else sync
    if not use.any():
        return None, 0, 0, 0
    # integer codes and per-program sums (no text copy of the module column, no pandas groupby: at 1.2 M op
    # executions those were the analysis' peak memory)
    inv, _, tuples = distinct_rows(ops, ["module", "program_id"])
    inv = np.asarray(inv)
    tot = int_sums(inv[use], column_numpy(ops, "duration_ps", np.int64)[use], len(tuples))
    present = np.bincount(inv[use], minlength=len(tuples)) > 0
    ok = [i for i, (m, p) in enumerate(tuples) if m is not None and p is not None and present[i]]
    if not ok:
        return None, 0, 0, 0
    # the most time; ties to the first in (module text, program id) order, as a sorted groupby's idxmax did
    best = min(ok, key=lambda i: (-int(tot[i]), str(tuples[i][0]), int(tuples[i][1])))
    m, pid = tuples[best]
    mcodes, mnames = codes_of(ops["module"], compact=True)
    mine = use & np.isin(mcodes, [i for i, v in enumerate(mnames) if str(v) == str(m)])
    # (a device's rows are in time order: steps and devices come in runs, counted from the runs' starts)
    steps = int(len(distinct_values(step[mine]))) if (step >= 0).any() else 0
    dcodes, _ = codes_of(ops["device"], compact=True)
    return (str(m), int(pid)), int(tot[best]), steps, int(len(distinct_values(dcodes[mine])))


def host_summary(tr, ops: pd.DataFrame | None = None, host: str | None = None) -> HostParallelism:
    """The :class:`HostParallelism` of one host of ``tr`` (``host``: which, when the trace holds several; the
    ops frame ``ops`` defaults to the trace's)."""
    ops = tr.ops if ops is None else ops
    name = host if host is not None else (tr.hosts[0] if tr.hosts else "")
    if host is not None and len(ops):
        hcodes, hnames = codes_of(ops["host"], compact=True)
        if not (len(hnames) == 1 and str(hnames[0]) == str(host) and (hcodes >= 0).all()):  # else: no copy
            ops = ops[np.isin(hcodes, [i for i, v in enumerate(hnames) if str(v) == str(host)])]
    if not tr.has_hlo:
        return HostParallelism(name, None, note="the trace has no HLO: no collectives or dots to read")
    key, t, steps, ndev = step_program(ops)
    if key is None:
        return HostParallelism(name, None, note="no device op ran: no step program")
    mod = next((m for m in tr.hlo_modules if m.name == key[0] and int(m.program_id) == key[1]), None)
    mod = mod or next((m for m in tr.hlo_modules if m.name == key[0]), None)
    if mod is None:
        return HostParallelism(name, None, t, steps, f"the step program {key[0]} has no HLO in the trace", ndev)
    proto = mod.proto.hlo_module if hasattr(mod.proto, "hlo_module") else mod.proto
    return HostParallelism(name, parallel_hlo.module_facts(int(mod.program_id), proto), t, steps, "", ndev)


def reduce(parts: list, *, chip=None, topology=None) -> Parallelism:
    """The :class:`Parallelism` of the hosts' summaries; ``chip`` (a :class:`tracekit.model.chips.Chip`) and
    ``topology`` (:class:`tracekit.model.topology.Topology`) price the limits (None: unknown)."""
    have = [p for p in parts if p.program is not None]
    if not have:
        notes = sorted({p.note for p in parts if p.note}) or ["no trace"]
        return Parallelism(notes=notes)
    # the program most hosts ran (by op time), its facts from the first host that has them
    time: dict = {}
    for p in have:
        k = (p.program.module, p.program.program_id)
        time[k] = time.get(k, 0) + p.program_time_ps
    key = max(sorted(time), key=lambda k: time[k])
    facts = next(p.program for p in have if (p.program.module, p.program.program_id) == key)
    axes = parallel_axes.assign_roles(facts)
    weights = {p.number: p for p in facts.params if p.kind == parallel_hlo.WEIGHT}
    dots = {d.name: d for d in facts.dots}
    ev = {}
    for c in facts.collectives:
        for o in c.operands:
            e = parallel_axes.classify(c, o, weights, dots)
            if e is not None:
                ev[(c.name, o.index)] = e
    ids = {d for c in facts.collectives for g in c.groups for d in g} | \
        {d for c in facts.collectives for pr in c.pairs for d in pr}
    ran = sum(p.devices for p in have if (p.program.module, p.program.program_id) == key)
    n_dev = max(len(ids), ran, 1)
    sizes = parallel_dims.dims(facts, axes, ev, n_dev)
    dtype = _dominant_dtype(facts)
    peak = precision.peak(chip, dtype) if chip is not None else (math.nan, "unknown: no chip")
    tokens = sizes["per_device_batch_tokens"]["value"]
    d_ff = sizes["d_ff"]["value"]
    for a in axes:
        a.limit = parallel_limits.limit(a.role, a.size, a.groups, topology, chip, peak,
                                        float(tokens) if tokens else math.nan, float(d_ff) if d_ff else math.nan)
    notes = []
    prod = 1
    for a in axes:
        prod *= a.size
    if axes and prod < n_dev:
        notes.append(f"the axes hold {prod} of the program's {n_dev} devices: the rest ({n_dev // prod}x) run "
                     "without a collective between them (replicated work, or an axis that never communicates)")
    if not facts.collectives:
        notes.append(f"the step program has no collectives: {n_dev} device(s) that never communicate (one device, "
                     "or replicated work: data parallelism without gradient reduction, inference)")
    if len(time) > 1:
        notes.append(f"hosts ran different step programs; read {key[0]}")
    return Parallelism(key[0], int(key[1]), n_dev, axes, sizes, dtype, peak, getattr(chip, "name", ""),
                       topology.describe() if topology is not None else "", notes)


def _dominant_dtype(facts) -> str:
    by: dict = {}
    for d in facts.dots:
        by[d.dtype] = by.get(d.dtype, 0.0) + d.flops
    return max(sorted(by), key=lambda k: by[k]) if by else "bf16"


def model_flops_for(par: Parallelism, model: str | None) -> tuple | None:
    """(model FLOPs per step, source, formula) for the overview's MFU when the user declared the model (``--model
    transformer``: 6 x N x tokens from the recovered shapes); None otherwise."""
    if not model:
        return None
    from tracekit.options import MODELS
    if model not in MODELS:
        from tracekit.errors import TraceError
        raise TraceError(f"unknown --model {model!r}", hint=f"one of: {', '.join(MODELS)}")
    v, formula = par.model_flops()
    return v, "--model transformer: 6 x N x tokens from the shapes the parallelism section recovers", formula


def rule_frame(par: Parallelism) -> pd.DataFrame:
    """The ``parallel_axes`` rule frame: one row per axis with a limit (:data:`FRAME_COLUMNS`)."""
    rows = []
    t = (par.sizes.get("per_device_batch_tokens") or {}).get("value")
    f = (par.sizes.get("d_ff") or {}).get("value")
    for a in par.axes:
        lim = getattr(a, "limit", None)
        if lim is None or lim.kind == "none":
            continue
        rows.append({"axis": a.index, "size": a.size, "role": a.role, "limit_kind": lim.kind, "level": lim.level,
                     "bound": lim.bound, "value": lim.value, "threshold": lim.threshold, "intensity": lim.intensity,
                     "axes_spanned": lim.axes_spanned, "peak_flops_per_s": lim.peak_flops_per_s,
                     "bandwidth_bytes_per_s": lim.bandwidth_bytes_per_s,
                     "per_device_batch_tokens": float(t) if t else math.nan, "d_ff": float(f) if f else math.nan,
                     "formula": lim.formula, "remedy": lim.remedy, "time_ps": 0})
    df = pd.DataFrame(rows, columns=FRAME_COLUMNS)
    ints = ("axis", "size", "axes_spanned", "time_ps")
    return df.astype({c: ("int64" if c in ints else "float64") for c in FRAME_COLUMNS
                      if c in ints or c in ("value", "threshold", "intensity", "peak_flops_per_s",
                                            "bandwidth_bytes_per_s", "per_device_batch_tokens", "d_ff")})
