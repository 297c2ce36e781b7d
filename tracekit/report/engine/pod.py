"""Section ``pod`` (a run of more than one host file only): what only a pod view shows.

* **Who arrives last at each collective.** Host clocks differ, so starts cannot be compared as recorded. The
  participants of a collective finish together (nobody leaves before the last one's data arrived), so each
  host's clock offset is the median, over the collective instances it shares with the reference host (the
  first), of the difference of its end from the reference's end. ``alignment_ps`` says how well that worked: the
  median absolute deviation of the ends after the shift (0 when the ends line up exactly). On aligned clocks the
  host that starts an instance last is its straggler; the others waited for it ``max start − their start``.
  An instance is the k-th execution of one collective op (module, op, async or not) on every device; a host
  arrives when its last device does and ends at its devices' median end. Each host sends, per instance, its
  arrival and end (two arrays); the driver lays them in an instances x hosts matrix and works in numpy.
* **Per-host step-time spread**: each host's step times (over its devices' steps): mean, p10, p50, p90, max and
  ``spread_ps`` = p90 − p10 (on the host's worker), with the modified z-score of the mean across hosts.
* **Hosts whose op mix differs**: each host's share of op time per op (module, op) against the pod's median
  share; ``mix_distance`` = half the L1 distance (0: the same mix, 1: nothing in common); a host differs when
  its distance is an outlier (modified z > 3.5) and at least 0.05.
"""
from __future__ import annotations


import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.records import record

NAME = "pod"
Z = 3.5
MIN_MIX = 0.05
ROWS = 64  #: per-host rows kept in the envelope (the hosts with the most to say first)
SPREAD_COLUMNS = ["steps", "step_ps_mean", "step_ps_p10", "step_ps_p50", "step_ps_p90", "step_ps_max"]


@record(frozen=True)
class Part:
    """One host's part of the pod section."""

    keys: tuple  #: the host's collective ops: (module, op named as its -start, async) per key index
    key: np.ndarray  #: per instance: its key index
    k: np.ndarray  #: per instance: which execution of the op (0, 1, ...)
    arrival: np.ndarray  #: per instance: the host's latest device start (int64, its own clock)
    end: np.ndarray  #: per instance: the host's median device end (float64, its own clock)
    spread: dict  #: the host's step-time statistics (:data:`SPREAD_COLUMNS`; empty without steps)


def summarize(hv) -> Part:
    from tracekit.analysis import timeline as tl
    from tracekit.grouping import cat_apply
    ops = hv.ops
    if not hv.pod:  # a run of one host file: the reduce reads no host part
        return _no_instances({})
    spread = _spread(hv.frames.steps)
    if not len(ops):
        return _no_instances(spread)
    m = (tl.is_collective(ops) | cat_apply(ops["opcode"], lambda v: str(v).lower() in ("send", "recv"))) \
        & ~tl.is_async_marker(ops)
    rows = ops.loc[m, ["device", "module", "op", "is_async", "start_ps", "duration_ps"]]
    if not len(rows):
        return _no_instances(spread)
    op = rows["op"].astype(str).str.replace(r"-done(\.\d+)?$", lambda x: "-start" + (x.group(1) or ""), regex=True)
    df = pd.DataFrame({"device": text_numpy(rows, "device"), "module": text_numpy(rows, "module"),
                       "op": op.to_numpy(), "is_async": column_numpy(rows, "is_async", bool),
                       "start_ps": column_numpy(rows, "start_ps", np.int64),
                       "end_ps": (rows["start_ps"] + rows["duration_ps"]).to_numpy(np.int64)})
    df = df.sort_values(["device", "module", "op", "is_async", "start_ps"], kind="stable")
    df["k"] = df.groupby(["device", "module", "op", "is_async"], sort=False).cumcount()
    g = df.groupby(["module", "op", "is_async", "k"], sort=True)
    inst = g.agg(arrival=("start_ps", "max"), end=("end_ps", "median")).reset_index()
    kinv = inst.groupby(["module", "op", "is_async"], sort=True).ngroup().to_numpy()
    keys = tuple(inst.groupby(["module", "op", "is_async"], sort=True).size().index)
    return Part(keys, kinv.astype(np.int32), column_numpy(inst, "k", np.int64), column_numpy(inst, "arrival", np.int64),
                column_numpy(inst, "end", np.float64), spread)


