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


#: Below this many rows a stage's independent jobs run one after the other: a pool's threads cost more CPU
#: (start-up, hand-offs, the GIL passed back and forth) than they win on jobs of a few milliseconds each
#: (the v6e trace, 27 k events: ~20 ms of CPU less without the pools).
SMALL_ROWS = 200_000


def pool_threads(rows: int, most: int = 2) -> int:
    """Threads for a stage's independent jobs over ``rows`` rows: 1 below :data:`SMALL_ROWS`, else up to ``most``
    (and :func:`default_threads`)."""
    return 1 if rows < SMALL_ROWS else max(1, min(most, default_threads()))


#: Commands that use BLAS themselves (``calibrate`` times a NumPy matmul) or hand the environment to the user's
#: program (``capture`` runs a script): their BLAS keeps its threads.
BLAS_COMMANDS = ("calibrate", "capture")


def blas_one_thread() -> bool:
    """Before NumPy is first imported: its BLAS on one thread unless ``OPENBLAS_NUM_THREADS`` says otherwise; True
    when it took effect. tracekit's analysis does no BLAS work (no matmul, no linear algebra), while OpenBLAS
    starts one thread per core when NumPy is imported: ~0.07 CPU-s of a 0.8 CPU-s ``analyze`` on a small trace
    (2 cores). For the command line's one-shot processes only; a library caller's process is never changed."""
    import sys
    if "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return False
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


_one_shot = False


def mark_one_shot() -> None:
    """This process is a tracekit command (or the post-run hook's analysis child): it analyzes, writes, exits and
    hands no frame to a caller, so its frames may hold read-only columns stored once
    (:func:`tracekit.columns.stores_constants_once`). Imports nothing: ``tracekit info`` never loads pandas."""
    global _one_shot
    _one_shot = True


def one_shot() -> bool:
    """Whether :func:`mark_one_shot` was called in this process."""
    return _one_shot
