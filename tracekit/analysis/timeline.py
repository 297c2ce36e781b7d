"""Where device time goes on the timeline: busy/idle, step breakdown, collective overlap, stragglers (the idle gaps:
:mod:`tracekit.analysis.gaps`).

Every function takes plain frames (``ops`` as declared by :data:`tracekit.schema.OPS`, ``steps`` as
:data:`tracekit.schema.STEPS`) and returns a plain frame. A device is a ``(host, device)`` pair. All times are
integer picoseconds. Work is vectorized with numpy per device: intervals are merged with a running maximum and
lengths of intersections come from ``np.searchsorted`` over a merged union plus a prefix sum of its lengths.

Terms
-----
* **sync op**: a row with ``is_async == False`` (the device executes it). **Async windows** (``is_async``) span
  ``-start`` to ``-done``; the device is free to run other ops meanwhile, so they never count as busy.
* **collective**: an op whose opcode (``-start``/``-done`` stripped) or category is a collective
  (:data:`COLLECTIVES`) or whose GPU kernel name contains ``nccl``/``rccl``; sync rows and async windows alike.
* **compute**: sync ops that are not collectives.
* **busy**: the union of sync op intervals (compute and sync collectives) of a device.
* **window** of a device: from the earliest op start on its host (any device, sync or async) or the device's first
  step start, whichever is earlier, to the latest end of the device's ops (async included) or steps. ``span_ps`` is
  its length; ``idle_ps = span_ps - busy_ps`` is exactly the sum of :func:`tracekit.analysis.gaps.gaps` with
  ``min_gap_ps=0``.

Not accounted for: ops of one device on several lines running concurrently are merged, never double counted;
steps of one device are assumed not to overlap each other.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.textmatch import Matcher, cat_mask
from tracekit.model import predictions
from tracekit.options import DEFAULTS
from tracekit.analysis.intervals import KEYS, covered, device_index, merge, rows_view, sync_rows, union
from tracekit.columns import code_dtype, column_numpy

#: Collective opcodes (after stripping ``-start``/``-done``/``-update``).
COLLECTIVES = frozenset({"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ragged-all-to-all",
                         "collective-permute", "collective-broadcast"})
#: Opcodes that move or re-lay-out data without arithmetic (xprof's "data formatting" family). Async copies
#: (copy-start/copy-done) are transfers between memory spaces, not layout changes, and are not included.
DATA_SHUFFLE = frozenset({"copy", "transpose", "gather", "scatter", "pad", "concatenate", "slice", "dynamic-slice",
                          "dynamic-update-slice", "reshape", "reverse", "broadcast"})


def _col(ops: pd.DataFrame, name: str) -> pd.Series:
    return ops[name] if name in ops.columns else pd.Series("", index=ops.index, dtype="category")


def _base_in(names, strip: bool = True) -> Matcher:
    """Matcher: the lower-cased opcode, ``-start``/``-done``/``-update`` stripped when ``strip``, is in ``names``."""
    return Matcher("in", names=frozenset(names), strip=strip)


def _has(pattern: str) -> Matcher:
    """Matcher: the text contains the regular expression ``pattern`` (case-insensitive)."""
    return Matcher("has", pattern=pattern)


def is_collective(ops: pd.DataFrame) -> np.ndarray:
    """Rows that are collectives: opcode/category in :data:`COLLECTIVES` or an NCCL/RCCL kernel."""
    return (cat_mask(_col(ops, "opcode"), _base_in(COLLECTIVES)) | cat_mask(_col(ops, "category"), _base_in(
        COLLECTIVES)) | cat_mask(_col(ops, "kernel"), _has("nccl|rccl")))


def is_matmul(ops: pd.DataFrame) -> np.ndarray:
    """dot/convolution ops, fusions the trace categorizes as convolution/dot/matmul, GPU GEMM kernels (cuBLAS/
    CUTLASS names, hipBLASLt/Tensile ``Cijk_*``), and custom calls priced by a GEMM or convolution model
    (``cost_source`` ``model:gemm*``, ``model:grouped_gemm``, ``model:cudnn_conv``, ``model:pallas_matmul``:
    :data:`tracekit.model.custom_calls.MATMUL_MODELS`)."""
    return (cat_mask(_col(ops, "opcode"), _base_in({"dot", "convolution"}))
            | cat_mask(_col(ops, "category"), _has(r"convolution|\bdot\b|matmul"))
            | cat_mask(_col(ops, "kernel"), _has(r"gemm|matmul|cutlass|xmma|wgmma|^Cijk_"))
            | cat_mask(_col(ops, "cost_source"), _has(r"^model:(?:gemm|grouped_gemm|cudnn_conv|pallas_matmul)")))


def is_data_shuffle(ops: pd.DataFrame) -> np.ndarray:
    """Opcodes in :data:`DATA_SHUFFLE` or the trace's category 'data formatting'."""
    return cat_mask(_col(ops, "opcode"), _base_in(DATA_SHUFFLE, strip=False)) | cat_mask(
        _col(ops, "category"), _has("data formatting"))


