"""XSpace -> DataFrames: ``ops`` (every device op execution), ``modules``, ``steps``, ``lines`` (inventory),
``host_events`` and ``devices``. Columnar throughout: :mod:`tracekit.ingest.wire` decodes each line's events and their
stats into NumPy arrays; names are resolved once per metadata entry (or per distinct stat value) and carried as
categorical codes (:mod:`tracekit.ingest.events`), so no Python object is made per event.

Sources of op rows:
- TPU: the ``XLA Ops`` line of each ``/device:TPU:N`` plane (op time from the device clock stat
  ``device_duration_ps`` when present, as xprof's op statistics do); the trace's own async windows from
  ``Async XLA Ops`` (pairing of ``*-start``/``*-done`` for the other devices happens in :mod:`tracekit.ingest.trace`).
- GPU: kernel and memcpy events on ``Stream #N(...)`` lines; ``hlo_op``/``hlo_module``/``program_id`` stats
  (on the event, or on its metadata) name the HLO instruction. Several kernels may belong to one op.
- CPU (XLA:CPU): events on host threads that carry both ``hlo_op`` and ``device_ordinal`` stats.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.columns import member_mask
from tracekit.ingest import copies, devclock, kernelprof
from tracekit.ingest.events import Acc, Cat, intern, stat_floats, stat_ints, stat_strings
from tracekit.ingest.wire import LineData, PlaneData
from tracekit.ingest.xspace import as_float, as_int, device_of, stats_dict

_INSTR_NAME = re.compile(r"^%?([\w.\-]+)\s*=")
#: host events kept for the rules (compilation inside profiled steps)
COMPILE_RE = re.compile(r"compil(?:e|ation)(?!d)", re.IGNORECASE)
U64 = 0xFFFFFFFFFFFFFFFF
#: Event times beyond this many ps (~27 days) are corrupt, and are clipped so sums of times fit in int64.
MAX_PS = 1 << 61


def instr_name_and_opcode(text: str) -> tuple[str, str]:
    """('fusion.3', 'fusion') from HLO text '%fusion.3 = f32[8]{0} fusion(...), kind=kLoop'. ('', '') if not."""
    m = _INSTR_NAME.match(text)
    if not m:
        return "", ""
    rest = text[m.end():].lstrip()
    if rest.startswith("("):  # tuple shape: skip balanced parentheses
        depth = 0
        for i, ch in enumerate(rest):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0:
                rest = rest[i + 1:].lstrip()
                break
    else:
        rest = rest.split(" ", 1)[1] if " " in rest else ""
    return m.group(1), rest.split("(", 1)[0].strip()


def opcode_from_name(name: str) -> str:
    """Best guess of the opcode from an instruction name ('all-reduce-start.2' -> 'all-reduce-start')."""
    return re.sub(r"(\.\d+)+$", "", name)


def _md_values(head, mids: np.ndarray, per_md, issues: dict | None = None) -> tuple[list, np.ndarray]:
    """``per_md(metadata or None)`` once per distinct metadata id, and the inverse index to spread it. Events
    whose metadata id the plane does not define are counted in ``issues["unknown_metadata"]``."""
    inv, uniq = pd.factorize(mids)  # hash-based: no sort of the events
    md = head.event_metadata
    known = [int(u) in md for u in uniq]
    if issues is not None and not all(known):
        issues["unknown_metadata"] = issues.get("unknown_metadata", 0) + \
            int(np.count_nonzero(~np.array(known, bool)[inv]))
    return [per_md(md[int(u)] if k else None) for u, k in zip(uniq, known)], inv


class OpMeta(NamedTuple):
    """What one op's event metadata says (worked out once per metadata id, spread to its events)."""
    op: str
    opcode: str
    category: str
    program_id: int
    flops: float
    bytes_accessed: float
    model_flops: float


class KernelMeta(NamedTuple):
    """A GPU kernel's metadata: its name and stats."""
    name: str
    stats: dict


def _col(vals: list, inv: np.ndarray, field: str) -> Cat:
    """The ``field`` of per-metadata values as a categorical column of the events (``inv``)."""
    return intern([getattr(v, field) for v in vals], inv)


