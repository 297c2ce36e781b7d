"""A pod's analysis: map on the workers (:mod:`tracekit.run.podmap`), reduce on the driver
(:mod:`tracekit.run.podreduce`), the driver's memory independent of the event count.

    rep = tracekit.run.pod.analyze("logs/plugins/profile/run1", jobs=8)               # local processes
    rep = tracekit.run.pod.analyze("gs://bucket/run1", dask="tcp://10.0.0.2:8786")     # a Dask cluster
    rep = tracekit.run.pod.analyze("run1", dask="local")                               # a LocalCluster here

One path for every engine: the same map function runs in this process (``jobs=1``), in a process pool, or on
Dask workers; each worker reads its host's file itself (a local path or a URL). A host whose file is corrupt or
missing, or whose worker dies, is tried once more, then left out with a warning in the report; the other hosts'
analysis completes. Ctrl-C cancels what is queued or running and leaves no worker busy.
"""
from __future__ import annotations

import os
import sys
import threading

from tracekit.errors import TraceError
from tracekit.ingest import badhosts
from tracekit.ingest.badhosts import ATTEMPTS
from tracekit.run.podmap import Options, summarize




class HostProgress:
    """Per-host progress on the ``progress`` line (:class:`tracekit.progress.Progress`): hosts done of all,
    the last host finished, failures so far."""

    def __init__(self, progress, n: int):
        self.progress, self.n, self.done, self.failed = progress, n, 0, 0

    def host(self, host: str, ok: bool, seconds: float = 0.0) -> None:
        self.done += ok
        self.failed += not ok
        fail = f", {self.failed} failed" if self.failed else ""
        self.progress.stage(f"hosts {self.done}/{self.n}{fail} (last: {host}, {seconds:.1f} s)")


def _pool_context():
    import multiprocessing as mp
    if sys.platform.startswith("linux"):
        safe = threading.active_count() == 1 and "jax" not in sys.modules
        return mp.get_context("fork" if safe else "forkserver")
    return mp.get_context()


def map_hosts(files: list, opt: Options, *, jobs: int = 1, dask=None, progress=None) -> tuple[list, list]:
    """(summaries in host order, failures [(host, path, reason)]) of ``files``
    (:class:`tracekit.ingest.paths.HostFile`), each host tried up to :data:`ATTEMPTS` times."""
    from tracekit.progress import NULL
    hp = HostProgress(progress or NULL, len(files))
    if dask is not None:
        results = _on_dask(files, opt, dask, hp)
    elif jobs <= 1 or len(files) == 1:
        results = {}
        for i, f in enumerate(files):
            results[i] = _in_process(f, opt, hp)
    else:
        results = _in_pool(files, opt, jobs, hp)
    summaries, failures = [], []
    for i, f in enumerate(files):
        r = results.get(i)
        if isinstance(r, BaseException) or r is None:
            failures.append((f.host, str(f.path), badhosts.reason(r) if r is not None else "not analyzed"))
        else:
            summaries.append(r)
    return summaries, failures


def _in_process(f, opt, hp):
    s, err = badhosts.attempt(summarize, os.fspath(f.path), f.host, opt)  # what the pool and Dask catch, too
    hp.host(f.host, err is None, 0.0 if s is None else s.seconds)
    return s if err is None else err


def _in_pool(files, opt, jobs, hp) -> dict:
    """A process pool of ``jobs`` workers; a pool broken by a dying worker is replaced, and from then on each
    host left runs in a pool of its own (so the host that kills its worker is the one that pays)."""
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool
    tries = {i: 0 for i in range(len(files))}
    results: dict = {}
    todo = list(range(len(files)))
    isolate = False
    while todo:
        width = 1 if isolate else min(jobs, len(todo))
        batch = todo[:1] if isolate else todo
        ex = ProcessPoolExecutor(max_workers=width, mp_context=_pool_context())
        futs = {}
        try:
            futs = {ex.submit(summarize, os.fspath(files[i].path), files[i].host, opt): i for i in batch}
            for i in batch:
                tries[i] += 1
            pending = set(futs)
            broken = False
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fu in done:
                    i = futs[fu]
                    try:
                        s = fu.result()
                        results[i] = s
                        hp.host(files[i].host, True, s.seconds)
                    except BrokenProcessPool as e:
                        broken = True
                        results[i] = e
                    except Exception as e:  # noqa: BLE001 - reported per host, the others go on
                        results[i] = e
            if broken:
                isolate = True
        except KeyboardInterrupt:
            for fu in futs:
                fu.cancel()
            ex.shutdown(wait=False, cancel_futures=True)  # the workers got the terminal's SIGINT too
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
        todo = [i for i in batch if isinstance(results.get(i), BaseException) and tries[i] < ATTEMPTS] + \
            [i for i in todo if i not in batch]
        for i in batch:
            if isinstance(results.get(i), BaseException) and tries[i] >= ATTEMPTS:
                hp.host(files[i].host, False)
    return results


