"""Reading trace-viewer JSON as a bounded stream: the (decompressed) bytes under the size limits, and the trace
events one at a time, built from ijson's token stream (``basic_parse``, its C backend) with nothing nested.

Bounds, checked as the tokens arrive, before memory or time is spent on a value:

* **Nesting.** Only the top level, the event list, each event and its ``args`` are built. A list or map anywhere
  else (a nested arg value, a list as an event's ``pid``, a list inside the event list, a top-level key other than
  ``traceEvents``) is skipped unread, counting its depth and nothing more, and stands as :data:`SKIPPED`: a nesting
  of any depth costs the parser one byte a level and the reader nothing. (ijson's ``items`` builds a path string
  per token, so nesting there costs the square of the depth: 30,000 levels took 2 GB.)
* **Size.** The file, the decompressed stream and its ratio to the compressed size are limited as for an XSpace
  (:mod:`tracekit.ingest.paths`); damaged and truncated deflate streams are one line.
* **Values.** :data:`MAX_STRING` characters for a string the reader keeps, :data:`MAX_ARGS` args an event,
  :data:`MAX_ARG_NAMES` distinct arg names, numbers written as strings at most :data:`MAX_NUMBER_TEXT` characters:
  :func:`text` and :func:`number` say which values pass. The JSON parser itself refuses integers past 64 bits,
  overflowing exponents and NaN (not JSON), and turns lone surrogate escapes into ``?``.
"""
from __future__ import annotations

import gzip
import math
import os
import zlib

from tracekit.errors import TraceError
from tracekit.ingest import formats, paths

#: the longest string (name, HLO text, arg value) the reader keeps; a longer one is ignored (and counted)
MAX_STRING = 1 << 20
#: args read per event; more are ignored (and counted)
MAX_ARGS = 1024
#: distinct arg names over the whole file; args of other names are ignored (and counted)
MAX_ARG_NAMES = 4096
#: the longest number written as a string ("123", "1.5e9") that is read as a number
MAX_NUMBER_TEXT = 40
#: a finite number outside +-2**63 is not a usable count of anything
_LIMIT = float(1 << 63)


class Skipped:
    """A list or map the stream skipped unread (where the reader builds none)."""
    __slots__ = ()

    def __repr__(self) -> str:
        return "SKIPPED"


SKIPPED = Skipped()
_STARTS = frozenset(("start_map", "start_array"))
_ENDS = frozenset(("end_map", "end_array"))


# ---- bytes ----------------------------------------------------------------------------------------------------

def head(path, max_bytes) -> bytes:
    """The first ``formats.HEAD_BYTES`` decompressed bytes (b"" when they cannot be read: :func:`open_bounded`
    then says why)."""
    try:
        with open_bounded(path, max_bytes) as f:
            return f.read(formats.HEAD_BYTES)
    except TraceError:
        raise
    except (OSError, EOFError, ValueError, zlib.error):
        return b""


class Bounded:
    """A binary reader over the (decompressed) stream that refuses more than ``max_bytes`` bytes, or more than
    ``paths.GZ_MAX_RATIO`` times the compressed size past ``paths.GZ_BOMB_FLOOR`` (the protobuf reader's limits),
    and turns every decompression error into a TraceError."""

    def __init__(self, raw, inner, where: str, max_bytes: int | None, compressed: int | None):
        self.raw, self.inner, self.where, self.max_bytes = raw, inner, where, max_bytes
        self.bomb = None if max_bytes is None or compressed is None else \
            max(compressed * paths.GZ_MAX_RATIO, paths.GZ_BOMB_FLOOR)
        self.total = 0

    def read(self, n: int = -1) -> bytes:
        try:
            b = self.inner.read(n)
        except (EOFError, zlib.error, gzip.BadGzipFile) as e:
            raise TraceError(f"cannot decompress the trace after {self.total:,} bytes ({type(e).__name__}: "
                             f"{str(e)[:120]}); the file is truncated or corrupt", self.where,
                             "re-capture or re-copy it in binary mode") from None
        except OSError as e:
            raise TraceError(f"cannot read file ({e.strerror or type(e).__name__})", self.where) from None
        self.total += len(b)
        if self.max_bytes is not None and self.total > self.max_bytes:
            raise TraceError(f"decompressed trace is over the {paths.size_text(self.max_bytes)} limit", self.where,
                             "raise the limit with --max-size MiB (or max_bytes=None)")
        if self.bomb is not None and self.total > self.bomb:
            raise TraceError(f"gzip file expands more than {paths.GZ_MAX_RATIO}x its size (a decompression bomb?)",
                             self.where, "raise --max-size if it is a real trace")
        return b

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()
        if self.raw is not self.inner:
            self.raw.close()


