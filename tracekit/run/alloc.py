"""Allocator tuning for the command line's one-shot analyses (glibc on Linux only; nothing elsewhere).

The pipeline allocates and frees many column-sized arrays. glibc serves every block above its mmap threshold
(32 MB at most) with a fresh ``mmap`` and returns it with ``munmap`` on free, so on a large trace each such
array costs the kernel a page fault and a zeroed page per 4 KB, every time: profiling a 15 M-event trace showed
over 40 % of the process's time in the kernel's ``clear_page``. Serving large blocks from the heap, keeping
freed memory for reuse, and sharing one arena between threads removes most of that (15 M events: 22.6 s ->
16.5 s wall, 6.4 -> 5.3 GB peak RSS, kernel time 13.8 s -> 5.9 s; see docs/performance.md). A library
caller's process is never tuned: only ``tracekit`` commands call :func:`tune`, and ``TRACEKIT_MALLOC_TUNING=0``
turns it off.
"""
from __future__ import annotations

import ctypes
import os
import sys

# mallopt parameters (glibc malloc.h)
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -4, -8
_NEVER = -1  # mallopt takes an int; glibc reads -1 as SIZE_MAX: never give the heap's top back mid-run
_TOP_PAD = 64 << 20  # grow the heap in 64 MB steps


def tune() -> bool:
    """Ask glibc to serve large blocks from the heap and keep freed memory; True when it took effect."""
    if os.environ.get("TRACEKIT_MALLOC_TUNING", "1") == "0" or not sys.platform.startswith("linux"):
        return False
    try:
        # the symbols already loaded into this process (libc's among them): ctypes.util.find_library would run
        # ldconfig in a child process, ~10 ms of CPU per command
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        if not hasattr(libc, "gnu_get_libc_version"):
            return False  # musl and others: mallopt is absent or a no-op
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_MMAP_MAX, 0) == 1
    ok &= mallopt(_M_TRIM_THRESHOLD, _NEVER) == 1
    ok &= mallopt(_M_TOP_PAD, _TOP_PAD) == 1
    # one arena: the worker threads' freed blocks are reused by every thread (with an arena per thread, each
    # keeps its own free memory and the peak grows; the threads are few, so contention is negligible)
    ok &= mallopt(_M_ARENA_MAX, 1) == 1
    return bool(ok)
