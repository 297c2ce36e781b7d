"""Section ``memory``: the memory view (programs, largest buffers, live-bytes curves, device peaks, host offload,
allocators) merged over the hosts, and the memory rules' frames."""
from __future__ import annotations

NAME = "memory"
MEMORY_BUFFERS = 20  #: largest buffers kept in the envelope
MEMORY_CURVES = 4  #: heap-simulator curves kept (the programs with the largest live peaks)
MEMORY_ALLOCATORS = 16  #: allocator timelines kept


def summarize(hv):
    """The host's :class:`tracekit.analysis.memory.MemoryView` (offload times are the pod's: added by the reduce)."""
    return hv.memory


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import memory
    mem = memory.with_offload_time(merge(parts), ctx.overview.devices)
    ctx.memory = mem
    ctx.frames.update(memory.rule_frames(mem, ctx.overview.devices, ctx.devices))
    return {"memory": section(mem)}


def merge(views: list):
    """The pod's memory view from the hosts' (in host order): programs, buffers, curves and offload of every
    distinct program as the first host that has it holds them (a program's executions summed over the hosts, the
    hosts it ran on joined), device peaks and allocators of every host, the smallest capacity. One view is
    returned as it is."""
    from tracekit.analysis.memory import MemoryView
    from tracekit.columns import stack
    if len(views) == 1:
        return views[0]
    key = ["module", "program_id", "memory_space"]
    seen: set = set()
    progs, bufs, off = [], [], []
    runs: dict = {}
    ran_on: dict = {}  # program -> the hosts it ran on, every host's together
    for v in views:
        p = v.programs
        mine = list(zip(*(p[k].tolist() for k in key))) if len(p) else []
        if "executions" in p.columns:
            for k, n in zip(mine, p["executions"].tolist()):
                runs[k] = runs.get(k, 0) + int(n)
        if "hosts" in p.columns:
            for k, hs in zip(mine, p["hosts"].tolist()):
                ran_on.setdefault(k, set()).update(h for h in str(hs).split(",") if h)
        new = [k not in seen for k in mine]
        if not any(new):  # (the common case: the programs of a host before it)
            continue
        fresh = {(m, int(i)) for (m, i, _), n in zip(mine, new) if n}
        progs.append(p[new])
        b = v.buffers
        if len(b):
            bufs.append(b[[(m, int(i)) in fresh for m, i in zip(b["module"].tolist(), b["program_id"].tolist())]])
        o = v.offload
        if o is not None and len(o):
            off.append(o[[(m, int(i)) in fresh for m, i in zip(o["module"].tolist(), o["program_id"].tolist())]])
        seen.update(mine)
    progs = stack(progs) if progs else views[0].programs.iloc[:0]
    if "executions" in progs.columns and len(progs):
        progs["executions"] = [runs.get(k, 0) for k in zip(*(progs[k].tolist() for k in key))]
    if "hosts" in progs.columns and len(progs):
        progs["hosts"] = [",".join(sorted(ran_on.get(k, ()))) for k in zip(*(progs[k].tolist() for k in key))]
    bufs = stack(bufs).sort_values("size_bytes", ascending=False, kind="stable", ignore_index=True) if bufs else \
        views[0].buffers.iloc[:0]
    curves, timeline = {}, {}
    for v in views:
        for k, c in v.curves.items():
            curves.setdefault(k, c)
        timeline.update(v.timeline)

    def cat(name):
        fs = [getattr(v, name) for v in views if getattr(v, name) is not None and len(getattr(v, name))]
        if not fs:
            return next((getattr(v, name) for v in views if getattr(v, name) is not None), None)
        return stack(fs)
    caps = [v.capacity_bytes for v in views if v.capacity_bytes == v.capacity_bytes]
    srcs = sorted({x for v in views for x in v.capacity_source.split("; ") if x})
    return MemoryView(programs=progs, buffers=bufs, curves=curves, devices=cat("devices"),
                      offload=stack(off) if off else views[0].offload, allocators=cat("allocators"),
                      timeline=timeline, capacity_bytes=min(caps) if caps else float("nan"),
                      capacity_source="; ".join(srcs))


def section(mv) -> dict:
    """The memory view (:class:`tracekit.analysis.memory.MemoryView`) as JSON-ready data."""
    from tracekit.report.envelope import clean, records
    progs = mv.programs[mv.programs["footprint_bytes"] > 0] if len(mv.programs) else mv.programs
    peaks = progs[progs["memory_space"] == "device"].sort_values(["live_peak_bytes", "module"],
                                                                 ascending=[False, True])
    keep = [(m, int(p)) for m, p in zip(peaks["module"], peaks["program_id"])][:MEMORY_CURVES]
    curves = []
    for m, p in keep:
        c = next((v for (mm, pp), v in sorted(mv.curves.items(), key=lambda kv: (kv[0][0], int(kv[0][1])))
                  if mm == m and int(pp) == p), None)
        if c is not None:
            curves.append({"module": m, "program_id": p, "memory_space": "device",
                           "points": [[int(a), int(b), str(n)] for a, n, b in zip(c["seq"], c["instruction"],
                                                                                   c["live_bytes"])]})
    timeline = []
    for (h, a), c in sorted(mv.timeline.items())[:MEMORY_ALLOCATORS]:
        timeline.append({"host": h, "allocator": a,
                         "points": [[int(t), float(b)] for t, b in zip(c["start_ps"], c["bytes_in_use"])]})
    return clean({
        "capacity_bytes": mv.capacity_bytes, "capacity_source": mv.capacity_source,
        "programs": records(progs.sort_values(["memory_space", "footprint_bytes", "module"],
                                              ascending=[True, False, True])),
        "buffers": records(mv.buffers.head(MEMORY_BUFFERS)),
        "devices": records(mv.devices) if mv.devices is not None else [],
        "offload": records(mv.offload) if mv.offload is not None else [],
        "curves": curves,
        "allocators": records(mv.allocators) if mv.allocators is not None else [],
        "timeline": timeline,
    })


