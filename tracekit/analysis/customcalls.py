"""Custom calls by share of op time: which library or hand-written kernels the program spent its time in, which
cost model priced each (``cost_source = model:<name>``, with the model's assumptions), and which stayed unknown
(listed by target name, largest first, so the next model to write is the one that covers the most time).

Op time is the synchronous ops' time (async windows excluded), as the report's roofline coverage counts it.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.model.custom_calls import ASSUMPTIONS

MAX_NOTES = 3  #: distinct cost notes kept per target (the attention FLOP ranges, kernel sizes, ...)


def summary(ops: pd.DataFrame, hlo: pd.DataFrame, costs: pd.DataFrame | None = None) -> dict:
    """``{op_time_ps, custom_call_ps, unknown_ps, targets: [...], models: {name: assumption}}``: one entry per
    custom-call target with its ops, executions, time, share of op time, cost sources, unknown reasons and (from
    ``costs``, the cost model's per-instruction frame) up to :data:`MAX_NOTES` notes."""
    empty = {"op_time_ps": 0, "custom_call_ps": 0, "unknown_ps": 0, "targets": [], "models": {}}
    if not len(ops) or not len(hlo) or "cost_source" not in ops.columns:
        return empty
    sync = ~ops["is_async"].to_numpy(bool)  # masks, not a copy of the ops frame
    op_time = int(ops["duration_ps"].to_numpy(np.int64)[sync].sum())
    cc = ops[["program_id", "op", "duration_ps", "cost_source", "unknown_reason"]][
        sync & (ops["opcode"] == "custom-call").to_numpy(bool)]
    empty["op_time_ps"] = op_time
    if not len(cc):
        return empty
    targets = hlo[hlo["opcode"].astype(str) == "custom-call"][["program_id", "name", "custom_call_target"]]
    targets = targets.rename(columns={"name": "op"}).drop_duplicates(["program_id", "op"])
    rows = pd.DataFrame({"program_id": cc["program_id"].to_numpy(), "op": cc["op"].astype(str).to_numpy(),
                         "duration_ps": cc["duration_ps"].to_numpy(np.int64),
                         "cost_source": cc["cost_source"].astype(str).to_numpy(),
                         "unknown_reason": cc["unknown_reason"].astype(str).to_numpy()})
    rows = rows.merge(targets.astype({"op": str}), on=["program_id", "op"], how="left")
    if costs is not None and len(costs) and "note" in costs.columns:
        notes = costs[["program_id", "op", "note"]].drop_duplicates(["program_id", "op"])
        rows = rows.merge(notes.astype({"op": str}), on=["program_id", "op"], how="left")
    else:
        rows["note"] = ""
    rows["custom_call_target"] = rows["custom_call_target"].fillna("").astype(str)
    rows["note"] = rows["note"].fillna("").astype(str)
    out, used = [], set()
    for target, g in rows.groupby("custom_call_target", sort=False):
        total = int(g["duration_ps"].sum())
        by_src = g.groupby("cost_source")["duration_ps"].sum().sort_values(ascending=False)
        sources = [str(s) for s in by_src.index]
        used.update(s[len("model:"):] for s in sources if s.startswith("model:"))
        unknown = int(g.loc[g["cost_source"] == "unknown", "duration_ps"].sum())
        reasons = sorted(set(g.loc[g["cost_source"] == "unknown", "unknown_reason"]) - {""})
        notes = [n for n in dict.fromkeys(g.sort_values("duration_ps", ascending=False)["note"]) if n][:MAX_NOTES]
        out.append({"target": target or "(not in the HLO)", "cost_source": sources[0], "cost_sources": sources,
                    "ops": int(g["op"].nunique()), "executions": int(len(g)), "total_ps": total,
                    "share": total / op_time if op_time else None, "unknown_ps": unknown,
                    "unknown_reasons": reasons, "notes": notes})
    out.sort(key=lambda r: (-r["total_ps"], r["target"]))
    return {"op_time_ps": op_time, "custom_call_ps": int(rows["duration_ps"].sum()),
            "unknown_ps": int(sum(r["unknown_ps"] for r in out)), "targets": out,
            "models": {m: ASSUMPTIONS.get(m, "") for m in sorted(used)}}
