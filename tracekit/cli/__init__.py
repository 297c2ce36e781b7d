"""The ``tracekit`` command line: ``commands`` (analyze, info, ops, diff, capture) and ``reference`` (chips,
calibrate, rules)."""
from tracekit.cli.commands import main

__all__ = ["main"]
