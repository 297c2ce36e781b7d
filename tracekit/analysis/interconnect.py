"""Per collective op, measured vs predicted: the report's interconnect section and ``tracekit collectives``.

Each host summarizes its collective executions (:func:`tracekit.analysis.collectives.executions`) where they are
(:func:`host_part`): per op (module, program, op, kind) the counts and sums the section shows, the first execution
and the model's description of it; per collective *instance* (the k-th execution of an op in one replica group,
async or not) and host: how many of its devices took part, the last one's start (``arrival``), and the sums the
skew needs. The reduce (:func:`reduce`) meets the instances across hosts in arrays: the last arrival ``L`` of an
instance is the largest of its hosts', and a host's devices waited ``clip(L - start, 0, duration)`` each, which
it knows exactly for itself (``L`` its own arrival: its own sum) and, for the others, from its sums: ``n L -
sum(start)`` while ``L`` is before every one of its devices' ends (a collective ends after its last participant
arrives), ``sum(duration)`` once ``L`` is past them all. Only clocks that disagree between hosts put ``L`` between a
host's ends; that host's wait is then ``min(n L - sum(start), sum(duration))``. One host is exactly
:func:`tracekit.analysis.collectives.executions` aggregated, and the driver holds O(ops + instances x hosts).
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from tracekit.analysis.collectives import busbw_factor, executions
from tracekit.columns import column_numpy, stack, text_numpy
from tracekit.grouping import group_index, int_sums, sorted_group_numbers
from tracekit.records import record

#: one row per collective op (module, op), executions aggregated
SUMMARY_COLUMNS = ["module", "program_id", "op", "kind", "group_size", "groups", "span", "global_bytes",
                   "size_bytes", "executions", "devices", "time_ps", "total_ps", "skew_ps", "transfer_ps",
                   "algbw_bytes_per_s", "busbw_bytes_per_s", "predicted_ps", "efficiency", "bound", "phases",
                   "pattern", "note", "hosts"]
KEY = ["module", "program_id", "op", "kind"]
#: per op and host: the sums, the first execution (start, host, device), the model's description of it, the hosts
OP_COLUMNS = KEY + ["n", "devices", "dur_sum", "size_bytes", "gmax", "pred_sum", "pred_n", "bound", "first_start",
                    "first_host", "first_device", "groups", "span", "phases", "reason", "pattern", "global_bytes",
                    "hosts"]
#: per instance and host (arrays): op row, instance key (async, group, k), devices, arrival, the skew's sums
INSTANCE_FIELDS = ("op", "is_async", "group", "k", "n", "arrival", "start_sum", "min_end", "max_end", "dur_sum",
                   "skew")


@record(frozen=True)
class HostPart:
    """One host's collective executions, summarized (see the module docstring)."""

    ops: pd.DataFrame  #: :data:`OP_COLUMNS`, one row per op, in first-execution order
    instances: dict  #: :data:`INSTANCE_FIELDS` -> array, one entry per (instance, this host)


def groups_text(op) -> str:
    """An op's replica groups as the table shows them."""
    if op.pairs:
        return f"{len(op.pairs)} source->target pair(s)"
    if not op.groups:
        return "all devices"
    sizes = {len(g) for g in op.groups}
    head = ", ".join("{" + ",".join(map(str, g)) + "}" for g in op.groups[:2])
    more = f", ... ({len(op.groups)} groups)" if len(op.groups) > 2 else ""
    return f"{len(op.groups)} x {'/'.join(map(str, sorted(sizes)))}: {head}{more}"


def _empty() -> HostPart:
    return HostPart(pd.DataFrame(columns=OP_COLUMNS), {f: np.zeros(0, np.int64) for f in INSTANCE_FIELDS})


