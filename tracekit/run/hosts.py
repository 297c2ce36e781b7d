"""Many hosts in parallel: a run folder with one ``*.xplane.pb`` per host, each host handled by its own worker.

    rep = tracekit.run.hosts.analyze("logs/plugins/profile/run1", jobs=8)            # local processes
    rep = tracekit.run.hosts.analyze("gs://bucket/logs", dask="tcp://10.0.0.2:8786")  # a Dask cluster

Each worker reads and decodes one host's file (a local path, or a URL through fsspec), extracts that host's frames
(what :func:`tracekit.ingest.trace.load` builds per host) and joins the roofline to its ops (what
:func:`tracekit.pipeline.with_roofline` computes per row). It sends back only frames, pickled: categorical columns
keep them small, and the HLO modules travel as serialized protos that the parent decodes once per distinct module.

The parent combines the parts exactly as :func:`tracekit.ingest.trace.load` does and runs the rest of the pipeline
(timeline, rules, report) once on the combined frames, so the report is byte-identical to
``tracekit.pipeline.analyze(run_folder)``: the same cluster-wide top ops, findings, devices and steps. The per-host
roofline equals the cluster-wide one when every host has the same device names and the same HLO modules and no
host has multi-kernel GPU ops (:func:`_roofline_per_host_ok`); otherwise the parent recomputes it on the combined
ops (still equal, only slower).

:func:`host_summary` turns a report into one row per host: step times, busy time, and straggler hosts by the
modified z-score ``0.6745·(x − median)/MAD`` (|z| > 3.5, as xprof).
"""
from __future__ import annotations

import os
import sys
import threading
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from tracekit.ingest import paths as _load
from tracekit.ingest.trace import HostFrames
from tracekit.errors import TraceError

STRAGGLER_Z = 3.5


@dataclass
class _Module:
    """An HLO module on the wire: the proto as bytes (decoded once per distinct module by the parent)."""
    name: str
    program_id: int
    blob: bytes
    buffers: bytes | None = None  #: the buffer assignment, serialized (None when the trace has none)


@dataclass
class HostPart:
    """What a worker sends back for one host: its frames (the ops roofline-joined when ``ops_columns`` is set: it
    names the columns of the plain ops frame; the HLO modules as :class:`_Module` on the wire), the loader's
    warnings, and the device names the host saw (``devices_seen``, to check that the per-host joins agree)."""
    frames: HostFrames
    warnings: list
    ops_columns: list | None = None
    devices_seen: list | None = None


def load_part(path: str, host: str, max_bytes: int | None = _load.DEFAULT_MAX_BYTES,
              max_events: int | None = None, roofline: bool = True, chip: str | None = None,
              topology: str | None = None, host_order: list | None = None) -> HostPart:
    """One host's frames (what :func:`tracekit.ingest.trace.load` builds per host), with ``ops`` roofline-joined
    (``roofline``), ready to pickle. Runs in a worker."""
    from tracekit import pipeline
    from tracekit.ingest import trace
    warnings: list[str] = []
    frames = trace.load_host(_load.HostFile(host, path), warnings, max_bytes=max_bytes, max_events=max_events)
    part = HostPart(frames, warnings)
    if roofline:
        one = trace.combine([frames], [])  # this host alone, as the cluster-wide path sees it
        if host_order:
            one.hosts = list(host_order)  # GPU device ids count the hosts before this one
        part.ops_columns = list(one.ops.columns)
        part.devices_seen = sorted(set(one.devices["device"].astype(str)))
        frames = replace(frames, ops=pipeline.with_roofline(one, chip, topology))
        del one
    part.frames = replace(frames, hlo_modules=[
        _Module(m.name, m.program_id, m.proto.SerializeToString(),
                m.buffers.SerializeToString() if m.buffers is not None else None) for m in frames.hlo_modules])
    return part


def _revive(parts: list[HostPart]) -> None:
    """Decode the HLO modules back into protos, once per (name, program id, bytes); duplicates share the object."""
    from tracekit.ingest import hlo
    from tracekit.proto import hlo_pb2
    seen: dict = {}
    for p in parts:
        mods = []
        for m in p.frames.hlo_modules:
            key = (m.name, m.program_id, m.blob, m.buffers)
            if key not in seen:
                seen[key] = hlo.Module(m.name, m.program_id, hlo_pb2.HloModuleProto.FromString(m.blob),
                                       None if m.buffers is None else hlo_pb2.BufferAssignmentProto.FromString(m.buffers))
            mods.append(seen[key])
        p.frames = replace(p.frames, hlo_modules=mods)


