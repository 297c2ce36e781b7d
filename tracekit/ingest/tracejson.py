"""Trace-viewer JSON (``*.trace.json``, ``*.trace.json.gz``, ``perfetto_trace.json.gz``) -> the same columnar
planes the ``.xplane.pb`` decoder gives (:class:`tracekit.ingest.wire.PlaneData`), so every later stage is the one
that reads XSpace.

The format is what xprof / TensorBoard's profile plugin and ``jax.profiler`` write: Chrome trace events whose
``process_name`` is an XPlane name (``/device:TPU:0``, ``/host:CPU``; the streaming trace viewer prefixes the host,
``myhost /device:TPU:0``) and whose ``thread_name`` is an XLine name (``XLA Ops``, ``XLA Modules``, ``Steps``,
``Stream #3(Kernel)``, a host thread). Complete events (``ph: X``) become line events: ``ts``/``dur`` in µs, the
``args`` as event stats (numbers written as strings are read as numbers). For device ops the args carry what the
XSpace keeps on the op's metadata: ``long_name`` (the HLO text; becomes the metadata name as in XSpace),
``hlo_category``, ``tf_op``, ``source``; and its costs ``model_flops`` / ``bytes_accessed`` and its device clock
``device_duration_ps``. An op's program is the ``XLA Modules`` event (``jit_f(<program id>)``) around it. The HLO
texts of each program become a small HLO module (:mod:`tracekit.ingest.hlotext`) in a ``/host:metadata`` plane.

What the JSON cannot tell, and the loader warns about: device properties (the chip only where a process name
carries it, :mod:`tracekit.ingest.jsondevice`; else ``--chip``), the HLO proto, executed FLOPs (``model_flops``
only), events the exporter dropped (ops starting at the same instant as another; streaming: no costs at all).

The document is parsed as a stream (:mod:`tracekit.ingest.jsonstream`: one event at a time, nothing nested built,
bounded memory) under the same limits as the protobuf reader: file size, decompressed size and ratio, and an event
count checked while reading. A document that is not a trace (its top level a string, a number) is refused; within a
trace, each field of the wrong type is ignored and counted, one warning for the file: ``args`` that are not a map
(the event is read without them), a ``name`` that is not a string or number, an arg that is not a usable number
where one is meant (``bytes_accessed``...) or a string over ``jsonstream.MAX_STRING``; an event whose ``ph``,
``pid``, ``tid``, ``ts`` or ``dur`` is of the wrong type (a list, a map; ``ts``/``dur`` not a finite number) is not
read; a metadata event whose ``args.name`` is not a string names nothing.
"""
from __future__ import annotations

import os
from array import array

import numpy as np

from tracekit.errors import TraceError
from tracekit.options import DEFAULT_MAX_BYTES
from tracekit.ingest import formats, hlotext, jsondevice, jsonstream
from tracekit.ingest.xspace import parse_module_label
from tracekit.ingest.wire import KIND_DOUBLE, KIND_INT64, KIND_STR, LineData, PlaneData
from tracekit.proto import hlo_pb2, xplane_pb2

#: args that describe the op (kept once per distinct op, on its metadata) rather than each execution
_META = ("long_name", "hlo_category", "tf_op", "source")
#: args dropped: viewer bookkeeping, or large and unused
_SKIP = frozenset(("uid", "_a", "_src", "source_stack", "memory_access_breakdown", "flow", "z"))
#: args that are numbers even when written as strings
_NUMERIC = frozenset(("device_duration_ps", "device_offset_ps", "bytes_accessed", "raw_bytes_accessed", "flops",
                      "model_flops", "program_id", "run_id", "device_ordinal", "step_num", "group_id",
                      "correlation_id", "queue_id", "replica_id", "core_type", "all_reduce_unique_id", "id",
                      "context_id", "iter_num"))
#: of those, the costs and the device clock: a value that is no usable number is ignored (and counted)
_COSTS = frozenset(("device_duration_ps", "device_offset_ps", "bytes_accessed", "raw_bytes_accessed", "flops",
                    "model_flops"))
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
#: xprof writes a zero-length event with ``dur`` 1e-06 µs (1 ps); read as 0, as in the XSpace
ZERO_DUR_US = 1e-06


# ---- events -> lines ---------------------------------------------------------------------------------------

