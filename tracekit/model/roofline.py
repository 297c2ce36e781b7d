"""The roofline join: every op execution gets FLOPs, bytes and collective bytes (trace stats first, else the HLO
cost model), the chip's peaks (trace first, else the sourced table, else calibration/estimate), and the predicted
compute / memory / network time, bound-by, efficiency and headroom.

Formulas (see ../shared/DOMAIN.md):
    compute_ps  = flops / peak_flops(compute_dtype)            (dtype-aware: an f32 dot against the f32 peak; a
                  custom call priced by a model runs at its operand type's peak: bf16 x bf16 -> f32 at bf16)
    memory_ps   = bytes_accessed / hbm_bw
    network_ps  = the collective's predicted time on the machine's links (:mod:`tracekit.model.collective_cost`:
                  torus axes / DCN / NVLink / Infinity Fabric / NIC levels, latency floors), for the device's own
                  replica group in the topology (:mod:`tracekit.model.topology`; ``--topology`` overrides);
                  ``net_level`` names the level that bounds it.
    roofline_ps = max(compute_ps, memory_ps, network_ps)     bound_by = argmax (ties: compute, then memory)
    efficiency  = roofline_ps / duration_ps                  headroom_ps = max(duration_ps - roofline_ps, 0)
An op with no known cost, or no work at all (a ``-done`` marker), is ``bound_by = unknown`` with the reason.
What this does not account for: caches/VMEM reuse beyond the cost model's operand/result bytes, clock throttling,
contention between overlapping ops, and the host-link (PCIe) bandwidth of host-offload copies.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.records import record
from tracekit.schema import Bound, CostSource, labels
from tracekit.model import (calibrate, chips, execution, identity, peaks, predictions, runtime_copies, sharing,
                            stated)
from tracekit.columns import (column_numpy, constant_columns, gather, held_once, narrow_int, one_value, self_time,
                              stores_constants_once, with_columns, without_columns)
from tracekit.grouping import distinct_rows, unique_rows
from tracekit.ingest.trace import Trace
from tracekit.model.identity import per_identity



def base_chips(tr: Trace, chip: str | None = None) -> dict:
    """(host, device) -> Chip as detected (table, trace stats, calibration or estimate), before any raise. A CPU
    device takes the recording machine's record beside its trace (:mod:`tracekit.model.machine`) when there is
    one; without it, this machine's calibration or estimate, and the chip's ``notes`` say the record is missing."""
    from tracekit.model import machine

    paths = dict(zip(getattr(tr, "hosts", []) or [], getattr(tr, "paths", []) or []))
    out, cpu = {}, {}
    for r in tr.devices.itertuples(index=False):
        if not chip and str(r.device_kind).lower().startswith("cpu"):
            if r.host not in cpu:
                found, note = machine.cpu_chip_for(paths.get(r.host))
                if found is None:  # an unknown machine: this one's rates stand in, without its name or a ceiling
                    here = chips.detect(r.device_kind, {}, None, cpu=calibrate.cpu_chip)
                    found = replace(here, name=machine.UNKNOWN_CPU, limits={})
                    note += f" (this machine's rates stand in: {here.name}; no ceiling, so no peak is raised)"
                cpu[r.host] = replace(found, notes=note, host_shared=True)
            out[(r.host, r.device)] = cpu[r.host]
            continue
        got = chips.detect(r.device_kind, tr.device_stats.get((r.host, r.device), {}), chip, cpu=calibrate.cpu_chip)
        if str(r.device_kind).lower().startswith("cpu"):  # (``--chip`` on a CPU capture: one host, one chip)
            got = replace(got, host_shared=True)
        out[(r.host, r.device)] = got
    return out


def device_chips(tr: Trace, chip: str | None = None, cost_table: pd.DataFrame | None = None) -> dict:
    """(host, device) -> the Chip the roofline uses: :func:`base_chips`, with the peaks of chips that are not an
    exact table part (CPUs, unknown chips) raised to the best rate the trace demonstrates (see
    :mod:`tracekit.model.peaks`; a roofline join of its own, on ``cost_table`` when the caller has it). :func:`joined`
    returns them with its ops: ask it, not this, when both are wanted."""
    base = base_chips(tr, chip)
    if any(not c.exact for c in base.values()) and len(tr.ops):
        return peaks.raise_estimates(base, _join(tr, base, cost_table=cost_table)[0])
    return base


@record(frozen=True)
class ChipUse:
    """One chip of an analysis and the devices that ran on it (``host/device`` when there are several hosts)."""

    chip: chips.Chip
    devices: tuple


def chips_used(tr: Trace, dchips: dict) -> list[ChipUse]:
    """The chips of the devices that ran ops (``dchips``: (host, device) -> Chip, :attr:`Joined.chips`), in the
    order their devices appear; a chip's numbers are those of its first device (a device plane with no ops, such
    as an idle GPU, is not part of the analysis)."""
    active = {(str(h), str(d)) for h, d in unique_rows(tr.ops, ["host", "device"])[1]} if len(tr.ops) else set()
    first: dict[str, chips.Chip] = {}
    devices: dict[str, list] = {}
    for (host, dev), c in dchips.items():
        if active and (host, dev) not in active:
            continue
        first.setdefault(c.name, c)
        devices.setdefault(c.name, []).append(dev if len(tr.hosts) == 1 else f"{host}/{dev}")
    return [ChipUse(first[name], tuple(devs)) for name, devs in devices.items()]


_IDENT = ["host", "device", "program_id", "op", "opcode", "is_async", "in_hlo"]


@record(frozen=True)
class Joined:
    """What the roofline join works out, handed on to every stage after it (nothing is kept on the Trace)."""

    ops: pd.DataFrame  #: ``tr.ops`` with the :data:`tracekit.schema.ROOFLINE` columns
    chips: dict  #: (host, device) -> the Chip its ops are priced on (:func:`device_chips`)
    model: object  #: the collective model (:class:`tracekit.model.collective_model.Model`) the collectives were priced on
    disagreements: tuple = ()  #: model warnings: author-stated flops the ops' shapes contradict (:func:`tracekit.model.stated.disagreements`)


def joined(tr: Trace, chip: str | None = None, topology: str | None = None,
           cost_table: pd.DataFrame | None = None, *, release_trace_costs: bool = False,
           dchips: dict | None = None, per_identity_table: bool = False) -> Joined:
    """The roofline join of ``tr`` (see :func:`join`) with the chips and the collective model it priced the ops on,
    and the cost disagreements it found. ``dchips``: (host, device) -> Chip to price on as given (``tracekit
    whatif --chip`` a machine record), instead of :func:`device_chips` of ``chip``. ``per_identity_table``: the
    predictions :data:`tracekit.model.predictions.PER_IDENTITY` are kept once per identity
    (:func:`tracekit.model.predictions.columns_of`; one-shot processes only), read with its :func:`values`."""
    from tracekit.model import collective_model
    dchips = device_chips(tr, chip, cost_table) if dchips is None else dchips
    ops, model, dis = _join(tr, dchips, topology, cost_table, release_trace_costs, per_identity_table)
    if model is None:  # (no op, or no HLO: the topology still stands)
        model = collective_model.build(tr, dchips, topology)
    return Joined(ops, dchips, model, tuple(dis))


def join(tr: Trace, chip: str | None = None, topology: str | None = None,
         cost_table: pd.DataFrame | None = None, *, release_trace_costs: bool = False) -> pd.DataFrame:
    """``tr.ops`` with the :data:`tracekit.schema.ROOFLINE` columns added (the ops of :func:`joined`). Costs, peaks
    and reasons are worked out once per distinct op identity (host, device, program, op, ...) and spread to the
    rows; only what varies per execution (trace-reported costs, the split of an op over its GPU kernels or over
    the events of one execution, the measured time) is per row. When no identity's rows differ in those (the
    common case), the whole prediction is made per identity (:func:`tracekit.model.identity.per_identity`). Peaks
    are :func:`device_chips`'. ``cost_table``: :func:`tracekit.model.identity.costs` of the trace, when the caller
    has worked it out already. ``release_trace_costs``: the caller needs the trace's own cost stats no more
    (:data:`TRACE_COST_COLUMNS`): they leave ``tr.ops`` and the result as soon as they have served, so they are
    not alive through the rest of the join (1.7 M rows: 27 MB)."""
    return joined(tr, chip, topology, cost_table, release_trace_costs=release_trace_costs).ops


def _join(tr: Trace, dchips: dict, topology: str | None = None, cost_table: pd.DataFrame | None = None,
          release_trace_costs: bool = False, per_identity_table: bool = False) -> tuple:
    """(roofline-joined ops, the collective model or None, the cost disagreements) on ``dchips``."""
    n = len(tr.ops)
    sch = _result_schema(release_trace_costs)
    if not n:
        if release_trace_costs:
            tr.ops = without_columns(tr.ops, TRACE_COST_COLUMNS)
        return schema.conform(tr.ops.copy(), sch), None, []
    ops = tr.ops
    inv, first, rows = distinct_rows(ops, _IDENT)
    u = per_identity(tr, pd.DataFrame(rows, columns=_IDENT), dchips, topology, cost_table)
    tf, tb = column_numpy(ops, "trace_flops", float), column_numpy(ops, "trace_bytes", float)
    execs = gather(u["executions"], inv)
    share = _combine(execution.kernel_split(ops, execs),
                     execution.execution_split(ops, execs, (inv, execution.op_groups(rows))))
    del execs  # (row-sized; each array below is freed as soon as it has served: this stage sets the peak)
    # rows whose prediction is not their identity's: split over kernels or events, or own trace costs
    own = np.zeros(n, bool) if share is None else share != 1.0
    for v in (tf, tb):
        at_first = gather(v[first], inv)
        own |= ~((v == at_first) | (np.isnan(v) & np.isnan(at_first)))
        del at_first
    rows = np.flatnonzero(own)
    del own
    # what reads the trace's own cost stats besides the prediction reads them now, so that the stats can leave
    # before the predictions are spread to the rows (two row-sized columns fewer through the rest of the join)
    disagreements = stated.disagreements(ops, inv, tf, u)
    copy_rows = runtime_copies.rows_of(ops)
    copy_size = tb[copy_rows]  # (memcpy/memset rows: their size)

    if len(rows) * 4 > n:  # mostly per row: predict every row
        p = _as_stored(_predict(lambda k: _to_rows(u[k], inv, k not in _WRITTEN), tf, tb, share, n, u))
        p = predictions.spread(p, None, 0)  # (every row an entry of its own)
        del tf, tb, share
        if release_trace_costs:
            ops = tr.ops = without_columns(ops, TRACE_COST_COLUMNS)
    else:  # predict once per identity, spread each column with one gather, then predict the few own rows
        share = None if share is None else share[rows]  # (only the own rows read it: not row-sized while spread)
        tf_rows, tb_rows = tf[rows], tb[rows]
        p = _predict(lambda k: u[k].copy(), tf[first], tb[first], None, len(first), u)  # (small: copies are free)
        del tf, tb
        if release_trace_costs:
            ops = tr.ops = without_columns(ops, TRACE_COST_COLUMNS)
        # the predictions kept per identity, read and written through the rows' codes (a row written to gets an
        # entry of its own: tracekit.model.predictions.Spread); the others (a byte a row, most) spread to the rows
        p = predictions.spread({k: (_to_rows(v, inv) if isinstance(v, np.ndarray) and k not in predictions.KEYS
                                    else v) for k, v in _as_stored(p).items()}, inv, len(first))
        if len(rows):
            at = gather(inv, rows)
            sub = _as_stored(_predict(lambda k: gather(u[k], at), tf_rows, tb_rows, share, len(rows), u))
            del at, tf_rows, tb_rows, share
            for k, v in sub.items():  # (the same arithmetic row by row: each value is what the row's own gives)
                if isinstance(p[k], predictions.Rows):
                    p[k][rows] = v
                elif isinstance(v, np.ndarray) and not (held_once(p[k]) and _all_equal(v, p[k][0])):
                    p[k] = p[k].copy() if held_once(p[k]) else p[k]  # (a copy of a view held once: full size)
                    p[k][rows] = v
            del sub
    # memcpy/memset: size, path
    to_host_copies = runtime_copies.price(ops, p, u, dchips, copy_rows, copy_size, len(EXTRA_REASONS))
    del rows, copy_rows, copy_size
    execution.queue_host_windows(ops, p, u, inv)
    execution.judge_done_over_windows(ops, p, u, inv)
    sharing.host_terms(ops, p, dchips)
    to_host = runtime_copies.mark_to_host(_to_rows(u["to_host"], inv), to_host_copies)  # (held once: most traces)
    del inv, first
    new: dict = {}
    new["efficiency"], new["headroom_ps"] = _efficiency_headroom(self_time(ops), p["roofline_ps"])
    # the predictions as columns, or (a one-shot process) those that vary kept per identity in a table
    cols, table = predictions.columns_of(p, n, per_identity_table)
    new.update(cols)
    new["dtype"] = pd.Categorical.from_codes(p["dtype_codes"], categories=u["dtypes"])
    new["compute_dtype"] = pd.Categorical.from_codes(p["cdtype_codes"], categories=u["cdtypes"])
    new["cost_source"] = pd.Categorical.from_codes(p["src"], categories=labels(CostSource) + u["models"])
    new["unknown_reason"] = pd.Categorical.from_codes(p.pop("reason").astype(np.int32),
                                                      categories=u["reasons"] + list(EXTRA_REASONS)
                                                      + u.get("late_reasons", []))
    new["bound_by"] = pd.Categorical.from_codes(p["best"], categories=schema.CATEGORIES["bound_by"])
    new["collective"] = pd.Categorical.from_codes(p["coll_codes"], categories=u["colls"])
    new["net_level"] = pd.Categorical.from_codes(p["level_codes"], categories=u["levels"])
    new["net_fast_ps"], new["loop_trip_count"] = p["net_fast"], narrow_int(p["trips"])
    new["coll_pattern"] = pd.Categorical.from_codes(p["pattern_codes"], categories=u["patterns"])
    new["is_host_transfer"] = p["host_x"]
    new["to_host"] = (to_host & p["host_x"]) if to_host.any() else to_host
    for col in ("dot_m", "dot_n", "dot_k"):
        new[col] = p[col]
    order = [c for c in schema.ROOFLINE if c in new] + [c for c in new if c not in schema.ROOFLINE]
    # one frame sharing the loader's columns and the new arrays (in schema order: conform() has nothing to copy)
    out = with_columns(ops, {k: new.pop(k) for k in order})
    # columns no op of the trace uses (collective model, loop trips, matmul shape) hold one value: stored once
    out = constant_columns(schema.conform(out, {k: v for k, v in sch.items() if k not in table}))
    order = [c for c in sch if c in out.columns or c in table] + [c for c in out.columns if c not in sch]
    return predictions.register(out, p, table, order), u.get("model"), disagreements


def _efficiency_headroom(own: np.ndarray, roof) -> tuple[np.ndarray, np.ndarray]:
    """(roofline / self time, max(self time - roofline, 0)) per row as float32, worked out in float64 a slice of
    rows at a time (whole columns of float64 temporaries were the join's peak at 17 M rows); ``own``: the self
    times, ``roof``: the roofline (an array or the join's :class:`tracekit.model.predictions.Rows`)."""
    n = len(own)
    eff, head = np.empty(n, np.float32), np.empty(n, np.float32)
    for a in range(0, n, _RATIO_SLICE):
        b = min(a + _RATIO_SLICE, n)
        r, d = roof[a:b], own[a:b].astype(float)
        eff[a:b] = np.divide(r, d, out=np.full(b - a, np.nan), where=d > 0)
        h = np.subtract(d, r, out=d)  # NaN where the roofline is unknown
        head[a:b] = np.maximum(h, 0, out=h)  # (NaN stays NaN)
    return eff, head


#: rows per slice of :func:`_efficiency_headroom`
_RATIO_SLICE = 1 << 20


def _result_schema(release_trace_costs: bool) -> dict:
    """The columns :func:`join` returns: the ops' and the roofline's, less the trace's own costs when released."""
    return {k: v for k, v in {**schema.OPS, **schema.ROOFLINE}.items()
            if not (release_trace_costs and k in TRACE_COST_COLUMNS)}


#: the reasons :func:`_predict` gives an unknown op that has none of its own: no work at all; work but no chip
#: (no FLOP/s and no bandwidth: a trace-viewer JSON export names none); work but no peak for what it does; a
#: custom call whose trace stats are 0 flops and 0 bytes (a kernel without a cost estimate: no kernel moves
#: nothing, so its 0 flops are no count either), without and with a chip
CHIP_UNKNOWN = identity.CHIP_UNKNOWN
ZERO_STATS = "custom call whose flops and bytes_accessed stats are both 0 (a kernel without a cost estimate): " \
             "FLOPs unknown"
EXTRA_REASONS = ("no work (zero flops and bytes)", CHIP_UNKNOWN,
                 "no peak FLOP/s or HBM bandwidth for its work on this chip", ZERO_STATS,
                 f"{ZERO_STATS}; {CHIP_UNKNOWN}")


#: the trace's own cost stats: :func:`join` reads them and nothing after it does (the pipeline has it release them)
TRACE_COST_COLUMNS = ("trace_flops", "trace_bytes")


#: the per-row arrays :func:`_predict` writes to (each must be a row-sized array of its own)
_WRITTEN = frozenset({"flops", "nbytes", "net", "reason", "coll_ps", "host_x"})


def _to_rows(v: np.ndarray, inv: np.ndarray, shared: bool = True) -> np.ndarray:
    """A per-identity array spread to the rows (``v[inv]``); one value for every identity is stored once (a
    read-only zero-stride view) when ``shared`` and :func:`tracekit.columns.stores_constants_once`: most traces
    leave the collective and matmul columns unused."""
    if shared and v.ndim == 1 and stores_constants_once() and one_value(v) is not None:
        return np.broadcast_to(v[:1].copy(), inv.shape)
    return gather(v, inv)


def _predict(b, tf: np.ndarray, tb: np.ndarray, share, n: int, u: dict) -> dict:
    """The roofline prediction for ``n`` entries (identities or rows): ``b(key)`` gives a new array of the
    per-identity value ``u[key]`` at that level (modified in place here), ``tf``/``tb`` the trace's own
    flops/bytes (NaN where absent), ``share`` the GPU kernel split (None: every entry carries its whole op)."""
    flops, nbytes, net, src, reason = b("flops"), b("nbytes"), b("net"), b("src").astype(np.int8), b("reason")
    # the trace's own cost stats win where present (TPU), except on async markers (costed as their async op)
    has_t = ~np.isnan(tf) & ~np.isnan(tb) & ~(b("done") | b("start_marker"))
    # a custom call (a kernel whose author states its cost): the stated bytes never fall below its operands read
    # and results written once; a model whose FLOPs come from the shapes keeps them, unless they are a range
    # (attention of unknown causality) the stated figure lies in (tracekit.model.stated: evidence, not truth)
    floor = b("floor_bytes")  # (NaN: not a custom call)
    # a custom call that states 0 flops and 0 bytes states nothing (no kernel moves nothing: a kernel without a
    # cost estimate): its model's figures stand, else its FLOPs are unknown and its bytes the floor
    zero = has_t & ~np.isnan(floor) & (tf == 0) & (tb == 0)
    has_t &= ~zero
    modeled = has_t & (src >= len(CostSource)) & ~np.isnan(nbytes)
    shaped = modeled & stated.shape_model(src, u["models"])
    inside = shaped & (tf >= flops) & (tf <= b("flops_hi"))  # (NaN: no range)
    nbytes[modeled] = np.fmax(tb[modeled], nbytes[modeled])
    take = has_t & ~(shaped & ~inside)
    flops[take], src[take & ~inside], reason[has_t] = tf[take], CostSource.TRACE, 0
    take &= ~modeled
    nbytes[take] = np.fmax(tb[take], floor[take])  # (NaN floor: the stat stands)
    zero &= np.isnan(flops)  # (no model priced it)
    nbytes[zero] = floor[zero]
    del modeled, shaped, inside, take
    net[(has_t | zero) & np.isnan(net)] = 0.0
    del has_t
    if share is not None:
        flops *= share
        nbytes *= share
        net *= share
    gsize = b("gsize")
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = flops / b("peak_f")
        compute *= 1e12  # (in place: one row-sized array, not two)
        memory = nbytes / b("bw")
        memory *= 1e12
        coll = b("coll_ps")  # the collective model's predicted time (NaN: not a collective, or not priced)
        if share is not None:
            coll *= share
        # the collective model's time where it priced the op, else 0 for an op that moves nothing over the
        # network and unknown (NaN) for one that does or may (NaN bytes)
        network = np.where(net <= 0, 0.0, np.nan)
        priced = np.isfinite(coll)
        network[priced] = coll[priced]
        del priced
        net_fast = b("net_fast")
        if not (net_fast.strides == (0,) and np.isnan(net_fast[:1]).all()):  # (unused, held once: stays so)
            net_fast = net_fast * (share if share is not None else 1.0)
        del coll
        # host transfers (few rows): their time over the host link, where the chip's link bandwidth is known
        host_x = b("host_x")
        hx = np.flatnonzero(host_x)
        xfer = gather(b("xfer"), hx) * (gather(share, hx) if share is not None else 1.0)
        hostlink = xfer / gather(b("hostw"), hx) * 1e12
        priced = ~np.isnan(hostlink)
        host_x[hx[~priced]] = False
        hx, xfer, hostlink = hx[priced], xfer[priced], hostlink[priced]
        net[hx] = xfer  # (after ``network`` above: what a host transfer moves is not network traffic)
        del xfer, priced
        intensity = np.where(nbytes > 0, flops / nbytes, np.nan)
    # bound-by: the largest term (ties: compute, then memory, then network, then host link)
    # (an unknown term counts as -1: it never wins, and a NaN compares false without a copy of the term)
    roof = np.nan_to_num(compute, nan=-1.0)
    best = np.full(n, Bound.COMPUTE, np.int8)
    for code, term in ((Bound.MEMORY, memory), (Bound.NETWORK, network)):
        better = term > roof
        best[better] = code
        np.fmax(roof, term, out=roof)  # (fmax keeps roof where the term is NaN)
        del better
    if len(hx):  # the host link, on the host transfers' rows only (elsewhere it is no term at all)
        r = roof[hx]
        best[hx[hostlink > r]] = Bound.HOST_LINK
        roof[hx] = np.fmax(r, hostlink)
    unknown = np.isnan(flops) | np.isnan(nbytes) | (roof <= 0)
    best[unknown] = Bound.UNKNOWN
    roof[unknown] = np.nan
    # an unknown op without a reason of its own: say what is missing (never "no work" for an op that has work)
    bare = unknown & ((reason == 0) | zero)
    if bare.any():
        work = (flops > 0) | (nbytes > 0)
        no_chip = np.isnan(b("peak_f")) & np.isnan(b("bw"))
        reason[bare] = len(u["reasons"]) + np.where(zero[bare], np.where(no_chip[bare], 4, 3), np.where(
            ~work[bare], 0, np.where(no_chip[bare], 1, 2)))
    network[hx] = hostlink
    return {"flops": flops, "bytes_accessed": nbytes, "net": net, "gsize": gsize, "src": src, "reason": reason,
            "compute": compute, "memory": memory, "network": network, "roofline_ps": roof, "best": best,
            "host_x": host_x, "intensity_flops_per_byte": intensity, "dtype_codes": b("dtype_codes"),
            "cdtype_codes": b("cdtype_codes"),
            "coll_codes": b("coll_codes"), "level_codes": b("level_codes"), "net_fast": net_fast,
            "pattern_codes": b("pattern_codes"), "trips": b("trips"), **{c: b(c) for c in ("dot_m", "dot_n", "dot_k")}}


#: the predictions stored narrower than they are worked out (:data:`tracekit.schema.ROOFLINE`): predicted times and
#: ratios as float32 (7 significant digits, against peaks known to 2-3), group sizes as int32
_STORED = {"compute": np.float32, "memory": np.float32, "network": np.float32, "roofline_ps": np.float32,
           "intensity_flops_per_byte": np.float32, "net_fast": np.float32, "gsize": np.int32}


def _as_stored(p: dict) -> dict:
    """:func:`_predict`'s result with the :data:`_STORED` arrays cast (in place; a constant held once stays so). A
    time or ratio past float32's range (only a damaged module's shapes give one) becomes infinite, silently."""
    with np.errstate(over="ignore"):
        for k, t in _STORED.items():
            v = p[k]
            p[k] = np.broadcast_to(v[:1].astype(t), v.shape) if held_once(v) else v.astype(t, copy=False)
    return p


def _combine(a, b):
    return b if a is None else (a if b is None else a * b)


def _all_equal(v: np.ndarray, c) -> bool:
    """Every value of ``v`` is ``c`` (NaN equal to NaN)."""
    eq = v == c
    if v.dtype.kind == "f":
        eq |= np.isnan(v) & np.isnan(c)
    return bool(eq.all())