def open_bounded(path, max_bytes: int | None) -> Bounded:
    where = os.fspath(path)
    if "://" in where:
        import fsspec.core
        fs, rp = fsspec.core.url_to_fs(where)
        size, raw = fs.size(rp), fs.open(rp, "rb")
    else:
        size, raw = os.stat(where).st_size, open(where, "rb")
    if max_bytes is not None and size > max_bytes:
        raw.close()
        raise TraceError(f"file is {paths.size_text(size)}, over the {paths.size_text(max_bytes)} limit", where,
                         "raise the limit with --max-size MiB (or max_bytes=None)")
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return Bounded(raw, gzip.GzipFile(fileobj=raw), where, max_bytes, size)
    return Bounded(raw, raw, where, max_bytes, None)


# ---- tokens -> events -----------------------------------------------------------------------------------------

class Counts:
    """What the stream left out: items of the event list that are not events, args past the limits."""

    def __init__(self):
        self.not_events = 0
        self.many_args = 0   # events with more than MAX_ARGS args
        self.arg_names: set = set()
        self.new_names = 0   # args whose name came after MAX_ARG_NAMES others


def events(f, where: str, counts: Counts):
    """The events (maps) of a trace-viewer document read from ``f``: its top level is a list of events or a map
    whose ``traceEvents`` is one. Each event is a dict of its keys' scalars (:data:`SKIPPED` for a list or map),
    its ``args`` (when a map) a dict likewise."""
    try:
        import ijson
    except ImportError:  # pragma: no cover - a dependency; kept for a broken install
        raise TraceError("cannot read trace-viewer JSON: the ijson package is missing", where,
                         "pip install ijson") from None
    it = ijson.basic_parse(f, use_float=True, buf_size=1 << 16)
    nxt = it.__next__
    try:
        ev, val = nxt()
    except StopIteration:
        return
    if ev == "start_array":
        yield from _items(nxt, counts)
    elif ev == "start_map":
        for ev, val in it:
            if ev == "end_map":
                break
            ev2, _ = nxt()
            if val == "traceEvents" and ev2 == "start_array":
                yield from _items(nxt, counts)
            elif ev2 in _STARTS:
                _skip(nxt)
    else:
        kind = {"string": "a string", "number": "a number", "boolean": "a boolean"}.get(ev, "null")
        raise TraceError(f"the document is {kind}, not a trace (a map with traceEvents, or a list of events)",
                         where, "tracekit reads the .xplane.pb or the .trace.json.gz that jax.profiler writes")
    for _ in it:  # the rest: the parser checks it is one JSON document
        pass


def _skip(nxt) -> None:
    """Consume a list or map whose start was just read, without building it."""
    depth = 1
    while depth:
        ev = nxt()[0]
        if ev in _STARTS:
            depth += 1
        elif ev in _ENDS:
            depth -= 1


def _items(nxt, counts: Counts):
    while True:
        ev, _ = nxt()
        if ev == "start_map":
            yield _event(nxt, counts)
        elif ev == "end_array":
            return
        else:
            counts.not_events += 1
            if ev == "start_array":
                _skip(nxt)


def _event(nxt, counts: Counts) -> dict:
    obj = {}
    while True:
        ev, key = nxt()
        if ev == "end_map":
            return obj
        ev, val = nxt()
        if ev in _STARTS:
            if key == "args" and ev == "start_map":
                val = _args(nxt, counts)
            else:
                _skip(nxt)
                val = SKIPPED
        obj[key] = val


def _args(nxt, counts: Counts) -> dict:
    obj: dict = {}
    names = counts.arg_names
    many = False
    while True:
        ev, key = nxt()
        if ev == "end_map":
            if many:
                counts.many_args += 1
            return obj
        ev, val = nxt()
        if ev in _STARTS:
            _skip(nxt)
            val = SKIPPED
        if len(obj) >= MAX_ARGS:
            many = True
            continue
        if key not in names:
            if len(names) >= MAX_ARG_NAMES or len(key) > 256:
                counts.new_names += 1
                continue
            names.add(key)
        obj[key] = val


# ---- values ---------------------------------------------------------------------------------------------------

def text(v) -> str | None:
    """``v`` if it is a string the reader keeps (at most MAX_STRING characters; a lone surrogate, which only a
    parser other than yajl's would leave, becomes U+FFFD), else None."""
    if not isinstance(v, str) or len(v) > MAX_STRING:
        return None
    if not v.isascii():
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            v = v.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return v


def number(v) -> int | float | None:
    """``v`` as a usable number (an int within 64 bits, or a finite float within +-2**63; a bool as 0/1; a string
    of at most MAX_NUMBER_TEXT characters that reads as one), else None."""
    if isinstance(v, str):
        if len(v) > MAX_NUMBER_TEXT:
            return None
        try:
            v = int(v)
        except ValueError:
            try:
                v = float(v)
            except ValueError:
                return None
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 64) else None
    if isinstance(v, float):
        return v if math.isfinite(v) and -_LIMIT <= v <= _LIMIT else None
    return None
