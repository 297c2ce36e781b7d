"""The roofline join: every op execution gets FLOPs, bytes and collective bytes (trace stats first, else the HLO
cost model), the chip's peaks (trace first, else the sourced table, else calibration/estimate), and the predicted
compute / memory / network time, bound-by, efficiency and headroom.

Formulas (see ../shared/DOMAIN.md):
    compute_ps  = flops / peak_flops(compute_dtype)            (dtype-aware: an f32 dot against the f32 peak; a
                  custom call priced by a model runs at its operand type's peak: bf16 x bf16 -> f32 at bf16)
    memory_ps   = bytes_accessed / hbm_bw
    network_ps  = net_bytes / W   where net_bytes is what one device sends on a ring (cost model) and
                  W = egress bandwidth (GPU: NVLink/IF per GPU), TPU: one link's bandwidth both ways when the ring
                  has its wraparound, one way otherwise; all-to-all uses V/(4W); a latency floor of 1 µs x N/2 hops.
    roofline_ps = max(compute_ps, memory_ps, network_ps)     bound_by = argmax (ties: compute, then memory)
    efficiency  = roofline_ps / duration_ps                  headroom_ps = max(duration_ps - roofline_ps, 0)
An op with no known cost, or no work at all (a ``-done`` marker), is ``bound_by = unknown`` with the reason.
What this does not account for: caches/VMEM reuse beyond the cost model's operand/result bytes, clock throttling,
contention between overlapping ops, and the host-link (PCIe) bandwidth of host-offload copies.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.model import chips
from tracekit.ingest import hlo
from tracekit.columns import distinct_rows, unique_rows, with_columns
from tracekit.ingest.trace import Trace

HOP_LATENCY_PS = 1_000_000  # ~1 µs per ICI hop (DOMAIN.md)
_COST_COLS = ["flops", "bytes_accessed", "net_bytes", "group_size", "dtype", "collective", "cost_known",
              "unknown_reason", "cost_model", "compute_dtype"]
#: cost_source categories; custom-call models follow as 'model:<name>'
SOURCES = ["hlo", "trace", "unknown"]


def costs(tr: Trace) -> pd.DataFrame:
    """Per-instruction costs of every module in the trace, keyed by (program_id, op). Cached on the Trace."""
    cached = getattr(tr, "_costs", None)
    if cached is not None:
        return cached
    from tracekit.model import cost
    ndev = max(1, len(tr.devices[["host", "device"]].drop_duplicates())) if len(tr.devices) else None
    parts = []
    for m in tr.hlo_modules:
        c = cost.instruction_costs(m.proto, num_devices=ndev)
        if len(c):
            c = c.assign(program_id=np.uint64(m.program_id))
            parts.append(c)
    out = (pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["program_id", "name"] + _COST_COLS))
    out = out.rename(columns={"name": "op"}).drop_duplicates(["program_id", "op"])
    out["op"] = out["op"].astype(str)
    tr._costs = out
    return out


def device_chips(tr: Trace, chip: str | None = None) -> dict:
    """(host, device) -> Chip for every device in the trace."""
    out = {}
    for r in tr.devices.itertuples(index=False):
        out[(r.host, r.device)] = chips.detect(r.device_kind, tr.device_stats.get((r.host, r.device), {}), chip)
    return out


def _per_kernel_split(ops: pd.DataFrame) -> np.ndarray | None:
    """Share of its op execution's cost that each row carries (None when every row carries its whole op): 1 for
    one-event ops; for GPU ops made of several kernels, the kernels of one execution (consecutive rows of the
    same op on a device) split it by duration."""
    gpu = (ops["source"] == "gpu_kernel").to_numpy()
    if not gpu.any():
        return None
    share = np.ones(len(ops))
    g = ops[gpu]
    hd, _ = unique_rows(g, ["host", "device"])  # devices of different hosts are different devices
    order = np.lexsort((g["start_ps"].to_numpy(), hd))
    dev = hd[order]
    key = (g["program_id"].astype(str) + "/" + g["op"].astype(str)).to_numpy()[order]
    new = np.ones(len(g), bool)
    new[1:] = (key[1:] != key[:-1]) | (dev[1:] != dev[:-1])
    run = np.cumsum(new) - 1
    dur = g["duration_ps"].to_numpy()[order].astype(float)
    tot = np.bincount(run, weights=dur)
    frac = np.divide(dur, tot[run], out=np.ones_like(dur), where=tot[run] > 0)
    s = np.empty(len(g))
    s[order] = frac
    share[gpu] = s
    return share


BOUNDS = ["compute", "memory", "network", "host_link", "unknown"]
_IDENT = ["host", "device", "program_id", "op", "opcode", "is_async", "in_hlo"]


def join(tr: Trace, chip: str | None = None) -> pd.DataFrame:
    """``tr.ops`` with the :data:`tracekit.schema.ROOFLINE` columns added. Costs, peaks and reasons are worked
    out once per distinct op identity (host, device, program, op, ...) and spread to the rows; only what varies
    per execution (trace-reported costs, the split of an op over its GPU kernels, the measured time) is per row.
    When no identity's rows differ in those (the common case), the whole prediction is made per identity."""
    n = len(tr.ops)
    if not n:
        return schema.conform(tr.ops.copy(), {**schema.OPS, **schema.ROOFLINE})
    ops = tr.ops
    inv, first, rows = distinct_rows(ops, _IDENT)
    u = _per_identity(tr, pd.DataFrame(rows, columns=_IDENT), chip)
    tf, tb = ops["trace_flops"].to_numpy(float), ops["trace_bytes"].to_numpy(float)
    share = _per_kernel_split(ops)
    per_identity = share is None and all(np.array_equal(v, v[first][inv], equal_nan=True) for v in (tf, tb))
    if per_identity:  # predict once per identity, spread each column with one gather
        p = _predict(lambda k: u[k].copy(), tf[first], tb[first], None, len(first), u)  # (small: copies are free)
        p = {k: (v[inv] if isinstance(v, np.ndarray) else v) for k, v in p.items()}
    else:
        p = _predict(lambda k: u[k][inv], tf, tb, share, n, u)
    del tf, tb, share
    new: dict = {}
    roof, flops, nbytes = p["roofline_ps"], p["flops"], p["bytes_accessed"]
    dur = ops["duration_ps"].to_numpy().astype(float)
    new["efficiency"] = np.divide(roof, dur, out=np.full(n, np.nan), where=dur > 0)
    new["intensity_flops_per_byte"] = p.pop("intensity_flops_per_byte")
    head = np.subtract(dur, roof, out=dur)  # NaN where the roofline is unknown
    new["headroom_ps"] = np.maximum(head, 0, out=head)  # (NaN stays NaN)
    del dur, head
    new["flops"], new["bytes_accessed"], new["net_bytes"], new["group_size"] = flops, nbytes, p["net"], p["gsize"]
    new["dtype"] = pd.Categorical.from_codes(p["dtype_codes"], categories=u["dtypes"])
    new["compute_dtype"] = pd.Categorical.from_codes(p["cdtype_codes"], categories=u["cdtypes"])
    new["cost_source"] = pd.Categorical.from_codes(p["src"], categories=SOURCES + u["models"])
    new["unknown_reason"] = pd.Categorical.from_codes(p["reason"].astype(np.int32),
                                                      categories=u["reasons"] + ["no work (zero flops and bytes)"])
    new["compute_ps"], new["memory_ps"], new["network_ps"], new["roofline_ps"] = \
        p["compute"], p["memory"], p["network"], roof
    new["bound_by"] = pd.Categorical.from_codes(p["best"], categories=BOUNDS)
    new["collective"] = pd.Categorical.from_codes(p["coll_codes"], categories=u["colls"])
    new["is_host_transfer"] = p["host_x"]
    for col in ("dot_m", "dot_n", "dot_k"):
        new[col] = p[col]
    order = [c for c in schema.ROOFLINE if c in new] + [c for c in new if c not in schema.ROOFLINE]
    # one frame sharing the loader's columns and the new arrays (in schema order: conform() has nothing to copy)
    out = with_columns(ops, {k: new.pop(k) for k in order})
    return schema.conform(out, {**schema.OPS, **schema.ROOFLINE})