def _roofline_per_host_ok(parts: list[HostPart]) -> bool:
    """(After :func:`_revive`.) True when each host's own roofline join equals the cluster-wide one. Beyond each
    row, the join reads the number of distinct device names (collectives with empty replica groups), the HLO
    modules (costs by program id and op, first module wins) and, for GPU ops made of several kernels,
    consecutive kernels per device name; those must agree across hosts."""
    if not all(p.ops_columns is not None for p in parts):
        return False
    first = parts[0]
    devs = set().union(*(p.devices_seen for p in parts))
    if any(len(p.devices_seen) != len(devs) for p in parts):
        return False
    mods = [sorted(map(id, p.frames.hlo_modules)) for p in parts]  # _revive made identical modules one object
    if any(m != mods[0] for m in mods[1:]) or any(len(p.frames.hlo) != len(first.frames.hlo) for p in parts):
        return False
    gpu = [bool(len(p.frames.ops)) and (p.frames.ops["source"].astype(str) == "gpu_kernel").any() for p in parts]
    if sum(gpu) > 1:
        return False
    # categorical columns the join adds must carry the same categories on every host: then their union (how
    # hosts are combined) is in the order the cluster-wide join would give, whatever order that is
    for c in first.frames.ops.columns:
        if c not in first.ops_columns and isinstance(first.frames.ops[c].dtype, pd.CategoricalDtype):
            cats = first.frames.ops[c].cat.categories
            if any(not p.frames.ops[c].cat.categories.equals(cats) for p in parts[1:]):
                return False
    return True


def _jobs(jobs: int | None) -> int:
    return max(1, os.cpu_count() or 1) if not jobs else max(1, int(jobs))


def load_parts(files: list, *, jobs: int | None = None, dask: str | object | None = None,
               max_bytes: int | None = _load.DEFAULT_MAX_BYTES, max_events: int | None = None,
               roofline: bool = True, chip: str | None = None, topology: str | None = None) -> list[HostPart]:
    """Per-host parts of ``files`` (:class:`tracekit.ingest.paths.HostFile`), in order (see :func:`load_part`), made by a
    process pool of ``jobs`` workers (0/None: one per core) or by the Dask cluster ``dask`` (an address or a
    ``Client``)."""
    n = len(files)
    order = [f.host for f in files]
    args = ([os.fspath(f.path) for f in files], [f.host for f in files], [max_bytes] * n, [max_events] * n,
            [roofline] * n, [chip] * n, [topology] * n, [order] * n)
    if dask is not None:
        client, own = _client(dask)
        try:
            parts = client.gather(client.map(load_part, *args, pure=False))
        finally:
            if own:
                client.close()
    elif _jobs(jobs) == 1 or n == 1:
        parts = list(map(load_part, *args))
    else:
        # Parts come back through files in a private folder (in memory under /dev/shm where there is one):
        # several times faster than multiprocessing's pipe for hundreds of MB per host.
        import shutil
        import tempfile
        from concurrent.futures import ProcessPoolExecutor
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        folder = tempfile.mkdtemp(prefix="tracekit-hosts-", dir=shm)
        try:
            with ProcessPoolExecutor(max_workers=min(_jobs(jobs), n), mp_context=_mp_context()) as ex:
                parts = [_read_part(f) for f in ex.map(_part_to_file, [folder] * n, range(n), *args)]
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    _revive(parts)
    return parts


def _part_to_file(folder: str, i: int, *args) -> str:
    """(worker) :func:`load_part`, pickled into ``folder``; returns the file's path."""
    import pickle
    path = os.path.join(folder, f"part{i}.pkl")
    with open(path, "wb") as f:
        pickle.dump(load_part(*args), f, protocol=pickle.HIGHEST_PROTOCOL)
    return path


def _read_part(path: str) -> HostPart:
    import pickle
    with open(path, "rb") as f:
        part = pickle.load(f)
    os.unlink(path)
    return part


def _mp_context():
    """fork where it is safe (Linux, no other threads, no JAX runtime: workers start with tracekit already
    imported), forkserver otherwise on Linux, else the platform default."""
    import multiprocessing as mp
    if sys.platform.startswith("linux"):
        safe = threading.active_count() == 1 and "jax" not in sys.modules
        return mp.get_context("fork" if safe else "forkserver")
    return mp.get_context()


def _client(dask):
    """(client, whether we opened it): a ``dask.distributed.Client`` as given, or one connected to an address."""
    if not isinstance(dask, str):
        return dask, False
    try:
        from dask.distributed import Client
    except ImportError:
        raise TraceError("--dask needs dask.distributed", dask, "pip install 'tracekit[dask]'") from None
    try:
        return Client(dask, timeout=10), True
    except (OSError, TimeoutError) as e:
        raise TraceError(f"cannot reach the Dask scheduler ({type(e).__name__}: {e})", dask,
                         "give the scheduler address, e.g. tcp://HOST:8786") from None


def _combine(parts: list[HostPart], files: list):
    """(Trace, roofline-joined ops or None) from the parts, as :func:`tracekit.ingest.trace.load` combines hosts."""
    from tracekit import schema
    from tracekit.ingest import trace
    per_host = _roofline_per_host_ok(parts)
    plain: set = set()
    frames = []
    for p in parts:
        f = p.frames
        if p.ops_columns is not None:
            plain.update(p.ops_columns)
            if not per_host:
                f = replace(f, ops=f.ops[p.ops_columns])
        frames.append(f)
    warnings = [w for p in parts for w in p.warnings]
    parts.clear()  # the combined frames hold the hosts' frames now
    tr = trace.combine(frames, warnings)
    del frames
    tr.paths = [str(f.path) for f in files]
    ops = None
    if per_host:
        ops = schema.conform(tr.ops, {**schema.OPS, **schema.ROOFLINE})
        tr.ops = ops[[c for c in ops.columns if c in plain]]  # the plain ops frame (copy-on-write: no copy)
    return tr, ops


