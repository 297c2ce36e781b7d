"""XSpace -> DataFrames: ``ops`` (every device op execution), ``modules``, ``steps``, ``lines`` (inventory),
``devices``, joined with the ``hlo`` frame. Columnar: each line's events are pulled into NumPy arrays in one pass,
names are resolved per metadata entry (not per event), and frames are built once from the arrays.

Sources of op rows:
- TPU: the ``XLA Ops`` line of each ``/device:TPU:N`` plane; async windows from ``Async XLA Ops`` or, where that
  line is empty, from pairing each ``*-start`` op with its ``*-done`` on the same device.
- GPU: kernel and memcpy events on ``Stream #N(...)`` lines; ``hlo_op``/``hlo_module``/``program_id`` stats
  (on the event, or on its metadata) name the HLO instruction. Several kernels may belong to one op.
- CPU (XLA:CPU): events on host threads that carry both ``hlo_op`` and ``device_ordinal`` stats.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit import schema
from tracekit.proto import xplane_pb2
from tracekit.xspace import device_of, line_arrays, line_arrays_with_stats, stat_ids, stat_names, stats_dict

_OPSTATS = ("hlo_op", "hlo_module", "program_id", "run_id", "device_ordinal", "flops", "bytes_accessed",
            "hlo_category")
_INSTR_NAME = re.compile(r"^%?([\w.\-]+)\s*=")
#: host events kept for the rules (compilation inside profiled steps)
COMPILE_RE = re.compile(r"compil(?:e|ation)(?!d)", re.IGNORECASE)


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
    op = rest.split("(", 1)[0].strip()
    return m.group(1), op


def opcode_from_name(name: str) -> str:
    """Best guess of the opcode from an instruction name ('all-reduce-start.2' -> 'all-reduce-start')."""
    base = re.sub(r"(\.\d+)+$", "", name)
    return base


class _Acc:
    """Column accumulator: lists of NumPy chunks and per-chunk constants, concatenated once."""

    def __init__(self):
        self.chunks: list[dict] = []

    def add(self, **cols):
        n = len(cols["start_ps"])
        if n:
            self.chunks.append({k: (v if isinstance(v, np.ndarray) or isinstance(v, list) else [v] * n)
                                for k, v in cols.items()})

    def frame(self, sch: dict) -> pd.DataFrame:
        if not self.chunks:
            return schema.empty(sch)
        keys = self.chunks[0].keys()
        data = {}
        for k in keys:
            parts = [c[k] for c in self.chunks]
            if all(isinstance(p, np.ndarray) for p in parts):
                data[k] = np.concatenate(parts)
            else:
                data[k] = [x for p in parts for x in (p.tolist() if isinstance(p, np.ndarray) else p)]
        return schema.conform(pd.DataFrame(data), sch)


def _md_table(plane, mids: np.ndarray, per_md):
    """Map unique metadata ids through ``per_md(md) -> tuple`` and broadcast back: one call per metadata entry."""
    uniq, inv = np.unique(mids, return_inverse=True)
    vals = [per_md(plane.event_metadata.get(int(u))) for u in uniq]
    return vals, inv


def _tpu_md(names):
    def f(md):
        if md is None:
            return ("", "", "", 0, np.nan, np.nan)
        op, opcode = instr_name_and_opcode(md.name)
        if not op:
            op = md.display_name or md.name
            opcode = opcode_from_name(op)
        st = stats_dict(md.stats, names)
        pid = st.get("program_id") or 0
        return (op, opcode, str(st.get("hlo_category") or ""), int(pid) & 0xFFFFFFFFFFFFFFFF,
                float(st["flops"]) if "flops" in st else np.nan,
                float(st["bytes_accessed"]) if "bytes_accessed" in st else np.nan)
    return f


def _take(vals, inv, i):
    col = [v[i] for v in vals]
    return np.asarray(col, dtype=object if isinstance(col[0] if col else "", str) else None)[inv] if col else []


def extract(space: xplane_pb2.XSpace, host: str, warnings: list[str]) -> dict[str, pd.DataFrame]:
    ops, asyncs, mods, steps, lines, host_steps, hev = _Acc(), _Acc(), _Acc(), _Acc(), _Acc(), _Acc(), _Acc()
    devices = []
    has_accel = any(device_of(p.name) and device_of(p.name)[0] in ("TPU", "GPU") for p in space.planes)
    for plane in space.planes:
        names = stat_names(plane)
        compile_ids = None
        dev = device_of(plane.name)
        pstats = stats_dict(plane.stats, names)
        if dev:
            kind = str(pstats.get("device_type_string") or "")
            if dev[0] == "GPU" and not kind:
                vendor = str(pstats.get("device_vendor") or "")
                cc = (pstats.get("compute_cap_major"), pstats.get("compute_cap_minor"))
                kind = f"{vendor or 'GPU'} cc{cc[0]}.{cc[1]}" if cc[0] is not None else (vendor or "GPU")
            devices.append({"host": host, "device": f"{dev[0]}:{dev[1]}", "device_kind": kind or dev[0],
                            "plane": plane.name, "stats": pstats})
        for line in plane.lines:
            n = len(line.events)
            if dev and n:
                device = f"{dev[0]}:{dev[1]}"
                if dev[0] == "TPU":
                    _tpu_line(plane, line, names, host, device, ops, asyncs, mods, steps)
                elif dev[0] == "GPU":
                    _gpu_line(plane, line, names, host, device, ops, steps, devices[-1]["device_kind"])
            elif not dev and n and plane.name.startswith("/host:") and plane.name != "/host:metadata":
                _host_line(plane, line, names, host, ops, host_steps, want_ops=not has_accel)
                if compile_ids is None:
                    compile_ids = np.array([k for k, md in plane.event_metadata.items() if COMPILE_RE.search(md.name)],
                                           dtype=np.int64)
                if len(compile_ids):
                    _compile_events(plane, line, host, compile_ids, hev)
            if n:
                t0 = line.timestamp_ns * 1000
                first = line.events[0].offset_ps
                last = max(line.events[-1].offset_ps + line.events[-1].duration_ps, first)
                lines.add(host=host, plane=plane.name, line=line.name or line.display_name, events=[n],
                          start_ps=[t0 + first], end_ps=[t0 + last])
            else:
                lines.add(host=host, plane=plane.name, line=line.name, events=[0], start_ps=[0], end_ps=[0])
    out = {"ops": ops.frame(schema.OPS), "async": asyncs.frame(schema.OPS), "modules": mods.frame(schema.MODULES),
           "steps": steps.frame(schema.STEPS), "host_steps": host_steps.frame(schema.STEPS),
           "lines": lines.frame(schema.LINES), "host_events": hev.frame(schema.HOST_EVENTS)}
    out["devices"] = devices
    return out


def _tpu_line(plane, line, names, host, device, ops, asyncs, mods, steps):
    lname = line.name
    if lname in ("XLA Ops", "Async XLA Ops"):
        ids = stat_ids(plane, "flops", "bytes_accessed", "device_duration_ps")
        mids, start, dur, ev = line_arrays_with_stats(line, ids, names)
        # the device's own clock measures the op (as xprof's op statistics do); the host-clock event gives start
        ddur = ev["device_duration_ps"]
        if any(v is not None for v in ddur):
            m = np.array([v is not None for v in ddur])
            dur[m] = np.array([int(v) for v in ddur if v is not None], dtype=np.int64)
        vals, inv = _md_table(plane, mids, _tpu_md(names))
        op, opcode, cat, pid, fl, by = (np.array([v[i] for v in vals], dtype=object)[inv] for i in range(6))
        fl = np.array(fl, dtype=float)
        by = np.array(by, dtype=float)
        # newer captures put flops/bytes on the events themselves
        for arr, key in ((fl, "flops"), (by, "bytes_accessed")):
            evv = ev[key]
            if any(v is not None for v in evv):
                m = np.array([v is not None for v in evv])
                arr[m] = np.array([float(v) for v in evv if v is not None])
        acc = ops if lname == "XLA Ops" else asyncs
        acc.add(host=host, device=device, line=lname, source="xla_ops" if lname == "XLA Ops" else "async_xla_ops",
                op=op, opcode=opcode, category=cat, program_id=pid.astype(np.uint64), start_ps=start,
                duration_ps=dur, is_async=lname != "XLA Ops", trace_flops=fl, trace_bytes=by)
    elif lname == "XLA Modules":
        ids = stat_ids(plane, "run_id")
        mids, start, dur, ev = line_arrays_with_stats(line, ids, names)
        from tracekit.hlo import parse_module_label
        vals, inv = _md_table(plane, mids, lambda md: parse_module_label(md.name if md else ""))
        mod = np.array([v[0] for v in vals], dtype=object)[inv]
        pid = np.array([v[1] for v in vals], dtype=np.uint64)[inv]
        run = np.array([int(v) if v is not None else -1 for v in ev["run_id"]], dtype=np.int64)
        mods.add(host=host, device=device, module=mod, program_id=pid, run_id=run, start_ps=start, duration_ps=dur)
    elif lname == "Steps":
        _steps_line(plane, line, names, host, device, steps)


def _steps_line(plane, line, names, host, device, steps):
    ids = stat_ids(plane, "step_num", "group_id")
    mids, start, dur, ev = line_arrays_with_stats(line, ids, names)
    step = []
    for i, mid in enumerate(mids):
        v = ev["step_num"][i] if ev["step_num"][i] is not None else ev["group_id"][i]
        if v is None:
            md = plane.event_metadata.get(int(mid))
            v = md.name if md is not None and md.name.isdigit() else i
        step.append(int(v))
    steps.add(host=host, device=device, step=np.array(step, np.int64), start_ps=start, duration_ps=dur,
              step_source="steps_line")


def _gpu_line(plane, line, names, host, device, ops, steps, kind):
    if line.name == "Steps":
        _steps_line(plane, line, names, host, device, steps)
        return
    if not line.name.startswith("Stream #"):
        return
    ids = stat_ids(plane, "hlo_op", "hlo_module", "program_id")
    mids, start, dur, ev = line_arrays_with_stats(line, ids, names)
    md_stats = {}
    vals, inv = _md_table(plane, mids, lambda md: (md.display_name or md.name if md else "",
                                                  stats_dict(md.stats, names) if md else {}))
    kernel = np.array([v[0] for v in vals], dtype=object)[inv]
    n = len(mids)
    op = np.empty(n, dtype=object)
    module = np.empty(n, dtype=object)
    pid = np.zeros(n, dtype=np.uint64)
    for i in range(n):
        mst = vals[inv[i]][1]
        o = ev["hlo_op"][i] if ev["hlo_op"][i] is not None else mst.get("hlo_op", "")
        op[i] = o or ""
        module[i] = ev["hlo_module"][i] if ev["hlo_module"][i] is not None else mst.get("hlo_module", "")
        p = ev["program_id"][i] if ev["program_id"][i] is not None else mst.get("program_id", 0)
        pid[i] = int(p or 0) & 0xFFFFFFFFFFFFFFFF
    is_memcpy = ("Memcpy" in line.name) | np.array([str(k).startswith(("Memcpy", "Memset")) for k in kernel], bool)
    source = np.where(is_memcpy, "gpu_memcpy", "gpu_kernel").astype(object)
    # On an XLA trace, a kernel with no hlo_op is the runtime's (e.g. a host-to-device copy), not an HLO op.
    if ids["hlo_op"] >= 0:
        source[op == ""] = "gpu_runtime"
    opcode = np.array([opcode_from_name(o) if o else "" for o in op], dtype=object)
    ops.add(host=host, device=device, line=line.name, source=source, op=op, opcode=opcode, module=module,
            program_id=pid, kernel=kernel, start_ps=start, duration_ps=dur, is_async=False)
    del md_stats


def _compile_events(plane, line, host, compile_ids, hev):
    mids, start, dur = line_arrays(line)
    m = np.isin(mids, compile_ids)
    if m.any():
        names = np.array([plane.event_metadata[int(i)].name for i in mids[m]], dtype=object)
        hev.add(host=host, line=line.name, name=names, start_ps=start[m], duration_ps=dur[m])


def _host_line(plane, line, names, host, ops, host_steps, want_ops: bool):
    ids = stat_ids(plane, "hlo_op", "hlo_module", "program_id", "run_id", "device_ordinal", "step_num")
    if all(v < 0 for v in ids.values()):
        return
    mids, start, dur, ev = line_arrays_with_stats(line, ids, names)
    sn = ev["step_num"]
    m = np.array([v is not None for v in sn], bool)
    if m.any():
        host_steps.add(host=host, device="", step=np.array([int(v) for v in sn if v is not None], np.int64),
                       start_ps=start[m], duration_ps=dur[m], step_source="step_annotation")
    if not want_ops:
        return
    m = np.array([a is not None and b is not None for a, b in zip(ev["hlo_op"], ev["device_ordinal"])], bool)
    if not m.any():
        return
    idx = np.nonzero(m)[0]
    op = np.array([str(ev["hlo_op"][i]) for i in idx], dtype=object)
    ops.add(host=host, device=np.array([f"CPU:{int(ev['device_ordinal'][i])}" for i in idx], dtype=object),
            device_kind="cpu", line=line.name, source="cpu_thunk", op=op,
            opcode=np.array([opcode_from_name(o) for o in op], dtype=object),
            module=np.array([str(ev["hlo_module"][i] or "") for i in idx], dtype=object),
            program_id=np.array([int(ev["program_id"][i] or 0) for i in idx], dtype=np.uint64),
            run_id=np.array([int(ev["run_id"][i]) if ev["run_id"][i] is not None else -1 for i in idx], np.int64),
            start_ps=start[idx], duration_ps=dur[idx], is_async=False)