def _num(vals: list, inv: np.ndarray, field: str, dtype) -> np.ndarray:
    """The ``field`` of per-metadata values as a numeric column of the events (``inv``)."""
    arr = np.array([getattr(v, field) for v in vals], dtype=dtype)
    return arr[inv] if len(inv) else np.empty(0, dtype)


def _ids(names: dict, *wanted: str) -> dict:
    out = {w: -1 for w in wanted}
    for k, v in names.items():
        if v in out:
            out[v] = k
    return out


def _start(line: LineData) -> np.ndarray:
    return line.offset_ps + line.timestamp_ns * 1000


def _sanitize(line: LineData, issues: dict) -> bool:
    """Make a line's times safe to add up in int64: negative event durations become 0, offsets and durations
    past :data:`MAX_PS` are clipped (both counted in ``issues``). False when the line's own timestamp is out of
    range (the line is then left out)."""
    if abs(line.timestamp_ns) >= MAX_PS // 1000:
        issues["bad_line_time"] = issues.get("bad_line_time", 0) + max(line.n_events, 1)
        return False
    if not line.n_events:
        return True
    off, dur = line.offset_ps, line.event_duration_ps
    if dur.min() < 0:
        neg = dur < 0
        issues["negative_duration"] = issues.get("negative_duration", 0) + int(np.count_nonzero(neg))
        dur[neg] = 0
    if dur.max() > MAX_PS or off.max() > MAX_PS or off.min() < -MAX_PS:
        issues["clipped_time"] = issues.get("clipped_time", 0) + int(
            np.count_nonzero((dur > MAX_PS) | (off > MAX_PS) | (off < -MAX_PS)))
        np.clip(off, -MAX_PS, MAX_PS, out=off)
        np.minimum(dur, MAX_PS, out=dur)
    return True


_ISSUES = {
    "unknown_metadata": "{n:,} event(s) refer to event metadata their plane does not define (shown without a name)",
    "negative_duration": "{n:,} event(s) have a negative duration (counted as 0)",
    "clipped_time": "{n:,} event(s) have an offset or duration beyond {max_days:.0f} days (clipped)",
    "bad_line_time": "{n:,} event(s) sit on lines whose timestamp is out of range (left out)",
}


def _issue_warnings(issues: dict, odd: dict, host: str, warnings: list[str]) -> None:
    for key, text in _ISSUES.items():
        if issues.get(key):
            warnings.append(f"{host}: " + text.format(n=issues[key], max_days=MAX_PS / 1e12 / 86400))
    if odd:
        which = ", ".join(f"{k} x{v:,}" for k, v in sorted(odd.items()))
        warnings.append(f"{host}: stat values with an unexpected type ({which}): numbers stored as text or "
                        "double were read, other values ignored")


