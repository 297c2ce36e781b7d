"""Limits on what reading a trace may cost, and the one-line messages when one is passed or memory runs out.

The decoders count every plane, metadata entry, line, event and stat as they read them (``tracekit.ingest.wire``)
and stop at ``max_events`` or at the work budget: :data:`WORK_PER_BYTE` bytes of work per byte of (decompressed)
trace, each item weighted by about the memory it takes through the pipeline (``wire.WEIGHTS``).
"""
from __future__ import annotations

import os

from tracekit.errors import TraceError

#: The work a trace may need (``tracekit.ingest.wire.WEIGHTS``: about the bytes of memory each plane, metadata
#: entry, line, event and stat takes through the pipeline) is at most this many bytes per byte of (decompressed)
#: trace, plus WORK_FLOOR. Real traces need 3-14 (the CPU fixtures and the third-party TPU/GPU traces); a file
#: of empty lines needs 1,536, of empty events 160. ``max_bytes=None`` or ``TRACEKIT_WORK_PER_BYTE=0`` lifts it.
WORK_PER_BYTE = 64
WORK_FLOOR = 32 << 20
#: What a real trace typically needs per byte (to say how much memory one that ran out of it would have needed).
TYPICAL_WORK_PER_BYTE = 16


def size_text(n: int) -> str:
    """A byte count for a message: '1.5 GiB', '12 bytes'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def work_per_byte() -> float:
    """WORK_PER_BYTE, or ``TRACEKIT_WORK_PER_BYTE`` when set (0: no budget)."""
    env = os.environ.get("TRACEKIT_WORK_PER_BYTE", "").strip()
    try:
        return float(env) if env else WORK_PER_BYTE
    except ValueError:
        return WORK_PER_BYTE


def work_budget(size: int) -> int | None:
    """The work a trace of ``size`` (decompressed) bytes may need; None when the budget is lifted."""
    per_byte = work_per_byte()
    return None if per_byte <= 0 else int(per_byte * size) + WORK_FLOOR


def work_of(planes) -> int:
    """The work (about the bytes of memory the pipeline will need) of decoded planes, weighted as the decoders
    count it."""
    from tracekit.ingest.wire import WORK_EVENT, WORK_LINE, WORK_PLANE, WORK_STAT
    return sum(WORK_PLANE + sum(WORK_LINE + line.n_events * WORK_EVENT + len(line.stat_id) * WORK_STAT
                                for line in p.lines) for p in planes)


def limit_error(args, size: int, where: str) -> TraceError:
    """The one line for a ``wire.LimitError`` (its ``args``) on a trace of ``size`` bytes."""
    kind, count, limit, planes, lines, events, stats = args
    if kind == "events":
        return TraceError(f"trace holds more than {limit:,} events ({count:,} counted when reading stopped)", where,
                          "raise the limit with --max-events (or max_events=None)")
    if kind == "stats":
        from tracekit.ingest.wire import STATS_PER_EVENT
        return TraceError(f"trace holds more than {limit:,} stats ({count:,} counted on {events:,} events; --max-events "
                          f"allows {STATS_PER_EVENT} per event)", where,
                          "raise the limit with --max-events (or max_events=None)")
    return TraceError(f"a {size_text(size)} trace that needs more than {size_text(limit)} of work ({planes:,} planes, "
                      f"{lines:,} lines, {events:,} events, {stats:,} stats counted): over {work_per_byte():g} bytes "
                      "of work per byte, where real traces need 3-14 (crafted or corrupt?)", where,
                      "if it is a real trace, set TRACEKIT_WORK_PER_BYTE=0 (or load it with max_bytes=None)")


def out_of_memory(where: str | None, need: int | None = None) -> TraceError:
    """The one line for a MemoryError: how much the trace needs (about), how much there is, what to do."""
    avail = available_memory()
    need_s = f"; the trace needs about {size_text(need)}" if need else ""
    avail_s = f", {size_text(avail)} available" if avail else ""
    return TraceError(f"out of memory{need_s}{avail_s}", where,
                      "analyze the hosts of a run folder in separate processes (--jobs N), on a Dask cluster "
                      "(--dask ADDR), or on a machine with more memory")


def available_memory() -> int | None:
    """Bytes of memory available to this process (Linux: MemAvailable, bounded by RLIMIT_AS); None if unknown."""
    avail = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    avail = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            avail = min(avail or soft, soft)
    except (ImportError, OSError, ValueError):
        pass
    return avail