def _no_instances(spread: dict) -> Part:
    """A host's part without collective instances."""
    return Part((), *(np.zeros(0, t) for t in (np.int32, np.int64, np.int64, np.float64)), spread)


def _spread(steps: pd.DataFrame) -> dict:
    if steps is None or not len(steps):
        return {}
    s = steps["step_ps"]
    return {"steps": int(len(s)), "step_ps_mean": float(s.mean()), "step_ps_p10": float(s.quantile(0.1)),
            "step_ps_p50": float(s.median()), "step_ps_p90": float(s.quantile(0.9)), "step_ps_max": float(s.max())}


def reduce(parts: list, ctx) -> dict:
    if not ctx.pod:
        return {}
    from tracekit.report.envelope import clean, records
    hosts = [s.host for s in ctx.summaries]
    arr, align = arrivals(hosts, parts)
    spread = step_spread(hosts, [p.spread for p in parts])
    mix = op_mix(hosts, [p.sums for p in ctx.parts("ops")])
    out = {"hosts": len(hosts),
           "failed_hosts": [{"host": h, "path": p, "reason": w} for h, p, w in ctx.failures],
           "collective_arrival": align, "stragglers_at_collectives": records(arr.head(ROWS)),
           "step_spread": records(spread.head(ROWS)), "op_mix": records(mix.head(ROWS)),
           "definitions": {"clock_offset_ps": "the host's clock minus the first host's, from the ends of shared "
                                              "collectives (which finish together)",
                           "alignment_ps": "median absolute deviation of collective ends after the shift",
                           "waited_for_ps": "time the other hosts waited for this host at collectives it was last at",
                           "mix_distance": "half the L1 distance of the host's op-time shares from the pod's median"}}
    return {"pod": clean(out)}


def _matrix(hosts: list, parts: list) -> tuple[list, np.ndarray, np.ndarray]:
    """(hosts with collectives, arrival and end matrices: instances x those hosts, NaN where a host has no part)."""
    ids: dict = {}
    codes, cols = [], []
    for j, p in enumerate(parts):
        if not len(p.key):
            continue
        gkey = np.array([ids.setdefault(k, len(ids)) for k in p.keys], np.int64)
        codes.append(gkey[p.key])
        cols.append(j)
    if not cols:
        return [], np.zeros((0, 0)), np.zeros((0, 0))
    kmax = max(int(parts[j].k.max()) for j in cols) + 1
    code = [c * kmax + parts[j].k for c, j in zip(codes, cols)]
    uniq, inv = np.unique(np.concatenate(code), return_inverse=True)
    start, end = np.full((len(uniq), len(cols)), np.nan), np.full((len(uniq), len(cols)), np.nan)
    at = np.cumsum([0] + [len(c) for c in code])
    for i, j in enumerate(cols):
        rows = inv[at[i]:at[i + 1]]
        start[rows, i] = parts[j].arrival.astype(np.float64)
        end[rows, i] = parts[j].end
    return [hosts[j] for j in cols], start, end


def arrivals(hosts: list, parts: list) -> tuple[pd.DataFrame, dict]:
    """(per host: clock_offset_ps, instances, last_at, waited_for_ps, late_ps_max; the alignment summary)."""
    cols = ["host", "clock_offset_ps", "instances", "last_at", "waited_for_ps", "late_ps_max"]
    names, start, end = _matrix(hosts, parts)
    if len(names) < 2:
        return pd.DataFrame(columns=cols), {"instances": 0, "hosts": len(names), "alignment_ps": None,
                                            "note": "fewer than two hosts with collectives"}
    shared = ~np.isnan(end).any(axis=1)  # instances every host took part in
    if not shared.any():
        return pd.DataFrame(columns=cols), {"instances": 0, "hosts": len(names), "alignment_ps": None,
                                            "note": "no collective instance shared by every host"}
    e, s = end[shared], start[shared]
    off = np.median(e - e[:, :1], axis=0)
    resid = e - off
    alignment = float(np.median(np.abs(resid - np.median(resid, axis=1, keepdims=True))))
    a = s - off  # aligned arrivals
    last = np.argmax(a, axis=1)  # (the first host among equal arrivals, as idxmax)
    late = a.max(axis=1)
    wait = late[:, None] - a  # what each host waited for the last one
    second = np.sort(a, axis=1)[:, -2]  # the next-to-last arrival
    n = int(shared.sum())
    rows = []
    for j, h in enumerate(names):
        mine = last == j
        rows.append({"host": h, "clock_offset_ps": float(off[j]), "instances": n, "last_at": int(mine.sum()),
                     "waited_for_ps": float(wait[mine].sum()),
                     "late_ps_max": float((late - second)[mine].max()) if mine.any() else 0.0})
    out = pd.DataFrame(rows, columns=cols).sort_values(["waited_for_ps", "host"], ascending=[False, True],
                                                       ignore_index=True)
    top = out.iloc[0]
    return out, {"instances": n, "hosts": len(names), "alignment_ps": alignment, "reference_host": names[0],
                 "last_host": str(top["host"]) if top["last_at"] else None,
                 "last_host_share": float(top["last_at"] / n), "waited_for_ps": float(top["waited_for_ps"])}


