"""Where device memory goes, from XLA's buffer assignment (:mod:`tracekit.ingest.buffers`) and, when the trace
has them, the allocator's events (``memory_events``).

Per program and memory space (``programs``), with XLA's own terms (``compiled.memory_analysis()``):

* ``argument_bytes`` = allocations of entry parameters; ``output_bytes`` = allocations that may be live out;
  ``alias_bytes`` = allocations that are both (an output written into a parameter's buffer: donated inputs);
  ``temp_bytes`` = every other allocation except thread-local and constant ones;
* ``footprint_bytes`` = argument + output − alias + temp + constant: what the device holds while the program runs;
* ``live_peak_bytes`` = argument + output − alias + constant + the peak of the temporaries the heap simulator
  shows alive at once (``live_peak_source = heap simulator``); without a heap-simulator trace the temp allocation
  itself (``allocations``).

``devices``: the device-level peak. Programs that run one after the other do not add up (their temporaries are
freed in between); programs whose executions overlap on a device do. ``peak_bytes`` is the largest sum of the
footprints of the programs running at one time (a lower bound: arrays the job keeps on the device but passes to
none of the running programs are not in the trace); ``upper_bytes`` adds the arguments of every other program
that ran on the device (what persists if none of them are the same arrays).

``offload``: programs that keep arrays in host memory (memory space 5). ``need_bytes`` = the program's device
live peak without the staging copies of those arrays (``from_host`` buffers) + the host arrays themselves: what
the device would hold if the arrays stayed in HBM; ``fits`` = need_bytes <= the chip's HBM capacity.
"""
from __future__ import annotations

from dataclasses import field, replace

import numpy as np
import pandas as pd

from tracekit.analysis import donation, hostcheck
from tracekit.analysis.allocators import CURVE_POINTS, allocator_summary
from tracekit.columns import column_numpy, stored
from tracekit.grouping import distinct_values, rows_by_text, unique
from tracekit.ingest import buffers as buf
from tracekit.records import record

PROGRAM_COLUMNS = ["module", "program_id", "memory_space", "argument_bytes", "output_bytes", "alias_bytes",
                   "temp_bytes", "constant_bytes", "thread_local_bytes", "footprint_bytes", "live_peak_bytes",
                   "live_peak_source", "largest_buffer_bytes", "largest_temp_bytes", "largest_temp_instruction",
                   "largest_temp_opcode", "largest_temp_source", "undonated_bytes", "undonated_parameters",
                   "executions", "hosts"]


@record(frozen=True)
class MemoryView:
    """The memory view of a trace: programs, buffers, live-bytes curves, device peaks, offload, allocators."""

    programs: pd.DataFrame  #: one row per (program, memory space), :data:`PROGRAM_COLUMNS`
    buffers: pd.DataFrame  #: every buffer worth listing, largest first (see :func:`largest_buffers`)
    curves: dict = field(default_factory=dict)  #: (module, program_id) -> DataFrame seq, instruction, live_bytes
    devices: pd.DataFrame = None  #: device-level peak per (host, device)
    offload: pd.DataFrame = None  #: programs with arrays in host memory
    allocators: pd.DataFrame = None  #: allocator events summarized per (host, allocator)
    timeline: dict = field(default_factory=dict)  #: (host, allocator) -> DataFrame start_ps, bytes_in_use
    capacity_bytes: float = float("nan")  #: the smallest HBM capacity among the trace's devices
    capacity_source: str = ""


def live_curve(heap: pd.DataFrame, sizes: dict, keep) -> tuple[np.ndarray, np.ndarray, list]:
    """(seq, live bytes after each event, instruction) of one heap-simulator trace, counting only buffers for
    which ``keep(buffer_id)`` is true. A SHARE_WITH reuses its canonical buffer's memory: nothing new is live,
    and the memory is free only when every sharer has been freed."""
    return _live(_records(heap[["seq", "kind", "buffer_id", "share_with", "instruction"]]), sizes, keep)


