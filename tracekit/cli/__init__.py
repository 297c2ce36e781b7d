"""The ``tracekit`` command line: ``app`` (the ``tracekit`` group), ``commands`` (info, ops, analyze, capture,
diff), ``reference`` (chips, calibrate, rules) and ``options`` (the error guard and the shared options)."""
from tracekit.cli.app import entry, main

__all__ = ["entry", "main"]
