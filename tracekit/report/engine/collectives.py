"""Section ``collectives``: the collective executions with the most exposed time (``collectives[]``: the
timeline's overlap of each collective with compute)."""
from __future__ import annotations


import numpy as np

from tracekit.columns import column_numpy
from tracekit.records import record

NAME = "collectives"
TOP = 50  #: rows kept


@record(frozen=True)
class Part:
    """One host's part of the collectives section."""

    rows: object  #: the host's :data:`TOP` collective executions with the most exposed time (a frame)
    exposed: np.ndarray  #: their exposed time


def summarize(hv) -> Part:
    coll = hv.frames.collectives
    if not len(coll):
        return Part(coll, np.zeros(0))
    top = coll.sort_values("exposed_ps", ascending=False, kind="stable").head(TOP).reset_index(drop=True)
    return Part(top, column_numpy(top, "exposed_ps", np.float64))


def reduce(parts: list, ctx) -> dict:
    """The :data:`TOP` rows with the most exposed time over every host (ties: host order, then the host's)."""
    from tracekit.report.envelope import rows_of
    if len(parts) == 1:
        return {"collectives": rows_of([parts[0].rows])}
    exposed = np.concatenate([p.exposed for p in parts])
    host = np.concatenate([np.full(len(p.rows), i) for i, p in enumerate(parts)])
    pos = np.concatenate([np.arange(len(p.rows)) for p in parts])
    take = np.lexsort((pos, host, -exposed))[:TOP]
    return {"collectives": rows_of([p.rows for p in parts], host[take], pos[take])}
