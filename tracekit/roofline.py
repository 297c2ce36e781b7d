"""The roofline join: every op execution gets FLOPs, bytes and collective bytes (trace stats first, else the HLO
cost model), the chip's peaks (trace first, else the sourced table, else calibration/estimate), and the predicted
compute / memory / network time, bound-by, efficiency and headroom.

Formulas (see ../shared/DOMAIN.md):
    compute_ps  = flops / peak_flops(dtype)                    (dtype-aware: an f32 dot against the f32 peak)
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

from tracekit import chips, hlo, schema
from tracekit.trace import Trace

HOP_LATENCY_PS = 1_000_000  # ~1 µs per ICI hop (DOMAIN.md)
_COST_COLS = ["flops", "bytes_accessed", "net_bytes", "group_size", "dtype", "collective", "cost_known",
              "unknown_reason"]


def costs(tr: Trace) -> pd.DataFrame:
    """Per-instruction costs of every module in the trace, keyed by (program_id, op). Cached on the Trace."""
    cached = getattr(tr, "_costs", None)
    if cached is not None:
        return cached
    from tracekit import cost
    ndev = max(1, tr.devices["device"].nunique()) if len(tr.devices) else None
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


def _per_kernel_split(ops: pd.DataFrame) -> np.ndarray:
    """Share of its op execution's cost that each row carries: 1 for one-event ops; for GPU ops made of several
    kernels, the kernels of one execution (consecutive rows of the same op on a device) split it by duration."""
    share = np.ones(len(ops))
    gpu = (ops["source"] == "gpu_kernel").to_numpy()
    if not gpu.any():
        return share
    g = ops[gpu]
    order = np.lexsort((g["start_ps"].to_numpy(), g["device"].astype(str).to_numpy()))
    dev = g["device"].astype(str).to_numpy()[order]
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


def join(tr: Trace, chip: str | None = None) -> pd.DataFrame:
    """``tr.ops`` with the :data:`tracekit.schema.ROOFLINE` columns added."""
    ops = tr.ops.copy()
    n = len(ops)
    if not n:
        return schema.conform(ops, {**schema.OPS, **schema.ROOFLINE})
    c = costs(tr) if tr.has_hlo else pd.DataFrame(columns=["program_id", "op"] + _COST_COLS)
    opname = ops["op"].astype(str).to_numpy(dtype=object)
    opc = ops["opcode"].astype(str).to_numpy(dtype=object)
    is_async = ops["is_async"].to_numpy()
    # a -done op is costed as the async op it completes (its duration is the exposed wait for it); the tiny
    # -start marker on the op line carries nothing (the window row carries the -start's cost)
    key_op = opname.copy()
    done = np.char.endswith(opc.astype(str), "-done") & ~is_async
    if done.any() and tr.has_hlo:
        d2s = hlo.done_to_start(tr.hlo)
        pids = ops["program_id"].to_numpy()
        key_op[done] = [d2s.get((int(p), o), o) for p, o in zip(pids[done], opname[done])]
    start_marker = np.char.endswith(opc.astype(str), "-start") & ~is_async
    key = pd.DataFrame({"program_id": ops["program_id"].to_numpy(), "op": key_op.astype(str)})
    j = key.merge(c, on=["program_id", "op"], how="left") if len(c) else key.reindex(columns=list(key) + _COST_COLS)
    hx = _hlo_extras(tr, key)
    known = j["cost_known"].fillna(False).astype(bool).to_numpy()
    flops = np.where(known, pd.to_numeric(j["flops"], errors="coerce").to_numpy(float), np.nan)
    nbytes = np.where(known, pd.to_numeric(j["bytes_accessed"], errors="coerce").to_numpy(float), np.nan)
    net = np.where(known, pd.to_numeric(j["net_bytes"], errors="coerce").fillna(0).to_numpy(float), np.nan)
    src = np.where(known, "hlo", "unknown").astype(object)
    reason = j["unknown_reason"].fillna("").astype(str).to_numpy(dtype=object)
    miss = ~known & (reason == "")
    reason[miss] = np.where(ops["in_hlo"].to_numpy()[miss], "no cost for this instruction",
                            "op not found in the trace's HLO")
    # the trace's own cost stats win where present (TPU), except on -done ops (costed as their async op)
    tf, tb = ops["trace_flops"].to_numpy(float), ops["trace_bytes"].to_numpy(float)
    has_t = ~np.isnan(tf) & ~np.isnan(tb) & ~done
    flops[has_t], nbytes[has_t], src[has_t] = tf[has_t], tb[has_t], "trace"
    net[has_t & np.isnan(net)] = 0.0
    reason[has_t] = ""
    flops[start_marker], nbytes[start_marker], net[start_marker] = 0.0, 0.0, 0.0
    reason[start_marker] = "async -start marker: the cost is on its window"
    # host offload copies move their bytes over the host link (PCIe), not HBM
    host_x = hx["host_memory"].to_numpy() & np.isin(opc.astype(str), ["copy", "copy-start", "copy-done"]) & \
        ~start_marker
    xfer = hx["transfer_bytes"].to_numpy(float)
    share = _per_kernel_split(ops)
    flops, nbytes, net = flops * share, nbytes * share, net * share
    gsize = pd.to_numeric(j["group_size"], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
    coll = j["collective"].fillna("").astype(str).to_numpy()
    dtype = j["dtype"].fillna("").astype(str).to_numpy(dtype=object)
    # peaks per device
    dchips = device_chips(tr, chip)
    peak_f = np.full(n, np.nan)
    bw = np.full(n, np.nan)
    netw = np.full(n, np.nan)
    hostw = np.full(n, np.nan)
    fam = np.empty(n, dtype=object)
    dev_key = ops["host"].astype(str) + "|" + ops["device"].astype(str)
    for (h, d), ch in dchips.items():
        m = (dev_key == f"{h}|{d}").to_numpy()
        if not m.any():
            continue
        fam[m] = ch.family
        bw[m] = ch.hbm_bw_bytes_per_s
        for dt in set(dtype[m]):
            mm = m & (dtype == dt)
            peak_f[mm] = chips.peak_flops(ch, dt or "bf16")[0]
        netw[m] = _network_bw(ch, gsize[m], coll[m])
        hostw[m] = ch.host_link_bw_bytes_per_s
    with np.errstate(divide="ignore", invalid="ignore"):
        compute = flops / peak_f * 1e12
        memory = nbytes / bw * 1e12
        network = np.where(net > 0, net / netw * 1e12, np.where(np.isnan(net), np.nan, 0.0))
        a2a = np.char.startswith(coll.astype(str), "all-to-all") | np.char.startswith(coll.astype(str), "ragged-all-to-all")
        # all-to-all on a bidirectional ring: V/(4W) with V the full array (net_bytes = V(N-1)/N)
        gs = np.maximum(gsize, 2)
        network = np.where(a2a, net * gs / (gs - 1) / 4 / netw * 1e12, network)
        floor = np.where((net > 0) & (fam == "tpu"), HOP_LATENCY_PS * np.maximum(gsize, 1) / 2, 0.0)
        network = np.where(net > 0, np.maximum(network, floor), network)
        hostlink = np.where(host_x, xfer * share / hostw * 1e12, 0.0)
    host_x = host_x & ~np.isnan(hostlink)
    net[host_x] = xfer[host_x] * share[host_x]
    parts = np.vstack([np.nan_to_num(compute, nan=-1), np.nan_to_num(memory, nan=-1),
                       np.nan_to_num(network, nan=-1), np.nan_to_num(hostlink, nan=-1)])
    best = parts.argmax(axis=0)
    roof = parts.max(axis=0)
    unknown = np.isnan(flops) | np.isnan(nbytes) | (roof <= 0)
    bound = np.array(["compute", "memory", "network", "host_link"], dtype=object)[best]
    bound[unknown] = "unknown"
    roof = np.where(unknown, np.nan, roof)
    reason[unknown & (reason == "")] = "no work (zero flops and bytes)"
    network = np.where(host_x, hostlink, network)
    dur = ops["duration_ps"].to_numpy().astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        eff = np.where(dur > 0, roof / dur, np.nan)
    ops["flops"], ops["bytes_accessed"], ops["net_bytes"] = flops, nbytes, net
    ops["group_size"], ops["dtype"], ops["cost_source"], ops["unknown_reason"] = gsize, dtype, src, reason
    with np.errstate(divide="ignore", invalid="ignore"):
        ops["intensity_flops_per_byte"] = np.where(nbytes > 0, flops / nbytes, np.nan)
    ops["compute_ps"], ops["memory_ps"], ops["network_ps"], ops["roofline_ps"] = compute, memory, network, roof
    ops["bound_by"], ops["efficiency"] = bound, eff
    ops["headroom_ps"] = np.where(np.isnan(roof), np.nan, np.maximum(dur - np.nan_to_num(roof), 0))
    ops["collective"] = coll
    ops["is_host_transfer"] = host_x
    for col in ("dot_m", "dot_n", "dot_k"):
        ops[col] = hx[col].to_numpy()
    return schema.conform(ops, {**schema.OPS, **schema.ROOFLINE})


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
    """Effective per-device bandwidth for each collective row (NaN where the chip gives none)."""
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
