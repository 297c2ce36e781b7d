"""Each executed instruction's cost counted once: which trace rows carry which part of an op's cost.

* **Control flow with traced bodies.** A ``while`` / ``conditional`` / ``call`` whose body ops appear in the trace on
  the same device (XLA:CPU nests them inside the loop's event) carries no cost of its own: the body's events carry
  theirs, once per iteration. Its time is its self time. When the bodies are not traced, the control-flow op carries
  what it runs (the cost model's body x ``known_trip_count``).
* **Several events for one execution.** An instruction that appears more often in one run of its module than it
  executes (XLA:CPU's ``sort`` records two events; a GPU op may launch several kernels) has its cost split over its
  events by duration, so the run's events carry it exactly as often as it ran. Executions per run come from the
  cost model (1 in the entry computation, trip count x in a loop body, unknown for a data-dependent loop: then
  every event counts as one execution). A GPU op's run of consecutive kernels is one execution unless its kernel
  names repeat with a period (a one-op program run again and again): then one execution per period.
* **Async pairs judged over their window.** The ``-start``..``-done`` window carries the transfer's cost and is
  judged over its span. The ``-done`` event carries no cost of its own; its time is the exposed wait, and its
  roofline is what a transfer at the roofline would have left exposed: ``clip(window start + window roofline -
  done start, 0, done duration)``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, gather, held_once
from tracekit.grouping import codes_of, group_index, key_codes, row_parts, rows_per_code, unique_rows
from tracekit.ingest.hlo import start_codes

CONTROL_FLOW = ("while", "conditional", "call")


def traced_ancestors(u: pd.DataFrame, parents: dict) -> set:
    """(host, device, program_id, control-flow op) for every control-flow instruction with at least one descendant
    instruction among the identities ``u`` (columns host, device, program_id, op). ``parents``: (program_id,
    instruction) -> the control-flow instruction whose computation holds it ('' at the entry)."""
    out: set = set()
    for h, d, p, o in zip(u["host"].astype(str), u["device"].astype(str), u["program_id"].astype(np.uint64),
                          u["op"].fillna("").astype(str)):
        p = int(p)
        seen = 0
        anc = parents.get((p, o), "")
        while anc and seen < 64:  # a nesting deeper than 64 is corrupt HLO: stop rather than loop
            key = (h, d, p, anc)
            if key in out:
                break
            out.add(key)
            anc = parents.get((p, anc), "")
            seen += 1
    return out


def execution_split(ops: pd.DataFrame, executions: np.ndarray, op_groups: tuple) -> np.ndarray | None:
    """Share of its op's per-execution cost each sync row carries, or None when every row carries it whole.
    ``executions``: per row, how often its instruction runs per run of its module (NaN: unknown). Rows are grouped
    by (host, device, program, op, run); a group with more events than executions splits ``executions`` whole
    costs over its events by duration. Only rows with a real run id (XLA:CPU thunks; TPU ops inside a module
    execution) are grouped. ``op_groups``: (a code per row, and for each code a small integer naming its (host,
    device, program, op)), as the roofline join has them from its op identities: only the rows that can split are
    grouped, by two small codes, a device's rows at a time (a group never spans devices; grouping the whole frame
    at once was the join's peak at 17 M rows)."""
    n = len(ops)
    if not n or "run_id" not in ops:
        return None
    src = ops["source"]  # compared as a column (a categorical's codes), not as a string per row
    run = column_numpy(ops, "run_id")
    ok = ~column_numpy(ops, "is_async", bool) & ((src == "cpu_thunk").to_numpy(bool) | (
        (src == "xla_ops").to_numpy(bool) & (run != -1))) & np.isfinite(executions) & (executions > 0)
    if not ok.any():
        return None
    duration = column_numpy(ops, "duration_ps", np.int64)
    split = [_device_split(ok, part, run, executions, duration, op_groups)  # (the rows of each device)
             for part in rows_per_code(codes_of(ops["device"], compact=True)[0]).values()]
    split = [x for x in split if x is not None]
    if not split:
        return None
    share = np.ones(n)
    for rows, values in split:
        share[rows] = values
    return share