def step_spread(hosts: list, spreads: list) -> pd.DataFrame:
    """Per host: its step time statistics and the modified z of the mean across hosts."""
    from tracekit.analysis.outliers import modified_z
    cols = ["host", *SPREAD_COLUMNS[:-1], "step_ps_max", "spread_ps", "step_ps_mean_z"]
    rows = [{"host": h, **s} for h, s in zip(hosts, spreads) if s]
    if not rows:
        return pd.DataFrame(columns=cols)
    out = pd.DataFrame(rows)
    out["spread_ps"] = out["step_ps_p90"] - out["step_ps_p10"]
    out["step_ps_mean_z"] = modified_z(out["step_ps_mean"]).to_numpy() if len(out) >= 3 else np.nan
    return out[cols].sort_values(["step_ps_mean", "host"], ascending=[False, True], ignore_index=True)


def op_mix(hosts: list, sums: list) -> pd.DataFrame:
    """Per host: mix_distance from the pod's median op-time shares, its modified z, ``differs``, and the op whose
    share differs most (``top_op``, ``top_op_share``, ``pod_share``)."""
    from tracekit.analysis.outliers import modified_z
    cols = ["host", "mix_distance", "mix_distance_z", "differs", "top_op", "top_op_share", "pod_share"]
    hs, mods, ops, tot = [], [], [], []
    for h, o in zip(hosts, sums):  # (one frame of every host's op times: one groupby, not one per host)
        if len(o):
            hs += [h] * len(o)
            mods += [str(x) for x in o["module"].tolist()]
            ops += [str(x) for x in o["op"].tolist()]
            tot.append(column_numpy(o, "total_ps", np.float64))
    if not hs:
        return pd.DataFrame(columns=cols)
    t = pd.Series(np.concatenate(tot)).groupby([hs, mods, ops], sort=True).sum()
    host_tot = t.groupby(level=0, sort=False).sum()
    t = t[t.index.get_level_values(0).isin(host_tot.index[host_tot > 0])]
    if t.index.get_level_values(0).nunique() < 2:
        return pd.DataFrame(columns=cols)
    m = (t / host_tot.reindex(t.index.get_level_values(0)).to_numpy()).unstack(level=0).fillna(0.0)
    m = m[[h for h in hosts if h in m.columns]]
    med = m.median(axis=1)
    med = med / med.sum() if med.sum() > 0 else med
    dist = (m.sub(med, axis=0)).abs().sum() / 2
    z = modified_z(dist) if len(dist) >= 3 else pd.Series(np.nan, index=dist.index)
    rows = []
    for h in m.columns:
        d = (m[h] - med).abs()
        k = d.idxmax()
        rows.append({"host": h, "mix_distance": float(dist[h]), "mix_distance_z": float(z[h]),
                     "differs": bool(z[h] > Z and dist[h] >= MIN_MIX), "top_op": f"{k[1]} ({k[0]})",
                     "top_op_share": float(m.at[k, h]), "pod_share": float(med[k])})
    return pd.DataFrame(rows, columns=cols).sort_values(["mix_distance", "host"], ascending=[False, True],
                                                        ignore_index=True)
