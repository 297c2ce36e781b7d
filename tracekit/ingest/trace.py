"""``tracekit.load(path) -> Trace``: the loader's public face. Resolves the path, decodes each host's XSpace,
extracts the frames (:mod:`tracekit.ingest.frames`), decodes the HLO (:mod:`tracekit.ingest.hlo`), and joins them:
module names by program id, HLO opcode and category per op, async windows, run ids, steps (the step program's
device runs: :mod:`tracekit.ingest.steps`)."""
from __future__ import annotations

import os
import re
from dataclasses import field

import numpy as np
import pandas as pd

from tracekit import collector, schema
from tracekit.ingest import frames
from tracekit.ingest import kernelprof
from tracekit.ingest import hlo
from tracekit.ingest import nesting
from tracekit.ingest import steps as steps_mod
from tracekit.ingest import windows
from tracekit.ingest import paths as _load
from tracekit.ingest import xspace
from tracekit.columns import column_numpy, concat_frames, constant_columns, narrow_int, with_columns
from tracekit.grouping import cat_apply, cat_from, codes_of, runs, unique_rows
from tracekit.ingest.order import contain, frame_order, sorted_frame, with_copies
from tracekit.options import DEFAULT_MAX_BYTES
from tracekit.records import record

ASYNC_PAIRABLE = ("all-reduce", "all-gather", "collective-permute", "copy", "async", "send", "recv",
                  "reduce-scatter", "all-to-all", "collective-broadcast")


@record
class Trace:
    """A loaded trace: its frames (ops, HLO, steps, modules, memory events, ...) and where they came from."""

    ops: pd.DataFrame
    hlo: pd.DataFrame
    modules: pd.DataFrame
    steps: pd.DataFrame
    lines: pd.DataFrame
    devices: pd.DataFrame
    host_events: pd.DataFrame = None
    memory_events: pd.DataFrame = None  #: allocator events (schema.MEMORY_EVENTS), when the trace has them
    kernel_profile: pd.DataFrame = None  #: MXU counters and Mosaic stages per kernel (schema.KERNEL_PROFILE)
    hlo_modules: list = field(default_factory=list)
    device_stats: dict = field(default_factory=dict)
    hosts: list = field(default_factory=list)
    paths: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    #: (module name, program id) -> the hosts whose trace holds that HLO module (:func:`per_host` reads it)
    module_hosts: dict = field(default_factory=dict)
    profile_spans: dict = field(default_factory=dict)  #: host -> (profile start, stop) in wall-clock ns, where known
    path_note: str | None = None  #: which run / sub-folder of the path was taken (locate.choose), when there was a choice

    def __repr__(self) -> str:
        ops = self.ops
        n_sync = int((~ops["is_async"]).sum()) if len(ops) else 0
        kinds = sorted({str(k) for k in self.devices["device_kind"]}) if len(self.devices) else []
        span = int((ops["start_ps"] + ops["duration_ps"]).max() - ops["start_ps"].min()) if len(ops) else 0
        from tracekit.units import fmt_time
        return (f"<tracekit Trace {', '.join(self.hosts) or '?'}: {len(self.devices)} device(s)"
                f"{' (' + ', '.join(kinds) + ')' if kinds else ''}; {n_sync:,} op executions over {fmt_time(span)}; "
                f"{len(self.modules['module'].unique()) if len(self.modules) else 0} module(s); "
                f"{self.steps['step'].nunique() if len(self.steps) else 0} step(s); "
                f"HLO {'yes' if self.has_hlo else 'no'}; {len(self.warnings)} warning(s)>")

    @property
    def has_hlo(self) -> bool:
        return len(self.hlo) > 0

    @property
    def device_ops(self) -> pd.DataFrame:
        """Synchronous op executions only (async windows overlap the ops that run inside them)."""
        return self.ops[~self.ops["is_async"]]


def load(path: str | os.PathLike, run: str | None = None, *, max_bytes: int | None = DEFAULT_MAX_BYTES,
         max_events: int | None = None, left_out: list | None = None) -> Trace:
    """Load a trace file, a run folder (every host), or a logdir (newest run, or ``run``). ``left_out``: a list to
    collect the hosts of a run folder that cannot be read, as ``(host, path, reason)``, each tried
    :data:`tracekit.ingest.badhosts.ATTEMPTS` times, instead of raising (:mod:`tracekit.ingest.badhosts`; when no
    host is left, its one error)."""
    chosen = _load.choose(path, run)  # (which run of a logdir was taken, in one warning: locate.choose)
    files, warnings = chosen.files, [chosen.note] if chosen.note else []
    kw = {"max_bytes": max_bytes, "max_events": max_events, "use_hostname": len(files) == 1}
    if left_out is None or len(files) == 1:
        parts, kept = [load_host(hf, warnings, **kw) for hf in files], files
    else:
        from tracekit.ingest import badhosts
        parts, kept = badhosts.load_each(files, load_host, warnings, left_out, **kw)
    tr = combine(parts, warnings)
    tr.paths = [str(f.path) for f in kept]
    tr.path_note = chosen.note
    return tr