def _device_split(ok: np.ndarray, part, run: np.ndarray, executions: np.ndarray, duration: np.ndarray,
                  op_groups: tuple) -> tuple | None:
    """(rows, share) of :func:`execution_split` among the rows ``part`` (one device's), or None: none split."""
    if isinstance(part, slice):
        idx = np.flatnonzero(ok[part]) + part.start
    else:
        idx = part[ok[part]]
    if not len(idx):
        return None
    if len(ok) < 1 << 31:  # (half the bytes of the row numbers while they fit)
        idx = idx.astype(np.int32)
    code, group_of = op_groups
    op = gather(np.asarray(group_of, np.int32), gather(code, idx))
    pair = pd.DataFrame({"op": pd.Categorical.from_codes(op, categories=range(int(op.max()) + 1)),
                         "run": gather(run, idx)}, copy=False)
    key = group_index(pair, ["op", "run"])[0]
    del op, pair
    count = np.bincount(key)
    # the rows with more events than executions in their group, a slice at a time (no row-sized temporaries)
    over = np.concatenate([np.flatnonzero(gather(count, key[a:a + _SLICE]) > executions[idx[a:a + _SLICE]] + 1e-9)
                           + a for a in range(0, len(idx), _SLICE)])
    if not len(over):
        return None
    # each group's duration (float64 sums in row order), then every value for the split rows alone
    dur = gather(duration, idx)
    tot = np.bincount(key, weights=dur)
    k = gather(key, over)
    d = gather(dur, over).astype(np.float64)
    del dur, key
    t, cnt = gather(tot, k), gather(count, k)
    frac = np.where(t > 0, d / np.where(t > 0, t, 1), 1.0 / cnt)
    rows = gather(idx, over)
    return rows, gather(executions, rows) * frac


def op_groups(idents: list) -> np.ndarray:
    """For each op identity (a tuple that starts with host, device, program id and op, as the roofline join's),
    a small integer naming its (host, device, program, op): what :func:`execution_split` groups by."""
    seen: dict = {}
    return np.array([seen.setdefault(tuple(t[:4]), len(seen)) for t in idents], np.int32)


#: rows per slice where :func:`execution_split` compares each row with its group
_SLICE = 1 << 20


def kernel_split(ops: pd.DataFrame, executions: np.ndarray | None = None) -> np.ndarray | None:
    """Share of its op execution's cost that each row carries (None when every row carries its whole op): 1 for
    one-event ops; for GPU ops made of several kernels, the kernels of one execution split it by duration.

    The kernels of one execution are consecutive rows of the same op on a device, but consecutive rows of an op
    are not always one execution: a jitted program of one op run again and again (a benchmark's matmul) leaves
    one kernel per execution, back to back. So a run of consecutive rows whose kernel names repeat with a period
    ([A, A, A]: three executions of A; [A, B, A, B]: two of A then B) holds one execution per period; any other
    run ([A, B], [T, C, T]) is one execution. A kernel without a name never starts one. A run of an op that
    executes e > 1 times per run of its module (a loop body: e = trip count, from ``executions``) holds min(k, e)
    executions of its k events."""
    gpu = (ops["source"] == "gpu_kernel").to_numpy()
    if not gpu.any():
        return None
    share = np.ones(len(ops))
    g = ops[gpu]
    hd, _ = unique_rows(g, ["host", "device"])  # devices of different hosts are different devices
    order = np.lexsort((column_numpy(g, "start_ps"), hd))
    dev = hd[order]
    key = (g["program_id"].astype(str) + "/" + g["op"].astype(str)).to_numpy()[order]
    new = np.ones(len(g), bool)
    new[1:] = (key[1:] != key[:-1]) | (dev[1:] != dev[:-1])
    run = np.cumsum(new) - 1
    dur = column_numpy(g, "duration_ps")[order].astype(float)
    names, named = _kernel_codes(g["kernel"])
    execution = _periodic_executions(new, run, names[order], named[order])
    frac = _split(dur, execution)
    if executions is not None:
        e = executions[gpu][order]
        loop = np.isfinite(e) & (e > 1)
        if loop.any():  # a loop body's run: min(k, e) executions of its k events
            count = np.bincount(run)[run]
            frac = np.where(loop, np.where(count > e, e * _split(dur, run), 1.0), frac)
    s = np.empty(len(g))
    s[order] = frac
    share[gpu] = s
    return share


