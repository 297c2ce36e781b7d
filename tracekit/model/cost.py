"""tracekit's own HLO cost model: FLOPs, transcendentals, bytes and interconnect bytes of every executed
instruction of an optimized HLO module (``HloModuleProto``).

:func:`instruction_costs` gives one row per instruction of every *executable* computation: the entry, while
bodies and conditions, conditional branches, call targets and async-wrapped computations. Fused computations and
applied-to computations (the reducers/comparators of reduce, sort, scatter, all-reduce, map, ...) get no rows of
their own: their instructions are costed inside the instruction that uses them. A row holds the cost of ONE
execution of its instruction; control-flow rows (while, conditional, call, async-start) hold the cost of what they
run, so the module's cost is the sum of the entry computation's rows (:func:`module_totals`). Each row also says
how often its instruction runs per run of the module (``executions``: while bodies trip-count times, NaN when
unknown) and which control-flow instruction runs its computation (``parent``), and the peak class it computes at
(``compute_dtype``: for dots and convolutions from the operands, see :mod:`tracekit.model.precision`). A custom
call priced by a model whose FLOPs are a range keeps the upper end in ``flops_hi`` (NaN otherwise), and one whose
author states a FLOP count in the instruction (a Pallas ``cost_estimate``) keeps it in ``stated_flops`` with
``stated_source`` (:mod:`tracekit.model.stated` weighs it against the shapes).
:func:`computation_kinds` says which role each computation has.

Conventions follow XLA's ``compiled.cost_analysis()`` on CPU (measured, see ``tests/test_cost_oracle.py``) so the
numbers can be compared: elementwise ops 1 flop per element (compare, select, clamp, convert too); exp, log,
log1p, expm1, tanh, logistic, sqrt, rsqrt, cbrt, power, sin, cos, tan, atan2, erf 1 transcendental and no flop;
dot 2*batch*M*N*K; fft 8 * input elements * prod_d floor(log2 fft_length[d]) (XLA multiplies the per-dimension
logs); gather reads and writes its output (plus the indices), scatter reads its updates twice and the indices
once and writes the updates, a fused gather reads its whole operand (as XLA counts them); convolution counts only
window taps that land on real input (padding and dilation holes excluded); reduce (in - out) reducer applications; reduce-window (window - 1) per output; sort n*ceil(log2 n) with
n = all elements; all-reduce one reducer per element, reduce-scatter none; fusions cost the sum of their fused
instructions' flops and read their parameters (only the sliced part for a parameter consumed only by slices)
and write their outputs (only the update for an in-place dynamic-update-slice root).

Where we differ from XLA on purpose:
  * while: body x trip count and condition x (trip count + 1) when ``known_trip_count`` is in the backend_config;
    XLA counts body and condition once. Unknown trip count -> NaN, reason 'unknown trip count'.
  * complex dot/convolution x4 (XLA counts a complex multiply-add as 2 flops like a real one).
  * a parameter read both by a slice and in full counts once in full (XLA: full + slice).
  * tuple costs 0 (XLA on CPU: 8 bytes of pointer per element); ``-done`` halves of async pairs cost 0 (XLA: in+out
    again); custom calls are priced by :mod:`tracekit.model.custom_calls` (GEMMs, convolutions, attention, TopK,
    sort: ``cost_model`` names the model) and the others keep their I/O bytes with NaN flops (XLA: -1 for both).
  * conditional: per-metric max over branches (as XLA); the row's note says so.
Collectives: ``net_bytes`` are the bytes each device sends on a ring, V = full array: all-gather (V = output),
reduce-scatter (V = input) and all-to-all V(N-1)/N, all-reduce 2V(N-1)/N, collective-permute V; N from
replica_groups / collective_device_list (iota: num_devices_per_group), empty -> ``num_devices``.
"""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tracekit.model import custom_calls
from tracekit.model.cost_ops import COLLECTIVE_OF, NAN, Cost, op_cost
from tracekit.model.precision import result_compute_dtype
from tracekit.ingest.hloshape import first_dtype, nbytes
from tracekit.proto import hlo_pb2

COLUMNS = ["module", "computation", "name", "opcode", "dtype", "compute_dtype", "flops", "transcendentals",
           "bytes_read", "bytes_written", "bytes_accessed", "net_bytes", "group_size", "collective", "cost_known",
           "unknown_reason", "note", "cost_model", "executions", "parent", "flops_hi", "stated_flops",
           "stated_source"]
_METRICS = ("flops", "transcendentals", "bytes_read", "bytes_written", "net_bytes")
_CONTROL = ("while", "conditional", "call", "async-start")


def _accumulate(acc: Cost, c: Cost, scale: float = 1.0, where: str = "") -> None:
    for m in _METRICS:
        setattr(acc, m, getattr(acc, m) + scale * getattr(c, m))
    _take_dtype(acc, c, scale)
    if not c.known:
        acc.known = False
        acc.reason = acc.reason or (f"{where}: {c.reason}" if where else c.reason)