class _Line:
    __slots__ = ("ts", "dur", "key", "s_ev", "s_id", "s_kind", "s_int", "s_dbl", "s_str")

    def __init__(self):
        self.ts, self.dur, self.key = array("d"), array("d"), array("q")
        self.s_ev, self.s_id, self.s_kind = array("i"), array("q"), array("b")
        self.s_int, self.s_dbl, self.s_str = array("q"), array("d"), []


class _Reader:
    def __init__(self, where: str, max_events: int | None):
        self.where, self.max_events = where, max_events
        self.lines: dict = {}           # (pid, tid) -> _Line
        self.keys: dict = {}            # (name, long_name, hlo_category, tf_op, source) -> key id
        self.stat_ids: dict = {}        # arg name -> stat metadata id
        self.procs: dict = {}           # pid -> process name
        self.threads: dict = {}         # (pid, tid) -> thread name
        self.n = 0
        self.skipped: dict = {}         # ph -> count of events that are not complete events
        self.bad: dict = {}             # what was wrong ("args", "pid", ...) -> count of events it was wrong in
        self.counts = jsonstream.Counts()
        self.has_flops = self.has_model_flops = self.has_costs = False
        self.hlo_over: dict = {}        # bound -> ops whose HLO text is over it (hlotext.module)

    def stat_id(self, k: str) -> int:
        sid = self.stat_ids.get(k)
        if sid is None:
            sid = self.stat_ids[k] = len(self.stat_ids) + 1
        return sid

    def wrong(self, what: str) -> None:
        self.bad[what] = self.bad.get(what, 0) + 1

    def event(self, ev: dict) -> None:
        self.n += 1
        if self.max_events is not None and self.n > self.max_events:
            raise TraceError(f"trace holds more than {self.max_events:,} events, over the limit", self.where,
                             "raise it with --max-events (or max_events=None)")
        ph = ev.get("ph")
        if ph != "X":
            if not isinstance(ph, str):
                if ph is not None:
                    self.wrong("ph (event not read)")
            elif ph == "M":
                self._meta(ev)
            elif ph:
                ph = ph if len(ph) <= 2 else "other"
                self.skipped[ph] = self.skipped.get(ph, 0) + 1
            return
        lk = (ev.get("pid"), ev.get("tid"))
        if not jsonstream.is_id(lk[0]) or not jsonstream.is_id(lk[1]):
            self.wrong("pid (event not read)" if not jsonstream.is_id(lk[0]) else "tid (event not read)")
            return
        ts, dur = ev.get("ts"), ev.get("dur")
        ts = 0.0 if ts is None else None if type(ts) is bool else jsonstream.number(ts)
        dur = 0.0 if dur is None else None if type(dur) is bool else jsonstream.number(dur)
        if ts is None or dur is None:
            self.wrong("ts (event not read)" if ts is None else "dur (event not read)")
            return
        line = self.lines.get(lk)
        if line is None:
            line = self.lines[lk] = _Line()
        i = len(line.ts)
        line.ts.append(ts)
        line.dur.append(dur)
        args = ev.get("args")
        meta = ["", "", "", ""]
        if type(args) is dict:
            if "model_flops" in args and "flops" not in args:
                args = dict(args, flops=args["model_flops"])
                self.has_model_flops = True
            for k, v in args.items():
                if k in _SKIP or v is None:
                    continue
                if k in _META:
                    s = jsonstream.name_text(v)
                    if s is None:
                        self.wrong(f"args.{k}")
                    else:
                        meta[_META.index(k)] = s
                    continue
                if k == "flops" and not self.has_model_flops:
                    self.has_flops = True
                self.has_costs = self.has_costs or k == "bytes_accessed"
                self._stat(line, i, k, v)
        elif args is not None:
            self.wrong("args (not a map)")
        name = jsonstream.name_text(ev.get("name"))
        if name is None:
            self.wrong("name")
        key = (name or "", *meta)
        kid = self.keys.get(key)
        if kid is None:
            kid = self.keys[key] = len(self.keys) + 1
        line.key.append(kid)

    def _meta(self, ev: dict) -> None:
        """A metadata event: the name of a process (a plane) or of a thread (a line)."""
        name, args = ev.get("name"), ev.get("args")
        if name not in ("process_name", "thread_name"):
            return
        pid, tid = ev.get("pid"), ev.get("tid")
        label = jsonstream.text(args.get("name", "")) if type(args) is dict else None
        if label is None:
            self.wrong(f"M {name} args")
        elif not jsonstream.is_id(pid):
            self.wrong("pid (event not read)")
        elif name == "process_name":
            self.procs[pid] = label
        elif not jsonstream.is_id(tid):
            self.wrong("tid (event not read)")
        else:
            self.threads[(pid, tid)] = label

    def _stat(self, line: _Line, i: int, k: str, v) -> None:
        if k in _NUMERIC:
            n = jsonstream.number(v)
            if n is None and (k in _COSTS or not isinstance(v, str) or len(v) > jsonstream.MAX_NUMBER_TEXT):
                self.wrong(f"args.{k} (not a usable number)")
                return
            v = v if n is None else n  # (an id that is no number, "abc", stays a string)
        elif isinstance(v, bool):
            v = int(v)
        if isinstance(v, int):
            if not _I64_MIN <= v <= _I64_MAX:
                v = v - (1 << 64) if (1 << 63) <= v < (1 << 64) else float(v)
        if isinstance(v, int):
            kind, iv, dv = KIND_INT64, v, float("nan")
        elif isinstance(v, float):
            kind, iv, dv = KIND_DOUBLE, 0, v
        elif isinstance(v, str):
            s = jsonstream.text(v)
            if s is None:
                self.wrong(f"args.{k} (over {jsonstream.MAX_STRING:,} characters)")
                return
            kind, iv, dv = KIND_STR, len(line.s_str), float("nan")
            line.s_str.append(s)
        else:
            return
        line.s_ev.append(i)
        line.s_id.append(self.stat_id(k))
        line.s_kind.append(kind)
        line.s_int.append(iv)
        line.s_dbl.append(dv)


