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
* **Tokens.** A string or number over :data:`MAX_TOKEN` bytes as written refuses the file (exit 2) before the
  parser reaches its end: yajl's lexer re-reads a token spanning its input chunks from the start, so one long
  token costs the square of its length. :class:`TokenScan` follows the tokens at each read's ends, vectorized.
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

import numpy as np

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
#: the longest string or number token (in bytes, as written) the parser is given: yajl re-reads a token that
#: spans its input chunks from the start at each chunk, so a token costs the square of its length over the chunk
#: size (a 16 MB string took 34 s); a longer one refuses the file before the parser reaches it
MAX_TOKEN = 4 << 20
#: bytes the parser is given at a time (with MAX_TOKEN: at most 4 chunks a token)
CHUNK = 1 << 20
#: a finite number outside +-2**63 is not a usable count of anything
_LIMIT = float(1 << 63)
#: bytes that may be part of a number token
_NUMBER_BYTES = np.zeros(256, bool)
_NUMBER_BYTES[np.frombuffer(b"0123456789+-.eE", np.uint8)] = True


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
        self.tokens = TokenScan(where)

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
        self.tokens.scan(b, self.total - len(b))
        return b

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()
        if self.raw is not self.inner:
            self.raw.close()


class TokenScan:
    """The length of the string and number tokens in the stream, checked chunk by chunk (vectorized: a quote is
    a string's end unless an odd run of backslashes precedes it), carrying what is open across chunks."""

    def __init__(self, where: str):
        self.where = where
        self.in_str = False   # a string is open at the end of the bytes so far
        self.str_len = 0      # ... this many bytes long so far
        self.num_len = 0      # a run of number bytes outside strings open at the end, this long
        self.bs_run = 0       # backslashes at the end of the bytes so far

    def scan(self, b: bytes, offset: int) -> None:
        for i in range(0, len(b), MAX_TOKEN):  # a token within a piece this long is short enough
            self._piece(np.frombuffer(b, np.uint8, min(MAX_TOKEN, len(b) - i), i), offset + i)

    def _piece(self, a: np.ndarray, offset: int) -> None:
        """Only the tokens open at either end of a piece may be too long: those are the ones followed."""
        n = len(a)
        quote = a == 34
        if self.bs_run or (a == 92).any():  # a quote after an odd run of backslashes is escaped
            q = np.flatnonzero(quote)
            after = q[(q > 0) & (a[q - 1] == 92)] if len(q) else q
            plain = np.flatnonzero(a != 92)
            if len(after):
                before = np.searchsorted(plain, after) - 1  # the last byte before the quote that is no backslash
                run = np.where(before >= 0, after - 1 - plain[np.maximum(before, 0)], after + self.bs_run)
                quote[after[(run & 1) == 1]] = False
            if self.bs_run and self.bs_run & 1 and quote[0]:
                quote[0] = False
            tail = n - 1 - int(plain[-1]) if len(plain) else n
            self.bs_run = tail + (self.bs_run if not len(plain) else 0)
        count = int(np.count_nonzero(quote))
        if not count:
            if self.in_str:
                self.str_len += n
                self._check(self.str_len, offset + n, "string")
        else:
            first, last_q = int(quote.argmax()), n - 1 - int(quote[::-1].argmax())
            if self.in_str:
                self._check(self.str_len + first, offset + first, "string")
                count -= 1
            self.in_str = count % 2 == 1
            self.str_len = n - last_q if self.in_str else 0
        # numbers: runs of number bytes, in strings too (a run in a string is no longer than the string)
        num = (a - 48 < 10) | (a == 43) | (a == 45) | (a == 46) | (a == 101) | (a == 69)
        if num.all():
            self.num_len += n
            self._check(self.num_len, offset, "number")
        else:
            other = ~num
            self._check(self.num_len + int(other.argmax()), offset, "number")
            self.num_len = int(other[::-1].argmax())

    def _check(self, length: int, at: int, what: str) -> None:
        if length > MAX_TOKEN:
            raise TraceError(f"a {what} of more than {paths.size_text(MAX_TOKEN)} near byte {at:,} (no trace "
                             "writes one: the file is corrupt or not a trace)", self.where,
                             "re-export it; tracekit reads the .trace.json.gz that jax.profiler writes")


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
    it = ijson.basic_parse(f, use_float=True, buf_size=CHUNK)
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


def is_id(v) -> bool:
    """What a pid or tid may be: an integer, a string, or null (as in an event without one)."""
    return v is None or type(v) is int or (type(v) is str and len(v) <= 256)


def name_text(v) -> str | None:
    """A name: a string the reader keeps, a number as its text, "" for null; None for anything else."""
    if v is None:
        return ""
    if type(v) in (int, float):
        return str(v)
    return text(v)
