"""The map: one host's trace -> its :class:`~tracekit.report.engine.context.HostSummary` (runs where the host's file
is read: in this process, a pool worker or a Dask worker)."""
from __future__ import annotations

import time

from tracekit.options import Options
from tracekit.report.engine.context import HostSummary


def summarize(hv, seconds: float = 0.0) -> HostSummary:
    """Every section's part of one :class:`tracekit.analysis.hostview.HostView`."""
    from tracekit.report import engine
    parts = {m.NAME: m.summarize(hv) for m in engine.sections()}
    return HostSummary(hv.host, hv.path, parts, seconds)


def summarize_trace(tr, options: Options, *, hosts: tuple = (), ops=None, release_trace_costs: bool = False,
                    progress=None, pod: bool | None = None) -> HostSummary:
    """The summary of one host's loaded trace ``tr`` (``tr.hosts == [host]``); ``hosts``: every host of the run, in
    order (a run of one file gives none); ``ops``: the caller's own roofline-joined ops; ``pod``: whether the run
    has more than one host file (None: more than one of ``hosts``)."""
    from tracekit.analysis import hostview
    from tracekit.model import predictions
    from tracekit.progress import NULL
    t0 = time.perf_counter()
    hv = hostview.build(tr, options, hosts=hosts, ops=ops, release_trace_costs=release_trace_costs,
                        progress=progress, pod=len(hosts) > 1 if pod is None else pod)
    (progress or NULL).stage("rules")
    try:
        return summarize(hv, time.perf_counter() - t0)
    finally:  # the host's frames are done with: a table of their predictions goes with them
        predictions.release(hv.ops)


def summarize_file(path: str, host: str, options: Options, hosts: tuple = (), use_hostname: bool = False,
                   progress=None) -> HostSummary:
    """The summary of one host file (a local path or a URL fsspec reads): the map function every engine runs.
    ``use_hostname``: name the host as its trace does (a single file) rather than ``host``. Raises what loading
    raises (:class:`tracekit.errors.TraceError` for a bad file)."""
    from tracekit.ingest import paths, trace
    from tracekit.progress import NULL
    (progress or NULL).stage("loading the trace")
    t0 = time.perf_counter()
    warnings: list[str] = []
    frames = trace.load_host(paths.HostFile(host, path), warnings, max_bytes=options.max_bytes,
                             max_events=options.max_events, use_hostname=use_hostname)
    tr = trace.combine([frames], warnings)
    del frames
    tr.paths = [str(path)]
    s = summarize_trace(tr, options, hosts=hosts if not use_hostname else (), release_trace_costs=True,
                        progress=progress)
    return HostSummary(s.host, s.path, s.parts, time.perf_counter() - t0)