def _live(events: list, sizes: dict, keep) -> tuple[np.ndarray, np.ndarray, list]:
    """:func:`live_curve` of a trace's events as row dicts (seq, kind, buffer_id, share_with, instruction)."""
    canon, refs = {}, {}
    live, out = 0, []
    for e in events:
        kind, b, c = e["kind"], int(e["buffer_id"]), int(e["share_with"])
        if kind == 0:
            canon[b], refs[b] = b, 1
            if keep(b):
                live += sizes.get(b, 0)
        elif kind == 2:
            root = canon.get(c, c)
            canon[b] = root
            refs[root] = refs.get(root, 0) + 1
        elif kind == 1:
            root = canon.pop(b, b)
            refs[root] = refs.get(root, 1) - 1
            if refs[root] <= 0:
                refs.pop(root, None)
                if keep(root):
                    live -= sizes.get(root, 0)
        out.append(live)
    return np.array([e["seq"] for e in events], np.int64), np.array(out, np.int64), [e["instruction"] for e in events]


def _traces(events: list) -> list:
    """A program's heap-simulator events (row dicts, in table order) split by trace, traces in number order."""
    out: dict = {}
    for e in events:
        out.setdefault(e["trace"], []).append(e)
    return [out[t] for t in sorted(out)]


def _downsample(seq, live, names, k: int = CURVE_POINTS) -> pd.DataFrame:
    """At most ``k`` points of a curve, always keeping its peak and its ends."""
    n = len(live)
    keep = np.arange(n) if n <= k else np.unique(np.r_[np.linspace(0, n - 1, k - 1).astype(int), np.argmax(live)])
    return pd.DataFrame({"seq": np.asarray(seq)[keep], "instruction": [names[i] for i in keep],
                         "live_bytes": np.asarray(live)[keep]})


def _records(df: pd.DataFrame) -> list[dict]:
    """The rows of a small table as dicts of plain Python values (what ``to_dict("records")`` gives, in a tenth of
    its time: one ``tolist`` per column)."""
    cols = df.columns.tolist()
    return [dict(zip(cols, r)) for r in zip(*(_listed(df, c) for c in cols))] if len(df) else []


def _listed(df: pd.DataFrame, c) -> list:
    """``df[c].tolist()`` (a NumPy column read from its stored array, without the Series)."""
    a = stored(df, c)  # (an ExtensionArray lists its values as its Series does; datetimes: the Series' Timestamps)
    return df[c].tolist() if isinstance(a, np.ndarray) and a.dtype.kind in "Mm" else a.tolist()


def _by_program(df: pd.DataFrame) -> dict:
    """(module, program_id) -> list of row dicts (the buffer tables are small: plain records beat pandas here)."""
    out: dict = {}
    for r in _records(df):
        out.setdefault((r["module"], int(r["program_id"])), []).append(r)
    return out


_SUMS = (("argument_bytes", ("argument", "argument+output")), ("output_bytes", ("output", "argument+output")),
         ("alias_bytes", ("argument+output",)), ("temp_bytes", ("temp",)), ("constant_bytes", ("constant",)),
         ("thread_local_bytes", ("thread-local",)))