def extract(planes: list[PlaneData], host: str, warnings: list[str]) -> dict:
    """The frames of one host's decoded planes. Each line is let go once read (``plane.lines`` is left empty), so
    the decoded columns and the frames made of them are not all alive at once; the planes' heads stay."""
    acc = {k: Acc() for k in ("ops", "async", "modules", "steps", "host_steps", "host_events", "lines",
                               "memory_events")}
    lines: list = []  # (plane, line, events, first start, last end) per line: one chunk at the end, not one per line
    devices = []
    issues: dict = {}  # counts of oddities, turned into warnings at the end
    odd: dict = {}  # stat name -> values stored with an unexpected type
    has_accel = any(device_of(p.name) and device_of(p.name)[0] in ("TPU", "GPU") for p in planes)
    seen: dict[str, int] = {}
    profiles: list = []  # the TPU planes' kernel profiles (tracekit.ingest.kernelprof)
    for plane in planes:
        head = plane.head
        names = {k: v.name for k, v in head.stat_metadata.items()}
        dev = device_of(plane.name)
        pstats = stats_dict(head.stats, names)
        kind = ""
        seen[plane.name] = seen.get(plane.name, 0) + 1
        if dev and seen[plane.name] == 1:
            kind = str(pstats.get("device_type_string") or "")
            if dev[0] == "GPU" and not kind:
                vendor = str(pstats.get("device_vendor") or "")
                cc = (pstats.get("compute_cap_major"), pstats.get("compute_cap_minor"))
                kind = f"{vendor or 'GPU'} cc{cc[0]}.{cc[1]}" if cc[0] is not None else (vendor or "GPU")
            devices.append({"host": host, "device": f"{dev[0]}:{dev[1]}", "device_kind": kind or dev[0],
                            "plane": plane.name, "stats": pstats})
        compile_ids = mem_ids = None
        tpu = bool(dev) and dev[0] == "TPU"
        stage = {k: Acc() for k in ("ops", "async", "modules", "steps")} if tpu else acc  # one plane's TPU lines
        clock: list = []
        prof = kernelprof.PlaneProfile(str(pstats.get("device_type_string") or "")) if tpu else None
        for i, line in enumerate(plane.lines):
            plane.lines[i] = None  # (read once: its columns are let go when this iteration's reads are done)
            if not _sanitize(line, issues):
                continue
            n = line.n_events
            if dev and n:
                device = f"{dev[0]}:{dev[1]}"
                if dev[0] == "TPU":
                    _tpu_line(head, line, names, host, device, stage, issues, odd, clock)
                    if kernelprof.wanted(line.name):
                        prof.read(head, line, names, odd)
                elif dev[0] == "GPU":
                    _gpu_line(head, line, names, host, device, acc, issues, odd)
            elif not dev and n and plane.name.startswith("/host:") and plane.name != "/host:metadata":
                _host_line(line, names, host, acc, want_ops=not has_accel, odd=odd)
                if compile_ids is None:
                    compile_ids = np.array([k for k, md in head.event_metadata.items() if COMPILE_RE.search(md.name)],
                                           dtype=np.int64)
                if len(compile_ids):
                    m = member_mask(line.metadata_id, compile_ids)
                    if m.any():
                        vals, inv = _md_values(head, line.metadata_id[m], lambda md: md.name if md else "")
                        acc["host_events"].add(host=host, line=line.name, name=np.array(vals, dtype=object)[inv],
                                               start_ps=_start(line)[m], duration_ps=line.event_duration_ps[m])
                if mem_ids is None:
                    mem_ids = {k: md.name for k, md in head.event_metadata.items() if md.name in MEMORY_EVENTS}
                    mem_keys = np.fromiter(mem_ids, np.int64, len(mem_ids))
                if mem_ids:
                    _memory_line(line, names, host, mem_ids, mem_keys, acc, odd)
            t0 = line.timestamp_ns * 1000
            first = int(line.offset_ps.min()) + t0 if n else 0
            last = int((line.offset_ps + line.event_duration_ps).max()) + t0 if n else 0
            lines.append((plane.name, line.name or line.display_name, n, first, last))
        if tpu:  # op starts from the device clock where the ops carry it; then the staged rows join the rest
            profiles.append(prof.frame(stage["ops"].chunks, host, f"{dev[0]}:{dev[1]}"))  # (host-clock starts)
            devclock.settle(stage, clock)
            for k, a in stage.items():
                acc[k].chunks.extend(a.chunks)
        plane.lines = []
    if lines:
        planes, names, counts, firsts, lasts = zip(*lines)
        every = np.arange(len(lines))
        acc["lines"].add(host=host, plane=intern(list(planes), every), line=intern(list(names), every),
                         events=np.array(counts, np.int64), start_ps=np.array(firsts, np.int64),
                         end_ps=np.array(lasts, np.int64))
    out = {"ops": acc["ops"].frame(schema.OPS), "async": acc["async"].frame(schema.OPS),
           "modules": acc["modules"].frame(schema.MODULES), "steps": acc["steps"].frame(schema.STEPS),
           "host_steps": acc["host_steps"].frame(schema.STEPS), "lines": acc["lines"].frame(schema.LINES),
           "host_events": acc["host_events"].frame(schema.HOST_EVENTS),
           "memory_events": acc["memory_events"].frame(schema.MEMORY_EVENTS), "devices": devices,
           "kernel_profile": kernelprof.combine(profiles)}
    for name, k in seen.items():
        if k > 1 and (device_of(name) or name == "/host:metadata"):
            warnings.append(f"{host}: plane {name!r} appears {k} times in the file: their events are taken together")
    _issue_warnings(issues, odd, host, warnings)
    return out


