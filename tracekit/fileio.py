"""Writing files whole or not at all: every report, calibration and hook output goes through :func:`write_atomic`.

The text goes to a temporary file in the target's folder, is flushed to disk, and is renamed over the target in one
step, so a reader sees the old file or the new one, never half of one, and a failed write leaves the old file as it
was. Used by the command line, the post-run hook and calibration alike (none of them imports another for it).
"""
from __future__ import annotations

import os
import tempfile

from tracekit.errors import TraceError


def write_atomic(path: str | os.PathLike, text: str, *, what: str = "the output") -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically; the file gets the usual permissions (0666 less the umask).
    An OS error (no folder, no space, no permission) is a :class:`TraceError` naming ``what`` and the path."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tracekit-", dir=d)
    except OSError as e:
        raise TraceError(f"cannot write {what} ({e.strerror})", path, "check the folder exists and is writable")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # the data is on disk before the rename makes it the file
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report gets the usual permissions
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):  # disk full, a folder in the way, ...: the old file is untouched
            raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", path,
                             "check the free space and that the path is a writable file") from None
        raise
