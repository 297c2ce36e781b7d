"""Which kind of trace file a path holds: an XSpace (``.xplane.pb``), xprof's trace-viewer JSON, or a format
tracekit does not read (then one line says what it is and what to read instead)."""
from __future__ import annotations

import os

XSPACE_SUFFIX = ".xplane.pb"
#: trace-viewer JSON names: ``<host>.trace.json.gz`` (TensorBoard's profile plugin, jax.profiler) and the
#: ``perfetto_trace.json.gz`` that ``jax.profiler.start_trace(create_perfetto_trace=True)`` writes
JSON_SUFFIXES = (".trace.json.gz", ".trace.json", "perfetto_trace.json.gz", "perfetto_trace.json")
#: bytes (decompressed) looked at to tell the formats apart
HEAD_BYTES = 1 << 16

_READ = "tracekit reads the .xplane.pb (or its .trace.json.gz trace-viewer export) that jax.profiler writes"
_KINETO = ('"schemaVersion"', '"deviceProperties"', '"distributedInfo"', '"cpu_op"', '"cuda_runtime"',
           '"python_function"', '"ac2g"', '"gpu_memcpy"', "PyTorch Profiler", '"Trace iteration"')


def is_xspace_name(name: str) -> bool:
    return name.endswith((XSPACE_SUFFIX, XSPACE_SUFFIX + ".gz"))


def is_json_name(name: str) -> bool:
    return name.endswith((".json", ".json.gz"))


def is_trace_name(name: str) -> bool:
    return is_xspace_name(name) or name.endswith(JSON_SUFFIXES)


def strip_suffix(name: str) -> str:
    """'host1' from 'host1.xplane.pb', 'host1.trace.json.gz', ...; '' when nothing is left."""
    for suf in (XSPACE_SUFFIX + ".gz", XSPACE_SUFFIX, ".trace.json.gz", ".trace.json", ".pb.gz", ".pb",
                ".json.gz", ".json"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def pick(names: list[str]) -> list[str]:
    """The trace files of one run folder: its ``.xplane.pb`` files when it has any (a folder holding both
    formats), else its ``*.trace.json(.gz)`` files, else its ``perfetto_trace.json(.gz)``."""
    xs = [n for n in names if is_xspace_name(os.path.basename(n))]
    if xs:
        return xs
    js = [n for n in names if os.path.basename(n).endswith((".trace.json.gz", ".trace.json"))]
    if js:
        return js
    return [n for n in names if os.path.basename(n) in ("perfetto_trace.json.gz", "perfetto_trace.json")]


def foreign(head: bytes, name: str) -> tuple[str, str] | None:
    """(what the file is, what to read instead) when ``head`` (its first bytes, decompressed) or ``name`` shows a
    format other than XSpace or xprof's trace-viewer JSON; None when it may be one of those."""
    base = os.path.basename(name)
    if "tfevents" in base:
        return ("a TensorBoard event file (summaries), not a profile",
                "the profile is the plugins/profile/<run>/*.xplane.pb of the same logdir")
    if base.endswith((".nsys-rep", ".qdrep", ".sqlite")):
        return "an Nsight Systems report, not a JAX/XLA profile", _READ
    if base.endswith((".pftrace", ".perfetto-trace")):
        return "a Perfetto protobuf trace, not a JAX/XLA profile", _READ
    text = bytes(head[:HEAD_BYTES]).lstrip().decode("utf-8", "replace")
    if not text.startswith(("{", "[")):
        return None
    if any(k in text for k in _KINETO):
        return ("a PyTorch profiler (Kineto) trace, not a JAX/XLA profile",
                _READ + "; for PyTorch traces use Holistic Trace Analysis or ui.perfetto.dev")
    if any(k in text for k in ('"/device:', '"/host:', " /device:", " /host:")):
        return None
    if "traceEvents" in text or text.startswith("["):
        if '"process_name"' in text:  # process names come first in a JSON export, and none is an XPlane's
            return "a Chrome trace-event JSON from another tool (no XLA device or host processes)", _READ
        return None
    if len(head) < HEAD_BYTES:  # the whole file was seen
        return "a JSON file that is not a trace (no traceEvents)", _READ
    return None


def looks_json(name: str) -> bool:
    """A local file whose name says nothing of its format (``trace.gz``) that starts like JSON (gzipped or not)."""
    if "://" in name or name.endswith((".pb", ".pb.gz")):
        return False
    try:
        import gzip
        with open(name, "rb") as f:
            head = f.read(64)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(name, "rb") as g:
                head = g.read(64)
    except (OSError, EOFError):
        return False
    return head.lstrip()[:1] in (b"{", b"[")
