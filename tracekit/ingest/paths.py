"""Find and decode traces: a file, a run folder (every host in it), or a logdir (newest run).

This stage only resolves paths (:mod:`tracekit.ingest.locate` chooses the files) and turns bytes into ``XSpace``
messages; :mod:`tracekit.ingest.frames` turns those into DataFrames. Every failure is a :class:`~tracekit.errors.TraceError` with a one-line message.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

from google.protobuf.message import DecodeError

from tracekit.errors import TraceError
from tracekit.ingest import formats
from tracekit.ingest import limits
from tracekit.ingest.locate import HostFile, choose, kind_of, not_regular
from tracekit.ingest.limits import size_text
from tracekit.options import DEFAULT_MAX_BYTES

SUFFIX = ".xplane.pb"
#: The refusal limits' default is :data:`tracekit.options.DEFAULT_MAX_BYTES`; ``max_bytes=None`` (the caller, or
#: ``--max-size``) lifts it.
#: A ``.gz`` that expands more than this many times its size (past ``GZ_BOMB_FLOOR`` bytes) is refused as a
#: decompression bomb while it is being decompressed (real traces compress 2-10x). ``max_bytes=None`` lifts it.
GZ_MAX_RATIO = 100
GZ_BOMB_FLOOR = 64 << 20
_GZ_CHUNK = 4 << 20


def resolve(path: str | os.PathLike, run: str | None = None) -> list[HostFile]:
    """The trace files ``path`` names: itself (a file), every ``*.xplane.pb`` in a run folder, or the newest run
    (or ``run``) under ``<logdir>/plugins/profile`` (:func:`tracekit.ingest.locate.choose`, which also says which
    run it took). A URL with a protocol (``gs://``, ``s3://``, ``memory://``…) is listed through fsspec the same
    way; its HostFile paths are then URL strings (read by :func:`read_bytes`)."""
    return choose(path, run).files


def read_bytes(path: Path, max_bytes: int | None = DEFAULT_MAX_BYTES) -> bytes:
    """The file's bytes (a ``.gz`` decompressed, bounded). ``path`` may be a URL string (``gs://…``), read
    through fsspec with the same size limit and messages."""
    where = os.fspath(path)
    remote = "://" in where
    try:
        if remote:
            proto = where.split("://", 1)[0]
            try:
                import fsspec.core
                fs, rp = fsspec.core.url_to_fs(where)
            except ImportError as e:  # fsspec itself, or the protocol's package (gcsfs, s3fs, …)
                try:
                    from fsspec.registry import known_implementations as known
                    pkg = known.get(proto, {}).get("class", "").split(".")[0]
                    pkg = pkg if pkg not in ("", "fsspec") else "its driver"
                except ImportError:
                    pkg = "fsspec"
                raise TraceError(f"cannot reach {proto}://, install {pkg}", where, str(e)) from None
            if fs.isdir(rp):
                raise IsADirectoryError(where)
            size = fs.size(rp)
            if max_bytes is not None and size > max_bytes:
                raise TraceError(f"file is {size_text(size)}, over the {size_text(max_bytes)} limit", where,
                                 "raise the limit with --max-size MiB (or max_bytes=None)")
            with fs.open(rp, "rb") as f:
                data = f.read()
        else:
            with _open_regular(path) as f:
                size = os.fstat(f.fileno()).st_size
                if max_bytes is not None and size > max_bytes:
                    raise TraceError(f"file is {size_text(size)}, over the {size_text(max_bytes)} limit", where,
                                     "raise the limit with --max-size MiB (or max_bytes=None)")
                data = f.read()
    except TraceError:
        raise
    except PermissionError:
        raise TraceError("file is not readable", where, "check its permissions") from None
    except IsADirectoryError:
        raise TraceError("is a folder, not a trace file", where) from None
    except OSError as e:
        raise TraceError(f"cannot read file ({e.strerror or type(e).__name__})", where) from None
    except Exception as e:  # noqa: BLE001 — remote storage (network, credentials): one line
        if not remote:
            raise
        raise TraceError(f"cannot reach {proto}:// ({type(e).__name__}: {(str(e).splitlines() or [''])[0]})", where,
                         "check the URL and your credentials") from None
    if where.endswith(".gz"):
        data = _gunzip(data, where, max_bytes)
    return data


def _open_regular(path):
    """``path`` opened for reading, after checking (on the open file, so nothing can swap it in between) that it
    is a regular file: opening a FIFO does not block (O_NONBLOCK), and a device or FIFO is a TraceError."""
    import stat
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise not_regular(kind_of(Path(path)) if not stat.S_ISFIFO(mode) else "a FIFO (named pipe)",
                               os.fspath(path))
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return open(fd, "rb")  # noqa: SIM115 — the caller closes it
    except BaseException:
        os.close(fd)
        raise


def _gunzip(data: bytes, where: str, max_bytes: int | None) -> bytes:
    """Decompress in chunks, never holding more than the limit: the decompressed size must stay within
    ``max_bytes`` and within ``GZ_MAX_RATIO`` times the compressed size (a gzip bomb); ``max_bytes=None`` lifts
    both. A corrupt or truncated gzip stream is a TraceError."""
    import io
    import zlib
    bomb = None if max_bytes is None else max(len(data) * GZ_MAX_RATIO, GZ_BOMB_FLOOR)
    out, total = [], 0
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as g:
            while True:
                chunk = g.read(_GZ_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if max_bytes is not None and total > max_bytes:
                    raise TraceError(f"decompressed trace is over the {size_text(max_bytes)} limit", where,
                                     "raise the limit with --max-size MiB (or max_bytes=None)")
                if bomb is not None and total > bomb:
                    raise TraceError(f"gzip file expands more than {GZ_MAX_RATIO}x its size (a decompression bomb?)",
                                     where, "if it is a real trace, gunzip it first, or load it with max_bytes=None")
                out.append(chunk)
    except (OSError, EOFError, zlib.error) as e:
        raise TraceError(f"not a valid gzip file ({e})", where, "re-copy it, or gunzip it and check the result") \
            from None
    return b"".join(out)


def decode(data: bytes, where: str, *, max_events: int | None = None, budget: int | None = None,
           changed: bool = False, stats: bool = True):
    """Decode serialized ``XSpace`` bytes into columnar planes (:mod:`tracekit.ingest.wire`), or raise TraceError saying
    why they are not a trace (or pass a limit: ``max_events``, the work ``budget``). Returns (planes, hostnames).
    ``changed``: the file changed while it was first read (said in the message if it does not decode); ``stats``
    False: events' stats are not decoded (``tracekit info``)."""
    from tracekit.ingest import pywire, wire
    if not data:
        raise TraceError("file is empty", where, "re-capture the profile; the writer may have been interrupted")
    try:
        planes, hostnames = wire.read_space(data, max_events=max_events, budget=budget, stats=stats)
    except pywire.LimitError as e:
        raise limits.limit_error(e.args, len(data), where) from None
    except (ValueError, DecodeError) as e:
        what = formats.foreign(bytes(data[:formats.HEAD_BYTES]), where)
        if what is not None:
            raise TraceError(what[0], where, what[1]) from None
        detail = str(e).split("\n")[0] or "bad protobuf wire data"
        if changed:
            raise TraceError(f"the file changed while it was being read and is now not a valid trace ({detail})",
                             where, "wait until the profiler has finished writing it") from None
        raise TraceError(f"not a valid XSpace trace ({detail}); the file is truncated, corrupt, or not an "
                         "xplane.pb", where, "re-capture or re-copy it in binary mode") from None
    except MemoryError:
        raise limits.out_of_memory(where, len(data) * limits.TYPICAL_WORK_PER_BYTE) from None
    except (RecursionError, OverflowError) as e:
        raise TraceError(f"not a valid XSpace trace ({type(e).__name__})", where) from None
    if not planes:
        raise TraceError("file holds no profiler planes (not an xplane.pb, or an empty capture)", where,
                         "check that the profiled code ran on a device while tracing")
    return planes, hostnames


def load_space(hf: HostFile, max_bytes: int | None = DEFAULT_MAX_BYTES, max_events: int | None = None,
               stats: bool = True):
    """Read and decode one host's file within the limits. A large local file is decoded from a memory map; if it
    changes size meanwhile (a trace still being written), it is read again into memory and decoded from that."""
    where = str(hf.path)
    mapped = _mapped(hf.path, max_bytes)
    if mapped is not None:
        mm, size, fd_stat = mapped
        budget = None if max_bytes is None else limits.work_budget(size)
        try:
            out = decode(mm, where, max_events=max_events, budget=budget, stats=stats)
            if not _changed(hf.path, fd_stat):
                return out
        except _wire_input_changed():
            pass
        except TraceError:
            if not _changed(hf.path, fd_stat):
                raise
        finally:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - the decoder holds no view once it returns
                pass
        data = read_bytes(hf.path, max_bytes)
        return decode(data, where, max_events=max_events,
                      budget=None if max_bytes is None else limits.work_budget(len(data)), changed=True, stats=stats)
    data = read_bytes(hf.path, max_bytes)
    return decode(data, where, max_events=max_events, budget=None if max_bytes is None else limits.work_budget(len(data)),
                  stats=stats)


def _wire_input_changed():
    from tracekit.ingest import pywire
    return pywire.InputChanged


def _changed(path, before) -> bool:
    """Whether the file at ``path`` is no longer the one (size, modification time) that was mapped."""
    try:
        now = os.stat(path)
    except OSError:
        return True
    return (now.st_size, now.st_mtime_ns, now.st_ino) != (before.st_size, before.st_mtime_ns, before.st_ino)


#: local files at least this large are decoded from a read-only memory map rather than read into memory
MMAP_MIN_BYTES = 1 << 20


def _mapped(path, max_bytes: int | None):
    """(memory map, size, stat) of a large local, uncompressed, regular trace file for the C decoder (which copies
    what it keeps), else None (then :func:`read_bytes` reads it, and says what is wrong with it if anything is).
    The pages come from the page cache: no copy of the file in the process, no fresh memory to zero. Should the
    file shrink while it is decoded, the decoder raises InputChanged instead of dying of SIGBUS."""
    import mmap
    import stat
    from tracekit.ingest import wire
    where = os.fspath(path)
    if "://" in where or where.endswith(".gz") or not wire.HAVE_BUS_GUARD:
        return None
    try:
        with _open_regular(path) as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_size < MMAP_MIN_BYTES or \
                    (max_bytes is not None and st.st_size > max_bytes):
                return None
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), st.st_size, st
    except (OSError, ValueError, TraceError):
        return None


def out_of_memory_for(source, run: str | None = None) -> TraceError:
    """:func:`out_of_memory` for an analysis of ``source`` (a path, or a loaded Trace): the need estimated from the
    size of its files (limits.TYPICAL_WORK_PER_BYTE per byte; a .gz counts 5 times its size)."""
    paths = list(getattr(source, "paths", None) or [])
    if not paths:
        try:
            paths = [str(hf.path) for hf in resolve(source, run)]
        except Exception:  # noqa: BLE001 — only for the message
            paths = []
    need = 0
    for p in paths:
        try:
            need += os.stat(p).st_size * limits.TYPICAL_WORK_PER_BYTE * (5 if str(p).endswith(".gz") else 1)
        except (OSError, TypeError, ValueError):
            pass
    if paths:
        where = ", ".join(map(str, paths)) if len(paths) <= 3 else f"{paths[0]} and {len(paths) - 1} more files"
    else:
        where = None if hasattr(source, "paths") else str(source)
    return limits.out_of_memory(where, need or None)
