"""Custom calls by share of op time: which library or hand-written kernels the program spent its time in, which
cost model priced each (``cost_source = model:<name>``, with the model's assumptions), and which stayed unknown
(listed by target name, largest first, so the next model to write is the one that covers the most time).

Op time is the synchronous ops' time (async windows excluded), as the report's roofline coverage counts it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, self_time, text_numpy
from tracekit.model.custom_calls import ASSUMPTIONS

MAX_NOTES = 3  #: distinct cost notes kept per target (the attention FLOP ranges, kernel sizes, ...)


def summary(ops: pd.DataFrame, hlo: pd.DataFrame, costs: pd.DataFrame | None = None) -> dict:
    """``{op_time_ps, custom_call_ps, unknown_ps, targets: [...], models: {name: assumption}}``: one entry per
    custom-call target with its ops, executions, time, share of op time, cost sources, unknown reasons and (from
    ``costs``, the cost model's per-instruction frame) up to :data:`MAX_NOTES` notes."""
    return finish(*parts(ops, hlo, costs))


ROW_COLUMNS = ["custom_call_target", "op", "cost_source", "unknown_reason", "note", "executions", "duration_ps",
               "longest_ps"]


def parts(ops: pd.DataFrame, hlo: pd.DataFrame, costs: pd.DataFrame | None = None) -> tuple:
    """(rows, op_time_ps, whether the summary applies): the custom-call executions aggregated per (target, op,
    cost source, unknown reason, note) with executions, duration_ps and longest_ps (:data:`ROW_COLUMNS`). The
    parts of disjoint devices merge: rows concatenated, op times summed, applies if any applies."""
    if not len(ops) or not len(hlo) or "cost_source" not in ops.columns:
        return pd.DataFrame(columns=ROW_COLUMNS), 0, False
    sync = ~column_numpy(ops, "is_async", bool)  # masks, not a copy of the ops frame
    op_time = int(self_time(ops).sum(where=sync))  # (self time: a loop's traced body ops are not counted twice)
    cc = ops[["program_id", "op", "duration_ps", "cost_source", "unknown_reason"]][
        sync & (ops["opcode"] == "custom-call").to_numpy(bool)]
    if not len(cc):
        return pd.DataFrame(columns=ROW_COLUMNS), op_time, True
    targets = hlo[hlo["opcode"].astype(str) == "custom-call"][["program_id", "name", "custom_call_target"]]
    targets = targets.rename(columns={"name": "op"}).drop_duplicates(["program_id", "op"])
    rows = pd.DataFrame({"program_id": column_numpy(cc, "program_id"), "op": text_numpy(cc, "op"),
                         "duration_ps": column_numpy(cc, "duration_ps", np.int64),
                         "cost_source": text_numpy(cc, "cost_source"),
                         "unknown_reason": text_numpy(cc, "unknown_reason")})
    rows = rows.merge(targets.astype({"op": str}), on=["program_id", "op"], how="left")
    if costs is not None and len(costs) and "note" in costs.columns:
        notes = costs[["program_id", "op", "note"]].drop_duplicates(["program_id", "op"])
        rows = rows.merge(notes.astype({"op": str}), on=["program_id", "op"], how="left")
    else:
        rows["note"] = ""
    rows["custom_call_target"] = rows["custom_call_target"].fillna("").astype(str)
    rows["note"] = rows["note"].fillna("").astype(str)
    keys = ["custom_call_target", "op", "cost_source", "unknown_reason", "note"]
    agg = rows.groupby(keys, sort=False).agg(executions=("duration_ps", "size"), duration_ps=("duration_ps", "sum"),
                                             longest_ps=("duration_ps", "max")).reset_index()
    return agg[ROW_COLUMNS], op_time, True


def finish(rows: pd.DataFrame, op_time: int, applies: bool = True) -> dict:
    """The summary from :func:`parts` (of one or more sets of devices, merged)."""
    empty = {"op_time_ps": op_time if applies else 0, "custom_call_ps": 0, "unknown_ps": 0, "targets": [],
             "models": {}}
    if not applies or not len(rows):
        return empty
    rows = rows.assign(executions=rows["executions"].astype(np.int64), duration_ps=rows["duration_ps"].astype(np.int64))
    out, used = [], set()
    for target, g in rows.groupby("custom_call_target", sort=False):
        total = int(g["duration_ps"].sum())
        by_src = g.groupby("cost_source", sort=False)["duration_ps"].sum().sort_values(ascending=False, kind="stable")
        sources = [str(s) for s in by_src.index]
        used.update(s[len("model:"):] for s in sources if s.startswith("model:"))
        unk = g["cost_source"] == "unknown"
        unknown = int(g.loc[unk, "duration_ps"].sum())
        reasons = sorted(set(g.loc[unk, "unknown_reason"]) - {""})
        longest = g.groupby("note", sort=False)["longest_ps"].max().sort_values(ascending=False, kind="stable")
        notes = [n for n in longest.index if n][:MAX_NOTES]
        out.append({"target": target or "(not in the HLO)", "cost_source": sources[0], "cost_sources": sources,
                    "ops": int(g["op"].nunique()), "executions": int(g["executions"].sum()), "total_ps": total,
                    "share": total / op_time if op_time else None, "unknown_ps": unknown,
                    "unknown_reasons": reasons, "notes": notes})
    out.sort(key=lambda r: (-r["total_ps"], r["target"]))
    return {"op_time_ps": op_time, "custom_call_ps": int(rows["duration_ps"].sum()),
            "unknown_ps": int(sum(r["unknown_ps"] for r in out)), "targets": out,
            "models": {m: ASSUMPTIONS.get(m, "") for m in sorted(used)}}