def _tpu_md(names, odd: dict | None = None):
    def f(md):
        if md is None:
            return OpMeta("", "", "", 0, np.nan, np.nan, np.nan)
        op, opcode = instr_name_and_opcode(md.name)
        if not op:
            op = md.display_name or md.name
            opcode = opcode_from_name(op)
        st = stats_dict(md.stats, names)
        pid = st.get("program_id") or 0
        if odd is not None:
            for k, want in (("program_id", int), ("flops", (int, float)), ("bytes_accessed", (int, float))):
                if k in st and (not isinstance(st[k], want) or isinstance(st[k], bool)):
                    odd[k] = odd.get(k, 0) + 1
        return OpMeta(op, opcode, str(st.get("hlo_category") or ""), as_int(pid) & U64,
                      as_float(st["flops"]) if "flops" in st else np.nan,
                      as_float(st["bytes_accessed"]) if "bytes_accessed" in st else np.nan,
                      as_float(st["model_flops"]) if "model_flops" in st else np.nan)
    return f


def _tpu_line(head, line, names, host, device, acc, issues=None, odd=None, clock=None):
    lname = line.name
    if lname in ("XLA Ops", "Async XLA Ops"):
        ids = _ids(names, "flops", "bytes_accessed", "model_flops", "device_duration_ps", "device_offset_ps")
        vals, inv = _md_values(head, line.metadata_id, _tpu_md(names, odd), issues)
        fl, by = _num(vals, inv, "flops", float), _num(vals, inv, "bytes_accessed", float)
        mf = _num(vals, inv, "model_flops", float)
        for arr, key in ((fl, "flops"), (by, "bytes_accessed"), (mf, "model_flops")):  # newer: on the events
            ev = stat_floats(line, ids[key], odd, key)
            m = ~np.isnan(ev)
            arr[m] = ev[m]
        dur = line.event_duration_ps.copy()
        has, ddur = stat_ints(line, ids["device_duration_ps"], odd, "device_duration_ps")
        if has.any() and (ddur[has].min() < 0 or ddur[has].max() > MAX_PS):  # the device clock: same checks
            neg = has & (ddur < 0)
            if issues is not None and neg.any():
                issues["negative_duration"] = issues.get("negative_duration", 0) + int(np.count_nonzero(neg))
            ddur = np.clip(ddur, 0, MAX_PS)
        dur[has] = ddur[has]
        sync = lname == "XLA Ops"
        start = _start(line)
        acc["ops" if sync else "async"].add(
            host=host, device=device, line=lname, source="xla_ops" if sync else "async_xla_ops",
            op=_col(vals, inv, "op"), opcode=_col(vals, inv, "opcode"), category=_col(vals, inv, "category"),
            program_id=_num(vals, inv, "program_id", np.uint64), start_ps=start, duration_ps=dur,
            is_async=np.full(line.n_events, not sync), trace_flops=fl, trace_bytes=by, trace_model_flops=mf)
        has_off, doff = stat_ints(line, ids["device_offset_ps"], odd, "device_offset_ps")
        both = has & has_off & (np.abs(doff) <= MAX_PS)
        if sync and clock is not None and both.any():
            clock.append((acc["ops"].chunks[-1], both, doff, start + line.event_duration_ps))
    elif lname == "XLA Modules":
        from tracekit.ingest.xspace import parse_module_label
        vals, inv = _md_values(head, line.metadata_id, lambda md: parse_module_label(md.name if md else ""), issues)
        has, run = stat_ints(line, _ids(names, "run_id")["run_id"], odd, "run_id")
        acc["modules"].add(host=host, device=device, module=_col(vals, inv, "name"), program_id=_num(vals, inv, "program_id", np.uint64),
                           run_id=np.where(has, run, -1), start_ps=_start(line), duration_ps=line.event_duration_ps)
    elif lname == "Steps":
        _steps_line(head, line, names, host, device, acc)


