"""Many hosts in parallel: a run folder with one ``*.xplane.pb`` per host, each host loaded by its own worker.

    rep = tracekit.hosts.analyze("logs/plugins/profile/run1", jobs=8)            # local processes
    rep = tracekit.hosts.analyze("gs://bucket/logs", dask="tcp://10.0.0.2:8786")  # a Dask cluster

Each worker reads and decodes one host's file (local path, or a URL through fsspec) and extracts that host's
frames: the part :func:`tracekit.trace.load` builds per host, which is the bulk of the work (bytes -> columnar
events -> ops/steps/devices/host events/HLO frames). It sends back only those frames, pickled (categorical columns
keep them small; the HLO modules travel as serialized protos and the parent decodes one copy of each module). The
parent combines the parts exactly as :func:`tracekit.trace.load` does and runs the rest of the pipeline
(roofline, timeline, rules, report) once on the combined frames, so the report is byte-identical to
``tracekit.pipeline.analyze(run_folder)``: same cluster-wide top ops, findings, devices and steps.

:func:`host_summary` turns a report into one row per host: step times, busy time, and straggler hosts by the
modified z-score ``0.6745·(x − median)/MAD`` (|z| > 3.5, as xprof).
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tracekit import loader as _load
from tracekit.errors import TraceError

STRAGGLER_Z = 3.5


@dataclass
class _Module:
    """An HLO module on the wire: the proto as bytes (decoded once per distinct module by the parent)."""
    name: str
    program_id: int
    blob: bytes


def load_part(path: str, host: str, max_bytes: int | None = _load.DEFAULT_MAX_BYTES,
              max_events: int | None = None) -> dict:
    """One host's frames (what :func:`tracekit.trace.load` builds per host), ready to pickle. Runs in a worker."""
    from tracekit import trace
    hf = _load.HostFile(host, path)
    warnings: list[str] = []
    decoded = _load.load_space(hf, max_bytes)  # (planes, hostnames); an XSpace before the columnar decoder
    planes = decoded[0] if isinstance(decoded, tuple) else decoded
    if max_events is not None:
        n = sum(_events(line) for p in getattr(planes, "planes", planes) for line in p.lines)
        if n > max_events:
            raise TraceError(f"trace holds {n:,} events, over the {max_events:,} limit", str(path),
                             "raise it with --max-events")
    part = trace._host(planes, host, warnings)
    del planes, decoded
    part["hlo_modules"] = [_Module(m.name, m.program_id, m.proto.SerializeToString()) for m in part["hlo_modules"]]
    part["warnings"] = warnings
    return part


def _events(line) -> int:
    n = getattr(line, "n_events", None)
    return n if n is not None else len(line.events)


def _revive(parts: list[dict]) -> None:
    """Decode the HLO modules back into protos, once per (name, program id, bytes); duplicates share the object."""
    from tracekit import hlo
    from tracekit.proto import hlo_pb2
    seen: dict = {}
    for p in parts:
        mods = []
        for m in p["hlo_modules"]:
            key = (m.name, m.program_id, m.blob)
            if key not in seen:
                seen[key] = hlo.Module(m.name, m.program_id, hlo_pb2.HloModuleProto.FromString(m.blob))
            mods.append(seen[key])
        p["hlo_modules"] = mods


def _jobs(jobs: int | None) -> int:
    return max(1, os.cpu_count() or 1) if not jobs else max(1, int(jobs))


def load_parts(files: list, *, jobs: int | None = None, dask: str | object | None = None,
               max_bytes: int | None = _load.DEFAULT_MAX_BYTES, max_events: int | None = None) -> list[dict]:
    """Per-host parts of ``files`` (:class:`tracekit.loader.HostFile`), in order, loaded by a process pool of
    ``jobs`` workers (0/None: one per core) or by the Dask cluster ``dask`` (an address or a ``Client``)."""
    paths = [os.fspath(f.path) for f in files]
    hosts = [f.host for f in files]
    n = len(files)
    if dask is not None:
        client, own = _client(dask)
        try:
            futs = client.map(load_part, paths, hosts, [max_bytes] * n, [max_events] * n, pure=False)
            parts = client.gather(futs)
        finally:
            if own:
                client.close()
    elif _jobs(jobs) == 1 or n == 1:
        parts = [load_part(p, h, max_bytes, max_events) for p, h in zip(paths, hosts)]
    else:
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=min(_jobs(jobs), n), mp_context=_mp_context()) as ex:
            parts = list(ex.map(load_part, paths, hosts, [max_bytes] * n, [max_events] * n))
    _revive(parts)
    return parts


def _mp_context():
    """fork where it is safe (Linux, no other threads: workers start with tracekit already imported), forkserver
    when this process has threads, else the platform default."""
    import multiprocessing as mp
    import threading
    if sys.platform.startswith("linux"):
        return mp.get_context("fork" if threading.active_count() == 1 else "forkserver")
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
        return Client(dask, timeout=30), True
    except (OSError, TimeoutError) as e:
        raise TraceError(f"cannot reach the Dask scheduler ({type(e).__name__}: {e})", dask,
                         "give the scheduler address, e.g. tcp://HOST:8786") from None


def load(path, run: str | None = None, *, jobs: int | None = None, dask=None,
         max_bytes: int | None = _load.DEFAULT_MAX_BYTES, max_events: int | None = None):
    """:func:`tracekit.load` with the hosts loaded in parallel: the same :class:`tracekit.trace.Trace`."""
    from tracekit import trace
    files = _load.resolve(path, run)
    if len(files) == 1:
        return trace.load(path, run=run, max_bytes=max_bytes, max_events=max_events)
    parts = load_parts(files, jobs=jobs, dask=dask, max_bytes=max_bytes, max_events=max_events)
    warnings = [w for p in parts for w in p.pop("warnings")]
    tr = trace._combine(parts, warnings)
    tr.paths = [str(f.path) for f in files]
    return tr


def analyze(source, *, jobs: int | None = None, dask=None, run: str | None = None, max_bytes=None, max_events=None,
            **kw):
    """:func:`tracekit.pipeline.analyze` of a run folder (or logdir) with its hosts loaded in parallel by ``jobs``
    processes or the Dask cluster ``dask``; the other keywords are ``pipeline.analyze``'s. Same Report, byte for
    byte. A single file, or ``jobs == 1`` without ``dask``, takes the single-process path."""
    from tracekit import pipeline
    from tracekit.trace import Trace
    mb = max_bytes if max_bytes is not None else _load.DEFAULT_MAX_BYTES
    if isinstance(source, Trace) or (dask is None and _jobs(jobs) == 1):
        return pipeline.analyze(source, run=run, max_bytes=max_bytes, max_events=max_events, **kw)
    tr = load(source, run=run, jobs=jobs, dask=dask, max_bytes=mb, max_events=max_events)
    return pipeline.analyze(tr, **kw)


def host_summary(report, threshold: float = STRAGGLER_Z) -> pd.DataFrame:
    """One row per host from a report (or its ``data`` dict): devices, steps, step_ps_mean / step_ps_median /
    step_ps_max (over its devices' steps), busy_ps and span_ps (mean over its devices), the modified z-scores of
    step_ps_mean and busy_ps across hosts, and ``is_straggler`` (either z above ``threshold``). Sorted by host."""
    from tracekit import timeline as tl
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
