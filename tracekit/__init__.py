"""tracekit: where your JAX/XLA program loses time, from a profiler trace, and what to do about it."""
from tracekit.errors import TraceError
from tracekit.trace import Trace, load

__all__ = ["Trace", "TraceError", "load"]
__version__ = "0.1.0"
