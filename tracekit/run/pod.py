"""Where the engine's map runs: this process, a process pool (``jobs``) or a Dask cluster (``dask``).

    rep = tracekit.analyze("logs/plugins/profile/run1", jobs=8)               # local processes
    rep = tracekit.analyze("gs://bucket/run1", dask="tcp://10.0.0.2:8786")     # a Dask cluster
    rep = tracekit.analyze("run1", dask="local")                               # a LocalCluster here

One engine (:mod:`tracekit.report.engine`) for every place: the same map function
(:func:`tracekit.report.engine.host.summarize_file`) runs in this process, in a pool worker or on a Dask worker,
each worker reading its host's file itself (a local path or a URL); the same reduce runs here
(:func:`tracekit.pipeline.analyze`), so the reports are equal. A host whose file is corrupt or missing, or whose
worker dies, is tried once more, then left out with a warning in the report; the other hosts' analysis
completes. Ctrl-C cancels what is queued or running and leaves no worker busy.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading

from tracekit.errors import TraceError
from tracekit.ingest import badhosts
from tracekit.ingest.badhosts import ATTEMPTS
from tracekit.options import Options
from tracekit.report.engine.host import summarize_file


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


def _quiet_worker() -> None:
    """A pool worker's initializer: Ctrl-C at a terminal reaches the whole process group, and a worker waiting
    for its next host would print the pool's traceback; the parent reports the interrupt in one line, so a
    worker just ends (exit 130) on SIGINT, whether it is reading a host or idle."""
    import signal
    signal.signal(signal.SIGINT, lambda *_: os._exit(130))
    if hasattr(signal, "pthread_sigmask"):  # held while the parent forked this worker (see _held_sigint)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextlib.contextmanager
def _held_sigint():
    """SIGINT held (blocked) in this thread while the pool forks its workers: a forked worker starts with the
    parent's handler until its initializer runs, and a Ctrl-C in that window printed its traceback; held, the
    signal waits for the initializer (the worker) and for the end of the block (here, where it raises)."""
    import signal
    old = None
    if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread():
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _children() -> set:
    import multiprocessing as mp
    return set(mp.active_children())


def _stop_workers(before: set) -> None:
    """End the child processes started since ``before`` (:func:`_children`): the pool's workers, not a
    caller's own children (the interrupt must not wait for a host being read)."""
    for child in _children() - before:
        child.terminate()


def map_hosts(files: list, opt: Options, run_hosts: tuple = (), progress=None) -> tuple[list, list]:
    """(summaries in host order, failures [(host, path, reason)]) of ``files``
    (:class:`tracekit.ingest.paths.HostFile`), each host tried up to :data:`ATTEMPTS` times: on the Dask cluster
    ``opt.dask``, else in a pool of ``opt.jobs`` processes (0: one per core), else here. The map of
    :func:`tracekit.pipeline.analyze` (its ``mapper``)."""
    from tracekit.progress import NULL
    if len(files) == 1:  # a single file: read here, as without jobs
        from tracekit import pipeline
        return pipeline.map_here(files, opt, run_hosts, progress)
    hp = HostProgress(progress or NULL, len(files))
    jobs = (os.cpu_count() or 1) if not opt.jobs else int(opt.jobs)
    dask, opt = opt.dask, opt.for_worker()
    task = (opt, tuple(run_hosts))
    if dask is not None:
        results = _on_dask(files, task, dask, hp)
    elif jobs <= 1:
        results = {}
        for i, f in enumerate(files):
            results[i] = _in_process(f, task, hp)
    else:
        results = _in_pool(files, task, jobs, hp)
    summaries, failures = [], []
    for i, f in enumerate(files):
        r = results.get(i)
        if isinstance(r, BaseException) or r is None:
            failures.append((f.host, str(f.path), badhosts.reason(r) if r is not None else "not analyzed"))
        else:
            summaries.append(r)
    return summaries, failures


def _in_process(f, task, hp):
    s, err = badhosts.attempt(summarize_file, os.fspath(f.path), f.host, *task)  # what the pool and Dask catch, too
    hp.host(f.host, err is None, 0.0 if s is None else s.seconds)
    return s if err is None else err


def _in_pool(files, task, jobs, hp) -> dict:
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
        before = _children()
        ex = ProcessPoolExecutor(max_workers=width, mp_context=_pool_context(), initializer=_quiet_worker)
        futs = {}
        try:
            broken = False
            with _held_sigint():
                for i in batch:
                    try:
                        futs[ex.submit(summarize_file, os.fspath(files[i].path), files[i].host, *task)] = i
                        tries[i] += 1
                    except BrokenProcessPool as e:  # a worker died before this host was queued (a Ctrl-C as
                        results[i], broken = e, True  # the pool started): queued again, no try counted
            pending = set(futs)
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
            # the workers got the terminal's SIGINT too (and ended), or not (a SIGINT to this process alone):
            # end them, so the reads running are not waited for; the broken pool then fails what is queued.
            # No future is cancelled: Python 3.11's pool raises InvalidStateError in its thread when a worker
            # dies after a cancel (it sets the pool-broken exception on the cancelled future).
            _stop_workers(before)
            ex.shutdown(wait=False)  # (nothing joined: the interrupt must not wait on the pool's threads)
            ex = None
            raise
        finally:
            if ex is not None:
                ex.shutdown(wait=True)
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


def _on_dask(files, task, dask, hp) -> dict:
    from dask.distributed import as_completed
    client, cluster = _client(dask, int(os.environ.get("TRACEKIT_DASK_WORKERS", "0")) or (os.cpu_count() or 1))
    own = isinstance(dask, str)
    futs = {}
    try:
        futs = {client.submit(summarize_file, os.fspath(f.path), f.host, *task, pure=False, retries=ATTEMPTS - 1,
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


def analyze(source, options: Options | None = None, *, progress=None, **given):
    """The Report of ``source`` (a trace file, run folder, logdir or loaded Trace): :func:`tracekit.pipeline.analyze`
    with the hosts of a run folder mapped by ``options.jobs`` processes (0: one per core) or on the Dask cluster
    ``options.dask`` (an address, ``"local"`` or a Client); a single file, a loaded Trace, or ``jobs == 1``
    without ``dask`` maps in this process. The Options' fields may be given as keywords."""
    from tracekit import options as options_mod
    from tracekit import pipeline
    opt = options_mod.make(options, **given)
    here = opt.dask is None and opt.jobs == 1
    return pipeline.analyze(source, opt, progress=progress, mapper=None if here else map_hosts)
