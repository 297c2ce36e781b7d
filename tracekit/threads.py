"""Threads: how many the decoder uses for its lines, NumPy's BLAS on one; and the one-shot process flag."""
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