def _take_dtype(acc: Cost, c: Cost, scale: float = 1.0) -> None:
    """The compute dtype of a sum of costs is that of its largest matmul."""
    f = scale * (c.dtype_flops or c.flops)
    if c.compute_dtype and (not acc.compute_dtype or f > acc.dtype_flops):
        acc.compute_dtype, acc.dtype_flops = c.compute_dtype, f


def trip_count(inst) -> int | None:
    """``known_trip_count.n`` from a while's backend_config JSON, else None."""
    try:
        n = json.loads(inst.backend_config or b"{}").get("known_trip_count", {}).get("n")
        return int(n) if n is not None else None
    except (ValueError, AttributeError, TypeError):
        return None


class _Model:
    def __init__(self, module: hlo_pb2.HloModuleProto, num_devices: int | None):
        self.module, self.num_devices = module, num_devices
        self.comps = {c.id: c for c in module.computations}
        self.local = {c.id: {i.id: i for i in c.instructions} for c in module.computations}
        self.glob = {i.id: i for c in module.computations for i in c.instructions}
        entry = self.comps.get(module.entry_computation_id)
        if entry is None or not module.entry_computation_id:
            named = [c for c in module.computations if c.name == module.entry_computation_name]
            entry = named[0] if named else (module.computations[-1] if module.computations else None)
        self.entry = entry
        self._applied: dict[int, tuple[float, float]] = {}
        self._rows: dict[int, list[tuple[object, Cost]]] = {}
        self._busy: set[int] = set()
        self._fused_cache: dict[int, tuple] = {}

    # -- lookup -----------------------------------------------------------------------------------------
    def operands(self, cid: int, inst) -> list:
        loc = self.local.get(cid, {})
        return [loc.get(i) or self.glob[i] for i in inst.operand_ids]

    def executable(self) -> list[int]:
        """Ids of computations that run as such, in module order."""
        seen, todo = set(), [self.entry.id] if self.entry is not None else []
        while todo:
            cid = todo.pop()
            if cid in seen or cid not in self.comps:
                continue
            seen.add(cid)
            for inst in self.comps[cid].instructions:
                if inst.opcode in _CONTROL:
                    todo.extend(inst.called_computation_ids)
        return [c.id for c in self.module.computations if c.id in seen]

    def executions(self) -> dict[int, tuple[float, str]]:
        """Computation id -> (executions per run of the module, name of the control-flow instruction that runs it;
        '' for the entry). A while body runs trip-count times per run of its while, its condition once more,
        a conditional's branch at most once (counted as once), a call target once; unknown trip count: NaN."""
        out: dict[int, tuple[float, str]] = {}
        todo = [(self.entry.id, 1.0, "")] if self.entry is not None else []
        while todo:
            cid, n, parent = todo.pop()
            if cid in out or cid not in self.comps:
                continue
            out[cid] = (n, parent)
            for inst in self.comps[cid].instructions:
                if inst.opcode not in _CONTROL:
                    continue
                called = list(inst.called_computation_ids)
                if inst.opcode == "while" and len(called) >= 2:
                    t = trip_count(inst)
                    k = float("nan") if t is None else float(t)
                    todo += [(called[0], n * k, inst.name), (called[1], n * (k + 1), inst.name)]
                else:
                    todo += [(k, n, inst.name) for k in called]
        return out

    # -- costs ------------------------------------------------------------------------------------------
    def applied(self, cid: int) -> tuple[float, float]:
        """(flops, transcendentals) of one application of a reducer / comparator / mapped computation."""
        if cid not in self._applied:
            acc = Cost()
            for inst in self.comps[cid].instructions:
                _accumulate(acc, self.inst_cost(cid, inst))
            self._applied[cid] = (acc.flops, acc.transcendentals)
        return self._applied[cid]

    def rows(self, cid: int) -> list[tuple[object, Cost]]:
        if cid not in self._rows:
            if cid in self._busy:
                raise ValueError(f"computation {self.comps[cid].name} calls itself")
            self._busy.add(cid)
            try:
                self._rows[cid] = [(i, self.inst_cost(cid, i)) for i in self.comps[cid].instructions]
            finally:  # a RecursionError (a call chain deeper than the stack) must not leave it marked busy
                self._busy.discard(cid)
        return self._rows[cid]

    def total(self, cid: int) -> Cost:
        acc = Cost()
        for _, c in self.rows(cid):
            _accumulate(acc, c, where=self.comps[cid].name)
        return acc

    def inst_cost(self, cid: int, inst) -> Cost:
        """Cost of one execution of ``inst``; HLO that does not hang together (a fusion without its computation,
        an operand id that does not exist, ...) gives an unknown cost with the reason, never an exception."""
        try:
            return self._inst_cost(cid, inst)
        except (IndexError, KeyError, ValueError, ZeroDivisionError, OverflowError, RecursionError) as e:
            return Cost().unknown(f"malformed HLO for {inst.opcode} {inst.name!r} ({type(e).__name__})")

    def _inst_cost(self, cid: int, inst) -> Cost:
        op = inst.opcode
        if op == "fusion":
            return self.fusion_cost(cid, inst)
        if op == "while":
            return self.while_cost(inst)
        if op == "conditional":
            return self.conditional_cost(inst)
        if op in ("call", "async-start"):
            c = Cost()
            for k in inst.called_computation_ids:
                _accumulate(c, self.total(k), where=self.comps[k].name)
            if op == "async-start":
                for k in inst.called_computation_ids:
                    for i, ic in self.rows(k):
                        if i.opcode in COLLECTIVE_OF and not c.collective:
                            c.collective, c.group_size = ic.collective, ic.group_size
            return c
        if op == "custom-call":  # vendor libraries and hand-written kernels: tracekit.model.custom_calls
            return custom_calls.cost(inst, [o.shape for o in self.operands(cid, inst)])
        return op_cost(inst, [o.shape for o in self.operands(cid, inst)], self)

    def while_cost(self, inst) -> Cost:
        if len(inst.called_computation_ids) < 2:
            return Cost().unknown("while without body and condition")
        body, cond = inst.called_computation_ids[0], inst.called_computation_ids[1]
        n = trip_count(inst)
        if n is None:
            return Cost().unknown("unknown trip count")
        c = Cost(note=f"known trip count {n}: body x{n}, condition x{n + 1}")
        _accumulate(c, self.total(body), n, self.comps[body].name)
        _accumulate(c, self.total(cond), n + 1, self.comps[cond].name)
        return c

    def conditional_cost(self, inst) -> Cost:
        branches = [self.total(k) for k in inst.called_computation_ids]
        c = Cost(note=f"max over {len(branches)} branches, per metric")
        for m in _METRICS:
            vals = [getattr(b, m) for b in branches]
            setattr(c, m, NAN if any(v != v for v in vals) else max(vals, default=0.0))
        for k, b in zip(inst.called_computation_ids, branches):
            if not b.known:
                c.known, c.reason = False, c.reason or f"{self.comps[k].name}: {b.reason}"
        return c

    def _fused(self, fid: int) -> tuple[Cost, dict]:
        """(flops/transcendentals of the fused computation, its users of each instruction id), once per
        computation: nested fusions that share a computation are not re-walked, and a fused computation that
        (directly or not) fuses itself is an error instead of an endless recursion."""
        if fid not in self._fused_cache:
            comp = self.comps[fid]
            if fid in self._busy:
                raise ValueError(f"fused computation {comp.name} fuses itself")
            self._busy.add(fid)
            try:
                c = Cost()
                users: dict[int, list] = {}
                for fi in comp.instructions:
                    ic = self.inst_cost(fid, fi)
                    for m in ("flops", "transcendentals"):
                        setattr(c, m, getattr(c, m) + getattr(ic, m))
                    _take_dtype(c, ic)
                    if not ic.known and ic.reason:
                        c.known, c.reason = False, c.reason or f"{comp.name}: {ic.reason}"
                    for k, oid in enumerate(fi.operand_ids):
                        users.setdefault(oid, []).append((fi, k))
            finally:
                self._busy.discard(fid)
            self._fused_cache[fid] = (c, users)
        return self._fused_cache[fid]

    def fusion_cost(self, cid: int, inst) -> Cost:
        fid = inst.called_computation_ids[0]
        comp = self.comps[fid]
        inner, users = self._fused(fid)
        c = Cost(flops=inner.flops, transcendentals=inner.transcendentals, known=inner.known, reason=inner.reason,
                 compute_dtype=inner.compute_dtype, dtype_flops=inner.dtype_flops)
        operands = self.operands(cid, inst)
        for fi in comp.instructions:
            if fi.opcode == "parameter" and fi.parameter_number < len(operands):
                c.bytes_read += _param_read(users.get(fi.id, []), nbytes(operands[fi.parameter_number].shape))
        loc = self.local[fid]
        root = loc.get(comp.root_id) or comp.instructions[-1]
        outs = [loc[i] for i in root.operand_ids] if root.opcode == "tuple" else [root]
        for o in outs:
            in_place = o.opcode == "dynamic-update-slice" and loc[o.operand_ids[0]].opcode == "parameter"
            c.bytes_written += nbytes(loc[o.operand_ids[1]].shape if in_place else o.shape)
        return c