def _steps_line(head, line, names, host, device, acc):
    ids = _ids(names, "step_num", "group_id")
    has_s, step = stat_ints(line, ids["step_num"])
    has_g, group = stat_ints(line, ids["group_id"])
    vals, inv = _md_values(head, line.metadata_id, lambda md: int(md.name) if md is not None and md.name.isdigit() else -1)
    from_name = np.array(vals, np.int64)[inv]
    st = np.where(has_s, step, np.where(has_g, group, np.where(from_name >= 0, from_name, np.arange(line.n_events))))
    acc["steps"].add(host=host, device=device, step=st.astype(np.int64), start_ps=_start(line),
                     duration_ps=line.event_duration_ps, step_source="steps_line")


def _gpu_line(head, line, names, host, device, acc, issues=None, odd=None):
    if line.name == "Steps":
        _steps_line(head, line, names, host, device, acc)
        return
    if not line.name.startswith("Stream #"):
        return
    ids = _ids(names, "hlo_op", "hlo_module", "program_id")
    vals, inv = _md_values(head, line.metadata_id, lambda md: (
        KernelMeta(md.display_name or md.name, stats_dict(md.stats, names)) if md is not None else
        KernelMeta("", {})), issues)
    kernel = intern([v.name for v in vals], inv)
    has_op, op = stat_strings(line, ids["hlo_op"], names, odd, "hlo_op")
    has_mod, mod = stat_strings(line, ids["hlo_module"], names, odd, "hlo_module")
    has_pid, pid = stat_ints(line, ids["program_id"], odd, "program_id")
    # stats may sit on the metadata instead of the events
    md_op = [str(v.stats.get("hlo_op", "")) for v in vals]
    if any(md_op):
        op = _fill(op, has_op, md_op, inv)
        mod = _fill(mod, has_mod, [str(v.stats.get("hlo_module", "")) for v in vals], inv)
        md_pid = np.array([as_int(v.stats.get("program_id", 0) or 0) & U64 for v in vals], np.uint64)[inv]
        pid = pid.astype(np.uint64)
        pid = np.where(has_pid, pid, md_pid)
    is_memcpy = np.array([str(k).startswith(("Memcpy", "Memset")) for k in kernel.categories], bool)
    is_memcpy = (is_memcpy[kernel.codes] if len(kernel.codes) else np.zeros(0, bool)) | ("Memcpy" in line.name)
    op_named = np.array([bool(c) for c in op.categories], bool)[op.codes] if len(op.codes) else np.zeros(0, bool)
    src = np.where(is_memcpy, 1, 0)
    if ids["hlo_op"] >= 0 or any(md_op):  # an XLA trace: a kernel with no hlo_op is the runtime's
        src = np.where(~op_named, 2, src)
    source = Cat(src.astype(np.int32), ["gpu_kernel", "gpu_memcpy", "gpu_runtime"])
    opcode = Cat(op.codes, [opcode_from_name(c) if c else "" for c in op.categories])
    runtime = copies.columns(line, names, kernel, is_memcpy & ~op_named, device, odd, ~op_named)  # size, direction
    acc["ops"].add(host=host, device=device, line=line.name, source=source, op=op, opcode=opcode, module=mod,
                   program_id=pid.astype(np.uint64), kernel=kernel, start_ps=_start(line),
                   duration_ps=line.event_duration_ps, is_async=np.zeros(line.n_events, bool), **runtime)


#: allocator events on host threads (xprof's memory-profile data): name -> kind
MEMORY_EVENTS = {"MemoryAllocation": "alloc", "MemoryDeallocation": "free"}