def _client(dask, workers: int):
    """(client, cluster or None): ``dask`` is a Client, a scheduler address, or ``"local"`` (a LocalCluster of
    ``workers`` processes started here)."""
    if not isinstance(dask, str):
        return dask, None
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise TraceError("--dask needs dask.distributed", dask, "pip install 'tracekit[dask]'") from None
    if dask == "local":
        import logging
        import warnings
        # silence_logs: a host that fails is one notice line, not the workers' "Compute Failed" tracebacks; the
        # scheduler's HTTP server takes another port when 8787 is busy (another cluster): no warning for that
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
            cluster = LocalCluster(n_workers=max(1, workers), threads_per_worker=1, processes=True,
                                   dashboard_address=None, host="127.0.0.1", silence_logs=logging.CRITICAL)
        return Client(cluster), cluster
    try:
        return Client(dask, timeout=10), None
    except (OSError, TimeoutError) as e:
        raise TraceError(f"cannot reach the Dask scheduler ({type(e).__name__}: {e})", dask,
                         "give the scheduler address, e.g. tcp://HOST:8786, or 'local'") from None


def _on_dask(files, opt, dask, hp) -> dict:
    from dask.distributed import as_completed
    client, cluster = _client(dask, int(os.environ.get("TRACEKIT_DASK_WORKERS", "0")) or (os.cpu_count() or 1))
    own = isinstance(dask, str)
    futs = {}
    try:
        futs = {client.submit(summarize, os.fspath(f.path), f.host, opt, pure=False, retries=ATTEMPTS - 1,
                              key=f"tracekit-host-{i}-{f.host}"): i for i, f in enumerate(files)}
        results = {}
        for fu in as_completed(list(futs)):
            i = futs[fu]
            try:
                s = fu.result()
                results[i] = s
                hp.host(files[i].host, True, s.seconds)
            except Exception as e:  # noqa: BLE001 - a failed host (corrupt, missing, its worker killed)
                results[i] = e
                hp.host(files[i].host, False)
            fu.release()
        return results
    except KeyboardInterrupt:
        client.cancel(list(futs), force=True)
        raise
    finally:
        if own:
            client.close()
            if cluster is not None:
                cluster.close()


def analyze(source, *, jobs: int | None = 1, dask=None, run: str | None = None, chip: str | None = None,
            topology: str | None = None, rules_dirs=(), select=(), ignore=(), params: dict | None = None,
            hidden: float = 0.9, exposed: float = 0.1, min_gap_ps: int = 0, fail_on: str = "never",
            max_bytes=None, max_events=None, progress=None, model_flops_per_step: float | None = None,
            max_evidence: int = 10):
    """The Report of a run folder's hosts, mapped by ``jobs`` processes (0: one per core) or the Dask cluster
    ``dask`` and reduced here (see the module docstring); the keywords are :func:`tracekit.pipeline.analyze`'s."""
    from tracekit.analysis import rule_cases, rule_model, rules
    from tracekit.ingest import paths
    from tracekit.run import podreport
    rule_list = rule_cases.check_user_rules(rule_model.load_rules(extra_dirs=rules_dirs, select=select, ignore=ignore))
    params = rules.check_params(rule_list, params)
    resolved = [(r, r.resolve(rule_model.params_for(r, params))) for r in rule_list]
    chosen = paths.choose(source, run)  # (the one chooser of trace.load too: the same note on both paths)
    files = chosen.files
    opt = Options(max_bytes=max_bytes, max_events=max_events, chip=chip, topology=topology,
                  host_order=tuple(f.host for f in files) if len(files) > 1 else (),
                  rules_dirs=tuple(str(d) for d in rules_dirs or ()), select=tuple(select or ()),
                  ignore=tuple(ignore or ()), params=tuple((k, tuple(sorted(dict(v).items())))
                                                           for k, v in sorted(params.items())), hidden=hidden,
                  exposed=exposed, min_gap_ps=min_gap_ps, max_evidence=max_evidence)
    n = (os.cpu_count() or 1) if not jobs else int(jobs)
    summaries, failures = map_hosts(files, opt, jobs=n, dask=dask, progress=progress)
    if not summaries:
        raise badhosts.none_left(failures)
    if progress is not None:
        progress.stage("reducing")
    return podreport.report(summaries, failures, files, resolved, opt, fail_on=fail_on,
                            model_flops_per_step=model_flops_per_step, notes=(chosen.note,) if chosen.note else ())