def _param_read(users: list, whole: int) -> float:
    """Bytes a fusion reads of one parameter: what its slices / dynamic-slices select when those are its only
    readers, nothing for the in-place operand of a dynamic-update-slice, else the whole operand (a gathered
    operand too, as XLA counts it)."""
    part, full = 0, False
    for u, k in users:
        if k == 0 and u.opcode in ("slice", "dynamic-slice"):
            part += nbytes(u.shape)
        elif not (k == 0 and u.opcode == "dynamic-update-slice"):
            full = True
    return float(whole if full else min(part, whole))


def _frame(module, num_devices) -> tuple[pd.DataFrame, str | None]:
    module = module.hlo_module if isinstance(module, hlo_pb2.HloProto) else module
    model = _Model(module, num_devices)
    runs = model.executions()
    recs = []
    for cid in model.executable():
        cname = model.comps[cid].name
        n, parent = runs.get(cid, (float("nan"), ""))
        for inst, c in model.rows(cid):
            dt = first_dtype(inst.shape)
            cdt = c.compute_dtype if inst.opcode not in _CONTROL else ""
            recs.append((module.name, cname, inst.name, inst.opcode, dt, cdt or result_compute_dtype(dt),
                         float(c.flops), float(c.transcendentals), float(c.bytes_read), float(c.bytes_written),
                         float(c.bytes_read + c.bytes_written), float(c.net_bytes), int(c.group_size),
                         c.collective, bool(c.known), c.reason, c.note, c.model, n, parent, float(c.flops_hi),
                         float(c.stated_flops), c.stated_source))
    # a column at a time, the numbers typed as they go in (a frame of records cast afterwards: 2 ms a module)
    values = list(zip(*recs)) if recs else [()] * len(COLUMNS)
    df = pd.DataFrame({c: np.array(v, _TYPES[c]) if c in _TYPES else list(v) if v else np.array([], object)
                       for c, v in zip(COLUMNS, values)})
    return df, (model.entry.name if model.entry is not None else None)