def programs(tables: buf.BufferTables, module_aliases: dict | None = None) -> tuple[pd.DataFrame, dict]:
    """The per-program summary (:data:`PROGRAM_COLUMNS`) and the device-space live curves of the heap simulator.
    ``module_aliases``: (module, program_id) -> set of parameter numbers whose buffer an output may reuse (the
    module's input/output alias config), for ``undonated_*``."""
    rows, curves = [], {}
    if not len(tables.allocations):
        return pd.DataFrame(columns=PROGRAM_COLUMNS), curves
    als, bus, hps = (_by_program(t) for t in (tables.allocations, tables.buffers, tables.heap))
    for key in sorted(als):
        mod, pid = key
        a, b = als[key], bus.get(key, [])
        kind_of = {x["allocation"]: x["kind"] for x in a}
        sizes = {x["buffer_id"]: x["size_bytes"] for x in b}
        color = {x["buffer_id"]: x["color"] for x in b}
        temp_buf = {x["buffer_id"] for x in b if kind_of.get(x["allocation"]) == "temp"}
        shapes = donation.allocation_shapes(b)
        peaks: dict = {}
        for ev in _traces(hps.get(key, [])):
            for c in sorted({color.get(int(e["buffer_id"]), -1) for e in ev} - {-1}):
                seq, live, names = _live(ev, sizes, lambda x, c=c: x in temp_buf and color.get(x) == c)
                if len(live) and live.max() > 0:
                    peaks[c] = peaks.get(c, 0) + int(live.max())
                    if c == 0 and (key not in curves or live.max() > curves[key]["live_bytes"].max()):
                        curves[key] = _downsample(seq, live, names)
        for c in sorted({x["color"] for x in a}):
            g = [x for x in a if x["color"] == c]
            sm = {k: sum(x["size_bytes"] for x in g if x["kind"] in v) for k, v in _SUMS}
            base = sm["argument_bytes"] + sm["output_bytes"] - sm["alias_bytes"] + sm["constant_bytes"]
            inc = [x for x in b if x["color"] == c]
            tb = [x for x in inc if x["buffer_id"] in temp_buf]
            top = max(tb, key=lambda x: x["size_bytes"]) if tb else None
            undonated, params = donation.undonated(g, a, (module_aliases or {}).get(key), shapes)
            rows.append({"module": mod, "program_id": pid, "memory_space": buf.space_name(c), **sm,
                         "footprint_bytes": base + sm["temp_bytes"],
                         "live_peak_bytes": base + (peaks[c] if c in peaks else sm["temp_bytes"]),
                         "live_peak_source": "heap simulator" if c in peaks else "allocations",
                         "largest_buffer_bytes": max((x["size_bytes"] for x in inc), default=0),
                         "largest_temp_bytes": top["size_bytes"] if top else 0,
                         "largest_temp_instruction": top["instruction"] if top else "",
                         "largest_temp_opcode": top["opcode"] if top else "",
                         "largest_temp_source": f"{top['source_file']}:{top['source_line']}"
                         if top and top["source_file"] else "",
                         "undonated_bytes": undonated, "undonated_parameters": params, "executions": 0,
                         "hosts": ""})
    types = {"program_id": np.uint64, **{c: np.int64 for c in PROGRAM_COLUMNS if c.endswith("_bytes")}}
    return pd.DataFrame({c: np.array([r[c] for r in rows], types[c]) if c in types else [r[c] for r in rows]
                         for c in PROGRAM_COLUMNS}), curves


def largest_buffers(tables: buf.BufferTables) -> pd.DataFrame:
    """One row per allocation that is not a temporary (its owner: the parameter instruction, else its largest
    logical buffer), and one per temporary logical buffer (each is one instruction's result); largest first.
    Columns: module, program_id, memory_space, kind, size_bytes, instruction, opcode, shape, source_file,
    source_line, parameter_number, allocation, from_host."""
    al, bu = tables.allocations, tables.buffers
    cols = ["module", "program_id", "memory_space", "kind", "size_bytes", "instruction", "opcode", "shape",
            "source_file", "source_line", "parameter_number", "allocation", "from_host"]
    if not len(al):
        return pd.DataFrame(columns=cols)
    # (plain lists: the tables are small, and a pandas merge, sort and de-duplication cost ms each on them)
    akey = list(zip(al["module"].tolist(), al["program_id"].tolist(), al["allocation"].tolist()))
    akind, asize = al["kind"].tolist(), al["size_bytes"].tolist()
    of: dict = {}  # allocation -> its rows in the allocations table
    for i, k in enumerate(akey):
        of.setdefault(k, []).append(i)
    bkey = list(zip(bu["module"].tolist(), bu["program_id"].tolist(), bu["allocation"].tolist()))
    bsize, bop = bu["size_bytes"].tolist(), bu["opcode"].tolist()
    temp, other = [], []  # (buffer row, allocation row): each buffer with its allocation, in buffer order
    for j, k in enumerate(bkey):
        for i in of.get(k, ()):
            (temp if akind[i] == "temp" else other).append((j, i))
    # an allocation that is not a temporary is listed once: the parameter instruction owns it, else its largest
    # buffer (the first of equal ones), at the allocation's size
    other.sort(key=lambda t: (bkey[t[0]], bop[t[0]] != "parameter", -bsize[t[0]]))
    owners, seen = [], set()
    for j, i in other:
        if bkey[j] not in seen:
            seen.add(bkey[j])
            owners.append((j, i))
    size = {k: asize[rows[0]] for k, rows in of.items()}
    picked = [(j, i, bsize[j]) for j, i in temp] + [(j, i, size[bkey[j]]) for j, i in owners]
    picked = [t for t in picked if t[2] > 0]
    # equal sizes: buffers of the program with the largest footprint first (the step, not a helper program)
    foot: dict = {}
    for (m, p, _), n in zip(akey, asize):
        foot[(m, p)] = foot.get((m, p), 0) + n
    inst = bu["instruction"].tolist()
    picked.sort(key=lambda t: (-t[2], -foot[bkey[t[0]][:2]], bkey[t[0]][0], inst[t[0]]))
    bj = np.array([t[0] for t in picked], np.int64)
    ai = np.array([t[1] for t in picked], np.int64)
    from_al = ("memory_space", "kind", "parameter_number")
    out = {"size_bytes": np.array([t[2] for t in picked], np.int64)}
    for c in cols:  # (arrays, each column's own type: a frame of Series would align their indexes)
        if c != "size_bytes":
            col, at = (al[c], ai) if c in from_al else (bu[c], bj)
            out[c] = col.to_numpy()[at] if isinstance(col.dtype, np.dtype) else col.array.take(at)
    return pd.DataFrame({c: out[c] for c in cols})