def host_part(ops: pd.DataFrame, model) -> HostPart:
    """The :class:`HostPart` of one host's roofline-joined ``ops`` priced on the collective ``model``."""
    ex = executions(ops, model, instances=True)
    if not len(ex):
        return _empty()
    o, row = _per_op(ex)
    desc = []
    for r in o.itertuples(index=False):
        op = model.op(int(r.program_id), r.op)
        p = model.predict(op.program_id, op.name, r.first_host, r.first_device)
        desc.append((groups_text(op), p.span if p is not None else "",
                     p.formula if p is not None and p.phases else (p.reason if p is not None else ""),
                     p.reason if p is not None else "", op.pattern, op.global_bytes))
    o["groups"], o["span"], o["phases"], o["reason"], o["pattern"], o["global_bytes"] = \
        (list(x) for x in zip(*desc))
    # instances: the op row of each execution, then per (op row, async, group, k)
    start, dur = column_numpy(ex, "start_ps", np.int64), column_numpy(ex, "duration_ps", np.int64)
    ik = {"op": np.asarray(row), "is_async": column_numpy(ex, "is_async", bool),
          "group": column_numpy(ex, "_group", np.int64),
          "k": column_numpy(ex, "_k", np.int64)}
    if ik["op"].dtype.kind in "iub":
        inv = sorted_group_numbers(ik["op"], ik["is_async"], ik["group"], ik["k"])
    else:  # (an op row pandas numbered with gaps: its own groupby, as before)
        inv = pd.DataFrame(ik).groupby(["op", "is_async", "group", "k"], sort=True).ngroup().to_numpy()
    n_i = int(inv.max()) + 1
    first = np.full(n_i, len(ex))
    np.minimum.at(first, inv, np.arange(len(ex)))
    arrival = np.full(n_i, np.iinfo(np.int64).min)
    np.maximum.at(arrival, inv, start)
    end = start + dur
    min_end, max_end = np.full(n_i, np.iinfo(np.int64).max), np.full(n_i, np.iinfo(np.int64).min)
    np.minimum.at(min_end, inv, end)
    np.maximum.at(max_end, inv, end)
    skew = np.minimum(np.maximum(arrival[inv] - start, 0), dur).astype(float)
    inst = {"op": ik["op"][first].astype(np.int32), "is_async": ik["is_async"][first],
            "group": ik["group"][first], "k": ik["k"][first],
            "n": np.bincount(inv, minlength=n_i).astype(np.int64), "arrival": arrival,
            "start_sum": int_sums(inv, start, n_i),
            "min_end": min_end, "max_end": max_end, "dur_sum": int_sums(inv, dur, n_i),
            "skew": np.bincount(inv, weights=skew, minlength=n_i)}
    return HostPart(o[OP_COLUMNS], inst)


