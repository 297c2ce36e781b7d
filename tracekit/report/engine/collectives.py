"""Section ``collectives``: the collective executions with the most exposed time (``collectives[]``: the
timeline's overlap of each collective with compute)."""
from __future__ import annotations

import pandas as pd

NAME = "collectives"
TOP = 50  #: rows kept


def summarize(hv) -> pd.DataFrame:
    """The host's :data:`TOP` collective executions with the most exposed time."""
    coll = hv.frames.collectives
    return coll.sort_values("exposed_ps", ascending=False, kind="stable").head(TOP).reset_index(drop=True) \
        if len(coll) else coll


def reduce(parts: list, ctx) -> dict:
    from tracekit.report.envelope import records
    rows = [p for p in parts if len(p)]
    if not rows:
        return {"collectives": []}
    c = pd.concat(rows, ignore_index=True) if len(rows) > 1 else rows[0]
    return {"collectives": records(c.sort_values("exposed_ps", ascending=False, kind="stable").head(TOP))}