def _predict(b, tf: np.ndarray, tb: np.ndarray, share, n: int, u: dict) -> dict:
    """The roofline prediction for ``n`` entries (identities or rows): ``b(key)`` gives a new array of the
    per-identity value ``u[key]`` at that level (modified in place here), ``tf``/``tb`` the trace's own
    flops/bytes (NaN where absent), ``share`` the GPU kernel split (None: every entry carries its whole op)."""
    flops, nbytes, net, src, reason = b("flops"), b("nbytes"), b("net"), b("src").astype(np.int8), b("reason")
    # the trace's own cost stats win where present (TPU), except on async markers (costed as their async op)
    has_t = ~np.isnan(tf) & ~np.isnan(tb) & ~(b("done") | b("start_marker"))
    flops[has_t], nbytes[has_t], src[has_t], reason[has_t] = tf[has_t], tb[has_t], 1, 0
    net[has_t & np.isnan(net)] = 0.0
    del has_t
    if share is not None:
        flops *= share
        nbytes *= share
        net *= share
    gsize = b("gsize")
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = flops / b("peak_f") * 1e12
        memory = nbytes / b("bw") * 1e12
        netw = b("netw")
        network = np.where(net > 0, net / netw * 1e12, np.where(np.isnan(net), np.nan, 0.0))
        a2a = b("a2a")
        if a2a.any():  # all-to-all on a bidirectional ring: V/(4W) with V the full array (net_bytes = V(N-1)/N)
            gs = np.maximum(gsize, 2)
            network = np.where(a2a, net * gs / (gs - 1) / 4 / netw * 1e12, network)
        del netw, a2a
        tpu_coll = (net > 0) & b("fam_tpu")
        if tpu_coll.any():  # ~1 µs per hop floor on TPU ICI
            network = np.where(tpu_coll, np.maximum(network, HOP_LATENCY_PS * np.maximum(gsize, 1) / 2), network)
        host_x = b("host_x")
        if host_x.any():
            xfer = b("xfer") * (share if share is not None else 1.0)
            hostlink = np.where(host_x, xfer / b("hostw") * 1e12, 0.0)
            host_x &= ~np.isnan(hostlink)
            net = np.where(host_x, xfer, net)
            del xfer
        else:
            hostlink = None
        intensity = np.where(nbytes > 0, flops / nbytes, np.nan)
    # bound-by: the largest term (ties: compute, then memory, then network, then host link)
    roof = np.nan_to_num(compute, nan=-1.0)
    best = np.zeros(n, np.int8)
    for code, term in ((1, memory), (2, network), (3, hostlink)):
        if term is None:
            continue
        t = np.nan_to_num(term, nan=-1.0)
        better = t > roof
        best[better] = code
        np.maximum(roof, t, out=roof)
        del t, better
    unknown = np.isnan(flops) | np.isnan(nbytes) | (roof <= 0)
    best[unknown] = 4
    roof[unknown] = np.nan
    reason[unknown & (reason == 0)] = len(u["reasons"])  # "no work"
    if hostlink is not None:
        network = np.where(host_x, hostlink, network)
    return {"flops": flops, "bytes_accessed": nbytes, "net": net, "gsize": gsize, "src": src, "reason": reason,
            "compute": compute, "memory": memory, "network": network, "roofline_ps": roof, "best": best,
            "host_x": host_x, "intensity_flops_per_byte": intensity, "dtype_codes": b("dtype_codes"),
            "cdtype_codes": b("cdtype_codes"),
            "coll_codes": b("coll_codes"), **{c: b(c) for c in ("dot_m", "dot_n", "dot_k")}}


