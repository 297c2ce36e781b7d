"""tracekit's own tracks in an export: exposed-collective windows per device (collective time with no compute
under it) and each finding's evidence windows."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.analysis.intervals import merge
from tracekit.report.trace_events import Writer, args_json, us

#: op executions drawn per evidence row of an aggregated finding (one row per op, not per execution)
EXECUTIONS_PER_EVIDENCE = 20
_TIME_COLUMNS = ("duration_ps", "span_ps", "step_ps")


def intersect(a0, a1, b0, b1) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two sorted lists of disjoint intervals [a0, a1) and [b0, b1)."""
    lo = np.searchsorted(b1, a0, "right")
    hi = np.searchsorted(b0, a1, "left")
    n = np.maximum(hi - lo, 0)
    ai = np.repeat(np.arange(len(a0)), n)
    bi = lo[ai] + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
    s, e = np.maximum(a0[ai], b0[bi]), np.minimum(a1[ai], b1[bi])
    keep = e > s
    return s[keep], e[keep]


def minus(a0, a1, b0, b1) -> tuple[np.ndarray, np.ndarray]:
    """[a0, a1) minus [b0, b1), both sorted lists of disjoint intervals."""
    if not len(a0):
        return a0, a1
    lo, hi = int(a0.min()), int(a1.max())
    g0, g1 = np.r_[lo, b1], np.r_[b0, hi]
    keep = g1 > g0
    return intersect(a0, a1, g0[keep], g1[keep])


def write_exposed(w: Writer, sel: pd.DataFrame, pid: dict, tl) -> int:
    """Per device: the union of collective time (sync collectives, async collective windows) minus the union of
    compute ops — the step breakdown's exposed collective time, as windows."""
    if not len(sel):
        return 0
    coll = tl.is_collective(sel)
    comp = tl.compute_mask(sel)
    st = column_numpy(sel, "start_ps", np.int64)
    en = st + column_numpy(sel, "duration_ps", np.int64)
    keys = list(zip(sel["host"].astype(str), sel["device"].astype(str)))
    groups = pd.Series(range(len(sel))).groupby(pd.Series(keys, dtype=object)).indices if len(sel) else {}
    n = 0
    for key, idx in groups.items():
        idx = np.asarray(idx)
        k0, k1 = merge(st[idx][coll[idx]], en[idx][coll[idx]])
        c0, c1 = merge(st[idx][comp[idx]], en[idx][comp[idx]])
        a, b = minus(k0, k1, c0, c1)
        p = pid[key]
        w.many(f'{{"ph":"X","pid":{p},"tid":1001,"ts":{us(x)},"dur":{us(y - x)},"name":"exposed collective",'
               f'"cat":"tracekit exposed collective"}}' for x, y in zip(a, b))
        n += len(a)
    return n


def evidence_windows(f, ops: pd.DataFrame, devices_frame: pd.DataFrame) -> list[tuple[str, str, int, int, float]]:
    """(host, device, start_ps, end_ps, savings_ps) of each evidence row of finding ``f``: the row's own window
    when it has ``start_ps`` and a time column; for rows that name an op (module, op) without a time, its longest
    executions (at most :data:`EXECUTIONS_PER_EVIDENCE`); for rows that name only a device, the device's
    profiled window."""
    ev = f.evidence
    out = []
    cols = set(ev.columns)
    tcol = next((c for c in _TIME_COLUMNS if c in cols), None)
    for r in ev.to_dict("records"):
        host, dev = str(r.get("host", "") or ""), str(r.get("device", "") or "")
        sav = float(r.get("savings_ps") or 0.0)
        if "start_ps" in cols and tcol is not None and r.get("start_ps") is not None:
            s = int(r["start_ps"])
            out.append((host, dev, s, s + int(r[tcol] or 0), sav))
        elif {"module", "op"} <= cols and len(ops):
            m = (ops["module"].astype(str) == str(r["module"])) & (ops["op"].astype(str) == str(r["op"])) & \
                ~ops["is_async"]
            if dev:
                m &= ops["device"].astype(str) == dev
            hit = ops[m.to_numpy()].nlargest(EXECUTIONS_PER_EVIDENCE, "duration_ps")
            for h, d, s, du in zip(hit["host"].astype(str), hit["device"].astype(str), hit["start_ps"],
                                   hit["duration_ps"]):
                out.append((h, d, int(s), int(s + du), sav / max(len(hit), 1)))
        elif dev and len(devices_frame):
            row = devices_frame[(devices_frame["device"].astype(str) == dev) &
                                (devices_frame["host"].astype(str) == host if host else True)]
            for s, span in zip(row["window_start_ps"], row["span_ps"]):
                out.append((host, dev, int(s), int(s + span), sav))
    return out


def write_findings(w: Writer, findings, ops, frames, win, devices, fpid: int) -> tuple[int, int]:
    n_win, aid = 0, 1 << 40  # ids apart from the async windows'
    for k, f in enumerate(findings):
        name = json.dumps(f"{f.rule_id} {f.name}", ensure_ascii=False)
        events = []
        for host, dev, s, e, sav in evidence_windows(f, ops, frames["devices"]):
            if devices and dev and dev not in devices:
                continue
            if win is not None and not (e > win[0] and s < win[1] or s == e and win[0] <= s < win[1]):
                continue
            aid += 1
            args = args_json([("rule", f.rule_id), ("severity", f.severity), ("host", host), ("device", dev),
                          ("message", f.message), ("savings_us", sav / 1e6)])
            events.append(f'{{"ph":"b","pid":{fpid},"tid":{k + 1},"ts":{us(s)},"name":{name},'
                          f'"cat":"tracekit finding","id":{aid},"args":{args}}}')
            events.append(f'{{"ph":"e","pid":{fpid},"tid":{k + 1},"ts":{us(e)},"name":{name},'
                          f'"cat":"tracekit finding","id":{aid}}}')
        w.many(events)
        n_win += len(events) // 2
    return len(findings), n_win
