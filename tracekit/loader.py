"""Find and decode traces: a file, a run folder (every host in it), or a logdir (newest run).

This stage only resolves paths and turns bytes into ``XSpace`` messages; :mod:`tracekit.frames` turns those into
DataFrames. Every failure is a :class:`~tracekit.errors.TraceError` with a one-line message.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path

from google.protobuf.message import DecodeError

from tracekit.errors import TraceError
from tracekit.proto import xplane_pb2

SUFFIX = ".xplane.pb"
#: Default refusal limits; both can be lifted (``max_bytes=None``) by the caller / ``--max-size``.
DEFAULT_MAX_BYTES = 8 << 30
GZ_MAX_RATIO = 50  # a .gz may expand at most this many times its size (bounded decompression)


@dataclass(frozen=True)
class HostFile:
    host: str
    path: Path


def host_name(path: Path) -> str:
    name = path.name
    for suf in (SUFFIX + ".gz", SUFFIX, ".pb.gz", ".pb"):
        if name.endswith(suf):
            return name[: -len(suf)] or "host"
    return path.stem or "host"


def _is_trace_file(p: Path) -> bool:
    return p.is_file() and (p.name.endswith(SUFFIX) or p.name.endswith(SUFFIX + ".gz"))


def _runs(profile_dir: Path) -> list[Path]:
    return sorted((d for d in profile_dir.iterdir() if d.is_dir() and any(map(_is_trace_file, d.iterdir()))),
                  key=lambda d: (d.name, d.stat().st_mtime))


def resolve(path: str | os.PathLike, run: str | None = None) -> list[HostFile]:
    """The trace files ``path`` names: itself (a file), every ``*.xplane.pb`` in a run folder, or the newest run
    (or ``run``) under ``<logdir>/plugins/profile``."""
    p = Path(path)
    if not p.exists():
        raise TraceError("no such file or folder", str(p), "give a .xplane.pb file, a run folder or a logdir")
    if p.is_file():
        if run:
            raise TraceError("--run applies to a logdir, not a file", str(p))
        return [HostFile(host_name(p), p)]
    try:
        files = sorted(f for f in p.iterdir() if _is_trace_file(f))
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
            return [HostFile(host_name(f), f) for f in sorted(f for f in d.iterdir() if _is_trace_file(f))]
    raise TraceError("no *.xplane.pb trace found", str(p),
                     "give a .xplane.pb file, a run folder, or a logdir containing plugins/profile/<run>/")


def read_bytes(path: Path, max_bytes: int | None = DEFAULT_MAX_BYTES) -> bytes:
    try:
        size = path.stat().st_size
        if max_bytes is not None and size > max_bytes:
            raise TraceError(f"file is {size / 2**30:.1f} GiB, over the {max_bytes / 2**30:.1f} GiB limit",
                             str(path), "raise the limit with --max-size (or max_bytes=None)")
        with open(path, "rb") as f:
            data = f.read()
    except PermissionError:
        raise TraceError("file is not readable", str(path), "check its permissions") from None
    except IsADirectoryError:
        raise TraceError("is a folder, not a trace file", str(path)) from None
    except OSError as e:
        raise TraceError(f"cannot read file ({e.strerror})", str(path)) from None
    if path.name.endswith(".gz"):
        limit = None if max_bytes is None else max(max_bytes, len(data) * GZ_MAX_RATIO)
        try:
            with gzip.GzipFile(fileobj=__import__("io").BytesIO(data)) as g:
                data = g.read(limit + 1 if limit is not None else -1)
        except (OSError, EOFError) as e:
            raise TraceError(f"not a valid gzip file ({e})", str(path)) from None
        if limit is not None and len(data) > limit:
            raise TraceError("decompressed trace is over the size limit", str(path),
                             "raise the limit with --max-size (or max_bytes=None)")
    return data


def decode(data: bytes, where: str) -> xplane_pb2.XSpace:
    """Parse serialized ``XSpace`` bytes, or raise TraceError saying why they are not a trace."""
    if not data:
        raise TraceError("file is empty", where, "re-capture the profile; the writer may have been interrupted")
    space = xplane_pb2.XSpace()
    try:
        space.ParseFromString(data)
    except DecodeError as e:
        detail = str(e).split("\n")[0] or "bad protobuf wire data"
        raise TraceError(f"not a valid XSpace trace ({detail}); the file is truncated, corrupt, or not an "
                         "xplane.pb", where, "re-capture or re-copy it in binary mode") from None
    except (ValueError, RecursionError, MemoryError) as e:
        raise TraceError(f"not a valid XSpace trace ({type(e).__name__})", where) from None
    if not space.planes:
        raise TraceError("file holds no profiler planes (not an xplane.pb, or an empty capture)", where,
                         "check that the profiled code ran on a device while tracing")
    return space


def load_space(hf: HostFile, max_bytes: int | None = DEFAULT_MAX_BYTES) -> xplane_pb2.XSpace:
    return decode(read_bytes(hf.path, max_bytes), str(hf.path))
