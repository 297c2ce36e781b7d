"""A one-line progress display on stderr for long analyses: only on a TTY, never in pipes, files or CI logs."""
from __future__ import annotations

import os
import sys
import time


class Progress:
    """``p.stage("decoding")`` rewrites one status line with the stage and the elapsed time; ``p.done()`` clears
    it. Disabled (a no-op) unless stderr is a terminal and ``TRACEKIT_NO_PROGRESS`` is unset."""

    def __init__(self, enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = bool(getattr(self.stream, "isatty", lambda: False)()) and not os.environ.get("TRACEKIT_NO_PROGRESS")
        self.enabled = enabled
        self.t0 = time.perf_counter()
        self._width = 0

    def stage(self, name: str) -> None:
        if not self.enabled:
            return
        text = f"tracekit: {name}… {time.perf_counter() - self.t0:.1f} s"
        self.stream.write("\r" + text.ljust(self._width))
        self.stream.flush()
        self._width = len(text)

    def done(self) -> None:
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0


NULL = Progress(enabled=False)
