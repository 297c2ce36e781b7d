"""How many threads tracekit's parallel parts use: the decoder's lines, the timeline frames, the rules."""
from __future__ import annotations

import os


def default_threads() -> int:
    """``TRACEKIT_THREADS`` if set, else the CPUs this process may use (at most 8)."""
    env = os.environ.get("TRACEKIT_THREADS", "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            pass
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, 8))