def load(path, run: str | None = None, *, jobs: int | None = None, dask=None,
         max_bytes: int | None = _load.DEFAULT_MAX_BYTES, max_events: int | None = None):
    """:func:`tracekit.load` with the hosts loaded in parallel: the same :class:`tracekit.ingest.trace.Trace`."""
    from tracekit.ingest import trace
    chosen = _load.choose(path, run)
    files = chosen.files
    if len(files) == 1:
        return trace.load(path, run=run, max_bytes=max_bytes, max_events=max_events)
    parts = load_parts(files, jobs=jobs, dask=dask, max_bytes=max_bytes, max_events=max_events, roofline=False)
    tr = _combine(parts, files)[0]
    tr.warnings[:0] = [chosen.note] if chosen.note else []  # which run was taken (locate.choose), as trace.load
    tr.path_note = chosen.note
    return tr


def analyze(source, *, jobs: int | None = None, dask=None, run: str | None = None, max_bytes=None, max_events=None,
            chip: str | None = None, topology: str | None = None, **kw):
    """:func:`tracekit.pipeline.analyze` of a run folder (or logdir) with its hosts mapped to small summaries by
    ``jobs`` processes or the Dask cluster ``dask`` (an address, ``"local"`` or a Client) and reduced in this
    process (:mod:`tracekit.run.pod`); the other keywords are ``pipeline.analyze``'s. A single file, or
    ``jobs == 1`` without ``dask``, takes the single-process path."""
    from tracekit import pipeline
    from tracekit.ingest.trace import Trace
    from tracekit.run import pod
    if isinstance(source, Trace) or (dask is None and _jobs(jobs) == 1):
        return pipeline.analyze(source, run=run, max_bytes=max_bytes, max_events=max_events, chip=chip,
                                topology=topology, **kw)
    files = _load.resolve(source, run)
    if len(files) == 1:
        return pipeline.analyze(source, run=run, max_bytes=max_bytes, max_events=max_events, chip=chip,
                                topology=topology, **kw)
    return pod.analyze(source, jobs=_jobs(jobs), dask=dask, run=run, max_bytes=max_bytes, max_events=max_events,
                       chip=chip, topology=topology, **kw)


def host_summary(report, threshold: float = STRAGGLER_Z) -> pd.DataFrame:
    """One row per host from a report (or its ``data`` dict): devices, steps, step_ps_mean / step_ps_median /
    step_ps_max (over its devices' steps), busy_ps and span_ps (mean over its devices), the modified z-scores of
    step_ps_mean and busy_ps across hosts, and ``is_straggler`` (either z above ``threshold``). Sorted by host."""
    from tracekit.analysis import timeline as tl
    data = getattr(report, "data", report)
    dev = pd.DataFrame(data.get("devices") or [], columns=["host", "device", "busy_ps", "span_ps"])
    st = pd.DataFrame(data.get("device_steps") or [],
                      columns=["host", "device", "steps", "step_ps_sum", "step_ps_median", "step_ps_max"])
    per = dev.groupby("host").agg(devices=("device", "nunique"), busy_ps=("busy_ps", "mean"),
                                  span_ps=("span_ps", "mean"))
    if len(st):
        g = st.groupby("host")
        s = pd.DataFrame({"steps": g["steps"].sum(), "step_ps_mean": g["step_ps_sum"].sum() / g["steps"].sum(),
                          "step_ps_median": g["step_ps_median"].median(), "step_ps_max": g["step_ps_max"].max()})
        per = per.join(s, how="outer")
    else:
        per = per.assign(steps=0, step_ps_mean=np.nan, step_ps_median=np.nan, step_ps_max=np.nan)
    per = per.reset_index().sort_values("host", ignore_index=True)
    per["steps"] = per["steps"].fillna(0).astype("int64")
    per["devices"] = per["devices"].fillna(0).astype("int64")
    few = len(per) < 3
    for c in ("step_ps_mean", "busy_ps"):
        per[f"{c}_z"] = np.nan if few else tl.modified_z(per[c]).to_numpy()
    per["is_straggler"] = (per["step_ps_mean_z"] > threshold) | (per["busy_ps_z"] > threshold)
    return per[["host", "devices", "steps", "step_ps_mean", "step_ps_median", "step_ps_max", "busy_ps", "span_ps",
                "step_ps_mean_z", "busy_ps_z", "is_straggler"]]


def stragglers(report, threshold: float = STRAGGLER_Z) -> list[str]:
    """Hosts whose mean step time or busy time is an outlier (modified z-score above ``threshold``)."""
    s = host_summary(report, threshold)
    return s.loc[s["is_straggler"], "host"].tolist()


__all__ = ["analyze", "load", "load_parts", "load_part", "host_summary", "stragglers"]
