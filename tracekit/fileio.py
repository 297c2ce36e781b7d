"""Writing files whole or not at all, and only where a file belongs: every report, calibration and hook output goes
through :func:`write_all` / :func:`write_atomic`.

Each text goes to a temporary file in its target's folder (``.tracekit-<pid>-<random>.tmp``), is flushed to disk,
and only when every requested file is written are they renamed over their targets, each in one step: a reader sees
the old file or the new one, never half of one, and a failure (no space on the third of four, no permission, a
signal) leaves every old file as it was. What is not a regular file is never replaced: a symlink is followed (its
target is replaced, the link stays), ``-`` and ``/dev/stdout`` are stdout, a character device or FIFO
(``/dev/null``, a pipe) is written through, and a folder, block device or socket is refused. SIGINT, SIGTERM and
SIGHUP while writing remove the temporaries; those of a process killed with SIGKILL are removed by the next write
into that folder. Used by the command line, the post-run hook and calibration alike.
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import signal
import stat
import sys
import threading
import time
from dataclasses import dataclass

from tracekit.errors import TraceError

#: Temporary files are named .tracekit-<pid>-<random>.tmp, next to their target. A process killed mid-write (SIGKILL
#: cannot be caught) leaves its temporary; the next write into that folder removes the temporaries of processes that
#: are gone (and any older than a day). Versions before this one wrote .tracekit-<random>: removed after an hour.
_TMP_RE = re.compile(r"^\.tracekit-(\d+)-[A-Za-z0-9_]{8}\.tmp$")
_OLD_TMP_RE = re.compile(r"^\.tracekit-[a-z0-9_]{8}$")
STALE_AFTER_S = 24 * 3600
OLD_STALE_AFTER_S = 3600
#: paths that mean this process's standard output or error: written through, never replaced
STDOUT_PATHS = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
STDERR_PATHS = ("/dev/stderr", "/dev/fd/2", "/proc/self/fd/2")


@dataclass(frozen=True)
class Target:
    """Where one output goes. ``kind``: "file" (a regular file, new or replaced through a temporary and a rename;
    ``path`` is what a symlink points to, so the link stays a link), "stdout" / "stderr", or "device" (a character
    device or a FIFO, written through: ``/dev/null`` stays a device)."""
    given: str
    kind: str
    path: str


def target(path, what: str = "the output") -> Target:
    """Where writing ``path`` goes, or a TraceError for what cannot be written: a folder, a block device, a socket."""
    given = os.fspath(path)
    if given in STDOUT_PATHS:
        return Target(given, "stdout", given)
    if given in STDERR_PATHS:
        return Target(given, "stderr", given)
    try:
        mode = os.stat(given).st_mode  # through symlinks, /proc/self/fd/N's too (whose target may have no path)
    except FileNotFoundError:  # a new file (a dangling symlink: its target is created, the link stays)
        return Target(given, "file", os.path.realpath(given))
    except OSError as e:
        raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", given) from None
    if stat.S_ISREG(mode):  # a symlink is followed: its target is replaced, the link stays
        return Target(given, "file", os.path.realpath(given))
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):  # opened by the name given (a pipe's realpath is no path)
        return Target(given, "device", given)
    kind = "a folder" if stat.S_ISDIR(mode) else "a block device" if stat.S_ISBLK(mode) else \
        "a socket" if stat.S_ISSOCK(mode) else "not a regular file"
    raise TraceError(f"cannot write {what}: the path is {kind}", given, "give a file name (or - for stdout)")


def write_all(items, *, what: str = "the output") -> None:
    """Write each ``(path, text)`` of ``items``: every file whole or not at all, and none replaced unless all of them
    could be written. Each text goes to a temporary file next to its target; all of them are written and flushed to
    disk before the first is renamed into place, so a failure (no space, no permission, SIGINT, SIGTERM, SIGHUP)
    leaves every old file as it was and no temporary behind (a signal then ends the process with 128 + its number).
    A symlink is followed (its target replaced); ``-`` and ``/dev/stdout`` are stdout; a character device or FIFO
    (``/dev/null``, a pipe) is written through, after the files. A replaced file keeps its permissions."""
    targets = [(target(p, what), text) for p, text in items]
    files = [(t, text) for t, text in targets if t.kind == "file"]
    folders = sorted({os.path.dirname(t.path) for t, _ in files})
    for d in folders:
        remove_stale_temporaries(d)
    temps: list[str] = []
    done, current = 0, 0
    with _signals_end_the_write():
        try:
            for current, (t, text) in enumerate(files):  # every temporary written and on disk ...
                temps.append(_temporary(t.path))
                _fill(temps[-1], t.path, text)
            for current, ((t, _), tmp) in enumerate(zip(files, temps)):  # ... before the first rename
                os.replace(tmp, t.path)
                done += 1
        except BaseException as e:
            for tmp in temps[done:]:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            if isinstance(e, OSError):
                kept = f"; {done} of {len(files)} files were already replaced" if done else ""
                raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__}){kept}",
                                 files[current][0].given, _hint(e)) from None
            raise
    for d in folders:
        _fsync_folder(d)
    for t, text in targets:
        if t.kind != "file":
            _write_through(t, text, what)


def _hint(e: OSError) -> str:
    if e.errno == errno.ENOENT:
        return "check that the folder exists"
    if e.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return "free some space (the old file is untouched)"
    if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "check that the folder is writable"
    return "check the free space and that the path is a writable file"


def write_atomic(path, text: str, *, what: str = "the output") -> None:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all (:func:`write_all` of one file)."""
    write_all([(path, text)], what=what)


