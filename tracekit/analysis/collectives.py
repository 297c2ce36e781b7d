"""Measured vs predicted, per collective execution: ``tracekit collectives --executions``, and what the
interconnect section (:mod:`tracekit.analysis.interconnect`) sums per op.

For each execution of a collective on a device (a sync op, or an async ``-start``..``-done`` window):

* **skew** (``skew_ps``): how long this device waited for the last participant of its replica group to arrive:
  the latest start among the traced participants of the same execution minus this device's start (clipped to
  the execution's duration). It is time spent waiting, not moving bytes, so it is shown apart. NaN when fewer
  than two participants of the group are in the trace (a multi-host job traced on one host). Starts compare
  across devices only as well as their clocks agree (tracekit warns about offset clocks).
* **transfer** (``transfer_ps``) = duration - skew: the time the bytes had.
* **algbw** = S / transfer and **busbw** = algbw x the nccl-tests factor (all-reduce 2(N-1)/N; all-gather,
  reduce-scatter, all-to-all (N-1)/N; permute, send/recv 1), where S is the nccl-tests size: the full array for
  all-reduce / all-gather / reduce-scatter, one device's buffer for all-to-all, the bytes sent for a permute.
* **predicted** (``predicted_ps``): the roofline's ``network_ps`` (:mod:`tracekit.model.collective_cost`) and
  the level that bounds it (``bound``); efficiency = predicted / transfer.

An async window's duration includes whatever ran while the transfer was in flight, so its bandwidth is a lower
bound. The k-th execution of an op on one device is matched with the k-th on the others (per module execution
order), so a trace cut mid-step can misalign one execution at the edge.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.analysis import timeline as tl
from tracekit.grouping import cat_apply, group_index, unique_rows
from tracekit.model import predictions

#: an async collective's ``-done`` op named as its ``-start`` (the model knows collectives by their start)
_START = re.compile(r"-done(\.\d+)?$")

#: nccl-tests busbw factor per kind, as a function of N
BUSBW = {"all-reduce": lambda n: 2 * (n - 1) / n, "all-gather": lambda n: (n - 1) / n,
         "reduce-scatter": lambda n: (n - 1) / n, "all-to-all": lambda n: (n - 1) / n,
         "ragged-all-to-all": lambda n: (n - 1) / n}
#: one row per execution (see the module docstring)
EXEC_COLUMNS = ["host", "device", "module", "program_id", "op", "kind", "step", "start_ps", "duration_ps",
                "is_async", "group_size", "traced_participants", "skew_ps", "transfer_ps", "size_bytes",
                "algbw_bytes_per_s", "busbw_bytes_per_s", "predicted_ps", "bound", "efficiency"]


def busbw_factor(kind: str, n: int) -> float:
    f = BUSBW.get(kind)
    return float(f(n)) if f is not None and n > 0 else 1.0


def _text(v) -> str:
    """A frame value as ``astype(str)`` shows it (a missing value reads "nan")."""
    return "nan" if v is None else str(v)


def _members(o, g: int, model) -> tuple:
    """The devices of op ``o``'s replica group that holds device group id ``g``: its send/recv pairs' devices,
    else its group of ``g``, else every device of the topology."""
    if o.pairs:
        return tuple(sorted({x for pr in o.pairs for x in pr}))
    return o.group_of(g) if o.groups else tuple(range(model.topology.size))


def executions(ops: pd.DataFrame, model, *, instances: bool = False) -> pd.DataFrame:
    """One row per collective execution of the roofline-joined ``ops`` whose op the collective ``model``
    (:class:`tracekit.model.collective_model.Model`) knows; columns :data:`EXEC_COLUMNS` (``instances``: and the
    instance each belongs to, ``_group`` and ``_k``: see :func:`tracekit.analysis.collparts.host_part`)."""
    cols = EXEC_COLUMNS + (["_group", "_k"] if instances else [])
    if model is None or not model.ops or not len(ops):
        return pd.DataFrame(columns=cols)
    rows = ops[(tl.is_collective(ops) | cat_apply(ops["opcode"], lambda v: str(v).lower() in ("send", "recv")))
               & ~tl.is_async_marker(ops)]
    if not len(rows):
        return pd.DataFrame(columns=cols)
    # the model is asked once per distinct (program, op) and (host, device), not once per execution
    oinv, pairs = unique_rows(rows, ["program_id", "op"])
    okey = [_START.sub(lambda m: "-start" + (m.group(1) or ""), _text(o)) for _, o in pairs]
    omodel = [model.op(int(p), k) for (p, _), k in zip(pairs, okey)]
    known = np.array([o is not None for o in omodel], bool)[oinv]
    rows, oinv = rows[known], oinv[known]
    if not len(rows):
        return pd.DataFrame(columns=cols)
    # (columns as arrays, the frame made once at the end: a small trace's collectives are a few hundred rows,
    # where each pandas sort, group or column set costs more than its arithmetic)
    n = len(rows)
    out = {"host": text_numpy(rows, "host"), "device": text_numpy(rows, "device"),
           "module": text_numpy(rows, "module"),
           "program_id": column_numpy(rows, "program_id").astype(np.uint64), "op": np.array(okey, object)[oinv],
           "step": column_numpy(rows, "step") if "step" in rows else np.full(n, -1),
           "start_ps": column_numpy(rows, "start_ps", np.int64),
           "duration_ps": column_numpy(rows, "duration_ps", np.int64),
           "is_async": column_numpy(rows, "is_async", bool),
           "predicted_ps": predictions.values(rows, "network_ps").astype(float) if predictions.has(rows, "network_ps")
           else np.full(n, np.nan),
           "bound": text_numpy(rows, "net_level") if "net_level" in rows else np.full(n, "", object)}
    dinv, devs = unique_rows(rows, ["host", "device"])
    dgid = np.array([model.ids.get((_text(h), _text(d)), -1) for h, d in devs], np.int64)
    # each execution's replica group: per distinct (op, device group id)
    _, gfirst, ginv = np.unique(oinv.astype(np.int64) * (len(devs) + 1) + dinv, return_index=True,
                                return_inverse=True)
    groups = [_members(omodel[oinv[i]], int(dgid[dinv[i]]), model) for i in gfirst.tolist()]
    gkind = [omodel[oinv[i]].kind for i in gfirst.tolist()]
    gsize = np.array([len(m) if m else -1 for m in groups], np.int64)
    ginv = ginv.ravel()  # (flat whatever NumPy's version)
    out["kind"] = np.array(gkind, object)[ginv]
    out["size_bytes"] = np.array([omodel[i].size_bytes for i in oinv.tolist()])
    out["group_size"] = gsize[ginv]
    out["_group"] = np.array([hash(m) for m in groups], np.int64)[ginv]
    factor = np.array([busbw_factor(k, int(x)) for k, x in zip(gkind, gsize)], float)[ginv]
    # the k-th execution of an op on each device (in time order) is the k-th execution of the collective
    text = {c: pd.factorize(out[c], sort=True)[0] for c in ("host", "device", "op")}  # (ranks in text order)
    pid = pd.factorize(out["program_id"], sort=True)[0]
    order = np.lexsort((out["start_ps"], out["is_async"], text["op"], pid, text["device"], text["host"]))
    out = {c: v[order] for c, v in out.items()}
    text, pid, factor = {c: v[order] for c, v in text.items()}, pid[order], factor[order]
    key = np.stack([text["host"], text["device"], pid, text["op"], out["is_async"]], axis=1)
    new = np.ones(n, bool)
    new[1:] = (key[1:] != key[:-1]).any(axis=1)
    run_start = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    out["_k"] = np.arange(n, dtype=np.int64) - run_start
    inst, _ = group_index(pd.DataFrame({"p": pid, "o": text["op"], "a": out["is_async"], "g": out["_group"],
                                        "k": out["_k"]}), ["p", "o", "a", "g", "k"])
    m = int(inst.max()) + 1 if n else 0
    last = np.full(m, np.iinfo(np.int64).min)
    np.maximum.at(last, inst, out["start_ps"])
    out["traced_participants"] = np.bincount(inst, minlength=m).astype(np.int64)[inst]
    dur = out["duration_ps"]
    skew = np.minimum(np.maximum(last[inst] - out["start_ps"], 0), dur).astype(float)
    skew[out["traced_participants"] < 2] = np.nan
    out["skew_ps"] = skew
    out["transfer_ps"] = dur - np.nan_to_num(skew)
    with np.errstate(divide="ignore", invalid="ignore"):
        tr = out["transfer_ps"].astype(float)
        out["algbw_bytes_per_s"] = np.where(tr > 0, out["size_bytes"].astype(float) / (tr / 1e12), np.nan)
        out["busbw_bytes_per_s"] = out["algbw_bytes_per_s"] * factor
        out["efficiency"] = np.where(tr > 0, out["predicted_ps"].astype(float) / tr, np.nan)
    last_order = np.lexsort((text["device"], text["host"], out["start_ps"]))  # (stable: ties as sorted above)
    return pd.DataFrame({c: out[c][last_order] for c in cols})
