"""What the roofline join works out once per op identity (host, device, program, op): the HLO cost of one
execution (:func:`costs`, from :mod:`tracekit.model.cost`), why a cost is unknown, the async markers and control
flow that carry none of their own, the chip's peaks for the op's dtype, host transfers, matmul shapes and the
collective model's prediction (:func:`per_identity`). :mod:`tracekit.model.roofline` spreads them to the rows."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, narrow_int, text_numpy
from tracekit.ingest import hlo
from tracekit.ingest.trace import Trace
from tracekit.model import execution, precision
from tracekit.schema import CostSource

#: what an op's unknown reason says when no chip is known (no peak FLOP/s and no bandwidth)
CHIP_UNKNOWN = "chip unknown — pass --chip NAME"
#: the columns of :func:`costs` beside (program_id, op)
COST_COLUMNS = ["flops", "bytes_accessed", "net_bytes", "group_size", "dtype", "compute_dtype", "collective",
                "cost_known", "unknown_reason", "cost_model", "executions", "parent", "flops_hi", "stated_flops",
                "stated_source"]


def costs(tr: Trace) -> pd.DataFrame:
    """Per-instruction costs of every module in the trace, keyed by (program_id, op) (worked out once per join)."""
    ndev = max(1, len(tr.devices[["host", "device"]].drop_duplicates())) if len(tr.devices) else None
    parts = []
    for m in tr.hlo_modules:
        c = module_costs(m, ndev)
        if len(c):
            c = c.assign(program_id=np.uint64(m.program_id))
            parts.append(c)
    out = pd.concat(parts, ignore_index=True) if parts else \
        pd.DataFrame(columns=["program_id", "name"] + COST_COLUMNS)
    out = out.rename(columns={"name": "op"}).drop_duplicates(["program_id", "op"])
    out["op"] = out["op"].astype(str)
    return out


#: (module digest, devices) -> its instruction costs, for the last :data:`MODULES_KEPT` modules: a process that
#: analyzes many hosts of one program (a pool or Dask worker, a notebook) prices each module once
_MODULE_COSTS: dict = {}
MODULES_KEPT = 32


def module_costs(m, ndev: int | None) -> pd.DataFrame:
    """:func:`tracekit.model.cost.instruction_costs` of the module ``m`` (:class:`tracekit.ingest.hlo.Module`) for
    ``ndev`` devices, worked out once per process for a module with a digest. The frame is shared: never modified
    (callers derive new frames from it)."""
    from tracekit.model import cost
    key = (m.digest, ndev) if m.digest else None
    c = _MODULE_COSTS.pop(key, None) if key is not None else None
    if c is None:
        c = cost.instruction_costs(m.proto, num_devices=ndev)
    if key is not None:
        _MODULE_COSTS[key] = c  # (last used last: the first key is the least recently used)
        while len(_MODULE_COSTS) > MODULES_KEPT:
            del _MODULE_COSTS[next(iter(_MODULE_COSTS))]
    return c


def per_identity(tr: Trace, u: pd.DataFrame, dchips: dict, topology: str | None = None,
                  cost_table: pd.DataFrame | None = None) -> dict:
    """Everything that depends only on which op ran where: cost per execution, reasons, peaks."""
    n = len(u)
    c = (cost_table if cost_table is not None else costs(tr)) if tr.has_hlo else \
        pd.DataFrame(columns=["program_id", "op"] + COST_COLUMNS)
    opname = u["op"].fillna("").astype(str).to_numpy(dtype=object)
    opc = u["opcode"].fillna("").astype(str).to_numpy(dtype=object)
    is_async = u["is_async"].astype(bool).to_numpy()
    # the async window (-start..-done) carries the transfer's cost; neither the -done event (the exposed wait,
    # judged over its window afterwards) nor the tiny -start marker on the op line carries any of its own
    done = np.array([o.endswith("-done") for o in opc], bool) & ~is_async
    start_marker = np.array([o.endswith("-start") for o in opc], bool) & ~is_async
    key = pd.DataFrame({"program_id": u["program_id"].astype(np.uint64).to_numpy(), "op": opname.astype(str)})
    # no cost table: every cost column missing, as objects (fillna-able), the key's columns as they are
    j = key.merge(c, on=["program_id", "op"], how="left") if len(c) else pd.DataFrame(
        {**{k: key[k] for k in key.columns}, **{k: np.full(n, np.nan, dtype=object) for k in COST_COLUMNS}},
        index=key.index, copy=False)
    hx = _hlo_extras(tr, key)
    known = j["cost_known"].fillna(False).astype(bool).to_numpy()
    flops = np.where(known, pd.to_numeric(j["flops"], errors="coerce").to_numpy(float), np.nan)
    nbytes = np.where(known, pd.to_numeric(j["bytes_accessed"], errors="coerce").to_numpy(float), np.nan)
    net = np.where(known, pd.to_numeric(j["net_bytes"], errors="coerce").fillna(0).to_numpy(float), np.nan)
    # what an author's figure is weighed against (tracekit.model.stated): the upper end of a model's FLOP range,
    # the figure the instruction itself states, and for a custom call the bytes of one read of its operands and
    # one write of its results, known even where its FLOPs are not (a floor under any stated bytes)
    flops_hi = _num(j, "flops_hi")
    stated_flops = _num(j, "stated_flops")
    stated_source = j["stated_source"].fillna("").astype(str).to_numpy(dtype=object) if "stated_source" in j \
        else np.full(n, "", dtype=object)
    floor_bytes = np.where(opc == "custom-call", _num(j, "bytes_accessed"), np.nan)
    model = j["cost_model"].fillna("").astype(str).to_numpy(dtype=object)
    models = sorted(set(model[known]) - {""})
    src = np.where(known, CostSource.HLO, CostSource.UNKNOWN)
    for i, name in enumerate(models):  # a custom call priced by a cost model: cost_source 'model:<name>'
        src[known & (model == name)] = len(CostSource) + i
    reason = j["unknown_reason"].fillna("").astype(str).to_numpy(dtype=object)
    miss = ~known & (reason == "")
    reason[miss] = np.where(u["in_hlo"].astype(bool).to_numpy()[miss], "no cost for this instruction",
                            "op not found in the trace's HLO")
    flops[start_marker], nbytes[start_marker], net[start_marker] = 0.0, 0.0, 0.0
    src[start_marker] = CostSource.HLO
    reason[start_marker] = "async -start marker: the cost is on its window"
    flops[done], nbytes[done], net[done] = 0.0, 0.0, 0.0
    src[done] = 0
    reason[done] = "async -done without its window in the trace: no cost of its own"
    # control flow whose body ops are traced on the same device carries none of their cost (they carry it)
    expanded = _expanded_control_flow(u, opc, j)
    flops[expanded], nbytes[expanded], net[expanded] = 0.0, 0.0, 0.0
    src[expanded] = 0
    reason[expanded] = "control flow: the ops it runs are traced and costed on their own"
    executions = pd.to_numeric(j["executions"], errors="coerce").to_numpy(float) if "executions" in j else \
        np.full(n, np.nan)
    host_x = column_numpy(hx, "host_memory") & np.isin(opc.astype(str), ["copy", "copy-start", "copy-done"]) & \
        ~start_marker
    gsize = pd.to_numeric(j["group_size"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    coll = j["collective"].fillna("").astype(str).to_numpy(dtype=object)
    dtype = j["dtype"].fillna("").astype(str).to_numpy(dtype=object)
    cdtype = j["compute_dtype"].fillna("").astype(str).to_numpy(dtype=object) if "compute_dtype" in j else dtype
    cdtype = np.where(cdtype == "", [precision.result_compute_dtype(x) for x in dtype], cdtype) if n else cdtype
    peak_f, bw, hostw = (np.full(n, np.nan) for _ in range(3))
    hosts, devs = text_numpy(u, "host"), text_numpy(u, "device")
    for (h, d), ch in dchips.items():
        m = (hosts == h) & (devs == d)
        if not m.any():
            continue
        bw[m] = ch.hbm_bw_bytes_per_s
        hostw[m] = ch.host_link_bw_bytes_per_s
        for dt in set(cdtype[m]):
            peak_f[m & (cdtype == dt)] = precision.peak(ch, dt)[0]
    # an op without a chip (a trace-viewer JSON export names none) says so beside its own reason
    no_chip = np.isnan(peak_f) & np.isnan(bw) & (reason != "")
    reason[no_chip] = [f"{r}; {CHIP_UNKNOWN}" for r in reason[no_chip]]
    cm = _collectives(tr, dchips, topology, u, opname, coll)
    for k in ("coll_ps", "net_fast"):  # markers and expanded control flow carry no network time of their own
        cm[k][done | start_marker | expanded] = np.nan
    reasons = [""] + sorted(set(reason) - {""})
    rcode = {r: i for i, r in enumerate(reasons)}
    dtypes = sorted(set(dtype))
    cdtypes = sorted(set(cdtype))
    colls = sorted(set(coll))
    xfer = column_numpy(hx, "transfer_bytes", float).copy()
    xfer[done] = 0.0  # a -done moves nothing of its own: the transfer is its window's
    return {"flops": flops, "nbytes": nbytes, "net": net, "src": src, "reasons": reasons,
            "reason": np.array([rcode[r] for r in reason], np.int32), "done": done, "start_marker": start_marker,
            "host_x": host_x, "to_host": column_numpy(hx, "to_host", bool), "xfer": xfer, "gsize": gsize,
            "peak_f": peak_f, "bw": bw, "hostw": hostw, **cm,
            "dtypes": dtypes, "dtype_codes": np.array([dtypes.index(x) for x in dtype], np.int32),
            "cdtypes": cdtypes, "cdtype_codes": np.array([cdtypes.index(x) for x in cdtype], np.int32),
            "executions": executions, "done": done,
            "d2s": hlo.done_to_start(tr.hlo) if done.any() and tr.has_hlo else {},
            "models": [f"model:{m}" for m in models], "flops_hi": flops_hi, "stated_flops": stated_flops,
            "stated_source": stated_source, "floor_bytes": floor_bytes,
            "colls": colls, "coll_codes": np.array([colls.index(x) for x in coll], np.int32),
            **{col: narrow_int(hx[col].to_numpy(np.int64)) for col in ("dot_m", "dot_n", "dot_k")}}


def _num(j: pd.DataFrame, col: str) -> np.ndarray:
    """A numeric cost column of the merged frame as float (NaN where absent)."""
    return pd.to_numeric(j[col], errors="coerce").to_numpy(float) if col in j else np.full(len(j), np.nan)


def _expanded_control_flow(u: pd.DataFrame, opc: np.ndarray, j: pd.DataFrame) -> np.ndarray:
    """Identities of while/conditional/call ops whose body ops appear in the trace on the same device."""
    cf = np.isin(opc.astype(str), execution.CONTROL_FLOW)
    if not cf.any() or "parent" not in j:
        return np.zeros(len(u), bool)
    par = j["parent"].fillna("").astype(str).to_numpy()
    pid = u["program_id"].astype(np.uint64).to_numpy()
    parents = {(int(p), str(o)): a for p, o, a in zip(pid, u["op"].fillna("").astype(str), par) if a}
    traced = execution.traced_ancestors(u[~cf], parents) if parents else set()
    return cf & np.array([(str(h), str(d), int(p), str(o)) in traced for h, d, p, o in
                          zip(u["host"], u["device"], pid, u["op"].fillna(""))], bool)


def _hlo_extras(tr: Trace, key: pd.DataFrame) -> pd.DataFrame:
    if not tr.has_hlo:
        return pd.DataFrame({"host_memory": False, "to_host": False, "transfer_bytes": 0, "dot_m": -1, "dot_n": -1,
                             "dot_k": -1},
                            index=range(len(key)))
    # each identity's instruction (outside fused computations; the first of a name) by a dict, its columns taken
    # by position: a left merge's values without the merge, the fill and the casts on a few hundred identities
    h = tr.hlo
    outside = np.flatnonzero(~column_numpy(h, "is_fusion_computation", bool))
    at: dict = {}
    for i, k in zip(outside.tolist(), zip(column_numpy(h, "program_id", np.uint64)[outside].tolist(),
                                          text_numpy(h, "name")[outside].tolist())):
        at.setdefault(k, i)
    rows = np.array([at.get(k, -1) for k in zip(column_numpy(key, "program_id", np.uint64).tolist(),
                                                key["op"].tolist())], np.int64)
    found = rows >= 0
    out = {"program_id": column_numpy(key, "program_id"), "op": column_numpy(key, "op")}
    for c, fill, dt in (("host_memory", False, bool), ("to_host", False, bool), ("transfer_bytes", 0, np.int64),
                        ("dot_m", -1, np.int64), ("dot_n", -1, np.int64), ("dot_k", -1, np.int64)):
        v = np.full(len(rows), fill, dt)
        v[found] = h[c].to_numpy()[rows[found]]
        out[c] = v
    return pd.DataFrame(out)


def _collectives(tr: Trace, dchips: dict, topology: str | None, u: pd.DataFrame, key_op: np.ndarray,
                 coll: np.ndarray) -> dict:
    """Per identity: the collective model's predicted time (``coll_ps``), bounding level, time if the group sat
    inside one slice/node, HLO pattern and enclosing loop's trip count."""
    from tracekit.model import collective_model
    n = len(u)
    out = {"coll_ps": np.full(n, np.nan), "net_fast": np.full(n, np.nan), "trips": np.full(n, -1, np.int64)}
    level, pattern = [""] * n, [""] * n
    model = collective_model.build(tr, dchips, topology) if tr.has_hlo else None
    if model is not None and model.ops:
        pids = column_numpy(u, "program_id")
        hosts, devs = text_numpy(u, "host"), text_numpy(u, "device")
        for i in range(n):
            op = model.op(int(pids[i]), str(key_op[i]))
            if op is None:
                continue
            pred = model.predict(op.program_id, op.name, hosts[i], devs[i])
            out["coll_ps"][i], out["net_fast"][i], level[i] = pred.time_ps, pred.fast_ps, pred.bound
            pattern[i], out["trips"][i] = op.pattern, op.trip_count
    levels, patterns = sorted(set(level)), sorted(set(pattern))
    out.update(model=model, levels=levels, level_codes=np.array([levels.index(x) for x in level], np.int32),
               patterns=patterns, pattern_codes=np.array([patterns.index(x) for x in pattern], np.int32))
    return out
