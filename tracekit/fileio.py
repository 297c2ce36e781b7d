"""Writing files whole or not at all, and only where a file belongs: every report, calibration and hook output goes
through :func:`write_all` / :func:`write_atomic`.

Each text goes to a temporary file in its target's folder (``.tracekit-<pid>-<random>.tmp``), is flushed to disk,
and only when every requested file is written are they renamed over their targets, each in one step: a reader sees
the old file or the new one, never half of one, and a failure (no space on the third of four, no permission, a
signal) leaves every old file as it was. What is not a regular file is never replaced: a symlink is followed (its
target is replaced, the link stays), ``-`` and ``/dev/stdout`` are stdout, a character device or FIFO
(``/dev/null``, a pipe) is written through, and a folder, block device or socket is refused. SIGINT, SIGTERM and
SIGHUP while writing remove the temporaries; those of a process killed with SIGKILL are removed by the next write
into that folder. :func:`stream` is the same writer for an output too large to hold as one text (``tracekit
export``): written as it is produced, to the same kind of temporary, renamed when complete. Used by every command
that writes, the post-run hook and calibration alike.
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import secrets
import signal
import stat
import sys
import threading
import time

from tracekit.errors import TraceError
from tracekit.records import record

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


@record(frozen=True)
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
    except OSError as e:  # a symlink loop (ELOOP), a path through a file (ENOTDIR), no permission to look
        raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", given, _hint(e)) from None
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


def _hint(e: OSError, through: bool = False) -> str:
    """What to do about ``e``; ``through``: it came from a device, FIFO or stdout written through (no old file)."""
    if through and e.errno == errno.ENOSPC:
        return "the device is full: give a file, or a device with room"
    if through and e.errno == errno.EPIPE:
        return "keep the reader open until the output is written"
    if e.errno == errno.ELOOP:
        return "the path is a loop of symlinks: give a file name"
    if e.errno == errno.ENOTDIR:
        return "a folder on the path is a file: give a file name"
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
    _keep_mode(tmp, path)


def _keep_mode(tmp: str, path: str) -> None:
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
    try:
        if t.kind in ("stdout", "stderr"):
            out = sys.stdout if t.kind == "stdout" else sys.stderr
            out.write(text)
            out.flush()
            return
        with open(_open_through(t, what), "w", encoding="utf-8", closefd=True) as f:
            f.write(text)
    except BrokenPipeError:
        raise  # the reader of stdout went away (`| head`): the command line ends quietly
    except OSError as e:  # /dev/full (ENOSPC), a FIFO whose reader left (EPIPE)
        raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", t.given,
                         _hint(e, through=True)) from None


def _open_through(t: Target, what: str) -> int:
    """A blocking descriptor on the device or FIFO ``t``; a FIFO nobody reads is ENXIO at once instead of blocking
    forever (opened with O_NONBLOCK, then made blocking)."""
    try:
        fd = os.open(t.path, os.O_WRONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        hint = "start the reader first" if e.errno == errno.ENXIO else "check that it is writable"
        raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", t.given, hint) from None
    os.set_blocking(fd, True)
    return fd


@contextlib.contextmanager
def stream(path, *, what: str = "the output"):
    """Write one output as it is produced (too large to hold as one text): yields a binary stream, which the
    caller may wrap (gzip, text) and close; this writer closes the file. The same rules as :func:`write_all`: a
    regular file (a symlink's target) is a temporary next to it, flushed to disk and renamed over it only when the
    body ends without error, keeping the old file's permissions (a read-only report is replaced and stays
    read-only, as with every other output); a failure, SIGINT, SIGTERM or SIGHUP leaves the old file and no
    temporary. A character device or FIFO is written through, ``-`` / ``/dev/stdout`` is stdout; a folder, block
    device or socket is refused before anything is written. An OSError (no space, EFBIG) is a TraceError."""
    t = target(path, what)
    if t.kind != "file":
        yield from _stream_through(t, what)
        return
    folder = os.path.dirname(t.path) or "."
    remove_stale_temporaries(folder)
    tmp = None
    with _signals_end_the_write():
        try:
            tmp = _temporary(t.path)
            with open(tmp, "wb") as f:
                yield _Kept(f)
                f.flush()
                os.fsync(f.fileno())  # the data is on disk before the rename makes it the file
            _keep_mode(tmp, t.path)
            os.replace(tmp, t.path)
            tmp = None
        except OSError as e:
            raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", t.given, _hint(e)) from None
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
    _fsync_folder(folder)


def _stream_through(t: Target, what: str):
    if t.kind in ("stdout", "stderr"):
        text = sys.stdout if t.kind == "stdout" else sys.stderr
        opened = None
    else:
        text, opened = None, open(_open_through(t, what), "wb")
    try:
        if text is not None:
            text.flush()  # what was printed before goes first
        dest = opened if opened is not None else getattr(text, "buffer", None)
        yield _Kept(dest) if dest is not None else _Kept(_TextBytes(text))
        (opened or text).flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise TraceError(f"cannot write {what} ({e.strerror or type(e).__name__})", t.given,
                         _hint(e, through=True)) from None
    finally:
        if opened is not None:
            with contextlib.suppress(OSError):
                opened.close()


class _Kept(io.RawIOBase):
    """A writable view of a binary file that its user may close (a gzip or text wrapper closes what it wraps)
    while the file itself stays open: :func:`stream` closes, flushes and renames it."""

    def __init__(self, f):
        super().__init__()
        self._f = f

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self._f.write(data)
        return len(data)

    def flush(self) -> None:
        if not self.closed:
            self._f.flush()


class _TextBytes:
    """A text stream with no binary buffer (a test runner's stdout) as a binary one: UTF-8 decoded."""

    def __init__(self, text):
        import codecs
        self._t, self._dec = text, codecs.getincrementaldecoder("utf-8")("replace")

    def write(self, data) -> int:
        self._t.write(self._dec.decode(bytes(data)))
        return len(data)

    def flush(self) -> None:
        self._t.flush()


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