def load(hf, warnings: list[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES,
         max_events: int | None = None) -> tuple[list[PlaneData], list[str]]:
    """(planes, hostnames) of one trace-viewer JSON file, as :func:`tracekit.ingest.paths.decode` gives them for
    an XSpace; what the JSON cannot tell, and what of it was ignored, is appended to ``warnings``."""
    where = os.fspath(hf.path)
    what = formats.foreign(jsonstream.head(hf.path, max_bytes), where)
    if what is not None:
        raise TraceError(what[0], where, what[1])
    reader = _Reader(where, max_events)
    try:
        with jsonstream.open_bounded(hf.path, max_bytes) as f:
            for ev in jsonstream.events(f, where, reader.counts):
                reader.event(ev)
    except TraceError:
        raise
    except OSError as e:
        raise TraceError(f"cannot read file ({e.strerror or type(e).__name__})", where) from None
    except UnicodeDecodeError as e:
        raise TraceError(f"a string after {reader.n:,} events is not valid UTF-8 ({e.reason}); the file is corrupt",
                         where, "re-export or re-copy it in binary mode") from None
    except Exception as e:  # ijson's errors (its module is imported lazily)
        if type(e).__name__ not in ("IncompleteJSONError", "JSONError"):
            raise
        msg = e.args[0] if e.args else ""
        msg = (msg.decode("utf-8", "replace") if isinstance(msg, bytes) else str(msg)).strip().splitlines() or [""]
        raise TraceError(f"not valid JSON after {reader.n:,} events ({msg[0][:120]}); the file is "
                         "truncated or corrupt", where, "re-export or re-copy it") from None
    planes, hostnames = _planes(reader)
    if not any(p.lines for p in planes):
        raise TraceError("no events on an XLA device or host (not a JAX/XLA trace-viewer export, or an empty "
                         "capture)", where, "tracekit reads the .xplane.pb or the .trace.json.gz that jax.profiler "
                         "writes")
    _warn(reader, planes, hf.host, warnings)
    return planes, hostnames


def _warn(reader: _Reader, planes, host: str, warnings: list[str]) -> None:
    devices = [p for p in planes if p.name.startswith("/device:")]
    rebuilt = any(p.name == "/host:metadata" for p in planes)
    gaps = ["no HLO proto (" + ("the HLO is rebuilt from each op's text, without fused computations)" if rebuilt
                                else "ops without cost args of their own have no FLOPs/bytes, so no roofline)"),
            "no buffer assignment (no memory view)"]
    if devices:
        gaps.append("no device properties (chip and peaks from the chip table: pass --chip NAME)")
    if reader.has_model_flops and not reader.has_flops:
        gaps.append("FLOPs are the ops' model_flops")
    if any(p.name.startswith("/device:TPU") for p in devices) and not reader.has_costs:
        gaps.append("no op costs (a streaming trace-viewer export carries none: analyze the .xplane.pb)")
    warnings.append(f"{host}: read from trace-viewer JSON, which has " + "; ".join(gaps))
    over = hlotext.over_bound_warning(reader.hlo_over, host)
    if over:
        warnings.append(over)
    if reader.skipped:
        kinds = ", ".join(f"{k} x{v:,}" for k, v in sorted(reader.skipped.items()))
        warnings.append(f"{host}: trace events other than complete events (ph X) were not read: {kinds}")
    c, bad = reader.counts, dict(reader.bad)
    for what, n in (("items of the event list that are not maps (not read)", c.not_events),
                    (f"args past the first {jsonstream.MAX_ARGS:,} of an event", c.many_args),
                    (f"args named after {jsonstream.MAX_ARG_NAMES:,} other names or over 256 characters", c.new_names)):
        if n:
            bad[what] = n
    if bad:
        top = sorted(bad.items(), key=lambda kv: (-kv[1], kv[0]))
        listed = ", ".join(f"{k} x{v:,}" for k, v in top[:8]) + (f", and {len(top) - 8} more" if len(top) > 8 else "")
        warnings.append(f"{host}: {sum(bad.values()):,} trace event fields of the wrong type or past the reader's "
                        f"bounds were ignored: {listed}")


# ---- lines -> planes ---------------------------------------------------------------------------------------

def _planes(r: _Reader) -> tuple[list[PlaneData], list[str]]:
    keys = list(r.keys)  # key id k is keys[k - 1]
    by_pid: dict = {}
    hostnames: list[str] = []
    for (pid, tid), line in r.lines.items():
        by_pid.setdefault(pid, []).append((tid, line))
    planes = []
    modules: dict[int, tuple[str, list]] = {}  # program id -> (module name, [hlotext.Op])
    for pid in sorted(by_pid, key=lambda p: (str(type(p)), p)):
        pname = r.procs.get(pid, f"pid {pid}")
        cut = max(pname.find(" /device:"), pname.find(" /host:"))
        if cut > 0:
            if pname[:cut] not in hostnames:
                hostnames.append(pname[:cut])
            pname = pname[cut + 1:]
        if not pname.startswith(("/device:", "/host:")):
            continue
        pname, kind = jsondevice.split_name(pname)
        head = xplane_pb2.XPlane(id=pid if isinstance(pid, int) and 0 <= pid < 1 << 63 else 0, name=pname)
        for name, sid in r.stat_ids.items():
            head.stat_metadata[sid].id = sid
            head.stat_metadata[sid].name = name
        pstat = {"hlo_category": r.stat_id("hlo_category"), "tf_op": r.stat_id("tf_op"),
                 "source": r.stat_id("source"), "program_id": r.stat_id("program_id")}
        for name, sid in pstat.items():
            head.stat_metadata[sid].id, head.stat_metadata[sid].name = sid, name
        jsondevice.add_kind(head, kind)
        lines = sorted(by_pid[pid], key=lambda t: (str(type(t[0])), t[0]))
        named = {r.threads.get((pid, tid), ""): line for tid, line in lines}
        mods = _module_spans(named.get("XLA Modules"), keys) if pname.startswith("/device:") else None
        md_ids: dict = {}
        out_lines = []
        for tid, line in lines:
            lname = r.threads.get((pid, tid), f"tid {tid}")
            kid = np.frombuffer(line.key, np.int64) if len(line.key) else np.zeros(0, np.int64)
            ts = np.frombuffer(line.ts, np.float64) if len(line.ts) else np.zeros(0)
            progs = np.zeros(len(kid), np.uint64)
            if mods is not None and lname in ("XLA Ops", "Async XLA Ops"):
                progs = _program_of(ts, *mods)
            if progs.any():
                pairs, inv = np.unique(np.stack([kid.astype(np.uint64), progs]), axis=1, return_inverse=True)
            else:
                uk, inv = np.unique(kid, return_inverse=True)
                pairs = np.stack([uk.astype(np.uint64), np.zeros(len(uk), np.uint64)])
            remap = np.empty(pairs.shape[1], np.int64)
            for j in range(pairs.shape[1]):
                k, prog = int(pairs[0, j]), int(pairs[1, j])
                mid = md_ids.get((k, prog))
                if mid is None:
                    mid = md_ids[(k, prog)] = len(md_ids) + 1
                    _metadata(head, mid, keys[k - 1], prog, pstat)
                    if prog and keys[k - 1][1] and lname == "XLA Ops":
                        label = mods[3].get(prog, "")
                        modules.setdefault(prog, (label, []))[1].append(
                            hlotext.Op(keys[k - 1][1], keys[k - 1][3], keys[k - 1][4]))
                remap[j] = mid
            mids = remap[inv.reshape(-1)] if len(kid) else np.zeros(0, np.int64)
            out_lines.append(_line_data(tid, lname, line, ts, mids))
        planes.append(PlaneData(head.id, pname, head, out_lines))
    meta = _metadata_plane(modules, r.hlo_over)
    if meta is not None:
        planes.append(meta)
    return planes, hostnames


def _metadata(head, mid: int, key: tuple, prog: int, pstat: dict) -> None:
    name, long_name, category, tf_op, source = key
    md = head.event_metadata[mid]
    md.id = mid
    md.name = long_name or name
    if long_name:
        md.display_name = name
    for stat, v in (("hlo_category", category), ("tf_op", tf_op), ("source", source)):
        if v:
            md.stats.add(metadata_id=pstat[stat], str_value=v)
    if prog:
        md.stats.add(metadata_id=pstat["program_id"], uint64_value=prog)


def _module_spans(line: _Line | None, keys: list):
    """(starts, ends, program ids, {program id: module name}) of the XLA Modules events, sorted; None if none."""
    if line is None or not len(line.ts):
        return None
    ts, dur = np.frombuffer(line.ts, np.float64), np.frombuffer(line.dur, np.float64)
    labels = [parse_module_label(keys[k - 1][0]) for k in line.key]
    prog = np.array([p for _, p in labels], np.uint64)
    order = np.argsort(ts, kind="stable")
    return ts[order], (ts + dur)[order], prog[order], {p: n for n, p in labels if p}


def _program_of(ts: np.ndarray, starts, ends, progs, _names) -> np.ndarray:
    """The program of the module execution each event starts in (0 outside every one)."""
    i = np.searchsorted(starts, ts, "right") - 1
    ok = (i >= 0) & (ts <= ends[np.maximum(i, 0)])
    return np.where(ok, progs[np.maximum(i, 0)], np.uint64(0)).astype(np.uint64)


def _ps(us: np.ndarray) -> np.ndarray:
    """µs (float) -> integer ps; NaN and values past ~27 days become 0 (the frames stage clips the rest)."""
    out = np.rint(np.nan_to_num(us, nan=0.0, posinf=0.0, neginf=0.0) * 1e6)
    return np.clip(out, -(1 << 61), 1 << 61).astype(np.int64)


def _line_data(tid, name: str, line: _Line, ts: np.ndarray, mids: np.ndarray) -> LineData:
    def arr(a, dt):
        return np.frombuffer(a, dt).copy() if len(a) else np.zeros(0, dt)
    dur = np.frombuffer(line.dur, np.float64) if len(line.dur) else np.zeros(0)
    dur = np.where(dur <= ZERO_DUR_US, 0.0, dur)
    return LineData(id=tid if isinstance(tid, int) and _I64_MIN <= tid <= _I64_MAX else 0, name=name,
                    display_name="", timestamp_ns=0, duration_ps=0, metadata_id=mids, offset_ps=_ps(ts),
                    event_duration_ps=np.maximum(_ps(dur), 0), stat_event=arr(line.s_ev, np.int32),
                    stat_id=arr(line.s_id, np.int64), stat_kind=arr(line.s_kind, np.int8),
                    stat_int=arr(line.s_int, np.int64), stat_double=arr(line.s_dbl, np.float64),
                    stat_str=line.s_str)


def _metadata_plane(modules: dict, over: dict) -> PlaneData | None:
    """A ``/host:metadata`` plane holding one ``Hlo Proto`` per program rebuilt from its ops' HLO text."""
    head = xplane_pb2.XPlane(name="/host:metadata")
    head.stat_metadata[1].id, head.stat_metadata[1].name = 1, "Hlo Proto"
    for k, (prog, (label, ops)) in enumerate(sorted(modules.items()), start=1):
        m = hlotext.module(label or f"program_{prog}", prog, ops, over)
        if m is None:
            continue
        md = head.event_metadata[k]
        md.id, md.name = k, f"{label or 'program'}({prog})"
        md.stats.add(metadata_id=1, bytes_value=hlo_pb2.HloProto(hlo_module=m).SerializeToString())
    if not head.event_metadata:
        return None
    return PlaneData(0, head.name, head, [])
