"""Events nested on one trace line, and the self time they leave their parents.

XLA:CPU records a ``while`` / ``call`` / ``conditional`` thunk as one event that contains the events of the ops it
runs, on the same thread line; a GPU command buffer may contain its kernels. Events on one line either follow each
other or nest: an event whose window lies inside an earlier, still open event's window is its child. The parent's
*self time* is its duration minus the time of its direct children (whose own children are inside them).

Lines without nesting (TPU op lines, GPU streams: the common case) are recognised with one vectorized pass and
cost nothing more; only lines that do nest are walked event by event.
"""
from __future__ import annotations

import numpy as np

from tracekit.ingest.wire import HAVE_C, wirec

#: the C walk (None: the extension is not built, is off, or was built before it had the walk)
_NEST = getattr(wirec, "nest", None) if HAVE_C else None


def self_times(line: np.ndarray, start: np.ndarray, duration: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per event: (self time, index of its parent event or -1). ``line`` groups events (any integer codes); an
    event is a child of the innermost earlier event of its line whose window contains it. Events that only
    partly overlap are not nested (each keeps its own time)."""
    n = len(start)
    self_ps = duration.astype(np.int64, copy=True)
    parent = np.full(n, -1, np.int64)
    if n < 2:
        return self_ps, parent
    end = start + duration
    order = np.lexsort((-duration, start, line))  # per line by start; the longer of two equal starts is the parent
    ln, st, en = line[order], start[order], end[order]
    new_line = np.ones(n, bool)
    new_line[1:] = ln[1:] != ln[:-1]
    bounds = np.append(np.nonzero(new_line)[0], n)
    walked = False
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b - a < 2:
            continue
        # an event starting before the latest end of the earlier events of its line may be nested
        if (st[a + 1:b] < np.maximum.accumulate(en[a:b - 1])).any():
            if not walked and _NEST is not None:
                start, end, duration = (np.ascontiguousarray(x, np.int64) for x in (start, end, duration))
            walked = True
            if _NEST is not None:  # (the same walk in C: ~1 µs an event in Python)
                _NEST(np.ascontiguousarray(order[a:b], np.int64), start, end, duration, self_ps, parent)
            else:
                _walk(order[a:b], start, end, duration, self_ps, parent)
    if walked:
        np.maximum(self_ps, 0, out=self_ps)
    return self_ps, parent


def _walk(rows: np.ndarray, start, end, duration, self_ps, parent) -> None:
    """The walk over one line's events ``rows`` (in its order): each event's parent is the innermost open event
    that holds it; the parent's self time loses the child's duration."""
    stack: list[int] = []
    for i in rows.tolist():
        s, e = int(start[i]), int(end[i])
        while stack and int(end[stack[-1]]) <= s:
            stack.pop()
        if stack and e <= int(end[stack[-1]]):
            p = stack[-1]
            parent[i] = p
            self_ps[p] -= int(duration[i])
        stack.append(i)
