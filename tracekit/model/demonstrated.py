"""What a trace demonstrates a chip can do: per host and term, the best median rate of an op over its timed
executions (the evidence :func:`tracekit.model.peaks.raise_estimates` raises estimated peaks to, within the
chip's physical ceiling)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy

#: an op must run this long (self time) for its rate to raise an estimated peak: shorter events are at the mercy
#: of timer resolution and per-event overhead
MIN_EVIDENCE_PS = 1_000_000
#: an op raises a peak only from this many timed executions: its median rate over them (one execution, or the
#: fastest of several, may be mistimed)
MIN_EXECUTIONS = 2
#: in-place ops: their cost model charges the whole operand, an upper bound on the bytes they touch
IN_PLACE = ("scatter", "dynamic-update-slice", "select-and-scatter")

def demonstrated(ops: pd.DataFrame, cap=None, cache=None) -> pd.DataFrame:
    """Per (host, term), the best rate the trace demonstrates: the highest MEDIAN rate of an op over its
    executions (or its rate over all of them, work / time, where that is higher) with a known cost and at least :data:`MIN_EVIDENCE_PS` of self time, from ops with at least
    :data:`MIN_EXECUTIONS` such executions (one execution demonstrates nothing: it may be mistimed), leaving out
    in-place ops whose bytes are an upper bound (:data:`IN_PLACE`). ``cap(host, term)``: the rate no execution
    can reach on that host's chip (its physical ceiling, :mod:`tracekit.model.cpu_limits`; inf: none); an op
    with an execution above it is mistimed (its events end before its work does), all its executions are left
    out, and a row with no rate counts them (``over_cap`` executions above, the fastest of them ``over_op`` at
    ``over_rate``). ``cache(host)``: the host's last-level cache bytes (NaN: unknown); a memory rate counts
    only from executions moving more than :data:`~tracekit.model.cpu_limits.LLC_MULTIPLE` times that (else it
    may be a cache rate), none where it is unknown. Both None: no ceiling, any cache."""
    from tracekit.model.cpu_limits import LLC_MULTIPLE
    cols = ["host", "term", "rate", "op", "module", "self_ps", "executions", "over_cap", "over_op", "over_rate"]
    ok = (~column_numpy(ops, "is_async", bool)) & (text_numpy(ops, "bound_by") != "unknown")
    if "opcode" in ops:
        ok &= ~ops["opcode"].astype(str).isin(IN_PLACE).to_numpy()
    if "category" in ops:
        ok &= ~ops["category"].astype(str).str.contains("scatter|dynamic-update-slice", regex=True).to_numpy()
    if not ok.any():
        return pd.DataFrame(columns=cols)
    from tracekit.model.sharing import concurrency
    conc = concurrency(ops)  # (a host's rate: an op's own times the host's devices in flight with it)
    share = conc[ok] if conc is not None else np.ones(int(ok.sum()))
    o = ops[ok]
    t = (o["self_ps"] if "self_ps" in o else o["duration_ps"]).to_numpy(np.float64)
    sec = np.where(t > 0, t, np.nan) / 1e12
    host_x = column_numpy(o, "is_host_transfer", bool) if "is_host_transfer" in o else np.zeros(len(o), bool)
    amounts = {"memory": column_numpy(o, "bytes_accessed", float), "cache": column_numpy(o, "bytes_accessed", float),
               "network": np.where(host_x, 0.0, column_numpy(o, "net_bytes", float)),
               "host_link": np.where(host_x, column_numpy(o, "net_bytes", float), 0.0)}
    cd = text_numpy(o, "compute_dtype") if "compute_dtype" in o else np.full(len(o), "f32")
    for d in sorted(set(cd)):
        amounts[f"compute:{d}"] = np.where(cd == d, column_numpy(o, "flops", float), 0.0)
    hosts = text_numpy(o, "host")
    key = pd.DataFrame({"host": hosts, "module": text_numpy(o, "module"),
                        "op": text_numpy(o, "op"), "t": t})
    rows = []
    evidence, bad = [], []
    for term, amt in amounts.items():
        rate = amt / sec * (share if term in ("memory", "cache") or term.startswith("compute:") else 1.0)
        m = np.isfinite(rate) & (rate > 0) & (t >= MIN_EVIDENCE_PS)
        if term in ("memory", "cache") and cache is not None:
            llc = pd.Series(hosts).map({h: cache(h) for h in set(hosts)}).to_numpy(float)
            big = amt > LLC_MULTIPLE * llc  # (NaN: unknown cache, compares False: no memory evidence)
            m &= big if term == "memory" else ~big
        if not m.any():
            continue
        k = key[m].assign(rate=rate[m])
        caps = {h: cap(h, term) for h in k["host"].unique()} if cap is not None else {}
        lim = k["host"].map(caps).to_numpy(float) if caps else np.full(len(k), math.inf)
        above = k[column_numpy(k, "rate") > lim]
        bad.append(above[["host", "module", "op"]])
        for h, a in above.groupby("host", sort=True):
            top = a.sort_values("rate", ascending=False, kind="stable").iloc[0]
            rows.append({"host": h, "term": term, "rate": math.nan, "op": None, "module": None, "self_ps": 0,
                         "executions": 0, "over_cap": len(a), "over_op": f"{top['op']} ({top['module']})",
                         "over_rate": float(top["rate"])})
        evidence.append((term, k))
    # an op shown to end before its work is done (a rate of any term above its ceiling) demonstrates nothing, in
    # no term, not even in its slower executions
    bad = pd.MultiIndex.from_frame(pd.concat(bad)) if bad and sum(map(len, bad)) else None
    for term, k in evidence:
        if bad is not None:
            k = k[~pd.MultiIndex.from_frame(k[["host", "module", "op"]]).isin(bad)]
        if not len(k):
            continue
        k = k.assign(work=column_numpy(k, "rate") * column_numpy(k, "t"))
        g = k.groupby(["host", "module", "op"], sort=True).agg(rate=("rate", "median"), self_ps=("t", "median"),
                                                               executions=("rate", "size"), work=("work", "sum"),
                                                               t=("t", "sum"))
        # the op's rate over all its executions (work / time, the rate its own efficiency in the op table is
        # read at) when that is above the median: the op that sets a peak then reads at most 100 % of it
        g["rate"] = np.maximum(column_numpy(g, "rate"), column_numpy(g, "work") / column_numpy(g, "t"))
        g = g[g["executions"] >= MIN_EXECUTIONS].reset_index()
        best = g.sort_values(["rate", "module", "op"], ascending=[False, True, True], kind="stable")
        for r in best.drop_duplicates("host").itertuples(index=False):
            rows.append({"host": r.host, "term": term, "rate": float(r.rate), "op": r.op, "module": r.module,
                         "self_ps": int(r.self_ps), "executions": int(r.executions), "over_cap": 0, "over_op": None,
                         "over_rate": math.nan})
    return pd.DataFrame(rows, columns=cols)
