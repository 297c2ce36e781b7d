"""One host's measured steps as a dependency graph (the map side of the replay: small, per host).

A node is one op row of a chosen step on a device (a step: a run of the step program on the device, start to start,
:mod:`tracekit.ingest.steps`; an op belongs to the step whose window holds its start). Kinds:

* ``OP``: a sync op; it ends ``work`` after it starts (a parent op, such as an XLA:CPU ``while`` that contains its
  body's events, ends ``tail`` after its last child).
* ``WIN``: an async window (``-start`` .. ``-done``); it starts with its ``-start`` op. A host-offload copy waits for
  the copy before it in its direction of the device's host link (``qprev``: PCIe is full duplex, the copies of one
  direction move one after the other) and then takes ``work`` (its own link time).
* ``DONE``: a ``-done`` op paired with its window: it ends when the window has ended (``after`` later), or
  ``nowait`` after it starts when the window was done already.

Each node starts ``slack`` after the latest of its predecessors (the gap measured before it: a launch, a host wait;
kept unless a change removes it), or ``slack`` after its step's start when it has none. Predecessors, each only
when it ended (or, for a window, its ``-start`` started) no later than the node started, ties broken by the
measured order so the graph has no cycle:

* **stream order**: the op that ended last before it on the same stream and nesting level. A stream is a trace
  line (a TPU op line, a GPU stream); XLA:CPU runs a device's thunks on whatever pool thread is free, so there the
  stream is the whole device;
* **data**: the ops that produce its operands (HLO operands, looked through instructions the trace does not show:
  get-tuple-element, bitcast, tuple, parameters of a called computation are not followed).

Collectives (sync ops and windows) carry a ``group`` key: the k-th execution of the op in the step by the
devices of one replica group; the replay (:mod:`tracekit.analysis.replay.engine`) makes them wait for their last
participant, across devices and hosts.

Building the graph is vectorized over the host's op rows (which step holds each: searchsorted; predecessors: one
sort of ranks and a searchsorted, :func:`latest_before`). What loops in Python is bounded by the chosen steps'
nodes (the caller caps them, :data:`tracekit.analysis.replay.inputs.MAX_NODES`): listing each node's operands, the
collectives' keys, the labels; and :func:`producers`, once per HLO instruction.
"""
from __future__ import annotations

import re
from dataclasses import field

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.grouping import codes_of, per_pair, per_value, row_parts, unique
from tracekit.model import predictions
from tracekit.records import record

OP, WIN, DONE = 0, 1, 2
END, START = 0, 1  #: a predecessor edge waits for the source's end, or (a window's -start) its start
#: instructions the trace never shows as op events: operands are followed through them
_INVISIBLE = frozenset({"get-tuple-element", "bitcast", "tuple", "reshape", "constant", "parameter",
                        "after-all", "partition-id", "replica-id", "iota"})
_COLLECTIVE = re.compile(r"^(all-reduce|all-gather|reduce-scatter|all-to-all|ragged-all-to-all|"
                         r"collective-permute|collective-broadcast)(-start)?$")
_DONE = re.compile(r"-done(\.\d+)?$")


@record
class HostGraph:
    """One host's chosen steps (see the module docstring). Node arrays have one entry per node, in the order
    :func:`build` sorted them (measured start, then end); ``steps_*`` one entry per (device, step)."""

    host: str
    devices: list
    rows: np.ndarray  #: position of the node's row in the ops frame given to :func:`build`
    dev: np.ndarray  #: device code (index into ``devices``)
    step: np.ndarray
    slot: np.ndarray  #: index of the node's (device, step) in the ``steps_*`` arrays
    kind: np.ndarray
    start: np.ndarray  #: measured, the host's clock (ps)
    end: np.ndarray
    work: np.ndarray  #: OP: duration; WIN: own time (queued copies: link time of its own); else 0
    slack: np.ndarray
    pred_ptr: np.ndarray  #: CSR: the predecessors of node i are pred_src[pred_ptr[i]:pred_ptr[i + 1]]
    pred_src: np.ndarray
    pred_kind: np.ndarray  #: END or START per edge
    parent: np.ndarray  #: enclosing op on its line (-1)
    tail: np.ndarray  #: parent: end minus its last child's end
    window: np.ndarray  #: DONE: its window node (-1)
    nowait: np.ndarray  #: DONE: time from its start when its window had ended before it started
    after: np.ndarray  #: DONE: time from its window's end
    qprev: np.ndarray  #: WIN: the copy before it in its link queue (-1)
    group: np.ndarray  #: collective instance key (object; None: not a collective)
    label: np.ndarray  #: "module/op" (object)
    steps_dev: np.ndarray
    steps_step: np.ndarray
    steps_start: np.ndarray
    steps_next: np.ndarray  #: the next run's start (the step's end, start to start)
    steps_tail: np.ndarray  #: next start minus the last end of the step's nodes (may be negative)
    #: windows whose -done did not wait, by how their end was estimated (:func:`links.window_ends`)
    estimated: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rows)