def device_peaks(progs: pd.DataFrame, executions: pd.DataFrame, ops: pd.DataFrame, capacity: dict) -> pd.DataFrame:
    """Per (host, device): ``peak_bytes`` (the largest sum of device-space footprints of programs running at
    once), ``programs_at_peak``, ``upper_bytes`` (+ arguments of the other programs that ran there),
    ``capacity_bytes`` (the chip's HBM, NaN when unknown), ``share`` = peak / capacity."""
    cols = ["host", "device", "peak_bytes", "programs_at_peak", "upper_bytes", "capacity_bytes", "share",
            "programs"]
    dev = progs[progs["memory_space"] == "device"]
    if not len(dev):
        return pd.DataFrame(columns=cols)
    foot = dict(zip(dev["program_id"].astype(np.uint64), dev["footprint_bytes"]))
    args = dict(zip(dev["program_id"].astype(np.uint64), dev["argument_bytes"]))
    name = dict(zip(dev["program_id"].astype(np.uint64), dev["module"]))
    win = executions if executions is not None and len(executions) else None
    if win is None and len(ops):  # no module executions: each program's op span on the device
        o = ops[~column_numpy(ops, "is_async", bool)]
        win = o.assign(end=o["start_ps"] + o["duration_ps"]).groupby(
            ["host", "device", "program_id"], observed=True).agg(start_ps=("start_ps", "min"), end=("end", "max"))
        win = win.reset_index().assign(duration_ps=lambda d: d["end"] - d["start_ps"])
    rows = []
    if win is None:
        return pd.DataFrame(columns=cols)
    known = np.array(sorted(foot), np.uint64)
    known_foot = np.array([foot[p] for p in known], np.int64)
    all_pids = win["program_id"].astype(np.uint64).to_numpy()
    all_st, all_dur = column_numpy(win, "start_ps", np.int64), column_numpy(win, "duration_ps", np.int64)
    for (h, d), idx in sorted(rows_by_text(win, ["host", "device"]).items()):
        pids = all_pids[idx]
        pos = np.minimum(np.searchsorted(known, pids), len(known) - 1)
        m = known[pos] == pids
        if not m.any():
            continue
        st = all_st[idx][m]
        en = st + all_dur[idx][m]
        pids, fp = pids[m], known_foot[pos[m]]
        t = np.r_[st, en]
        delta = np.r_[fp, -fp]
        order = np.lexsort((delta, t))  # at a tie, the end (negative) first: back-to-back programs do not add
        run = np.cumsum(delta[order])
        k = int(np.argmax(run)) if len(run) else 0
        at = t[order][k]
        live = sorted({name[p] for p in unique(pids[(st <= at) & (at < en)])} or {name[pids[0]]})
        peak = int(run[k]) if len(run) else 0
        peak = max(peak, int(fp.max()))
        distinct = unique(pids)  # (each program once: the names below are looked up per program, not per run)
        others = sum(args[p] for p in distinct) - min(args[p] for p in distinct)
        cap = capacity.get((h, d), np.nan)
        rows.append({"host": h, "device": d, "peak_bytes": peak, "programs_at_peak": ", ".join(live),
                     "upper_bytes": peak + int(others), "capacity_bytes": cap,
                     "share": peak / cap if cap and cap == cap else np.nan,
                     "programs": ", ".join(sorted({name[p] for p in distinct}))})
    return pd.DataFrame(rows, columns=cols)


