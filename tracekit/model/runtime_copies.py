"""The runtime's own copies and fills on a GPU (:mod:`tracekit.ingest.copies`: memcpy/memset activity and the
runtime's copy/fill kernels, with no HLO op), priced from their size and direction (``cost_source =
model:runtime_copy``, FLOPs 0):

* device to device (``memcpy D2D``): read and write the size in HBM, ``bytes_accessed = 2 x size``, at the HBM
  bandwidth;
* a fill (``memset``): write the size, at the HBM bandwidth;
* host to device / device to host (``memcpy H2D`` / ``D2H``): the size over the host link (PCIe), ``network_ps =
  size / host-link bandwidth`` (``bound_by host_link``, ``is_host_transfer``; D2H ``to_host``), and the size in HBM
  on the device's side;
* peer to peer (``memcpy P2P``): the size over all of the device's links at once (its egress bandwidth): a lower
  bound on the time, since one copy may use fewer links;
* to this device from an unknown source (``memcpy to device``: ROCm's ``MemcpyOther`` with ``dest`` = this
  device): priced as device to device, the fastest it can be: a copy from the host takes longer, so its efficiency
  is a lower bound, never above the truth.

A copy whose size the trace does not give (``size:0``), or whose direction it does not give, stays unknown with
the reason saying which; a number the trace does not give is unknown, never zero.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.ingest import copies
from tracekit.schema import Bound, CostSource

MODEL = "model:runtime_copy"
NO_SIZE = "runtime copy: the trace gives no size (memcpy_details size:0 or no details)"
NO_DIRECTION = "runtime copy of a known size in an unknown direction (the trace names neither its kind nor a " \
               "destination on this device)"
NO_BANDWIDTH = "runtime copy: no bandwidth for its path on this chip"
#: reasons :func:`price` gives, after the roofline's own (``late_reasons`` of the identity dict)
REASONS = (NO_SIZE, NO_DIRECTION, NO_BANDWIDTH)
_WRITTEN = ("flops", "bytes_accessed", "net", "src", "reason", "compute", "memory", "network", "roofline_ps", "best",
            "host_x", "intensity_flops_per_byte")


def rows_of(ops: pd.DataFrame) -> np.ndarray:
    """Positions of the runtime's copies and fills: sync rows of a :data:`tracekit.ingest.copies.CATEGORIES`
    category that joined no HLO instruction."""
    if not len(ops) or "category" not in ops.columns:
        return np.zeros(0, np.int64)
    cat = ops["category"]
    cats = cat.cat.categories.tolist() if isinstance(cat.dtype, pd.CategoricalDtype) else None
    if cats is not None:
        hit = np.array([str(c) in copies.CATEGORIES for c in cats] + [False], bool)
        m = hit[cat.array.codes]
    else:
        m = cat.astype(str).isin(copies.CATEGORIES).to_numpy()
    if not m.any():
        return np.zeros(0, np.int64)
    m &= ~column_numpy(ops, "in_hlo", bool) & ~column_numpy(ops, "is_async", bool)
    return np.flatnonzero(m)


def price(ops: pd.DataFrame, p: dict, u: dict, dchips: dict, rows: np.ndarray, size: np.ndarray,
          n_extra: int) -> np.ndarray:
    """Price the runtime copies of ``ops`` (``rows``: :func:`rows_of`, ``size``: their ``trace_bytes``) in the
    roofline's prediction ``p`` (in place; ``u``: the identity dict, whose ``models``/``late_reasons`` lists gain
    this model and its reasons, which come after its ``reasons`` and the roofline's ``n_extra`` own). Returns the
    rows that copy to the host (for ``to_host``)."""
    if not len(rows):
        return rows
    for k in _WRITTEN:  # (writable arrays of their own: a constant column may be held once, read-only)
        if isinstance(p.get(k), np.ndarray) and (not p[k].flags.writeable or p[k].strides == (0,)):
            p[k] = p[k].copy()
    if MODEL not in u["models"]:
        u["models"].append(MODEL)
    late = u.setdefault("late_reasons", [])
    base = len(u["reasons"]) + n_extra

    def reason(text):
        if text not in late:
            late.append(text)
        return base + late.index(text)

    src_code = len(CostSource) + u["models"].index(MODEL)
    cat = column_numpy(ops, "category")[rows].astype(str) if not isinstance(ops["category"].dtype,
                                                                            pd.CategoricalDtype) \
        else np.asarray(ops["category"].cat.categories.astype(str))[ops["category"].array.codes[rows]]
    hosts, devs = column_numpy(ops, "host")[rows].astype(str), column_numpy(ops, "device")[rows].astype(str)
    n = np.asarray(size, float)
    bw, hostw, egress = (np.array([getattr(dchips.get((h, d)), a, None) or np.nan for h, d in zip(hosts, devs)],
                                  float) for a in ("hbm_bw_bytes_per_s", "host_link_bw_bytes_per_s",
                                                   "egress_bw_bytes_per_s"))
    hbm_bytes = np.where(np.isin(cat, [copies.D2D, copies.TO_DEVICE]), 2 * n, n)
    memory = hbm_bytes / bw * 1e12
    link = np.where(np.isin(cat, [copies.H2D, copies.D2H]), n / hostw * 1e12,
                    np.where(cat == copies.P2P, n / egress * 1e12, 0.0))
    roof = np.fmax(memory, link)
    best = np.where(np.isin(cat, [copies.H2D, copies.D2H]) & (link > memory), Bound.HOST_LINK,
                    np.where((cat == copies.P2P) & (link > memory), Bound.NETWORK, Bound.MEMORY))
    why = np.zeros(len(rows), np.int64)
    for text, m in ((NO_BANDWIDTH, np.isnan(roof)), (NO_DIRECTION, cat == copies.UNKNOWN), (NO_SIZE, np.isnan(n))):
        if m.any():  # (the last that applies wins: no size, then no direction, then no bandwidth)
            why[m] = reason(text)
    ok = why == 0
    hx = np.isin(cat, [copies.H2D, copies.D2H])
    p["flops"][rows] = 0.0
    p["bytes_accessed"][rows] = np.where(np.isnan(n), np.nan, hbm_bytes)
    p["src"][rows] = np.where(ok, src_code, CostSource.UNKNOWN)
    p["reason"][rows] = why
    p["compute"][rows] = 0.0
    p["memory"][rows] = np.where(ok, memory, np.nan)
    p["network"][rows] = np.where(ok, link, np.nan)
    p["roofline_ps"][rows] = np.where(ok, roof, np.nan)
    p["best"][rows] = np.where(ok, best, Bound.UNKNOWN)
    p["net"][rows] = np.where(ok & (hx | (cat == copies.P2P)), n, 0.0)
    p["host_x"][rows] = ok & hx
    p["intensity_flops_per_byte"][rows] = np.where(np.isnan(n), np.nan, 0.0)
    return rows[ok & (cat == copies.D2H)]


def mark_to_host(to_host: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``to_host`` with ``rows`` set (a copy when it is held once or read-only)."""
    if not len(rows):
        return to_host
    out = np.array(to_host, bool, copy=True)
    out[rows] = True
    return out
