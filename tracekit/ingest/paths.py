"""Find and decode traces: a file, a run folder (every host in it), or a logdir (newest run).

This stage only resolves paths and turns bytes into ``XSpace`` messages; :mod:`tracekit.ingest.frames` turns those into
DataFrames. Every failure is a :class:`~tracekit.errors.TraceError` with a one-line message.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from tracekit.errors import TraceError
from tracekit.ingest import formats

SUFFIX = ".xplane.pb"
#: Default refusal limits; both can be lifted (``max_bytes=None``) by the caller / ``--max-size``.
DEFAULT_MAX_BYTES = 8 << 30
#: A ``.gz`` that expands more than this many times its size (past ``GZ_BOMB_FLOOR`` bytes) is refused as a
#: decompression bomb while it is being decompressed (real traces compress 2-10x). ``max_bytes=None`` lifts it.
GZ_MAX_RATIO = 100
GZ_BOMB_FLOOR = 64 << 20
_GZ_CHUNK = 4 << 20


@dataclass(frozen=True)
class HostFile:
    host: str
    path: Path


def host_name(path: Path) -> str:
    name = path.name
    if name in ("perfetto_trace.json.gz", "perfetto_trace.json"):
        return "host"
    stripped = formats.strip_suffix(name)
    return (stripped or "host") if stripped != name else (path.stem or "host")


def _is_trace_file(p: Path) -> bool:
    return p.is_file() and formats.is_trace_name(p.name)


def _trace_files(d: Path) -> list[Path]:
    """The trace files of a run folder (its .xplane.pb files when it has both formats), sorted."""
    return sorted(Path(n) for n in formats.pick([str(f) for f in d.iterdir() if _is_trace_file(f)]))


def _runs(profile_dir: Path) -> list[Path]:
    return sorted((d for d in profile_dir.iterdir() if d.is_dir() and any(map(_is_trace_file, d.iterdir()))),
                  key=lambda d: (d.name, d.stat().st_mtime))


def resolve(path: str | os.PathLike, run: str | None = None) -> list[HostFile]:
    """The trace files ``path`` names: itself (a file), every ``*.xplane.pb`` in a run folder, or the newest run
    (or ``run``) under ``<logdir>/plugins/profile``. A URL with a protocol (``gs://``, ``s3://``, ``memory://``…)
    is listed through fsspec the same way; its HostFile paths are then URL strings (read by :func:`read_bytes`)."""
    url = os.fspath(path)
    if "://" in url:
        from pathlib import PurePosixPath
        try:
            import fsspec.core
        except ImportError:
            raise TraceError("cannot read a URL: fsspec is not installed", url,
                             "pip install fsspec (or tracekit[remote])") from None
        proto = url.split("://", 1)[0]
        try:
            fs, root = fsspec.core.url_to_fs(url)
        except ImportError as e:
            from fsspec.registry import known_implementations
            pkg = known_implementations.get(proto, {}).get("class", "").split(".")[0]
            raise TraceError(f"cannot reach {proto}://, install {pkg if pkg not in ('', 'fsspec') else 'its driver'}",
                             url, str(e)) from None
        except ValueError as e:
            raise TraceError(f"cannot reach {proto}:// ({e})", url,
                             "use gs://, s3://, memory://, … or a local path") from None
        root = root.rstrip("/") or root

        def traces(d):  # trace files directly in folder d, sorted
            return sorted(formats.pick([e["name"] for e in fs.ls(d, detail=True) if e.get("type") == "file"
                                        and formats.is_trace_name(e["name"].rsplit("/", 1)[-1])]))

        def hostfile(name):  # keep the URL the user typed as the prefix
            name = name.rstrip("/")
            u = url.rstrip("/") + name[len(root):] if name.startswith(root) else fs.unstrip_protocol(name)
            return HostFile(host_name(PurePosixPath(name)), u)

        try:
            if not fs.exists(root):
                raise TraceError("no such file or folder", url, "give a .xplane.pb file, a run folder or a logdir")
            if fs.isfile(root):
                if run:
                    raise TraceError("--run applies to a logdir, not a file", url)
                return [hostfile(root)]
            files = traces(root)
            if files and not run:
                return [hostfile(f) for f in files]
            for pdir in (f"{root}/plugins/profile", f"{root}/profile", root):
                if not fs.isdir(pdir):
                    continue
                runs = sorted((e["name"].rstrip("/") for e in fs.ls(pdir, detail=True) if e.get("type") == "directory"),
                              key=lambda d: d.rsplit("/", 1)[-1])
                runs = [d for d in runs if traces(d)]
                if not runs:
                    continue
                if run:
                    chosen = [d for d in runs if d.rsplit("/", 1)[-1] == run]
                    if not chosen:
                        names = ", ".join(d.rsplit("/", 1)[-1] for d in runs[-5:])
                        raise TraceError(f"no run named {run!r}", hostfile(pdir).path, f"runs here include: {names}")
                    return [hostfile(f) for f in traces(chosen[0])]
                return [hostfile(f) for f in traces(runs[-1])]
        except TraceError:
            raise
        except Exception as e:  # noqa: BLE001 — any storage failure (network, credentials) is one line
            first = (str(e).splitlines() or [""])[0]
            raise TraceError(f"cannot reach {proto}:// ({type(e).__name__}: {first})", url,
                             "check the URL and your credentials") from None
        raise TraceError("no *.xplane.pb or *.trace.json.gz trace found", url,
                         "give a .xplane.pb file, a run folder, or a logdir containing plugins/profile/<run>/")
    p = Path(path)
    if not p.exists():
        raise TraceError("no such file or folder", str(p), "give a .xplane.pb file, a run folder or a logdir")
    if p.is_file():
        if run:
            raise TraceError("--run applies to a logdir, not a file", str(p))
        return [HostFile(host_name(p), p)]
    try:
        files = _trace_files(p)
    except PermissionError:
        raise TraceError("folder is not readable", str(p), "check its permissions") from None
    if files and not run:
        return [HostFile(host_name(f), f) for f in files]
    for profile_dir in (p / "plugins" / "profile", p / "profile", p):
        if profile_dir.is_dir():
            runs = _runs(profile_dir)
            if not runs:
                continue
            if run:
                chosen = [d for d in runs if d.name == run]
                if not chosen:
                    names = ", ".join(d.name for d in runs[-5:])
                    raise TraceError(f"no run named {run!r}", str(profile_dir), f"runs here include: {names}")
                d = chosen[0]
            else:
                d = runs[-1]
            return [HostFile(host_name(f), f) for f in _trace_files(d)]
    raise TraceError("no *.xplane.pb or *.trace.json.gz trace found", str(p),
                     "give a .xplane.pb file, a run folder, or a logdir containing plugins/profile/<run>/")


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
        else:
            size = Path(path).stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise TraceError(f"file is {size_text(size)}, over the {size_text(max_bytes)} limit", where,
                             "raise the limit with --max-size MiB (or max_bytes=None)")
        with (fs.open(rp, "rb") if remote else open(path, "rb")) as f:
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


def size_text(n: int) -> str:
    """A byte count for a message: '1.5 GiB', '12 bytes'."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


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


def decode(data: bytes, where: str):
    """Decode serialized ``XSpace`` bytes into columnar planes (:mod:`tracekit.ingest.wire`), or raise TraceError saying
    why they are not a trace. Returns (planes, hostnames)."""
    from tracekit.ingest import wire
    if not data:
        raise TraceError("file is empty", where, "re-capture the profile; the writer may have been interrupted")
    try:
        planes, hostnames = wire.read_space(data)
    except (ValueError, DecodeError) as e:
        what = formats.foreign(bytes(data[:formats.HEAD_BYTES]), where)
        if what is not None:
            raise TraceError(what[0], where, what[1]) from None
        detail = str(e).split("\n")[0] or "bad protobuf wire data"
        raise TraceError(f"not a valid XSpace trace ({detail}); the file is truncated, corrupt, or not an "
                         "xplane.pb", where, "re-capture or re-copy it in binary mode") from None
    except (RecursionError, MemoryError, OverflowError) as e:
        raise TraceError(f"not a valid XSpace trace ({type(e).__name__})", where) from None
    if not planes:
        raise TraceError("file holds no profiler planes (not an xplane.pb, or an empty capture)", where,
                         "check that the profiled code ran on a device while tracing")
    return planes, hostnames


def load_space(hf: HostFile, max_bytes: int | None = DEFAULT_MAX_BYTES):
    mapped = _mapped(hf.path, max_bytes)
    if mapped is not None:
        try:
            return decode(mapped, str(hf.path))
        finally:
            try:
                mapped.close()
            except BufferError:  # pragma: no cover - the decoder holds no view once it returns
                pass
    return decode(read_bytes(hf.path, max_bytes), str(hf.path))


#: local files at least this large are decoded from a read-only memory map rather than read into memory
MMAP_MIN_BYTES = 1 << 20


def _mapped(path, max_bytes: int | None):
    """A read-only memory map of a large local, uncompressed trace for the C decoder (which copies what it keeps),
    else None (then :func:`read_bytes` reads it, and says what is wrong with it if anything is). The pages come
    from the page cache: no copy of the file in the process, no fresh memory to zero."""
    import mmap
    from tracekit.ingest import wire
    where = os.fspath(path)
    if "://" in where or where.endswith(".gz") or not wire.HAVE_C:
        return None
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < MMAP_MIN_BYTES or (max_bytes is not None and size > max_bytes):
                return None
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