def remove_stale_temporaries(folder) -> list[str]:
    """Remove this module's temporaries in ``folder`` left by processes that are gone (or that are older than a
    day; those of older versions after an hour). Returns their names. Never raises."""
    removed = []
    now = time.time()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for e in entries:
        m = _TMP_RE.match(e.name)
        old = _OLD_TMP_RE.match(e.name)
        if not (m or old):
            continue
        try:
            st = e.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                continue
            age = now - st.st_mtime
            if m:
                pid = int(m.group(1))
                stale = age > STALE_AFTER_S or (pid != os.getpid() and not _alive(pid))
            else:
                stale = age > OLD_STALE_AFTER_S
            if stale:
                os.unlink(e.path)
                removed.append(e.name)
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True  # it exists (owned by someone else), or we cannot tell: keep its file
    return True


def _temporary(path: str) -> str:
    """A new, empty temporary file next to ``path`` (O_EXCL: never someone else's)."""
    d = os.path.dirname(path) or "."
    for _ in range(100):
        name = os.path.join(d, f".tracekit-{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600))
            return name
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {d}")


def _fill(tmp: str, path: str, text: str) -> None:
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())  # the data is on disk before the rename makes it the file
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)  # a replaced file keeps its permissions
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # a new report gets the usual permissions (the temporary was made 0600)
    os.chmod(tmp, mode)


def _fsync_folder(folder: str) -> None:
    """Flush the renames themselves to disk (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_through(t: Target, text: str, what: str) -> None:
    if t.kind in ("stdout", "stderr"):
        stream = sys.stdout if t.kind == "stdout" else sys.stderr
        stream.write(text)
        stream.flush()
        return
    try:  # a FIFO nobody reads: ENXIO at once instead of blocking forever
        fd = os.open(t.path, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        hint = "start the reader first" if e.errno == errno.ENXIO else "check that it is writable"
        raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", t.given, hint) from None
    try:
        os.set_blocking(fd, True)
        with open(fd, "w", encoding="utf-8", closefd=True) as f:
            f.write(text)
    except OSError as e:
        raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", t.given) from None


@contextlib.contextmanager
def _signals_end_the_write():
    """While files are written: SIGTERM and SIGHUP raise SystemExit(128 + N) (so the temporaries are removed on the
    way out) instead of ending the process on the spot. Main thread only (signals are delivered there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    def end(signum, frame):
        raise SystemExit(128 + signum)
    old = {}
    for name in ("SIGTERM", "SIGHUP"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                old[sig] = signal.signal(sig, end)
            except (ValueError, OSError):
                pass
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
