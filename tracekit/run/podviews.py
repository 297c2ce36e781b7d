"""What only a pod view shows (the report's ``pod`` section, built on the driver from the hosts' summaries).

* **Who arrives last at each collective.** Host clocks differ, so starts cannot be compared as recorded. The
  participants of a collective finish together (nobody leaves before the last one's data arrived), so each
  host's clock offset is the median, over the collective instances it shares with the reference host (the
  first), of the difference of its end from the reference's end. ``alignment_ps`` says how well that worked: the
  median absolute deviation of the ends after the shift (0 when the ends line up exactly). On aligned clocks the
  host that starts an instance last is its straggler; the others waited for it ``max start − their start``.
  An instance is the k-th execution of one collective op (module, op, async or not) on every device; a host
  arrives when its last device does and ends at its devices' median end.
* **Per-host step-time spread**: each host's step times (over its devices' steps): mean, p10, p50, p90, max and
  ``spread_ps`` = p90 − p10, with the modified z-score of the mean across hosts.
* **Hosts whose op mix differs**: each host's share of op time per op (module, op) against the pod's median
  share; ``mix_distance`` = half the L1 distance (0: the same mix, 1: nothing in common); a host differs when
  its distance is an outlier (modified z > 3.5) and at least 0.05.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

Z = 3.5
MIN_MIX = 0.05
ROWS = 64  #: per-host rows kept in the envelope (the hosts with the most to say first)


def section(summaries, steps, crow, skel, dchips, opt, failures) -> dict:
    from tracekit.report.envelope import clean, records
    arr, align = arrivals(crow)
    spread = step_spread(steps)
    mix = op_mix(summaries)
    out = {"hosts": len(summaries), "failed_hosts": [{"host": h, "path": p, "reason": w} for h, p, w in failures],
           "collective_arrival": align, "stragglers_at_collectives": records(arr.head(ROWS)),
           "step_spread": records(spread.head(ROWS)), "op_mix": records(mix.head(ROWS)),
           "definitions": {"clock_offset_ps": "the host's clock minus the first host's, from the ends of shared "
                                              "collectives (which finish together)",
                           "alignment_ps": "median absolute deviation of collective ends after the shift",
                           "waited_for_ps": "time the other hosts waited for this host at collectives it was last at",
                           "mix_distance": "half the L1 distance of the host's op-time shares from the pod's median"}}
    return clean(out)


def _instances(crow: pd.DataFrame) -> pd.DataFrame:
    """Per (instance, host): arrival (latest device start) and end (median device end), raw clocks."""
    if crow is None or not len(crow):
        return pd.DataFrame(columns=["inst", "host", "start_ps", "end_ps"])
    op = crow["op"].astype(str).str.replace(r"-done(\.\d+)?$", lambda m: "-start" + (m.group(1) or ""), regex=True)
    df = pd.DataFrame({"host": crow["host"].astype(str).to_numpy(), "device": crow["device"].astype(str).to_numpy(),
                       "key": (crow["module"].astype(str) + "\x00" + op + "\x00" +
                               crow["is_async"].astype(str)).to_numpy(),
                       "start_ps": crow["start_ps"].to_numpy(np.int64),
                       "end_ps": (crow["start_ps"] + crow["duration_ps"]).to_numpy(np.int64)})
    df = df.sort_values(["host", "device", "key", "start_ps"], kind="stable")
    df["k"] = df.groupby(["host", "device", "key"], sort=False).cumcount()
    df["inst"] = df["key"] + "\x00" + df["k"].astype(str)
    return df.groupby(["inst", "host"], sort=False).agg(start_ps=("start_ps", "max"),
                                                        end_ps=("end_ps", "median")).reset_index()


def arrivals(crow: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """(per host: clock_offset_ps, instances, last_at, waited_for_ps, late_ps_max; the alignment summary)."""
    cols = ["host", "clock_offset_ps", "instances", "last_at", "waited_for_ps", "late_ps_max"]
    ins = _instances(crow)
    hosts = list(dict.fromkeys(ins["host"])) if len(ins) else []
    if len(hosts) < 2:
        return pd.DataFrame(columns=cols), {"instances": 0, "hosts": len(hosts), "alignment_ps": None,
                                            "note": "fewer than two hosts with collectives"}
    ref = hosts[0]
    end = ins.pivot(index="inst", columns="host", values="end_ps")
    start = ins.pivot(index="inst", columns="host", values="start_ps")
    shared = end.dropna()  # instances every host took part in
    if not len(shared):
        return pd.DataFrame(columns=cols), {"instances": 0, "hosts": len(hosts), "alignment_ps": None,
                                            "note": "no collective instance shared by every host"}
    off = (shared.sub(shared[ref], axis=0)).median()
    resid = shared.sub(off, axis=1)
    resid = resid.sub(resid.median(axis=1), axis=0).abs()
    alignment = float(np.median(resid.to_numpy()))
    a = start.loc[shared.index].sub(off, axis=1)  # aligned arrivals
    last = a.idxmax(axis=1)
    late = a.max(axis=1)
    wait = (-a).add(late, axis=0)  # what each host waited for the last one
    second = pd.Series(np.sort(a.to_numpy(), axis=1)[:, -2], index=a.index)  # the next-to-last arrival
    rows = []
    for h in hosts:
        mine = last == h
        rows.append({"host": h, "clock_offset_ps": float(off[h]), "instances": int(len(shared)),
                     "last_at": int(mine.sum()), "waited_for_ps": float(wait[mine].sum(axis=1).sum()),
                     "late_ps_max": float((late - second)[mine].max()) if mine.any() else 0.0})
    out = pd.DataFrame(rows, columns=cols).sort_values(["waited_for_ps", "host"], ascending=[False, True],
                                                       ignore_index=True)
    top = out.iloc[0]
    return out, {"instances": int(len(shared)), "hosts": len(hosts), "alignment_ps": alignment,
                 "reference_host": ref, "last_host": str(top["host"]) if top["last_at"] else None,
                 "last_host_share": float(top["last_at"] / len(shared)),
                 "waited_for_ps": float(top["waited_for_ps"])}


def step_spread(steps: pd.DataFrame) -> pd.DataFrame:
    """Per host: step time statistics over its devices' steps and the modified z of the mean across hosts."""
    from tracekit.analysis.timeline import modified_z
    cols = ["host", "steps", "step_ps_mean", "step_ps_p10", "step_ps_p50", "step_ps_p90", "step_ps_max",
            "spread_ps", "step_ps_mean_z"]
    if steps is None or not len(steps):
        return pd.DataFrame(columns=cols)
    g = steps.assign(host=steps["host"].astype(str)).groupby("host")["step_ps"]
    out = pd.DataFrame({"steps": g.size(), "step_ps_mean": g.mean(), "step_ps_p10": g.quantile(0.1),
                        "step_ps_p50": g.median(), "step_ps_p90": g.quantile(0.9), "step_ps_max": g.max()})
    out["spread_ps"] = out["step_ps_p90"] - out["step_ps_p10"]
    out["step_ps_mean_z"] = modified_z(out["step_ps_mean"]).to_numpy() if len(out) >= 3 else np.nan
    return out.reset_index()[cols].sort_values(["step_ps_mean", "host"], ascending=[False, True], ignore_index=True)


def op_mix(summaries: list) -> pd.DataFrame:
    """Per host: mix_distance from the pod's median op-time shares, its modified z, ``differs``, and the op whose
    share differs most (``top_op``, ``top_op_share``, ``pod_share``)."""
    from tracekit.analysis.timeline import modified_z
    cols = ["host", "mix_distance", "mix_distance_z", "differs", "top_op", "top_op_share", "pod_share"]
    shares = {}
    for s in summaries:
        o = s.op_sums
        if not len(o):
            continue
        t = o.groupby([o["module"].astype(str), o["op"].astype(str)])["total_ps"].sum()
        if t.sum() > 0:
            shares[s.host] = t / t.sum()
    if len(shares) < 2:
        return pd.DataFrame(columns=cols)
    m = pd.DataFrame(shares).fillna(0.0)
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