def is_host_transfer(ops: pd.DataFrame) -> np.ndarray:
    """Host<->device transfers: infeed/outfeed/send/recv (XLA's host transfers), GPU memcpy HtoD/DtoH, ops or
    kernels whose name says host-to-device / device-to-host, and rows an ``is_host_transfer`` column of the ops
    frame already marks (e.g. a copy-start to host memory space, which only the HLO shows)."""
    names = _has(r"htod|dtoh|host.?to.?device|device.?to.?host|memcpy.?h2d|memcpy.?d2h")
    hit = (cat_mask(_col(ops, "opcode"), _base_in({"infeed", "outfeed", "send", "recv"}))
           | cat_mask(_col(ops, "kernel"), names) | cat_mask(_col(ops, "op"), names))
    if "is_host_transfer" in ops.columns:
        hit |= ops["is_host_transfer"].fillna(False).to_numpy(bool)
    return hit


#: an async op's launch or wait: the opcode ends in ``-start``/``-done`` (as written: opcodes are lower case)
_MARKER = Matcher("has", pattern=r"-(?:start|done)$", case=True)


def is_async_marker(ops: pd.DataFrame) -> np.ndarray:
    """Sync ``*-start``/``*-done`` ops: they launch or wait for an async op; a ``-done`` that lasts is the device
    stalled on it, so neither counts as compute that could hide other work."""
    return sync_rows(ops) & cat_mask(_col(ops, "opcode"), _MARKER)


def compute_mask(ops: pd.DataFrame) -> np.ndarray:
    """Sync ops that do work: not collectives, not async start/done markers."""
    return sync_rows(ops) & ~is_collective(ops) & ~is_async_marker(ops)


def _frame(rows: list, cols: dict) -> pd.DataFrame:
    if rows:
        df = pd.concat(rows, ignore_index=True) if len(rows) > 1 else rows[0].reset_index(drop=True)
        cast = {c: t for c, t in cols.items() if t != object and df[c].dtype != t}  # (only what differs)
        return df.astype(cast) if cast else df
    return pd.DataFrame({c: pd.Series(dtype=t) for c, t in cols.items()})


_BUSY = {"host": object, "device": object, "start_ps": "int64", "end_ps": "int64", "duration_ps": "int64"}


def busy_intervals(ops) -> pd.DataFrame:
    """Merged busy intervals per device: the union of sync op intervals (async windows excluded).
    Columns: host, device, start_ps, end_ps, duration_ps; sorted by device then start. ``ops``: the ops frame or
    its :class:`~tracekit.analysis.intervals.DeviceIndex` (as every function here that reads a frame by device)."""
    parts = []
    for (h, d), (ms, me) in device_index(ops).busy().items():
        if not ms.size:
            continue
        parts.append(pd.DataFrame({"host": h, "device": d, "start_ps": ms, "end_ps": me, "duration_ps": me - ms}))
    return _frame(parts, _BUSY)


def windows(ops, steps=None) -> dict:
    """(host, device) -> (window_start_ps, window_end_ps) for every device with ops or steps (module docstring)."""
    spans: dict = {}
    host_first: dict = {}  # host -> its first op start (every device's window starts no later)
    for of_ops, x in ((True, ops), (False, steps)):
        if x is None:
            continue
        x = device_index(x)
        df = x.df
        if df.empty:
            continue
        st = column_numpy(df, "start_ps", np.int64)
        for key, idx in x.groups().items():
            lo, hi = int(rows_view(st, idx).min()), int(x.ends_at(idx).max())
            old = spans.get(key, (lo, hi))
            spans[key] = (min(lo, old[0]), max(hi, old[1]))
            if of_ops:  # (the ops' groups cover every row)
                host_first[key[0]] = min(lo, host_first.get(key[0], lo))
    spans = {k: (min(v[0], host_first.get(k[0], v[0])), v[1]) for k, v in spans.items()}
    return dict(sorted(spans.items()))