@record(frozen=True)
class HostFrames:
    """One host's frames, decoded and joined: what :func:`load_host` hands :func:`combine` (which merges hosts
    into a :class:`Trace`). ``hlo_modules``: the decoded HLO modules; ``device_stats``: (host, device) -> the
    device plane's stats."""

    host: str
    ops: pd.DataFrame
    hlo: pd.DataFrame
    modules: pd.DataFrame
    steps: pd.DataFrame
    lines: pd.DataFrame
    devices: pd.DataFrame
    host_events: pd.DataFrame
    memory_events: pd.DataFrame
    hlo_modules: list
    device_stats: dict
    kernel_profile: pd.DataFrame = None  #: :mod:`tracekit.ingest.kernelprof`'s rows of this host
    profile_span: tuple | None = None  #: (start, stop) wall-clock ns of the profile (Task Environment plane)


def load_host(hf, warnings: list[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES,
              max_events: int | None = None, use_hostname: bool = False) -> HostFrames:
    """One host file's frames (decoded, limits checked, joined); :func:`combine` merges hosts. ``use_hostname``:
    name the host as the trace does rather than by its file name."""
    collector.resume()  # a one-shot process's imports are done: collect again (nothing in a library caller's)
    from tracekit.ingest import formats, limits
    if formats.is_json_name(os.fspath(hf.path)) or formats.looks_json(os.fspath(hf.path)):
        from tracekit.ingest import tracejson
        planes, hostnames = tracejson.load(hf, warnings, max_bytes=max_bytes, max_events=max_events)
    else:
        planes, hostnames = _load.load_space(hf, max_bytes, max_events)  # the limits are checked while decoding
    need = limits.work_of(planes)  # _host frees the decoded lines as it goes
    try:
        return _host(planes, hostnames[0] if use_hostname and hostnames else hf.host, warnings)
    except MemoryError:
        planes = None
        raise limits.out_of_memory(str(hf.path), need) from None


def _host(planes, host: str, warnings: list[str]) -> HostFrames:
    span = xspace.profile_span(planes)  # (this host's profile window: hostcheck compares the hosts')
    ex = frames.extract(planes, host, warnings)
    mods = _hlo_modules(planes, warnings)
    for p in planes:  # the decoded event columns are in the frames now: free them before the joins
        p.lines = []
    h = hlo.hlo_frame(mods)
    ops = ex.pop("ops")  # (popped: the frame before the joins is freed once they have replaced its columns)
    devs = pd.DataFrame([{k: d[k] for k in ("host", "device", "device_kind", "plane")} for d in ex["devices"]],
                        columns=["host", "device", "device_kind", "plane"])
    dstats = {(d["host"], d["device"]): d["stats"] for d in ex["devices"]}
    op_devices = set(ops["device"].cat.categories.tolist()) if len(ops) else set()
    if any(str(d).startswith("CPU") for d in op_devices):
        cpu = sorted({str(d) for d in op_devices} - set(devs["device"]), key=_dev_key)
        devs = pd.concat([devs, pd.DataFrame({"host": host, "device": cpu, "device_kind": "cpu", "plane": "/host:CPU"})])
        for d in cpu:
            dstats[(host, d)] = {}
    # module names by program id (HLO metadata and XLA Modules lines)
    names = {m.program_id: m.name for m in mods}
    mx = ex["modules"]
    for name, pid in unique_rows(mx, ["module", "program_id"])[1] if len(mx) else []:
        names.setdefault(int(pid), str(name))
    ops = _fill_modules(ops, names)
    asyncs = _fill_modules(ex.pop("async"), names)
    ops = _join_hlo(ops, h)
    asyncs = _join_hlo(asyncs, h)
    if len(ops):  # the op rows and the async windows, in (device, start) order: one gather per column
        paired = windows.paired_starts(ops, asyncs, h)
        if paired is not None and not len(asyncs) and schema.conform(ops, schema.OPS) is ops:
            # every window paired from its -start row: the windows are copies of those rows but for their own columns
            own = windows.window_columns(ops, *paired)
            parts = [ops]
            del ops, asyncs  # (handed over: each column is let go once its sorted column is made)
            ops = with_copies(parts, paired[0], own)
            del own
        else:
            parts = [ops, *windows.window_frames(ops, asyncs, paired)]
            del ops, asyncs  # (handed over: concat_frames lets each column before the sort go once it is sorted)
            ops = concat_frames(parts, order=frame_order(parts), consume=True)
        del paired
    else:
        del asyncs
    kinds = dict(zip(devs["device"], devs["device_kind"]))
    dinv, drows = unique_rows(ops, ["device"])
    ops = with_columns(ops, {"device_kind": cat_from([kinds.get(d, "") for (d,) in drows], dinv)})
    if not len(mx):
        mx = _module_runs(ops, host)
    ops = _assign_runs(ops, mx)
    devices = sorted({str(d) for d in ops["device"].unique()}, key=_dev_key) if len(ops) else []
    steps = steps_mod.device_steps(ex["steps"], ex["host_steps"], mx, devices, host, warnings)
    ops = _assign_steps(ops, steps)
    ops = with_columns(ops, {"self_ps": _self_ps(ops)}) if len(ops) else ops
    _consistency_warnings(ops, h, host, warnings)
    return HostFrames(host=host, ops=ops, hlo=h, modules=mx, steps=steps, lines=ex["lines"], devices=devs,
                      host_events=ex["host_events"], memory_events=ex["memory_events"], hlo_modules=mods,
                      device_stats=dstats, kernel_profile=ex["kernel_profile"],
                      profile_span=span)


def _self_ps(ops: pd.DataFrame) -> np.ndarray | pd.Series:
    """Self time of every op row: nested events on one line (sync rows only) leave their parent its own time.
    Only host-clock lines nest (XLA:CPU thunks, GPU streams): a TPU op's duration is the device clock's while its
    start is the line's, so TPU events may seem to overlap without nesting (xprof counts no child time there)."""
    dur = column_numpy(ops, "duration_ps", np.int64)
    sync = ~column_numpy(ops, "is_async", bool) & cat_apply(ops["source"], lambda v: str(v).startswith(("cpu", "gpu")))
    if not sync.any():
        return ops["duration_ps"]  # nothing can nest (TPU op lines): the durations' column, shared (copy-on-write)
    idx = np.nonzero(sync)[0]
    line = ops["line"].array.codes if isinstance(ops["line"].dtype, pd.CategoricalDtype) else \
        pd.factorize(ops["line"])[0]
    own = nesting.self_times(line[idx].astype(np.int64), column_numpy(ops, "start_ps", np.int64)[idx], dur[idx])[0]
    if np.array_equal(own, dur[idx]):
        return ops["duration_ps"]  # nothing nested (most GPU streams): shared as above
    out = dur.copy()
    out[idx] = own
    return out


def _hlo_modules(planes, warnings: list[str]) -> list:
    """The HLO modules of every ``/host:metadata`` plane (a file may hold the plane twice), each once."""
    mods, seen = [], set()
    for p in planes:
        if p.name == "/host:metadata":
            for m in hlo.modules_from_plane(p.head, warnings):
                if (m.name, m.program_id) not in seen:
                    seen.add((m.name, m.program_id))
                    mods.append(m)
    return mods


#: Devices of one host whose ops lie further apart than this from all the others' suggest a clock offset.
CLOCK_GAP_PS = 1_000_000_000_000  # 1 s
#: Share of op time that did not join to the HLO (when the trace has HLO) worth a warning.
UNJOINED_SHARE = 0.001
_HLO_SOURCES = ("xla_ops", "gpu_kernel", "cpu_thunk")


def _consistency_warnings(ops: pd.DataFrame, h: pd.DataFrame, host: str, warnings: list[str]) -> None:
    """Warn about what makes the analysis less trustworthy: devices whose time ranges lie apart (clock offset),
    ops that did not join to the trace's HLO, device ops without any HLO."""
    if not len(ops):
        return
    sync = ~column_numpy(ops, "is_async", bool)
    codes, devs = codes_of(ops["device"])
    start = column_numpy(ops, "start_ps")
    dur = column_numpy(ops, "duration_ps")
    if len(devs) > 1:
        # first start and last end of each device's sync ops (one run of rows per device in a sorted frame)
        first: dict = {}
        last: dict = {}
        for d, rows in runs(codes):
            ok = sync[rows]
            if not ok.any():
                continue
            s_ = start[rows][ok]
            lo_, hi_ = s_.min(), (s_ + dur[rows][ok]).max()
            first[d], last[d] = min(first.get(d, lo_), lo_), max(last.get(d, hi_), hi_)
        lo, hi = pd.Series(first, dtype="int64").sort_index(), pd.Series(last, dtype="int64").sort_index()
        far = []
        for d in lo.index:
            others_lo, others_hi = lo.drop(d), hi.drop(d)
            if not len(others_lo):
                continue
            gap = max(int(lo[d]) - int(others_hi.max()), int(others_lo.min()) - int(hi[d]), 0)
            if gap > CLOCK_GAP_PS:
                far.append((str(devs[d]), gap))
        if far:
            worst = max(g for _, g in far)
            warnings.append(f"{host}: the ops of {', '.join(d for d, _ in far)} lie up to {worst / 1e12:.3g} s apart "
                            "from the other devices' (a clock offset between devices?): cross-device comparisons "
                            "(collectives, overlap, steps) may be off")
    src_codes, srcs = codes_of(ops["source"])
    real = sync & np.isin(src_codes, [i for i, v in enumerate(srcs) if v in _HLO_SOURCES])
    total = int(dur[real].sum())
    if not real.any() or total <= 0:
        return
    if len(h):
        missed = real & ~column_numpy(ops, "in_hlo", bool)
        share = int(dur[missed].sum()) / total
        if share > UNJOINED_SHARE:
            warnings.append(f"{host}: {share:.1%} of op time ({int(missed.sum()):,} op executions) did not match an "
                            "instruction of the trace's HLO (ops not in their module's HLO, or HLO of another "
                            "program): those ops have no HLO category or cost")
    elif not np.isfinite(column_numpy(ops, "trace_flops", float)[real]).all() and not any(
            w.startswith(f"{host}: read from trace-viewer JSON, which has no HLO proto") for w in warnings):
        # (a trace-viewer JSON's reader said it already, with what else the format lacks: said once)
        warnings.append(f"{host}: the trace holds no HLO (no 'Hlo Proto' in a /host:metadata plane): ops without "
                        "cost stats of their own have no FLOPs/bytes, so no roofline")


def _dev_key(d: str):
    kind, _, num = d.partition(":")
    return (kind, int(num) if num.isdigit() else 0)


def _fill_modules(ops: pd.DataFrame, names: dict) -> pd.DataFrame:
    """Rows without a module name get it from their program id (one lookup per distinct pair)."""
    if not len(ops):
        return ops
    inv, rows = unique_rows(ops, ["module", "program_id"])
    return with_columns(ops, {"module": cat_from([m if m else names.get(int(p), "") for m, p in rows], inv)})


_COPY_KERNEL = re.compile(r"memcpy|memset|copybuffer|fillbuffer|copy_?kernel|\bcopy\b", re.IGNORECASE)
_FORMAT_KERNEL = re.compile(r"transpose|im\d*d?2col|col2im|permute|layout|nchw|nhwc", re.IGNORECASE)


def kernel_category(kernel: str) -> str:
    """Category of a GPU kernel with no HLO op, from its name: memcpy/memset/buffer copies and fills -> 'copy',
    transposes/im2col/layout changes -> 'data formatting', anything else -> 'kernel (no HLO)'."""
    k = str(kernel or "")
    if _COPY_KERNEL.search(k):
        return "copy"
    if _FORMAT_KERNEL.search(k):
        return "data formatting"
    return "kernel (no HLO)"


def _join_hlo(ops: pd.DataFrame, h: pd.DataFrame) -> pd.DataFrame:
    """opcode and category from the HLO instruction each op ran (joined on program id and instruction name, once
    per distinct pair); ``in_hlo`` says which rows joined."""
    if not len(ops):
        return ops
    table = {}
    if len(h):
        top = h[~h["is_fusion_computation"]]
        table = {(int(p), n): (o, c) for p, n, o, c in zip(top["program_id"], top["name"], top["opcode"].astype(str),
                                                           top["category"].astype(str))}
    cols = ["program_id", "op", "opcode", "category", "source"] + (["kernel"] if "kernel" in ops.columns else [])
    inv, rows = unique_rows(ops, cols)
    out = []
    for pid, op, opc, cat, src, *kernel in rows:
        hit = table.get((int(pid), op or ""))
        if hit:
            opc, cat = hit[0], (cat or hit[1])
        cat = cat or opc or (kernel_category(kernel[0] if kernel else "") if str(src).startswith("gpu") else "")
        out.append((bool(hit), opc or "", cat))
    return with_columns(ops, {"in_hlo": np.array([o[0] for o in out], bool)[inv] if out else np.zeros(0, bool),
                              "opcode": cat_from([o[1] for o in out], inv),
                              "category": cat_from([o[2] for o in out], inv)})


def _module_runs(ops: pd.DataFrame, host: str) -> pd.DataFrame:
    """Module executions derived from ops that carry a run id (XLA:CPU): one per (device, module, run id)."""
    o = ops[ops["source"] == "cpu_thunk"]  # XLA:CPU run ids can be negative: every value is real
    if not len(o):
        return schema.empty(schema.MODULES)
    g = o.assign(end=o["start_ps"] + o["duration_ps"]).groupby(["device", "module", "program_id", "run_id"],
                                                                 observed=True)
    r = g.agg(start_ps=("start_ps", "min"), end=("end", "max")).reset_index()
    r["duration_ps"] = r["end"] - r["start_ps"]
    r["host"] = host
    return schema.conform(r.drop(columns="end"), schema.MODULES, extra=False)


def _assign_runs(ops: pd.DataFrame, mx: pd.DataFrame) -> pd.DataFrame:
    """TPU ops get the run id of the module execution (``XLA Modules`` line) that contains them."""
    tpu = cat_apply(ops["source"], lambda v: v in ("xla_ops", "async_xla_ops", "async_pair")).astype(bool) \
        if len(ops) else None
    if not len(ops) or not len(mx) or not tpu.any():
        return ops
    run = column_numpy(ops, "run_id").copy()
    run[tpu] = contain(ops[["device", "start_ps"]][tpu], mx, "run_id")  # two columns, not the whole frame
    return with_columns(ops, {"run_id": run})


def _assign_steps(ops: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    if len(ops) and len(steps):
        ops = with_columns(ops, {"step": contain(ops, steps, "step")})
    return ops


def combine(parts: list[HostFrames], warnings: list[str]) -> Trace:
    """One :class:`Trace` of the hosts' frames (in host order; ops sorted by host, device, start)."""
    def cat(key, sch):
        frames_ = [getattr(p, key) for p in parts if len(getattr(p, key))]
        if not frames_:
            return schema.empty(sch)
        return schema.conform(concat_frames(frames_), sch)

    seen, mods, owners = set(), [], {}
    for p in parts:
        for m in p.hlo_modules:
            owners.setdefault((m.name, m.program_id), []).append(p.host)
            if (m.name, m.program_id) not in seen:
                seen.add((m.name, m.program_id))
                mods.append(m)
    h = [p.hlo for p in parts if len(p.hlo)]
    hl = pd.concat(h, ignore_index=True).drop_duplicates(["program_id", "computation", "name"]) if h else schema.empty(schema.HLO)
    ops = cat("ops", schema.OPS)
    if sum(len(p.ops) > 0 for p in parts) > 1:  # one host's rows are in (device, start) order already (load_host)
        ops = sorted_frame(ops)
    ops = constant_columns(ops)  # (no trace costs on GPU/CPU: stored once)
    ops = with_columns(ops, {c: narrow_int(ops[c].to_numpy()) for c in schema.NARROW_INTS if c in ops.columns})
    devs = pd.concat([p.devices for p in parts], ignore_index=True)
    warnings[:] = steps_mod.fold_warnings(warnings)  # (one line for the hosts whose annotations miss the runs)
    dstats = {}
    for p in parts:
        dstats.update(p.device_stats)
    return Trace(ops=ops, hlo=schema.conform(hl.reset_index(drop=True), schema.HLO), modules=cat("modules", schema.MODULES),
                 steps=cat("steps", schema.STEPS), lines=cat("lines", schema.LINES), devices=devs,
                 host_events=cat("host_events", schema.HOST_EVENTS),
                 memory_events=cat("memory_events", schema.MEMORY_EVENTS),
                 kernel_profile=kernelprof.combine([p.kernel_profile for p in parts]),
                 hlo_modules=mods, device_stats=dstats, hosts=[p.host for p in parts], warnings=warnings,
                 module_hosts={k: tuple(v) for k, v in owners.items()},
                 profile_spans={p.host: p.profile_span for p in parts if p.profile_span})