def _per_identity(tr: Trace, u: pd.DataFrame, chip: str | None) -> dict:
    """Everything that depends only on which op ran where: cost per execution, reasons, peaks."""
    n = len(u)
    c = costs(tr) if tr.has_hlo else pd.DataFrame(columns=["program_id", "op"] + _COST_COLS)
    opname = u["op"].fillna("").astype(str).to_numpy(dtype=object)
    opc = u["opcode"].fillna("").astype(str).to_numpy(dtype=object)
    is_async = u["is_async"].astype(bool).to_numpy()
    # a -done op is costed as the async op it completes (its duration is the exposed wait for it); the tiny
    # -start marker on the op line carries nothing (the window row carries the -start's cost)
    done = np.array([o.endswith("-done") for o in opc], bool) & ~is_async
    start_marker = np.array([o.endswith("-start") for o in opc], bool) & ~is_async
    key_op = opname.copy()
    if done.any() and tr.has_hlo:
        d2s = hlo.done_to_start(tr.hlo)
        key_op[done] = [d2s.get((int(p), o), o) for p, o in zip(u["program_id"].to_numpy()[done], opname[done])]
    key = pd.DataFrame({"program_id": u["program_id"].astype(np.uint64).to_numpy(), "op": key_op.astype(str)})
    j = key.merge(c, on=["program_id", "op"], how="left") if len(c) else \
        key.reindex(columns=list(key) + _COST_COLS).astype({k: object for k in _COST_COLS})  # fillna-able
    hx = _hlo_extras(tr, key)
    known = j["cost_known"].fillna(False).astype(bool).to_numpy()
    flops = np.where(known, pd.to_numeric(j["flops"], errors="coerce").to_numpy(float), np.nan)
    nbytes = np.where(known, pd.to_numeric(j["bytes_accessed"], errors="coerce").to_numpy(float), np.nan)
    net = np.where(known, pd.to_numeric(j["net_bytes"], errors="coerce").fillna(0).to_numpy(float), np.nan)
    model = j["cost_model"].fillna("").astype(str).to_numpy(dtype=object)
    models = sorted(set(model[known]) - {""})
    src = np.where(known, 0, 2)
    for i, name in enumerate(models):  # a custom call priced by a cost model: cost_source 'model:<name>'
        src[known & (model == name)] = len(SOURCES) + i
    reason = j["unknown_reason"].fillna("").astype(str).to_numpy(dtype=object)
    miss = ~known & (reason == "")
    reason[miss] = np.where(u["in_hlo"].astype(bool).to_numpy()[miss], "no cost for this instruction",
                            "op not found in the trace's HLO")
    flops[start_marker], nbytes[start_marker], net[start_marker] = 0.0, 0.0, 0.0
    src[start_marker] = 0
    reason[start_marker] = "async -start marker: the cost is on its window"
    host_x = hx["host_memory"].to_numpy() & np.isin(opc.astype(str), ["copy", "copy-start", "copy-done"]) & \
        ~start_marker
    gsize = pd.to_numeric(j["group_size"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    coll = j["collective"].fillna("").astype(str).to_numpy(dtype=object)
    dtype = j["dtype"].fillna("").astype(str).to_numpy(dtype=object)
    cdtype = j["compute_dtype"].fillna("").astype(str).to_numpy(dtype=object)
    cdtype = np.where(cdtype == "", dtype, cdtype)  # the operand type decides the peak where the model knows it
    dchips = device_chips(tr, chip)
    peak_f, bw, netw, hostw = (np.full(n, np.nan) for _ in range(4))
    fam_tpu = np.zeros(n, bool)
    hosts, devs = u["host"].astype(str).to_numpy(), u["device"].astype(str).to_numpy()
    for (h, d), ch in dchips.items():
        m = (hosts == h) & (devs == d)
        if not m.any():
            continue
        fam_tpu[m] = ch.family == "tpu"
        bw[m] = ch.hbm_bw_bytes_per_s
        hostw[m] = ch.host_link_bw_bytes_per_s
        for dt in set(cdtype[m]):
            peak_f[m & (cdtype == dt)] = chips.peak_flops(ch, dt or "bf16")[0]
        netw[m] = _network_bw(ch, gsize[m], coll[m])
    reasons = [""] + sorted(set(reason) - {""})
    rcode = {r: i for i, r in enumerate(reasons)}
    dtypes = sorted(set(dtype))
    cdtypes = sorted(set(cdtype))
    colls = sorted(set(coll))
    return {"flops": flops, "nbytes": nbytes, "net": net, "src": src, "reasons": reasons,
            "reason": np.array([rcode[r] for r in reason], np.int32), "done": done, "start_marker": start_marker,
            "host_x": host_x, "xfer": hx["transfer_bytes"].to_numpy(float), "gsize": gsize,
            "a2a": np.array([str(x).startswith(("all-to-all", "ragged-all-to-all")) for x in coll], bool),
            "peak_f": peak_f, "bw": bw, "netw": netw, "hostw": hostw, "fam_tpu": fam_tpu,
            "dtypes": dtypes, "dtype_codes": np.array([dtypes.index(x) for x in dtype], np.int32),
            "cdtypes": cdtypes, "cdtype_codes": np.array([cdtypes.index(x) for x in cdtype], np.int32),
            "models": [f"model:{m}" for m in models],
            "colls": colls, "coll_codes": np.array([colls.index(x) for x in coll], np.int32),
            **{col: hx[col].to_numpy(np.int32) for col in ("dot_m", "dot_n", "dot_k")}}


def _hlo_extras(tr: Trace, key: pd.DataFrame) -> pd.DataFrame:
    cols = ["host_memory", "transfer_bytes", "dot_m", "dot_n", "dot_k"]
    if not tr.has_hlo:
        return pd.DataFrame({"host_memory": False, "transfer_bytes": 0, "dot_m": -1, "dot_n": -1, "dot_k": -1},
                            index=range(len(key)))
    h = tr.hlo[~tr.hlo["is_fusion_computation"]][["program_id", "name"] + cols]
    h = h.rename(columns={"name": "op"}).drop_duplicates(["program_id", "op"])
    h["op"] = h["op"].astype(str)
    j = key.merge(h, on=["program_id", "op"], how="left")
    return j.fillna({"host_memory": False, "transfer_bytes": 0, "dot_m": -1, "dot_n": -1, "dot_k": -1}).astype(
        {"host_memory": bool, "transfer_bytes": np.int64, "dot_m": np.int64, "dot_n": np.int64, "dot_k": np.int64})


def _network_bw(ch: chips.Chip, gsize: np.ndarray, coll: np.ndarray) -> np.ndarray:
    """Effective per-device bandwidth for each collective (NaN where the chip gives none)."""
    out = np.full(len(gsize), np.nan)
    if ch.family == "tpu":
        link = ch.link_bw_bytes_per_s
        wrap = np.array([ch.has_wraparound(int(g)) for g in gsize], bool)
        out[:] = np.where(wrap, 2 * link, link)
        perm = coll == "collective-permute"
        out[perm] = link
    else:
        out[:] = ch.egress_bw_bytes_per_s
    return out