_SUMMARY = {"host": object, "device": object, "device_kind": object, "window_start_ps": "int64", "span_ps": "int64",
            "busy_ps": "int64", "idle_ps": "int64", "idle_before_first_op_ps": "int64", "op_count": "int64",
            "async_count": "int64", "utilization": "float64"}


def device_summary(ops, steps=None) -> pd.DataFrame:
    """Per device: device_kind, window_start_ps, span_ps, busy_ps, idle_ps (= span − busy),
    idle_before_first_op_ps (window start to the first sync op; the whole span when there is none),
    op_count (sync ops), async_count (async windows), utilization (busy / span)."""
    ix = device_index(ops)
    ops = ix.df
    sync = sync_rows(ops)
    kinds = ops["device_kind"].array if "device_kind" in ops.columns else np.full(len(ops), "")
    groups, merged = ix.groups(), ix.busy()
    rows = []
    none = np.array([], np.int64)
    for (h, d), (ws, we) in windows(ix, steps).items():
        idx = groups.get((h, d), none)
        si = idx[sync[idx]]
        ms, me = merged.get((h, d), (none, none))
        busy = int((me - ms).sum())
        first = int(ms[0]) if ms.size else we
        rows.append((h, d, kinds[idx[0]] if idx.size else "", ws, we - ws, busy, we - ws - busy, first - ws,
                     si.size, idx.size - si.size, busy / (we - ws) if we > ws else 0.0))
    return _frame([pd.DataFrame(rows, columns=list(_SUMMARY))] if rows else [], _SUMMARY)


#: the refined buckets (+ exposed collectives: a partition of the step; compute_ps = the first 3, wait + idle the rest)
REFINED = ("compute_bound_ps", "memory_bound_ps", "compute_other_ps", "offload_wait_ps", "async_wait_ps",
           "host_idle_ps", "launch_idle_ps", "other_idle_ps")
_BREAKDOWN = {"host": object, "device": object, **{c: "int64" for c in (
    "step", "start_ps", "step_ps", "compute_ps", "collective_ps", "collective_exposed_ps", "collective_hidden_ps",
    "wait_ps", "idle_ps", *REFINED)}, "open_end": bool}
#: op sources whose ops the host launches one at a time (idle between them inside a program is launch overhead)
HOST_LAUNCHED = frozenset({"cpu_thunk", "gpu_kernel", "gpu_memcpy", "gpu_runtime"})