def offload(progs: pd.DataFrame, tables: buf.BufferTables, capacity: float) -> pd.DataFrame:
    """Programs with arrays in host memory: host_bytes, device_peak_bytes (live peak today), staging_bytes
    (device copies of host arrays), need_bytes (see the module docstring), capacity_bytes, fits, share."""
    cols = ["module", "program_id", "host_bytes", "device_peak_bytes", "staging_bytes", "need_bytes",
            "capacity_bytes", "share", "fits"]
    host = progs[progs["memory_space"] == "host"]
    rows = []
    if len(host):  # (the tables as records, by program: few programs keep arrays in host memory)
        als, bus, hps = (_by_program(t) for t in (tables.allocations, tables.buffers, tables.heap))
        dev = {}
        for x in _records(progs[progs["memory_space"] == "device"]):
            dev.setdefault((x["module"], int(x["program_id"])), x)  # (the first row, as iloc[0] takes it)
    for r in (_records(host) if len(host) else ()):
        hb = int(r["argument_bytes"] + r["output_bytes"] - r["alias_bytes"] + r["temp_bytes"])
        if hb <= 0:
            continue
        key = (r["module"], int(r["program_id"]))
        b = bus.get(key, [])
        temp_alloc = {x["allocation"] for x in als.get(key, []) if x["kind"] == "temp"}
        dev_temp = [x for x in b if x["color"] == 0 and x["allocation"] in temp_alloc]
        staging = {x["buffer_id"] for x in dev_temp if x["from_host"]}
        sizes = {x["buffer_id"]: x["size_bytes"] for x in b}
        keep_ids = {x["buffer_id"] for x in dev_temp} - staging
        peak_wo = 0
        for ev in _traces(hps.get(key, [])):
            _, live, _ = _live(ev, sizes, lambda x: x in keep_ids)
            peak_wo += int(live.max()) if len(live) else 0
        base = 0
        dpeak = 0
        x = dev.get(key)
        if x is not None:
            base = int(x["argument_bytes"] + x["output_bytes"] - x["alias_bytes"] + x["constant_bytes"])
            dpeak = int(x["live_peak_bytes"])
            if x["live_peak_source"] != "heap simulator":  # no simulator trace: the temp allocation, staging included
                peak_wo = int(x["temp_bytes"])
        need = base + peak_wo + hb
        rows.append({"module": r["module"], "program_id": r["program_id"], "host_bytes": hb,
                     "device_peak_bytes": dpeak, "staging_bytes": int(sum(sizes[i] for i in staging)),
                     "need_bytes": need, "capacity_bytes": capacity, "share": need / capacity if capacity == capacity
                     and capacity else np.nan, "fits": bool(capacity == capacity and need <= capacity)})
    return pd.DataFrame(rows, columns=cols)


def aliases(modules: list) -> dict:
    """(module, program_id) -> parameter numbers an output may alias (the module's input/output alias config)."""
    return {(m.name, int(m.program_id)): {int(e.parameter_number) for e in m.proto.input_output_alias.entries}
            for m in modules}


