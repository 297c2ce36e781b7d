"""The allocator's own view of memory, from the trace's allocator events (``memory_events``: the runtime's
``MemoryAllocation``/``MemoryDeallocation`` events with bytes in use after each): per (host, allocator) a summary
and a downsampled bytes-in-use curve (:func:`allocator_summary`), part of :mod:`tracekit.analysis.memory`'s view."""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.grouping import rows_by_text

#: points kept of a curve (an allocator's bytes in use, a program's live bytes): the peak and both ends among them
CURVE_POINTS = 200


def allocator_summary(events: pd.DataFrame | None) -> tuple[pd.DataFrame, dict]:
    """Per (host, allocator) from the allocator's events: events, first/last time, peak_in_trace_bytes (the most
    bytes in use after any event), reported_peak_bytes (the allocator's own peak_bytes_in_use, which may predate
    the trace), last_bytes; and a downsampled bytes-in-use curve per allocator."""
    cols = ["host", "allocator", "events", "start_ps", "end_ps", "peak_in_trace_bytes", "reported_peak_bytes",
            "last_bytes", "device"]
    if events is None or not len(events):
        return pd.DataFrame(columns=cols), {}
    rows, curves = [], {}
    start = column_numpy(events, "start_ps", np.int64)
    in_use, peak = column_numpy(events, "bytes_in_use", float), column_numpy(events, "peak_bytes_in_use", float)
    # (host, allocator) as text -> its events' rows, in frame order (a missing name is no group, as in a groupby)
    groups = rows_by_text(events, ["host", "allocator"])
    for (h, a) in sorted(groups):
        g = groups[(h, a)]
        g = g[np.argsort(start[g], kind="stable")]
        use = in_use[g]
        ok = ~np.isnan(use)
        if not ok.any():
            continue
        t, use = start[g][ok], use[ok]
        pk = peak[g]
        rows.append({"host": h, "allocator": a, "events": int(ok.sum()), "start_ps": int(t[0]), "end_ps": int(t[-1]),
                     "peak_in_trace_bytes": float(use.max()),
                     "reported_peak_bytes": float(np.nanmax(pk)) if (~np.isnan(pk)).any() else np.nan,
                     "last_bytes": float(use[-1]), "device": allocator_device(a)})
        keep = np.arange(len(use)) if len(use) <= CURVE_POINTS else np.unique(
            np.r_[np.linspace(0, len(use) - 1, CURVE_POINTS - 1).astype(int), np.argmax(use)])
        curves[(h, a)] = pd.DataFrame({"start_ps": t[keep], "bytes_in_use": use[keep]})
    return pd.DataFrame(rows, columns=cols), curves


def allocator_device(name: str) -> str:
    """'GPU_4_bfc' -> 'GPU:4'; 'device 2' -> ':2' (the index on the host; the caller knows the family); else ''."""
    import re
    m = re.match(r"^(GPU|TPU|CPU)_(\d+)_", name)
    if m:
        return f"{m.group(1)}:{m.group(2)}"
    m = re.match(r"^device (\d+)$", name)
    return f":{m.group(1)}" if m else ""