def _per_op(ex: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    """(one row per op of the executions ``ex``, in first-execution order: KEY, n, dur_sum, the first execution's
    size_bytes, bound, start, host and device, gmax, devices, hosts, pred_sum, pred_n; each execution's op row).
    ``ex`` is in (start, host, device) order: an op's first row is its first execution."""
    cols = KEY + ["size_bytes", "bound", "host", "device"]
    if any(ex[c].isna().any() for c in cols):  # (a missing value: pandas' groupby, which skips it)
        g = ex.groupby(KEY, sort=False)
        o = g.agg(n=("start_ps", "size"), dur_sum=("duration_ps", "sum"), size_bytes=("size_bytes", "first"),
                  gmax=("group_size", "max"), bound=("bound", "first"), first_start=("start_ps", "first"),
                  first_host=("host", "first"), first_device=("device", "first")).reset_index()
        o["devices"] = [tuple(sorted(set(v))) for v in g["device"].agg(list)]
        o["hosts"] = [tuple(sorted({str(h) for h in v})) for v in g["host"].agg(list)]
        pred, inv = g["predicted_ps"], g.ngroup().to_numpy()
    else:  # one grouping, then arrays (a groupby's aggregation costs ms on the few hundred rows of a host)
        inv, first = group_index(ex, KEY)  # (groups in first-seen order, as groupby(sort=False) numbers them)
        inv, n_op = inv.astype(np.int64), len(first)
        o = pd.DataFrame({c: ex[c].take(first).reset_index(drop=True) for c in KEY})
        o["n"] = np.bincount(inv, minlength=n_op).astype(np.int64)
        o["dur_sum"] = int_sums(inv, column_numpy(ex, "duration_ps", np.int64), n_op)
        o["size_bytes"] = ex["size_bytes"].take(first).reset_index(drop=True)
        gmax = np.full(n_op, np.iinfo(np.int64).min)
        np.maximum.at(gmax, inv, column_numpy(ex, "group_size", np.int64))
        o["gmax"] = gmax
        o["bound"] = ex["bound"].take(first).reset_index(drop=True)
        o["first_start"] = column_numpy(ex, "start_ps", np.int64)[first]
        o["first_host"] = ex["host"].take(first).reset_index(drop=True)
        o["first_device"] = ex["device"].take(first).reset_index(drop=True)
        o["devices"] = _distinct(inv, ex["device"].tolist(), n_op)
        o["hosts"] = _distinct(inv, [str(h) for h in ex["host"].tolist()], n_op)  # (a trace of several hosts)
        pred = pd.Series(column_numpy(ex, "predicted_ps", float)).groupby(inv)
    o["pred_sum"] = pred.sum().to_numpy(float)  # (NaN skipped, as a mean skips them)
    o["pred_n"] = pred.count().to_numpy(np.int64)
    return o, inv


def _distinct(inv: np.ndarray, values: list, n: int) -> list:
    """Per group of ``inv`` (codes in [0, n)): its distinct ``values``, sorted, as a tuple."""
    out: list = [set() for _ in range(n)]
    for i, v in zip(inv.tolist(), values):
        out[i].add(v)
    return [tuple(sorted(x)) for x in out]


def reduce(parts: list) -> pd.DataFrame:
    """One row per collective op over every host's :class:`HostPart` (``parts`` in host order):
    :data:`SUMMARY_COLUMNS`, sorted by total time (see the module docstring)."""
    parts = [p for p in parts if p is not None and len(p.ops)]
    if not parts:
        return pd.DataFrame(columns=SUMMARY_COLUMNS)
    allo = stack([p.ops for p in parts]) if len(parts) > 1 else parts[0].ops
    offs = np.cumsum([0] + [len(p.ops) for p in parts])
    gid = allo.groupby(KEY, sort=False).ngroup().to_numpy()  # every host's op rows -> the pod's op
    n_op = int(gid.max()) + 1
    # the pod's first execution of each op: the least (start, host, device)
    order = np.lexsort((text_numpy(allo, "first_device"), text_numpy(allo, "first_host"),
                        column_numpy(allo, "first_start", np.int64)))
    _, at = np.unique(gid[order], return_index=True)
    first = order[at]
    # (the columns as arrays, the frame made once at the end: a column set on a frame costs more than its sums)
    out = {c: allo[c].take(first).reset_index(drop=True) for c in KEY + [
        "size_bytes", "bound", "groups", "span", "phases", "reason", "pattern", "global_bytes", "first_start",
        "first_host", "first_device"]}  # (Series: each keeps its type in the frame)
    out["executions"] = int_sums(gid, column_numpy(allo, "n", np.int64), n_op)
    out["total_ps"] = int_sums(gid, column_numpy(allo, "dur_sum", np.int64), n_op)
    gmax = np.full(n_op, np.iinfo(np.int64).min)
    np.maximum.at(gmax, gid, column_numpy(allo, "gmax", np.int64))
    out["group_size"] = gmax
    devs: list = [set() for _ in range(n_op)]
    hosts: list = [set() for _ in range(n_op)]
    for g, d, h in zip(gid.tolist(), allo["devices"].tolist(), allo["hosts"].tolist()):
        devs[g].update(d)
        if isinstance(h, tuple):  # (unknown: none named)
            hosts[g].update(h)
    out["devices"] = [len(d) for d in devs]
    out["hosts"] = [",".join(sorted(h)) for h in hosts]
    pred_n = int_sums(gid, column_numpy(allo, "pred_n", np.int64), n_op)
    pred_sum = np.bincount(gid, weights=column_numpy(allo, "pred_sum", float), minlength=n_op)
    skew_sum, skew_n = _skews(parts, offs, gid, n_op)
    n = out["executions"].astype(float)
    dur_sum = out["total_ps"].astype(float)
    size = column_numpy(out, "size_bytes", float)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["time_ps"] = dur_sum / n
        out["skew_ps"] = np.where(skew_n > 0, skew_sum / np.maximum(skew_n, 1), np.nan)
        tr = out["transfer_ps"] = (dur_sum - skew_sum) / n
        out["predicted_ps"] = np.where(pred_n > 0, pred_sum / np.maximum(pred_n, 1), np.nan)
        out["algbw_bytes_per_s"] = np.where(tr > 0, size / (tr / 1e12), np.nan)
        out["busbw_bytes_per_s"] = out["algbw_bytes_per_s"] * np.array(
            [busbw_factor(k, int(g)) for k, g in zip(out["kind"], out["group_size"])], float)
        out["efficiency"] = np.where(tr > 0, out["predicted_ps"] / tr, np.nan)
    notes = []
    for eff, skew, gs, reason in zip(out["efficiency"].tolist(), out["skew_ps"].tolist(), out["group_size"].tolist(),
                                     out["reason"]):
        note = []
        if np.isfinite(eff) and eff > 1.05:
            note.append("faster than the model allows: check --topology and the chip's link figures")
        if not np.isfinite(skew):
            note.append(f"skew unknown: the trace holds one device of each {gs}-device group (skew compares "
                        "the members' start times)")
        if reason:
            note.append(reason)
        notes.append("; ".join(note))
    out["note"] = notes
    out = pd.DataFrame(out)
    # (the pod's ops in first-execution order, then by total time: ties as one host's groupby leaves them)
    out = out.sort_values(["first_start", "first_host", "first_device"], kind="stable")
    return out.sort_values(["total_ps", "module", "op"], ascending=[False, True, True],
                           kind="stable")[SUMMARY_COLUMNS].reset_index(drop=True)


def _skews(parts: list, offs: np.ndarray, gid: np.ndarray, n_op: int) -> tuple[np.ndarray, np.ndarray]:
    """Per pod op: the waits summed over its executions whose instance has two or more participants, and how
    many such executions there are (see the module docstring). Host by host: the driver holds one host's
    temporaries and an int32 instance id per (instance, host), not every host's instance arrays side by side."""
    ids, m = _instance_ids(parts, offs, gid)
    if not m:
        return np.zeros(n_op), np.zeros(n_op, np.int64)
    last = np.full(m, np.iinfo(np.int64).min)
    who = np.zeros(m, np.int64)
    for p, inv in zip(parts, ids):
        np.maximum.at(last, inv, p.instances["arrival"])
        who += int_sums(inv, p.instances["n"], m)
    waits, counts = np.zeros(n_op), np.zeros(n_op, np.int64)
    for i, (p, inv) in enumerate(zip(parts, ids)):
        if not len(inv):
            continue
        c = p.instances
        op = gid[offs[i] + c["op"].astype(np.int64)]
        L, n = last[inv], c["n"].astype(np.int64)
        dur = c["dur_sum"].astype(float)
        ahead = n * L.astype(float) - c["start_sum"].astype(float)
        wait = np.where(c["arrival"] == L, c["skew"],
                        np.where(L <= c["min_end"], ahead,
                                 np.where(L >= c["max_end"], dur, np.minimum(ahead, dur))))
        ok = who[inv] >= 2
        waits += np.bincount(op, weights=np.where(ok, wait, 0.0), minlength=n_op)
        counts += np.bincount(op, weights=np.where(ok, n, 0), minlength=n_op).astype(np.int64)
    return waits, counts


def _instance_ids(parts: list, offs: np.ndarray, gid: np.ndarray) -> tuple[list, int]:
    """(per host: the pod-wide id of each of its instances (int32), how many instances the pod has). An instance
    is (pod op, async, replica group, k), packed exactly into one int64 (the groups by their rank among the pod's
    distinct groups); the pod's distinct packed keys grow host by host (a sorted union), so the driver never
    holds every host's keys side by side."""
    if not parts:
        return [], 0
    groups = np.unique(np.concatenate([np.unique(p.instances["group"]) for p in parts]))
    n_k = max((int(p.instances["k"].max()) + 1 for p in parts if len(p.instances["k"])), default=1)
    n_op = int(gid.max()) + 1 if len(gid) else 1
    if n_op * 2 * max(len(groups), 1) * n_k >= 1 << 62:  # (no real pod gets near: a frame groupby then)
        return _instance_ids_by_frame(parts, offs, gid)

    def packed(i, p):
        c = p.instances
        op = gid[offs[i] + c["op"].astype(np.int64)].astype(np.int64)
        g = np.searchsorted(groups, c["group"]).astype(np.int64)
        return ((op * 2 + c["is_async"].astype(np.int64)) * len(groups) + g) * n_k + c["k"].astype(np.int64)

    known = np.zeros(0, np.int64)
    for i, p in enumerate(parts):
        known = np.union1d(known, packed(i, p))
    return [np.searchsorted(known, packed(i, p)).astype(np.int32) for i, p in enumerate(parts)], len(known)


def _instance_ids_by_frame(parts: list, offs: np.ndarray, gid: np.ndarray) -> tuple[list, int]:
    """:func:`_instance_ids` by a pandas groupby of every host's keys at once."""
    keys = pd.concat([pd.DataFrame({"op": gid[offs[i] + p.instances["op"].astype(np.int64)],
                                    "a": p.instances["is_async"], "g": p.instances["group"], "k": p.instances["k"]})
                      for i, p in enumerate(parts)], ignore_index=True)
    inv = keys.groupby(["op", "a", "g", "k"], sort=False).ngroup().to_numpy(np.int64)
    cuts = np.cumsum([0] + [len(p.instances["op"]) for p in parts])
    return [inv[a:b].astype(np.int32) for a, b in zip(cuts[:-1], cuts[1:])], int(inv.max()) + 1 if len(inv) else 0


def summary(ops: pd.DataFrame, model) -> pd.DataFrame:
    """The interconnect summary (:data:`SUMMARY_COLUMNS`) of one trace's roofline-joined ``ops``: the one-host
    case of :func:`reduce`."""
    return reduce([host_part(ops, model)])


def view(ops: pd.DataFrame, model):
    """(summary frame, executions frame) of roofline-joined ops and the collective model the join priced them on
    (:attr:`tracekit.model.roofline.Joined.model`)."""
    return summary(ops, model), executions(ops, model)