def _rank_key(*arrays) -> list:
    """Dense ranks of the values of ``arrays`` taken together (one rank space, order kept). The values are times in
    ps and keys: sorted distinct values by one sort (:func:`tracekit.grouping.unique`; NumPy's hash table collides
    on round picosecond times, twice the time here)."""
    allv = np.concatenate(arrays)
    u = unique(allv)
    return [np.searchsorted(u, a) for a in arrays]


def latest_before(key: np.ndarray, q_time: np.ndarray, q_seq: np.ndarray, c_key: np.ndarray, c_time: np.ndarray,
                  c_seq: np.ndarray, q_key: np.ndarray | None = None) -> np.ndarray:
    """For each query i: the candidate j of the same key with the largest (c_time, c_seq) strictly below
    (q_time_i, q_seq_i), as an index into the candidates, -1 where none. ``key`` is the queries' key (``q_key``
    an alias); vectorized by one sort of the candidates on (key, time rank, seq)."""
    key = key if q_key is None else q_key
    if not len(c_key) or not len(key):
        return np.full(len(key), -1, np.int64)
    n = int(max(c_seq.max(initial=0), q_seq.max(initial=0))) + 1
    qt, ct = _rank_key(q_time, c_time)
    kq, kc = _rank_key(key, c_key)
    span = (int(max(qt.max(initial=0), ct.max(initial=0))) + 1) * n
    c_val = kc.astype(np.int64) * span + ct.astype(np.int64) * n + c_seq
    q_val = kq.astype(np.int64) * span + qt.astype(np.int64) * n + q_seq
    order = np.argsort(c_val, kind="stable")
    sv = c_val[order]
    pos = np.searchsorted(sv, q_val, "left") - 1
    ok = pos >= 0
    found = order[np.where(ok, pos, 0)]
    ok &= kc[found] == kq
    return np.where(ok, found, -1)


def producers(hlo: pd.DataFrame) -> dict:
    """(program_id, instruction) -> the instructions whose results it reads, looked through the instructions a
    trace does not show (:data:`_INVISIBLE`; a parameter ends the search): the ops it waits for."""
    if hlo is None or not len(hlo):
        return {}
    pid = column_numpy(hlo, "program_id", np.uint64)
    names = text_numpy(hlo, "name")
    comp = text_numpy(hlo, "computation")
    opc = text_numpy(hlo, "opcode")
    opers = hlo["operands"].fillna("").astype(str).to_numpy()
    info = {}
    for p, c, n, o, ops_ in zip(pid.tolist(), comp, names, opc, opers):
        info[(p, c, n)] = (o, [x for x in ops_.split(",") if x])
    memo: dict = {}

    def visible(p, c, n, depth=0):
        k = (p, c, n)
        if k in memo:
            return memo[k]
        memo[k] = ()  # (a cycle cannot form in HLO; this only guards against corrupt input)
        o, operands = info.get(k, ("", []))
        out: set = set()
        for x in operands:
            xo = info.get((p, c, x), ("", []))[0]
            if xo in _INVISIBLE:
                if xo != "parameter" and depth < 32:
                    out.update(visible(p, c, x, depth + 1))
            elif xo:
                out.add(x)
        memo[k] = tuple(sorted(out))
        return memo[k]

    return {(p, n): visible(p, c, n) for (p, c, n) in info}


def _ascending(a: np.ndarray) -> bool:
    return bool((a[1:] >= a[:-1]).all()) if len(a) > 1 else True


