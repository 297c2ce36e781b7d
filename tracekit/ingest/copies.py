"""The runtime's own copies and fills on a GPU stream (memcpy/memset activity the CUDA or ROCm runtime records, and
its copy/fill kernels), with the size and direction the trace gives them: their category (one of
:data:`CATEGORIES`) and their size in bytes (``trace_bytes``; NaN when the trace does not say), which
:mod:`tracekit.model.runtime_copies` prices.

The stat formats are XLA's profilers' (the emitting source):

* CUDA, ``xla/backends/profiler/gpu/cupti_collector.cc`` (openxla/xla @ 0c24afff): ``memcpy_details`` =
  ``kind_src:<memory kind> kind_dst:<memory kind> size:<bytes> dest:<device> async:<0|1>`` on ``MemcpyH2D`` /
  ``MemcpyD2H`` / ``MemcpyD2D`` / ``MemcpyP2P`` / ``MemcpyOther`` events (older writers: ``size:%u dest:%u
  async:%u``); ``memset_details`` = ``kind:<memory kind> num_bytes:<bytes> async:<0|1>``.
* ROCm, ``xla/backends/profiler/gpu/rocm_collector.cc`` (openxla/xla @ 925b9c2d): ``memcpy_details`` =
  ``kind:Unknown size:<bytes> dest:<device> async:<0|1>`` (the memory kinds are not discovered), ``memset_details``
  = ``kind:Unknown num_bytes:<bytes> async:<0|1>``; the stream's line is named after the event types it holds,
  ``Stream #N(MemcpyOther)``, and an event without a name of its own is named after its type.

Direction, first that applies: the event's or the line's type (``MemcpyH2D``, ``HtoD``, ...: one memcpy type in
the line's parentheses), the memory kinds (``device`` to ``device``: device to device, or peer to peer when
``dest`` is another device; ``pinned``/``pageable`` on one side: to or from the host), and for a ``MemcpyOther``
whose ``dest`` is this device, "to this device" (the source is not in the trace). A size of 0 is the writer's
"not known" (the shared MI300X traces write ``size:0`` on every copy), never a copy of nothing.
"""
from __future__ import annotations

import re

import numpy as np

from tracekit.ingest.events import Cat, stat_strings

H2D, D2H, D2D, P2P, TO_DEVICE, UNKNOWN, MEMSET = ("memcpy H2D", "memcpy D2H", "memcpy D2D", "memcpy P2P",
                                                  "memcpy to device", "memcpy", "memset")
#: the categories of runtime copies and fills, as the ops frame names them
CATEGORIES = (H2D, D2H, D2D, P2P, TO_DEVICE, UNKNOWN, MEMSET)
_BY_NAME = ((re.compile(r"h2d|htod|host.?to.?device", re.I), H2D), (re.compile(r"d2h|dtoh|device.?to.?host", re.I), D2H),
            (re.compile(r"d2d|dtod|device.?to.?device", re.I), D2D), (re.compile(r"p2p|ptop|peer", re.I), P2P),
            (re.compile(r"memset|fill", re.I), MEMSET))
_COPY_KERNEL = re.compile(r"memcpy|memset|copybuffer|fillbuffer", re.I)
_FIELD = re.compile(r"(\w+):(\S*)")
_HOST_KINDS = ("pinned", "pageable", "host")


def parse(details: str) -> dict:
    """``{'size': 4, 'dest': 1, 'kind_src': 'pinned', ...}`` from a details string (numbers as ints)."""
    out: dict = {}
    for k, v in _FIELD.findall(details or ""):
        out[k] = int(v) if v.isdigit() else v.lower()
    return out


def _by_name(text: str) -> str | None:
    for pat, cat in _BY_NAME:
        if pat.search(text):
            return cat
    return None


