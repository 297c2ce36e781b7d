"""The replay's answers as plain data: the step statistic, the critical path, the ops whose bound changes."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.analysis.replay import engine
from tracekit.analysis.replay.graph import DONE, WIN

KIND = {0: "op", WIN: "window", DONE: "done"}


def device_steps(j: engine.Joined, r: engine.Result) -> pd.DataFrame:
    """One row per replayed (host, device, step): measured and predicted step time."""
    rows = []
    for h, g in enumerate(j.graphs):
        meas = g.steps_next - g.steps_start
        rows.append(pd.DataFrame({"host": g.host, "device": np.array(g.devices, object)[g.steps_dev],
                                  "step": g.steps_step, "slot": np.arange(len(meas)), "h": h,
                                  "measured_ps": meas, "predicted_ps": r.step_ps[h]}))
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame(
        columns=["host", "device", "step", "slot", "h", "measured_ps", "predicted_ps"])


def step_statistic(ds: pd.DataFrame, column: str) -> tuple[float, tuple]:
    """(the median step of the slowest device for ``column``, that device (host, device))."""
    med = ds.groupby(["host", "device"])[column].median()
    key = med.idxmax()
    return float(med.loc[key]), key


def median_slot(ds: pd.DataFrame, key: tuple, column: str) -> tuple[int, int]:
    """(host index, slot) of the step of device ``key`` whose ``column`` lies nearest its median."""
    mine = ds[(ds["host"] == key[0]) & (ds["device"] == key[1])]
    i = (mine[column] - mine[column].median()).abs().idxmin()
    return int(mine.loc[i, "h"]), int(mine.loc[i, "slot"])


def critical_path(j: engine.Joined, r: engine.Result, h: int, slot: int, ops: pd.DataFrame,
                  limit: int = 400) -> tuple[list, dict]:
    """(entries in time order, a summary) of the chain that sets step ``slot``'s end on host ``h``. An entry:
    op, device, kind, start_ps (from the step's start: where the path enters it; a collective's own time starts at
    its last participant's arrival), time_ps (its own time on the path: 0 where the path only passes through its
    start), gap_ps (the path's idle time before it). The summary: path ops, their time, the gaps,
    the devices it crosses. Over ``limit`` entries the longest are kept, in time order."""
    path = engine.critical_path(j, r, h, slot)
    g = j.graphs[h]
    t0 = int(g.steps_start[slot] - j.offset[h])
    kinds = np.concatenate([x.kind for x in j.graphs]) if j.graphs else np.zeros(0)
    labels = np.concatenate([x.label for x in j.graphs]) if j.graphs else np.zeros(0, object)
    out = []
    prev_end = t0
    for node, how in path:
        hh = j.host_of(node)
        gg = j.graphs[hh]
        local = node - j.base[hh]
        dev = gg.devices[gg.dev[local]]
        s, e = int(r.S[node]), int(r.E[node])
        q = int(r.why_e[node])  # its own time on the path: from what set its end (its start, a window, a queue)
        own = e - (int(r.E[q >> 1]) if q & 1 else int(r.S[q >> 1])) if how == "run" and q >= 0 else 0
        at = e - own if how == "run" else s  # where the path enters it (a collective: at the last arrival)
        out.append({"op": str(labels[node]), "device": dev if len(j.graphs) == 1 else f"{gg.host}/{dev}",
                    "kind": ("collective" if j.gid[node] >= 0 else KIND.get(int(kinds[node]), "op")),
                    "start_ps": at - t0, "time_ps": own, "gap_ps": max(at - prev_end, 0)})
        prev_end = max(prev_end, e if how == "run" else s)
    step_end = t0 + int(r.step_ps[h][slot])
    summary = {"ops": len(out), "time_ps": int(sum(x["time_ps"] for x in out)),
               "gaps_ps": int(sum(x["gap_ps"] for x in out)), "tail_ps": max(step_end - prev_end, 0),
               "devices": sorted({x["device"] for x in out}), "entries_kept": min(len(out), limit)}
    if len(out) > limit:
        keep = sorted(sorted(range(len(out)), key=lambda i: -(out[i]["time_ps"] + out[i]["gap_ps"]))[:limit])
        out = [out[i] for i in keep]
    return out, summary


def bound_changes(j: engine.Joined, rt, work_before: np.ndarray, work_after: np.ndarray, ops: pd.DataFrame,
                  limit: int = 50) -> list:
    """Ops (module/op) whose roofline bound changes, over the replayed executions: from, to, executions and their
    time measured and predicted; the most measured time first."""
    rows = np.concatenate([g.rows for g in j.graphs]) if j.graphs else np.zeros(0, np.int64)
    b0, b1 = rt.bound_before[rows], rt.bound_after[rows]
    hit = np.flatnonzero((b0 != b1) & (b0 != "unknown") & (b1 != "unknown"))
    if not len(hit):
        return []
    labels = np.concatenate([g.label for g in j.graphs])
    df = pd.DataFrame({"op": labels[hit], "b0": b0[hit], "b1": b1[hit], "measured_ps": work_before[hit],
                       "predicted_ps": work_after[hit]})
    agg = df.groupby(["op", "b0", "b1"], sort=False).agg(executions=("op", "size"),
                                                           measured_ps=("measured_ps", "sum"),
                                                           predicted_ps=("predicted_ps", "sum")).reset_index()
    agg = agg.sort_values(["measured_ps", "op"], ascending=[False, True], kind="stable").head(limit)
    return [{"op": r.op, "from": r.b0, "to": r.b1, "executions": int(r.executions),
             "measured_ps": int(r.measured_ps), "predicted_ps": int(r.predicted_ps)}
            for r in agg.itertuples(index=False)]