def _memory_line(line, names, host, mem_ids: dict, mem_keys: np.ndarray, acc, odd=None):
    """The allocator's MemoryAllocation/MemoryDeallocation events of a host line: bytes in use after each, the
    allocator (``allocator_name``, else the device index ``index_on_host``), peak and available bytes."""
    m = member_mask(line.metadata_id, mem_keys)
    if not m.any():
        return
    ids = _ids(names, "allocator_name", "index_on_host", "bytes_allocated", "peak_bytes_in_use", "bytes_available",
               "requested_bytes")
    has_a, alloc = stat_strings(line, ids["allocator_name"], names, odd, "allocator_name")
    has_i, index = stat_ints(line, ids["index_on_host"], odd, "index_on_host")
    has_a, has_i = has_a[m], has_i[m]  # (only the allocator's events: a host thread's line holds many others)
    # each event's allocator: its name, else "device <index on host>", else "allocator" (labels made per distinct
    # name and index, not per event)
    names_, idx = [str(c) for c in alloc.categories], index[m]
    base, lo = len(names_), int(idx.min(initial=0))
    key = np.where(has_a, alloc.codes[m], np.where(has_i, base + 1 + (idx - lo), base))
    kinv, kuniq = pd.factorize(key)
    label = [names_[k] if 0 <= k < base else "" if k < 0 else "allocator" if k == base else
             f"device {k - base - 1 + lo}" for k in kuniq.tolist()]
    u, uinv = np.unique(np.array(label, dtype=str), return_inverse=True)
    inv = uinv.ravel()[kinv]
    free = np.fromiter((MEMORY_EVENTS[mem_ids[int(k)]] == "free" for k in line.metadata_id[m]), bool)
    acc["memory_events"].add(
        host=host, allocator=intern(list(u), inv), kind=Cat(free.astype(np.int32), ["alloc", "free"]),
        start_ps=_start(line)[m],
        **{c: stat_floats(line, ids[s_], odd, s_)[m] for c, s_ in (
            ("bytes_in_use", "bytes_allocated"), ("peak_bytes_in_use", "peak_bytes_in_use"),
            ("bytes_available", "bytes_available"), ("requested_bytes", "requested_bytes"))})


def _fill(cat: Cat, has: np.ndarray, md_vals: list, inv: np.ndarray) -> Cat:
    md = intern(md_vals, inv)
    table = {c: i for i, c in enumerate(cat.categories)}
    remap = np.array([table.setdefault(c, len(table)) for c in md.categories], np.int32)
    codes = np.where(has, cat.codes, remap[md.codes] if len(remap) else cat.codes)
    return Cat(codes.astype(np.int32), list(table))


def _host_line(line, names, host, acc, want_ops: bool, odd=None):
    ids = _ids(names, "hlo_op", "hlo_module", "program_id", "run_id", "device_ordinal", "step_num")
    if all(v < 0 for v in ids.values()) or not len(line.stat_id):
        return
    start = _start(line)
    has_s, step = stat_ints(line, ids["step_num"], odd, "step_num")
    if has_s.any():
        acc["host_steps"].add(host=host, device="", step=step[has_s], start_ps=start[has_s],
                              duration_ps=line.event_duration_ps[has_s], step_source="step_annotation")
    if not want_ops:
        return
    has_op, op = stat_strings(line, ids["hlo_op"], names, odd, "hlo_op")
    has_dev, ordinal = stat_ints(line, ids["device_ordinal"], odd, "device_ordinal")
    m = has_op & has_dev
    if not m.any():
        return
    idx = np.nonzero(m)[0]
    _, mod = stat_strings(line, ids["hlo_module"], names, odd, "hlo_module")
    _, pid = stat_ints(line, ids["program_id"], odd, "program_id")
    has_run, run = stat_ints(line, ids["run_id"], odd, "run_id")
    du, dinv = np.unique(ordinal[idx], return_inverse=True)
    opc = Cat(op.codes[idx], [opcode_from_name(c) for c in op.categories])
    acc["ops"].add(host=host, device=intern([f"CPU:{int(d)}" for d in du], dinv), device_kind="cpu",
                   line=line.name, source="cpu_thunk", op=Cat(op.codes[idx], op.categories), opcode=opc,
                   module=Cat(mod.codes[idx], mod.categories), program_id=pid[idx].astype(np.uint64),
                   run_id=np.where(has_run[idx], run[idx], -1), start_ps=start[idx],
                   duration_ps=line.event_duration_ps[idx], is_async=np.zeros(len(idx), bool))