def _kernel_codes(kernel: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per row: an integer per distinct kernel name, and whether the row has a name."""
    codes, names = codes_of(kernel)
    has_name = np.array([str(v) != "" for v in names] + [False])  # (code -1, missing: the last entry)
    return codes, has_name[codes]


def _periodic_executions(new: np.ndarray, run: np.ndarray, names: np.ndarray, named: np.ndarray) -> np.ndarray:
    """Per row (sorted by device and time; ``new``: a run of one op starts, ``run``: its run): the execution it
    belongs to. A run whose named kernels repeat with period p (the position where its first kernel's name comes
    round again) and whose length is a multiple of p holds one execution per p rows; any other run is one."""
    n = len(run)
    first = np.flatnonzero(new)
    pos = np.arange(n) - first[run]
    again = np.flatnonzero((pos > 0) & named & named[first][run] & (names == names[first][run]))
    period = np.zeros(len(first), np.int64)
    if len(again):
        r, at = np.unique(run[again], return_index=True)  # (rows in order: the first recurrence of each run)
        period[r] = pos[again[at]]
    p = period[run]
    check = np.flatnonzero((p > 0) & (pos >= p))
    broken = np.zeros(len(first), bool)
    broken[run[check[names[check] != names[check - p[check]]]]] = True
    length = np.bincount(run, minlength=len(first))
    periodic = (period > 0) & ~broken & (length % np.maximum(period, 1) == 0)
    starts = new | (periodic[run] & (pos % np.maximum(p, 1) == 0))
    return np.cumsum(starts) - 1


def _split(dur: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Each row's share of its group's duration (equal shares in a group of zero duration)."""
    tot, count = np.bincount(group, weights=dur), np.bincount(group)
    return np.divide(dur, tot[group], out=1.0 / count[group], where=tot[group] > 0)


def pair_done_windows(ops: pd.DataFrame, done: np.ndarray, start_of: dict) -> tuple[np.ndarray, np.ndarray]:
    """(done rows, their window rows): each sync ``-done`` row (``done`` mask) paired with the async window of
    its ``-start`` (``start_of``: (program_id, done op) -> start op) on the same host and device: the latest one
    that starts at or before it (a trace's own async event may end before the -done starts) and that no earlier
    -done took: a -done whose -start is missing from the trace stays unpaired. Pairs never cross devices, so a
    frame sorted by device is paired one device's rows at a time (a view each): the temporaries are one device's."""
    parts = row_parts(ops, ["host", "device"]) if len(ops) > _PER_DEVICE_ROWS else {}
    spans = sorted((p.start, p.stop) for p in parts.values() if isinstance(p, slice))
    if len(spans) > 1 and len(spans) == len(parts) and sum(b - a for a, b in spans) == len(ops):
        got = [_pair_done_windows(ops.iloc[a:b], done[a:b], start_of) for a, b in spans]
        return (np.concatenate([d + a for (d, _), (a, _) in zip(got, spans)]),
                np.concatenate([w + a for (_, w), (a, _) in zip(got, spans)]))
    return _pair_done_windows(ops, done, start_of)


#: frames longer than this are paired device by device (:func:`pair_done_windows`)
_PER_DEVICE_ROWS = 100_000


def _pair_done_windows(ops: pd.DataFrame, done: np.ndarray, start_of: dict) -> tuple[np.ndarray, np.ndarray]:
    """:func:`pair_done_windows` of the rows of ``ops`` at once."""
    d_idx = np.nonzero(done)[0]
    w_idx = np.nonzero(column_numpy(ops, "is_async", bool))[0]
    if not len(d_idx) or not len(w_idx):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    # each row's (host, device, program, op) as one number from the columns' codes; a -done's is its -start's
    # (named once per distinct program and -done: no op of that name in the frame, no window to pair)
    first = ["host", "device", "program_id"]
    dstart = start_codes(ops, d_idx, start_of)
    d_idx, dstart = d_idx[dstart >= 0], dstart[dstart >= 0]
    if not len(d_idx):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    (wplace, dplace), place_space = key_codes(ops, first, w_idx, d_idx)
    oc, ou = codes_of(ops["op"], compact=True)  # (the codes start_codes gives: the op column's own)
    if place_space * (len(ou) + 1) >= 1 << 62:
        raise ValueError("the -done/window keys do not fit one int64")
    wkey = wplace * (len(ou) + 1) + gather(oc, w_idx) + 1
    dk = dplace * (len(ou) + 1) + dstart + 1
    start = column_numpy(ops, "start_ps", np.int64)
    # every key at once: windows and -dones in one (key, start) order, a window before a -done of its start, ties
    # in row order; each -done's candidate is the last window sorted before it (kept where its key is the -done's)
    nw = len(w_idx)
    key = np.concatenate([wkey, dk])
    order = np.lexsort((np.arange(nw + len(d_idx)) >= nw, np.concatenate([start[w_idx], start[d_idx]]), key))
    is_win = order < nw
    last = np.maximum.accumulate(np.where(is_win, np.arange(len(order)), -1))
    at = np.flatnonzero(~is_win)
    pos = last[at]
    ok = pos >= 0
    # a window completes one -done: a later one of its key without its own start is unpaired (the -done before
    # found the same window; one of another key never finds a window of this key)
    ok[1:] &= pos[1:] != pos[:-1]
    pos = np.where(ok, pos, 0)
    ok &= key[order[pos]] == key[order[at]]
    return d_idx[order[at][ok] - nw].astype(np.int64), w_idx[order[pos][ok]].astype(np.int64)


def done_roofline(ops: pd.DataFrame, d_idx: np.ndarray, w_idx: np.ndarray, window_roof: np.ndarray) -> np.ndarray:
    """The roofline of each paired ``-done`` row: the wait a transfer at its window's roofline would have left,
    ``clip(window start + window roofline - done start, 0, done duration)`` (NaN where the window's is unknown)."""
    start = column_numpy(ops, "start_ps", np.int64)
    dur = column_numpy(ops, "duration_ps", np.int64)
    left = start[w_idx] + window_roof - start[d_idx]
    return np.clip(left, 0, dur[d_idx]).astype(float)


def queued_link_time(ops: pd.DataFrame, rows: np.ndarray, own: np.ndarray, to_host: np.ndarray) -> np.ndarray:
    """The host-link time of the host-transfer windows at ``rows`` (positions in ``ops``; ``own``: each one's
    time alone on the link, ``to_host``: its direction) when transfers in flight together share the link. PCIe is
    full duplex, so each (host, device, direction) is one queue; the link moves the transfers in the order they
    started, one after the other (three copies started together finish at 1, 2 and 3 times one's time, as the
    copy engines serialize them): ``finish_i = max(start_i, finish_(i-1)) + own_i`` (Lindley's recursion, as
    prefix sums and a running maximum). Returns ``finish_i - start_i``, never below ``own``."""
    out = np.asarray(own, float).copy()
    if len(rows) < 2:
        return out
    start = column_numpy(ops, "start_ps", np.int64)[rows].astype(float)
    (hc, _), (dc, du) = (codes_of(ops[c], compact=True) for c in ("host", "device"))
    # one number per (host, device, direction); the radix len(du) + 1 keeps a missing device (code -1) apart
    queue = (gather(hc, rows).astype(np.int64) * (len(du) + 1) + gather(dc, rows)) * 2
    queue += np.asarray(to_host, bool)
    # ops sorted by (host, device, start), rows ascending: a stable sort of the queue number alone gives (queue,
    # start) order (checked); otherwise sort on both
    order = np.argsort(queue, kind="stable")
    q, t0 = queue[order], start[order]
    if not bool(((q[1:] != q[:-1]) | (t0[1:] >= t0[:-1])).all()):
        order = np.lexsort((start, queue))
        q = queue[order]
    cut = np.flatnonzero(q[1:] != q[:-1]) + 1
    for g in np.split(order, cut):
        s, t = start[g], out[g]
        done = np.cumsum(t)  # S_i: the link's work up to and including transfer i
        # finish_i = S_i + max over j <= i of (start_j - S_(j-1)): the last time the queue ran empty sets it
        ready = np.maximum.accumulate(s - (done - t))
        out[g] = np.maximum(done + ready - s, t)
    return out


def queue_host_windows(ops: pd.DataFrame, p: dict, u: dict, inv: np.ndarray) -> None:
    """Host-transfer windows in flight together share their direction of the host link: each one's host-link time
    (``network``) and roofline become the time until the link, moving the transfers in the order they started,
    would have finished it (:func:`queued_link_time`); in place in the roofline join's prediction ``p`` (``u``:
    its identity dict, ``inv``: each row's identity), before the ``-done`` rows take their windows' verdicts."""
    w = np.flatnonzero(np.asarray(p["host_x"], bool) & column_numpy(ops, "is_async", bool))
    if len(w) < 2:
        return
    own = p["network"][w].astype(float)
    w, own = w[np.isfinite(own)], own[np.isfinite(own)]
    queued = queued_link_time(ops, w, own, gather(u["to_host"], gather(inv, w)))
    later = queued > own
    if not later.any():
        return
    w, queued = w[later], queued[later]
    for k in ("network", "roofline_ps"):
        if isinstance(p[k], np.ndarray) and not p[k].flags.writeable:
            p[k] = p[k].copy()
        p[k][w] = np.fmax(p[k][w], queued)


def judge_done_over_windows(ops: pd.DataFrame, p: dict, u: dict, inv: np.ndarray) -> None:
    """Each ``-done`` row paired with its async window takes the window's verdict scaled to the wait a transfer
    at the roofline would have left exposed (:func:`done_roofline`); in place."""
    done = u["done"][inv]
    if not done.any():
        return
    d_idx, w_idx = pair_done_windows(ops, done, u["d2s"])
    if not len(d_idx):
        return
    same = ("best", "host_x", "reason", "dtype_codes", "cdtype_codes", "coll_codes", "gsize")  # window's own
    for k in ("compute", "memory", "network", "roofline_ps", "net", *same):
        v = p[k]
        if isinstance(v, np.ndarray) and not v.flags.writeable and not (k in same and held_once(v)):
            p[k] = v.copy()  # (a column held once gets its window's value, its own: it stays held once)
    wroof = p["roofline_ps"][w_idx]
    roof = done_roofline(ops, d_idx, w_idx, wroof)
    scale = np.divide(roof, wroof, out=np.zeros(len(roof)), where=wroof > 0)
    for k in ("compute", "memory", "network"):
        p[k][d_idx] = p[k][w_idx] * scale
    p["roofline_ps"][d_idx] = np.where(np.isnan(wroof), np.nan, roof)
    for k in same:
        if not held_once(p[k]):
            p[k][d_idx] = p[k][w_idx]  # (cost_source stays the -done's own: its zero cost is the model's)
    p["net"][d_idx] = 0.0