def build(tr, chips: dict) -> MemoryView:
    """The memory view of a loaded trace; ``chips``: (host, device) -> Chip (the roofline join's,
    :attr:`tracekit.model.roofline.Joined.chips`: their HBM capacities)."""
    tables = buf.tables(tr.hlo_modules)
    progs, curves = programs(tables, aliases(tr.hlo_modules))
    runs = donation.executions(tr)  # (a program that never ran in the window holds nothing there)
    progs["executions"] = [runs.get((str(m), int(p)), 0) for m, p in zip(progs["module"], progs["program_id"])]
    ran_on = hostcheck.program_hosts(tr.ops) if len(tr.ops) else {}  # the hosts each program ran on
    progs["hosts"] = [",".join(ran_on.get((str(m), int(p)), ())) for m, p in zip(progs["module"], progs["program_id"])]
    capacity = {(str(h), str(d)): float(c.hbm_bytes) for (h, d), c in chips.items()}
    ran = set(distinct_values(column_numpy(tr.ops, "program_id", np.uint64))) if len(tr.ops) else set()
    caps = [v for v in capacity.values() if v == v]
    cap_src = sorted({c.sources.get("hbm_bytes", "") for c in chips.values()})
    devices = device_peaks(progs[progs["program_id"].astype(np.uint64).isin(ran)] if ran else progs,
                           tr.modules, tr.ops, capacity)
    alloc, timeline = allocator_summary(tr.memory_events)
    cap = min(caps) if caps else np.nan
    return MemoryView(programs=progs, buffers=largest_buffers(tables), curves=curves, devices=devices,
                      offload=offload(progs, tables, cap), allocators=alloc, timeline=timeline, capacity_bytes=cap,
                      capacity_source="; ".join(x for x in cap_src if x))


def with_offload_time(mv: MemoryView, per_device: pd.DataFrame) -> MemoryView:
    """``offload`` with what the time view says (``per_device``: the overview's device rows): per step, the wait on
    host-offload copies (``wait_per_step_ps``, the mean over devices: what keeping the arrays in HBM would save)
    and the host-link roofline of those copies (``host_link_per_step_ps``, the largest over devices: the least
    they cost while offloaded); ``wait_ps`` = the wait over every step and device. Several offloading programs
    share them in proportion to their host bytes."""
    off = mv.offload
    if off is None or not len(off):
        return mv
    dev = per_device if per_device is not None else pd.DataFrame()
    wait = float((dev["offload_wait_per_step_ps"] * dev["steps"]).sum()) if len(dev) else 0.0
    per = float(dev["offload_wait_per_step_ps"].mean()) if len(dev) else 0.0
    link = float(dev["host_link_per_step_ps"].max()) if len(dev) else 0.0
    share = off["host_bytes"] / off["host_bytes"].sum()
    off = off.assign(wait_per_step_ps=per * share, host_link_per_step_ps=link * share, wait_ps=wait * share,
                     steps=int(dev["steps"].max()) if len(dev) else 0)
    return replace(mv, offload=off)


def rule_frames(mv: MemoryView, per_device: pd.DataFrame, devices: pd.DataFrame) -> dict:
    """Frames for the memory and utilization rules: ``memory_devices`` (:func:`device_peaks` + ``span_ps``),
    ``memory_programs`` (the programs' device-space rows + ``capacity_bytes``, ``live_peak_share``, ``time_ps``
    = 0: memory findings claim no time), ``offload`` (:func:`offload` + :func:`with_offload_time`), ``overview``
    (the overview's device rows)."""
    md = mv.devices if mv.devices is not None else pd.DataFrame()
    if len(md) and devices is not None and len(devices):
        keys = list(zip(devices["host"].astype(str).tolist(), devices["device"].astype(str).tolist()))
        span = dict(zip(keys, devices["span_ps"].tolist()))
        mine = [span.get(k) for k in zip(md["host"].tolist(), md["device"].tolist())]
        if len(span) == len(keys) and None not in mine:  # (each device once, every one found: a left merge's column)
            md = md.assign(span_ps=np.array(mine, devices["span_ps"].dtype))
        else:
            span = devices.assign(host=devices["host"].astype(str), device=devices["device"].astype(str))
            md = md.merge(span[["host", "device", "span_ps"]], on=["host", "device"], how="left")
    progs = mv.programs[(mv.programs["memory_space"] == "device") & (mv.programs["footprint_bytes"] > 0)]
    progs = progs.assign(capacity_bytes=mv.capacity_bytes, live_peak_share=progs["live_peak_bytes"] /
                         mv.capacity_bytes if mv.capacity_bytes == mv.capacity_bytes else np.nan, time_ps=0)
    off = mv.offload if mv.offload is not None else pd.DataFrame()
    return {"memory_devices": md, "memory_programs": progs, "offload": off,
            "overview": per_device if per_device is not None else pd.DataFrame()}


__all__ = ["build", "MemoryView", "programs", "largest_buffers", "device_peaks", "offload", "allocator_summary",
           "live_curve", "aliases"]