#: the numeric columns of :func:`instruction_costs` and their types (the others hold text)
_TYPES = {**dict.fromkeys(("flops", "transcendentals", "bytes_read", "bytes_written", "bytes_accessed", "net_bytes",
                           "executions", "flops_hi", "stated_flops"), np.float64),
          "group_size": np.int64, "cost_known": np.bool_}


def instruction_costs(module: hlo_pb2.HloModuleProto, *, num_devices: int | None = None) -> pd.DataFrame:
    """One row per instruction of every executable computation (see the module docstring): the cost of one
    execution; NaN with ``cost_known=False`` and a reason where a cost cannot be known. Accepts an
    ``HloProto`` too. ``num_devices``: participants of collectives whose replica groups are empty."""
    return _frame(module, num_devices)[0]


def module_totals(module: hlo_pb2.HloModuleProto, *, num_devices: int | None = None) -> dict:
    """Whole-module totals, summed like XLA's ``cost_analysis()`` (the entry computation's rows, control flow
    included through its rows; while loops x known trip count). Unknown (NaN) parts are skipped: ``cost_known``
    says whether there were any and ``unknown_reasons`` lists why."""
    df, entry = _frame(module, num_devices)
    e = df[df["computation"] == entry]
    return {"flops": float(e["flops"].sum()), "transcendentals": float(e["transcendentals"].sum()),
            "bytes accessed": float(e["bytes_accessed"].sum()), "bytes read": float(e["bytes_read"].sum()),
            "bytes written": float(e["bytes_written"].sum()), "net bytes": float(e["net_bytes"].sum()),
            "cost_known": bool(e["cost_known"].all()),
            "unknown_reasons": sorted(set(e.loc[~e["cost_known"], "unknown_reason"]))}


def computation_kinds(module: hlo_pb2.HloModuleProto) -> dict[str, str]:
    """Role of every computation: 'entry', 'executable' (while body/condition, branch, call target, async
    wrapped), 'fused' (called by a fusion, also nested), 'applied' (reducer, comparator, mapped function), or
    'unused'. Only 'entry' and 'executable' computations get rows in :func:`instruction_costs`."""
    module = module.hlo_module if isinstance(module, hlo_pb2.HloProto) else module
    model = _Model(module, None)
    kinds = {cid: "executable" for cid in model.executable()}
    if model.entry is not None:
        kinds[model.entry.id] = "entry"
    todo = [(k, "fused" if i.opcode == "fusion" else "applied") for c in module.computations
            for i in c.instructions if i.opcode not in _CONTROL + ("async-update", "async-done")
            for k in i.called_computation_ids]
    while todo:
        cid, kind = todo.pop()
        if cid in kinds or cid not in model.comps:
            continue
        kinds[cid] = kind
        todo.extend((k, kind) for i in model.comps[cid].instructions for k in i.called_computation_ids)
    return {c.name: kinds.get(c.id, "unused") for c in module.computations}