def _in_windows(start: np.ndarray, w_start: np.ndarray, w_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions in ascending ``start`` of the rows each window holds, each one's window) where a row belongs to
    the latest window (``w_start`` ascending) starting at or before it, if it starts before that window's end."""
    if not len(w_start):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    upto = np.minimum(w_end, np.r_[w_start[1:], np.iinfo(np.int64).max])  # (the next window takes over)
    a = np.searchsorted(start, w_start, "left")
    cnt = np.maximum(np.searchsorted(start, upto, "left") - a, 0)
    offsets = np.cumsum(cnt) - cnt
    pos = np.repeat(a - offsets, cnt) + np.arange(int(cnt.sum()), dtype=np.int64)
    return pos.astype(np.int64), np.repeat(np.arange(len(w_start), dtype=np.int64), cnt)


def _parents(line: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per node: the innermost node of its line whose window contains it (-1)."""
    from tracekit.ingest.nesting import self_times
    return self_times(line, start, end - start)[1]


#: the op columns the graph reads (the chosen steps' rows of them are copied once)
COLUMNS = ("host", "device", "line", "source", "module", "program_id", "op", "opcode", "start_ps", "duration_ps",
           "is_async", "is_host_transfer", "to_host", "net_bytes", "roofline_ps")


def step_rows(ops: pd.DataFrame, steps: pd.DataFrame, step_numbers, host: str | None = None):
    """(the chosen steps of ``host`` (closed ones among ``step_numbers``: a frame), their devices, the positions of
    the op rows whose start lies in one of those steps' windows on its device, each one's step (index into the
    chosen steps)). Works on the columns' codes: no string per row."""
    st = steps[~column_numpy(steps, "open_end", bool)] if "open_end" in steps else steps
    if host is not None:
        st = st[text_numpy(st, "host") == host]
    st = st[np.isin(column_numpy(st, "step", np.int64), np.asarray(list(step_numbers), np.int64))]
    sdev, devices = codes_of(st["device"].astype(str))
    devices = [str(d) for d in devices]
    s_start = column_numpy(st, "start_ps", np.int64)
    s_next = s_start + column_numpy(st, "duration_ps", np.int64)
    dcodes, dnames = codes_of(ops["device"], compact=True)
    hmask = None
    if host is not None:
        hcodes, hnames = codes_of(ops["host"], compact=True)
        mine = [i for i, h in enumerate(hnames) if str(h) == host]
        hmask = hcodes == (mine[0] if mine else -2)
    dmap = {str(d): i for i, d in enumerate(dnames)}
    ostart = column_numpy(ops, "start_ps", np.int64)
    # one host's frame sorted by device and start (as the loader leaves it): each device's rows are a slice, and
    # each step's rows a range of it found by binary search (no device-sized temporaries)
    parts = row_parts(ops, ["host", "device"]) if host is not None else {}
    rows, slots = [], []
    for d, name in enumerate(devices):
        srows = np.flatnonzero(sdev == d)
        srows = srows[np.argsort(s_start[srows], kind="stable")]
        part = parts.get((host, name), slice(0, 0)) if host is not None else None
        if isinstance(part, slice) and _ascending(ostart[part]):
            r, k = _in_windows(ostart[part], s_start[srows], s_next[srows])
            rows.append(part.start + r)
            slots.append(srows[k])
            continue
        on = dcodes == dmap.get(name, -2)
        orows = np.flatnonzero(on & hmask if hmask is not None else on)
        pos = np.searchsorted(s_start[srows], ostart[orows], "right") - 1
        ok = pos >= 0
        cand = srows[np.where(ok, pos, 0)]
        ok &= ostart[orows] < s_next[cand]
        rows.append(orows[ok])
        slots.append(cand[ok])
    rows = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    slots = np.concatenate(slots) if slots else np.zeros(0, np.int64)
    return st, devices, sdev.astype(np.int64), rows.astype(np.int64), slots.astype(np.int64)


def build(host: str, ops: pd.DataFrame, steps: pd.DataFrame, step_numbers, d2s: dict | None = None,
          prod: dict | None = None, member_of=None) -> HostGraph:
    """The graph of the steps ``step_numbers`` of one host. ``ops``: op rows (every host's: this host's are taken
    here; roofline columns, when present, mark host-offload copies: ``is_host_transfer``, ``to_host``); ``steps``:
    the steps frame; ``d2s``: ``-done`` -> ``-start`` names (:func:`tracekit.ingest.hlo.done_to_start`); ``prod``:
    :func:`producers`; ``member_of(device, program_id, op)``: the devices of the replica group the device's
    collective runs in (None: every device that runs it). The graph's ``rows`` are positions in ``ops``."""
    from tracekit.analysis.replay import links
    st, devices, sdev_codes, frows, fslot = step_rows(ops, steps, step_numbers, host)
    s_start = column_numpy(st, "start_ps", np.int64)
    s_next = s_start + column_numpy(st, "duration_ps", np.int64)
    s_step = column_numpy(st, "step", np.int64)
    fstart = column_numpy(ops, "start_ps", np.int64)[frows]
    fdur = column_numpy(ops, "duration_ps", np.int64)[frows]
    order = np.lexsort((frows, fstart + fdur, fstart))
    frows, nslot = frows[order], fslot[order]
    # the chosen rows' columns, once (everything below is bounded by them)
    ops = predictions.materialized(ops[[c for c in (*COLUMNS, *predictions.COLUMNS) if c in ops.columns]].take(
        frows).reset_index(drop=True), COLUMNS)
    n = len(frows)
    rows = np.arange(n, dtype=np.int64)
    start = column_numpy(ops, "start_ps", np.int64)
    end = start + column_numpy(ops, "duration_ps", np.int64)
    is_async = column_numpy(ops, "is_async", bool)
    opname = text_numpy(ops, "op")
    opcode = text_numpy(ops, "opcode")
    module = text_numpy(ops, "module")
    pid = column_numpy(ops, "program_id", np.uint64)
    src = text_numpy(ops, "source")
    line = codes_of(ops["line"])[0] if n else np.zeros(0, np.int64)
    ocode_rows = sdev_codes[nslot] if n else np.zeros(0, np.int64)
    seq = np.arange(n, dtype=np.int64)
    kind = np.where(is_async, WIN, OP).astype(np.int8)
    # nesting (sync rows on one line)
    parent = np.full(n, -1, np.int64)
    sync = np.flatnonzero(~is_async)
    if len(sync):
        lkey = nslot[sync] * (int(line.max(initial=0)) + 1) + line[sync]
        p = _parents(lkey, start[sync], end[sync])
        parent[sync[p >= 0]] = sync[p[p >= 0]]
    # stream edges: the latest end before the start on the same stream and level (a CPU device is one stream)
    stream = np.where(src == "cpu_thunk", -1, line)
    skey = (nslot * (int(line.max(initial=0)) + 2) + stream + 1) * (n + 1) + parent + 1
    qs = sync
    found = latest_before(skey[qs], start[qs], seq[qs], skey[sync], end[sync], seq[sync])
    e_dst, e_src, e_kind = [qs[found >= 0]], [sync[found[found >= 0]]], [np.full(int((found >= 0).sum()), END)]
    first = qs[(found < 0) & (parent[qs] >= 0)]  # a parent's first child starts with it
    e_dst.append(first)
    e_src.append(parent[first])
    e_kind.append(np.full(len(first), START))
    # data edges: each operand's producer, the latest of that name on the device ended before the start
    if prod:
        dq, dname = _operand_rows(prod, sync, pid, opname)
        if len(dq):
            names_c, uniq = pd.factorize(np.concatenate([dname, opname[sync]]))
            qk = nslot[dq] * (len(uniq) + 1) + names_c[:len(dq)]
            ck = nslot[sync] * (len(uniq) + 1) + names_c[len(dq):]
            f = latest_before(qk, start[dq], seq[dq], ck, end[sync], seq[sync])
            e_dst.append(dq[f >= 0])
            e_src.append(sync[f[f >= 0]])
            e_kind.append(np.full(int((f >= 0).sum()), END))
    # windows start with their -start op: the latest sync row of that name starting at or before them
    win = np.flatnonzero(is_async)
    if len(win) and len(sync):
        nk, _ = pd.factorize(np.concatenate([opname[win], opname[sync]]))
        f = latest_before(nslot[win] * (int(nk.max()) + 1) + nk[:len(win)], start[win], seq[win],
                          nslot[sync] * (int(nk.max()) + 1) + nk[len(win):], start[sync], seq[sync])
        e_dst.append(win[f >= 0])
        e_src.append(sync[f[f >= 0]])
        e_kind.append(np.full(int((f >= 0).sum()), START))
    dst = np.concatenate(e_dst) if e_dst else np.zeros(0, np.int64)
    srcs = np.concatenate(e_src) if e_src else np.zeros(0, np.int64)
    kinds = np.concatenate(e_kind).astype(np.int8) if e_kind else np.zeros(0, np.int8)
    key = np.unique(dst * (n + 1) + srcs, return_index=True)[1]  # one edge per (dst, src)
    dst, srcs, kinds = dst[key], srcs[key], kinds[key]
    o = np.lexsort((srcs, dst))
    dst, srcs, kinds = dst[o], srcs[o], kinds[o]
    ptr = np.searchsorted(dst, np.arange(n + 1))
    # slack: measured start minus the latest predecessor time (none: the step's start)
    ptime = np.where(kinds == END, end[srcs], start[srcs])
    latest = np.full(n, np.iinfo(np.int64).min)
    np.maximum.at(latest, dst, ptime)
    base = np.where(latest > np.iinfo(np.int64).min, latest, s_start[nslot])
    slack = np.maximum(start - base, 0)
    work = np.where(kind == OP, end - start, 0).astype(np.int64)
    # parents end a tail after their last child
    tail = np.zeros(n, np.int64)
    has = parent >= 0
    if has.any():
        last = np.full(n, np.iinfo(np.int64).min)
        np.maximum.at(last, parent[has], end[has])
        isp = last > np.iinfo(np.int64).min
        tail[isp] = end[isp] - last[isp]
    # -done ops wait for their windows; host-offload copies queue on the link
    window, waited = links.done_windows(ops, rows, kind, start, end, d2s or {})
    end, estimated = links.window_ends(ops, rows, start, end, window, waited)
    nowait, after = links.done_times(window, waited, start, end)
    kind[window >= 0] = DONE
    work[window >= 0] = 0
    qprev, own = links.link_queue(ops, rows, kind, start, end, nslot)
    work = np.where(kind == WIN, own, work)
    group = _groups(opname, opcode, module, pid, is_async, nslot, s_step, seq,
                    [devices[d] for d in sdev_codes[nslot]] if n else [], member_of)
    label = per_pair(lambda m, o: f"{m}/{o}", module, opname)
    # the step's tail: from the last end of its nodes to the next run's start
    last_end = np.full(len(st), np.iinfo(np.int64).min)
    if n:
        np.maximum.at(last_end, nslot, end)
    steps_tail = np.where(last_end > np.iinfo(np.int64).min, s_next - last_end, s_next - s_start)
    return HostGraph(host, devices, frows, ocode_rows, s_step[nslot], nslot, kind, start, end, work, slack, ptr,
                     srcs, kinds, parent, tail, window, nowait, after, qprev, group, label, sdev_codes.astype(np.int64),
                     s_step, s_start, s_next, steps_tail, estimated=estimated)


def _operand_rows(prod: dict, rows: np.ndarray, pid: np.ndarray, opname: np.ndarray) -> tuple:
    """(row, operand name) of each of ``rows``' operands (:func:`producers` of its program and op), in row order
    and each row's operands in their order; looked up once per distinct (program, op)."""
    looked = per_pair(lambda p, o: prod.get((int(p), o), ()), pid[rows], opname[rows])
    count = np.fromiter(map(len, looked), np.int64, len(looked))
    names = np.fromiter((x for xs in looked for x in xs), object, int(count.sum()))
    return np.repeat(rows.astype(np.int64), count), names


def _groups(opname, opcode, module, pid, is_async, nslot, s_step, seq, dev_names, member_of) -> np.ndarray:
    """Collective instance keys: (module, program, op, async, step, k-th execution of the op in the step on its
    device, the devices of its replica group (None: unknown))."""
    n = len(opname)
    out = np.full(n, None, object)
    base = per_value(lambda o: _COLLECTIVE.match(o.lower()) is not None, opcode, bool)
    idx = np.flatnonzero(base & ~per_value(lambda o: bool(_DONE.search(o)), opname, bool)) if n else base
    if not len(idx):
        return out
    df = pd.DataFrame({"m": module[idx], "o": opname[idx], "a": is_async[idx], "s": nslot[idx], "q": seq[idx]})
    df = df.sort_values(["s", "m", "o", "a", "q"], kind="stable")
    df["k"] = df.groupby(["s", "m", "o", "a"], sort=False).cumcount()
    steps = s_step[column_numpy(df, "s")]
    memo: dict = {}
    for i, m, o, a, st, k in zip(idx[df.index.to_numpy()], df["m"], df["o"], df["a"], steps, df["k"]):
        who = None
        if member_of is not None:
            mk = (dev_names[i], int(pid[i]), str(o))
            if mk not in memo:
                memo[mk] = member_of(*mk)
            who = memo[mk]
        out[i] = (str(m), int(pid[i]), str(o), bool(a), int(st), int(k), who)
    return out