def _line_type(line_name: str) -> str | None:
    """The memcpy/memset type of a stream line that holds only one (``Stream #5(MemcpyH2D)``)."""
    m = re.search(r"\(([^)]*)\)\s*$", line_name)
    kinds = {_by_name(t) or (UNKNOWN if t.strip().lower() == "memcpyother" else None)
             for t in (m.group(1).split(",") if m else [])}
    kinds.discard(None)
    return kinds.pop() if len(kinds) == 1 else None


def direction(event_name: str, line_name: str, fields: dict, ordinal: int | None) -> str:
    """The category of one runtime copy (module doc)."""
    if "num_bytes" in fields and "size" not in fields:
        return MEMSET
    cat = _by_name(event_name)
    if cat in (None, UNKNOWN):
        src, dst = fields.get("kind_src"), fields.get("kind_dst")
        if src == "device" and dst == "device":
            cat = D2D if fields.get("dest") in (None, ordinal) else P2P
        elif src in _HOST_KINDS and dst == "device":
            cat = H2D
        elif src == "device" and dst in _HOST_KINDS:
            cat = D2H
    if cat is None:
        cat = _line_type(line_name)
    if cat in (None, UNKNOWN) and ordinal is not None and fields.get("dest") == ordinal:
        cat = TO_DEVICE
    return cat or UNKNOWN


def columns(line, names: dict, kernel: Cat, is_copy: np.ndarray, device: str, odd=None,
            runtime: np.ndarray | None = None) -> dict:
    """``trace_bytes`` (the size of each runtime copy or fill, NaN elsewhere and where unknown) and ``category``
    (:data:`CATEGORIES` for the copies, empty elsewhere) of a GPU stream line's events; ``is_copy``: the events
    the loader takes for memcpy/memset activity (copy kernels are found here by name); ``runtime``: the events
    that are the runtime's (no HLO op: an XLA op's copy kernel keeps its HLO's category and cost)."""
    n = line.n_events
    ids = {v: k for k, v in names.items()}
    has_c, cdet = stat_strings(line, ids.get("memcpy_details", -1), names, odd, "memcpy_details")
    has_s, sdet = stat_strings(line, ids.get("memset_details", -1), names, odd, "memset_details")
    by_kernel = np.array([bool(_COPY_KERNEL.search(str(k))) for k in kernel.categories] + [False], bool)
    copy = is_copy | has_c | has_s | (by_kernel[kernel.codes] if n else np.zeros(0, bool))
    if runtime is not None:
        copy &= runtime
    if not copy.any():  # (most lines: one value for the chunk, spread when the frame is made)
        return {"trace_bytes": np.nan, "category": None}
    dev = device.partition(":")[2]
    ordinal = int(dev) if dev.isdigit() else None
    idx = np.flatnonzero(copy)
    # one parse per distinct (kernel, details) pair: details as +code (memcpy), -code-2 (memset), -1 (none)
    det = np.where(has_c[idx], cdet.codes[idx], np.where(has_s[idx], -sdet.codes[idx] - 2, -1))
    pairs, inv = np.unique(np.stack([kernel.codes[idx].astype(np.int64), det.astype(np.int64)]), axis=1,
                           return_inverse=True)
    found = []
    for k, d in pairs.T:
        text = cdet.categories[d] if d >= 0 else sdet.categories[-d - 2] if d <= -2 else ""
        f = parse(str(text))
        b = f.get("size", f.get("num_bytes"))
        found.append((direction(str(kernel.categories[k]) if k >= 0 else "", line.name, f, ordinal),
                      float(b) if isinstance(b, int) and b > 0 else np.nan))
    size = np.full(n, np.nan)
    size[idx] = np.array([b for _, b in found], float)[inv.ravel()]
    labels = [""] + sorted({c for c, _ in found})
    codes = np.zeros(n, np.int32)
    codes[idx] = np.array([labels.index(c) for c, _ in found], np.int32)[inv.ravel()]
    return {"trace_bytes": size, "category": Cat(codes, labels)}
