"""tracekit: where your JAX/XLA program loses time, from a profiler trace, and what to do about it."""
from tracekit.errors import TraceError
from tracekit.version import __version__

__all__ = ["Options", "Trace", "TraceError", "analyze", "capture", "load", "profile"]


def __getattr__(name):
    # Lazy: ``import tracekit`` (and so the command line's start) imports neither pandas nor jax nor the
    # capture/hook code; the first use of an attribute imports what it needs.
    if name in ("Trace", "load"):
        from tracekit.ingest import trace
        return getattr(trace, name)
    if name == "analyze":  # tracekit.analyze(path, options=None, **options) -> Report (jobs/dask honoured)
        from tracekit.run.pod import analyze
        return analyze
    if name == "Options":
        from tracekit.options import Options
        return Options
    if name == "capture":  # tracekit.capture(fn, *args, ...) -> Report
        from tracekit.run.capture import capture
        return capture
    if name == "profile":
        from tracekit.run.hook import profile
        return profile
    raise AttributeError(f"module 'tracekit' has no attribute {name!r}")