def step_breakdown(ops, steps, modules: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (host, device, step), with C = union of compute (sync non-collective) ops, K = union of collectives
    (sync collectives and async collective windows), both clipped to the step ``[start, start + step_ps)``:

    * ``compute_ps`` = |C|; ``collective_ps`` = |K|;
    * ``collective_exposed_ps`` = |K \\ C| (collective time with no compute running);
    * ``collective_hidden_ps`` = |K ∩ C| (a part of ``compute_ps``, not disjoint from it);

    * ``wait_ps`` = |A \\ (C ∪ K)| with A the sync ``*-done`` (and ``*-start``) ops that are not collectives and
      the windows of non-collective async ops in flight: the device stalled on, or had nothing to do but an async
      copy or transfer (e.g. a host-offload copy-done) — neither compute nor idle; ``offload_wait_ps`` +
      ``async_wait_ps`` exactly;
    * ``idle_ps`` = step_ps − |C ∪ K ∪ A|: ``host_idle_ps`` + ``launch_idle_ps`` + ``other_idle_ps`` exactly.

    ``compute_ps + collective_exposed_ps + wait_ps + idle_ps == step_ps``. An exposed async collective window is
    collective time here, whereas :func:`tracekit.analysis.gaps.gaps` (busy = sync ops only) counts it as idle.

    Refined (:data:`REFINED`; each ≥ 0, with ``collective_exposed_ps`` exactly ``step_ps``): C split by the ops'
    ``bound_by`` into ``compute_bound_ps`` = |C_compute|, ``memory_bound_ps`` = |C_memory \\ C_compute| and
    ``compute_other_ps`` (unknown, host-link or network bound); ``offload_wait_ps`` = no compute or collective
    while a host transfer (``is_host_transfer``) is in flight or waited for, ``async_wait_ps`` the same for other
    async ops (non-collective async windows, W); the idle rest split by the program executions ``modules``:
    ``host_idle_ps`` with no program running (the device waits for the host: input, Python, dispatch),
    ``launch_idle_ps`` inside a program on devices whose ops the host launches one by one (:data:`HOST_LAUNCHED`),
    ``other_idle_ps`` inside a program elsewhere (TPU) or when the device's program runs are unknown. With a
    ``collective_level`` column, ``collective_exposed_<level>_ps`` splits the exposed time by level (sorted)."""
    ix, sx = device_index(ops), device_index(steps)
    ops, steps = ix.df, sx.df
    cls, levels = _step_classes(ops)
    launched = cat_mask(_col(ops, "source"), lambda s: s.isin(HOST_LAUNCHED))
    og, mg = ix.groups(), device_index(modules).groups() if modules is not None and len(modules) else {}
    st = column_numpy(ops, "start_ps", np.int64)
    sst, sdur, sno = (steps[c].to_numpy(np.int64) for c in ("start_ps", "duration_ps", "step"))
    sopen = column_numpy(steps, "open_end", bool) if "open_end" in steps.columns else np.zeros(len(steps), bool)
    parts, keys = [], []
    for (h, d), si in sx.groups().items():
        oi = og.get((h, d), np.array([], np.int64))
        a = sst[si]
        b = a + sdur[si]
        programs = None  # this device's program runs, merged, when known
        if (mi := mg.get((h, d))) is not None:
            mst = column_numpy(modules, "start_ps", np.int64)[mi]
            programs = merge(mst, mst + column_numpy(modules, "duration_ps", np.int64)[mi])
        m = _class_covered(rows_view(cls, oi), rows_view(st, oi), ix.ends_at(oi), a, b, programs,
                           len(levels) if levels is not None else 0)
        c, k, u, w, cb, cbm, off, act = (m[x] for x in ("c", "k", "u", "w", "cb", "cbm", "off", "act"))
        outside = m["outside"] if programs is not None else np.zeros(len(a), np.int64)
        inside = (b - a) - act - outside
        host_launched = bool(rows_view(launched, oi).any()) and programs is not None
        zero = np.zeros_like(inside)
        row = {"step": sno[si], "start_ps": a, "step_ps": b - a,
               "compute_ps": c, "collective_ps": k, "collective_exposed_ps": u - c, "collective_hidden_ps": c + k - u,
               "wait_ps": act - u, "idle_ps": (b - a) - act, "compute_bound_ps": cb, "memory_bound_ps": cbm - cb,
               "compute_other_ps": c - cbm, "offload_wait_ps": off - u, "async_wait_ps": act - off,
               "host_idle_ps": outside, "launch_idle_ps": inside if host_launched else zero,
               "other_idle_ps": zero if host_launched else inside, "open_end": sopen[si]}
        for r, lv in enumerate(levels or ()):  # the levels of this device's collectives, in text order
            if (x := m["levels"].get(r)) is not None:
                row[f"collective_exposed_{lv}_ps"] = x
        parts.append(pd.DataFrame(row))
        keys.append((h, d))
    cols = {k: v for k, v in _BREAKDOWN.items() if k not in KEYS}
    if parts:
        # per-level columns: a device without a level's collectives lacks its column (NaN after the concat): typed after
        cols.update({c: object for p in parts for c in p.columns if c.startswith("collective_exposed_")
                     and c != "collective_exposed_ps"})
    out = _frame(parts, cols)
    # host and device as categories in text order (the steps are grouped by them again and again: codes, where
    # text would be hashed at every grouping), each device's rows one run of codes
    for i, (c, vals) in enumerate(zip(KEYS, zip(*keys) if keys else ((), ()))):
        cats = sorted(set(vals))
        code = {v: j for j, v in enumerate(cats)}
        out.insert(i, c, pd.Categorical.from_codes(
            np.repeat(np.array([code[v] for v in vals], code_dtype(len(cats))), [len(p) for p in parts]), cats)
            if keys else pd.Series(dtype=object))
    levels_cols = [c for c in cols if c.startswith("collective_exposed_")]
    if levels_cols:
        out = out.fillna({c: 0 for c in levels_cols}).astype({c: "int64" for c in levels_cols})
    if len(parts) == 1 and len(out) and (column_numpy(out, "start_ps")[1:] >= column_numpy(out, "start_ps")[:-1]).all():
        return out  # (one device, its steps in order: the sort below would change nothing)
    return out.sort_values(["host", "device", "start_ps"], ignore_index=True)


#: the row classes of :func:`step_breakdown` (disjoint): compute ops by bound, -start/-done waits and async
#: windows by host transfer; collectives are _K + the rank of their level
_CB, _CM, _CO, _WH, _WN, _XH, _XN, _K = range(1, 9)


def _step_classes(ops: pd.DataFrame) -> tuple[np.ndarray, list | None]:
    """Each row's class (:data:`_CB`...; a collective's is ``_K`` + its level's rank among the levels sorted as
    text, '' first) and the levels other than '' (None without a ``collective_level`` column)."""
    coll, sync, marker = is_collective(ops), sync_rows(ops), is_async_marker(ops)
    hostx = ops["is_host_transfer"].fillna(False).to_numpy(bool) if "is_host_transfer" in ops.columns else \
        np.zeros(len(ops), bool)
    if "bound_by" in ops.columns:
        bound = _col(ops, "bound_by")
        cm = cat_mask(bound, lambda s: s == "compute")
        mm = cat_mask(bound, lambda s: s == "memory")
    else:
        cm = mm = np.zeros(len(ops), bool)
    # one small code per row (sync, marker, host transfer, compute- and memory-bound as bits), classed by a table
    bits = sync.view(np.uint8) | (marker.view(np.uint8) << 1)
    bits |= hostx.view(np.uint8) << 2
    bits |= cm.view(np.uint8) << 3
    bits |= mm.view(np.uint8) << 4
    table = np.array([(_XH if b & 4 else _XN) if not b & 1 else (_WH if b & 4 else _WN) if b & 2 else
                      _CB if b & 8 else _CM if b & 16 else _CO for b in range(32)], np.int16)
    cls = table[bits]
    levels = None
    if "collective_level" in ops.columns:
        lv = _col(ops, "collective_level")
        lv = lv if isinstance(lv.dtype, pd.CategoricalDtype) else lv.astype(str).astype("category")
        names = sorted({str(v) for v in lv.cat.categories.tolist()} | {""})
        rank = np.array([names.index(str(v)) for v in lv.cat.categories.tolist()] + [0], np.int16)  # missing: as ''
        cls[coll] = _K + rank[lv.array.codes[coll]]
        levels = names[1:]
    else:
        cls[coll] = _K
    return cls, levels


def _class_covered(cls: np.ndarray, st: np.ndarray, en: np.ndarray, a: np.ndarray, b: np.ndarray, programs,
                   n_levels: int) -> dict:
    """How much of each step ``[a, b)`` of one device the unions of :func:`step_breakdown` cover (c, k, u, w, cb,
    cbm, off, act; 'outside': not in ``programs``' merged program runs nor in act, when given; 'levels': level
    rank -> the exposed time its collectives add). Each class's rows are gathered and merged once, and each union
    is let go as soon as the unions built on it are (a device's unions are about its rows in size)."""
    order = np.argsort(cls, kind="stable")  # rows by class, in start order within each class
    cnt = np.bincount(cls, minlength=_K + 1)
    s, e = st[order], en[order]
    bounds = np.r_[0, np.cumsum(cnt)]
    cm = {c: merge(s[bounds[c]:bounds[c + 1]], e[bounds[c]:bounds[c + 1]]) for c in range(len(cnt)) if cnt[c]}
    del order, s, e, en  # (the rows are in the merged classes now: let them go before the unions are built)
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    g = lambda *cs: union(*(cm.get(c, none) for c in cs))  # noqa: E731
    out = {"cb": covered(*g(_CB), a, b), "cbm": covered(*g(_CB, _CM), a, b)}
    c = g(_CB, _CM, _CO)
    out["c"] = covered(*c, a, b)
    k = g(*range(_K, len(cnt)))
    u = union(c, k)
    out["k"], out["u"] = covered(*k, a, b), covered(*u, a, b)
    del k
    out["levels"], done, now = {}, out["c"], c
    for r in range(n_levels):  # rank 0 ('') is not a level: level r is class _K + 1 + r
        if (lm := cm.get(_K + 1 + r)) is None:
            continue
        now = union(now, lm)
        cur = covered(*now, a, b)
        out["levels"][r] = cur - done
        done = cur
    del c, now
    w = union(u, g(_WH, _WN))
    out["w"], out["off"] = covered(*w, a, b), covered(*union(u, g(_WH, _XH)), a, b)
    del u
    act = union(w, g(_XH, _XN))
    del w
    out["act"] = covered(*act, a, b)
    if programs is not None:
        out["outside"] = (b - a) - covered(*union(act, programs), a, b)
    return out


def collective_overlap(ops, hidden: float = DEFAULTS.hidden, exposed: float = DEFAULTS.exposed) -> pd.DataFrame:
    """One row per collective (sync op, async window, or NCCL/RCCL kernel): span_ps, covered_ps (its
    intersection with the union of compute ops on the same device), exposed_ps = span − covered,
    overlap_ratio = covered / span (1.0 for an empty span), overlap_class: ``hidden`` when ratio ≥ ``hidden``,
    ``exposed`` when ratio ≤ ``exposed``, else ``partial``; network_ps and net_bytes as the ops frame gives them
    (NaN when absent). Same definition as xprof's async overlap, applied to sync collectives too."""
    ops = device_index(ops).df
    return _overlap(ops, is_collective(ops) & ~is_async_marker(ops), compute_mask(ops), hidden, exposed)


def async_overlap(ops: pd.DataFrame, hidden: float = DEFAULTS.hidden,
                  exposed: float = DEFAULTS.exposed) -> pd.DataFrame:
    """xprof's async-overlap view: every async window (collectives and copies alike) against the union of the
    synchronous ops on its device that do work (:func:`compute_mask`, plus sync collectives). Columns as
    :func:`collective_overlap`."""
    win = column_numpy(ops, "is_async", bool)
    return _overlap(ops, win, sync_rows(ops) & ~is_async_marker(ops), hidden, exposed)


def _overlap(ops, rows: np.ndarray, cover: np.ndarray, hidden: float, exposed: float) -> pd.DataFrame:
    cops = ops[rows]
    comp = ops[["host", "device", "start_ps", "duration_ps"]][cover]  # (what the union reads: 4 columns, not ~25)
    cx, kx = device_index(comp), device_index(cops)
    cst, cen = column_numpy(comp, "start_ps", np.int64), cx.ends()
    cg = cx.groups()
    a, b = column_numpy(cops, "start_ps", np.int64), kx.ends()
    cov = np.zeros(a.size, np.int64)
    for key, idx in kx.groups().items():
        ci = cg.get(key)
        if ci is not None:
            cov[idx] = covered(*merge(cst[ci], cen[ci]), a[idx], b[idx])
    span = b - a
    ratio = np.where(span > 0, cov / np.maximum(span, 1), 1.0)
    cols = [c for c in ["host", "device", "device_kind", "module", "op", "opcode", "category", "kernel", "step",
                        "is_async", "start_ps"] if c in ops.columns]
    out = cops[cols].reset_index(drop=True)
    out["span_ps"], out["covered_ps"], out["exposed_ps"], out["overlap_ratio"] = span, cov, span - cov, ratio
    out["overlap_class"] = np.where(ratio >= hidden, "hidden", np.where(ratio <= exposed, "exposed", "partial"))
    for c in ("network_ps", "net_bytes", "group_size", "net_fast_ps", "loop_trip_count"):
        out[c] = predictions.values(cops, c) if predictions.has(cops, c) else \
            (-1 if c in ("group_size", "loop_trip_count") else np.nan)
    for c in ("net_level", "coll_pattern"):  # the collective model's bounding level and HLO pattern, as text
        vals = cops[c].astype(str).to_numpy() if c in cops.columns else np.full(len(cops), "", object)
        out[c] = np.where(vals == "", "not priced", vals) if c == "net_level" else vals
    return out
