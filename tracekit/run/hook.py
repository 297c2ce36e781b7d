"""The post-run hook: profile part of a training job, analyze it off the training thread, never break the job.

    with tracekit.profile(logdir="logs"):            # the whole block
        train()

    @tracekit.profile(logdir="logs")                 # each call of the function
    def train(): ...

    hook = tracekit.profile(start_step=10, num_steps=5, logdir="logs")   # a window of steps
    for i in range(steps):
        hook.step(i)
        train_step(...)
    hook.close()                                     # or `with tracekit.profile(...) as hook:` around the loop

    with tracekit.profile() as p:                     # no logdir: no files left behind
        train()
    p.report                                         # the Report, after the block

The trace goes to ``<logdir>/plugins/profile/<run>/``; the analysis runs in a detached child process
(:mod:`tracekit.run.hookchild`: its own session, lower CPU priority, ended after ``timeout_s``) started as soon as
the trace stops, so in the step-window form it overlaps the rest of training. One log line says where the report
will be. ``close()`` waits for it; a job that exits without ``close()`` does not wait: the child finishes the
report on its own. The report files (``tracekit-report.json``,
``tracekit-report.html``, ...) land in the run folder and a short summary (the top 3 findings with their savings)
is logged at INFO. ``hook.report`` is the :class:`~tracekit.report.envelope.Report` once the analysis is done
(read from the JSON report; None before, or without one).

Without a ``logdir`` the trace goes to a temporary folder: the analysis writes only its JSON report there,
``report`` is read from it, and the folder is removed, so nothing is left behind (also when the analysis fails,
times out, or the job is interrupted). A job that exits without ``close()`` then gets no analysis (nobody is left
to read it): its trace is removed at exit.

Any failure inside tracekit — a log folder that cannot be created, a profiler trace already running, jax
missing, a trace that cannot be written or read, the analysis failing or running past ``timeout_s`` — is logged
as one warning and training goes on; nothing propagates into the training code. The one exception is opt-in:
with ``fail_on=SEVERITY``, :class:`~tracekit.errors.FindingsError` is raised by ``close()`` (or at the end of the
``with`` block / decorated call, when it ends without an exception) if a finding reached that severity.

In multi-process JAX every process traces, and only process 0 (``jax.process_index() == 0``) analyzes unless
``all_processes=True``. ``TRACEKIT_HOOK_FAIL=1`` in the environment makes the analysis fail on purpose (to check
that a job survives it).
"""
from __future__ import annotations

import atexit
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tracekit.errors import FindingsError
from tracekit.run import hookchild
from tracekit.run.hookchild import EXTENSIONS

_LOG = logging.getLogger("tracekit")
SEVERITIES = ("info", "warning", "error")
TEMP_PREFIX = "tracekit-profile-"  #: the temporary folder of a profile without a logdir
STEP_NAME = "train"


def profile(logdir=None, *, outputs=("json", "html"), fail_on: str | None = None, timeout_s: float = 120,
            all_processes: bool = False, log: logging.Logger = _LOG, start_step: int | None = None,
            num_steps: int | None = None, threads: int = 1, options=None) -> "Profile":
    """A profiling hook: a context manager, a decorator, or (with ``start_step``/``num_steps``) a step window
    driven by ``hook.step(i)``. Without ``logdir`` nothing is left on disk and ``hook.report`` is the result (see
    the module docstring); ``outputs`` then does not apply. The analysis child runs on ``threads`` threads
    (decoding, rules, BLAS; default 1: training keeps the other cores). ``options``: the analysis'
    :class:`tracekit.options.Options` (chip, rules, thresholds, ...; ``fail_on`` here is the hook's gate). See the
    module docstring."""
    return Profile(logdir, outputs=outputs, fail_on=fail_on, timeout_s=timeout_s, all_processes=all_processes,
                   log=log, start_step=start_step, num_steps=num_steps, threads=threads, options=options)


class Profile:
    def __init__(self, logdir=None, *, outputs=("json", "html"), fail_on=None, timeout_s=120, all_processes=False,
                 log=_LOG, start_step=None, num_steps=None, threads=1, options=None):
        self.log = log if log is not None else _LOG
        self.options = options
        self.threads = 1
        try:
            self.threads = max(1, int(threads))
        except (TypeError, ValueError):
            self._warn(f"threads={threads!r} is not a number; the analysis runs on one thread")
        self.logdir, self.timeout_s, self.all_processes = None, 120.0, False
        self.temporary = logdir is None  # no logdir: a temporary folder per trace, removed once read
        self.window, self.start_step, self.num_steps = False, 0, 5
        self.outputs, self.fail_on, self._depth = ["json"], None, 0
        self._reset()
        self._safe(self._configure, logdir, outputs, fail_on, timeout_s, all_processes, start_step, num_steps)

    def _configure(self, logdir, outputs, fail_on, timeout_s, all_processes, start_step, num_steps):
        self.logdir = os.fspath(logdir) if logdir is not None else None
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.all_processes = bool(all_processes)
        self.window = start_step is not None or num_steps is not None
        self.start_step = int(start_step) if start_step is not None else 0
        self.num_steps = max(1, int(num_steps)) if num_steps is not None else 5
        if isinstance(outputs, str):
            outputs = (outputs,)
        self.outputs = []
        for fmt in outputs or ():
            if fmt in EXTENSIONS:
                self.outputs.append(fmt)
            else:
                self._warn(f"unknown report format {fmt!r} ignored (use {', '.join(sorted(EXTENSIONS))})")
        if self.temporary:  # the JSON report is what `report` is read from; nothing else would outlive the folder
            self.outputs = ["json"]
        self.fail_on = fail_on
        if fail_on not in (None, "never") + SEVERITIES:
            self._warn(f"fail_on={fail_on!r} is not one of {SEVERITIES}; the findings gate is off")
            self.fail_on = None

    # -- public entry points: each one catches everything tracekit can raise ---------------------------------------

    def __enter__(self):
        self._depth += 1
        if self._depth > 1:  # re-entered (a decorated function calling itself): the outer use owns the trace
            return self
        self._safe(self._reset)
        if not self.window:
            self._safe(self._start)
        return self

    def __exit__(self, exc_type, exc, tb):
        self._depth = max(0, self._depth - 1)
        if self._depth:
            return False
        if exc_type is None:
            self.close()
        elif not issubclass(exc_type, KeyboardInterrupt):
            self._safe(self._finish)  # the training error propagates; the partial trace is still analyzed
        else:
            self._safe(self._abort)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)
        return wrapper

    def step(self, i) -> None:
        """Call at the top of every training step with its number: starts/stops the window and marks the step."""
        self._safe(self._step, i)

    def close(self) -> None:
        """Stop tracing if still on, wait (at most ``timeout_s``) for the analysis, and apply ``fail_on``."""
        self._safe(self._finish)
        failed = None if self._gated else self._gate()
        self._gated = True
        if failed is not None:
            raise failed

    @property
    def result(self) -> dict | None:
        """What the analysis reported: ``run``, ``written``, ``skipped``, ``summary_lines``, ``fails`` ..."""
        return self._result

    @property
    def report(self):
        """The :class:`~tracekit.report.envelope.Report` of the analysis once it is done (after ``close()`` or
        the ``with`` block), read from its JSON report; None before that, when it failed, or without a JSON
        report."""
        if self._report is None and self._result and self._result.get("json") and not self.temporary:
            try:
                self._report = _read_report(self._result["json"])
            except Exception as e:  # noqa: BLE001
                self._warn(f"cannot read the report: {type(e).__name__}: {e}")
        return self._report

    # -- internals ------------------------------------------------------------------------------------------

    def _reset(self):
        self._tracing = False
        self._window_done = False
        self._window_first = None
        self._annotation = None
        self._before = {}
        self._thread = None
        self._child = None
        self._exiting = self._at_exit = False
        self._result = None
        self._report = None
        self._closed = False
        self._gated = False

    def _warn(self, msg: str) -> None:
        if getattr(self, "_exiting", False):
            return
        try:
            self.log.warning("%s; training goes on", msg)
        except Exception:  # noqa: BLE001 — a broken logger must not break training either
            pass

    def _safe(self, fn, *args):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 — the hook's one promise: nothing propagates into training
            self._warn(f"{type(e).__name__}: {' '.join(str(e).split())[:300]}")
            try:
                self._abort()
            except Exception:  # noqa: BLE001
                pass
            return None

    def _start(self):
        import jax

        from tracekit.run.capture import trace_files
        if self.temporary:
            self._discard()
            self.logdir = tempfile.mkdtemp(prefix=TEMP_PREFIX)
        os.makedirs(self.logdir, exist_ok=True)
        probe = Path(self.logdir) / f".tracekit-probe-{os.getpid()}"
        probe.write_bytes(b"")  # fail now (before tracing) if the folder is not writable
        probe.unlink()
        self._before = trace_files(self.logdir)
        opts = jax.profiler.ProfileOptions()
        opts.python_tracer_level = 0
        try:
            jax.profiler.start_trace(self.logdir, profiler_options=opts)
        except RuntimeError as e:
            raise RuntimeError(f"cannot start the profiler ({e}); tracekit.profile records nothing") from None
        self._tracing = True
        atexit.register(self._atexit)

    def _step(self, i):
        if self._closed:
            return
        i = int(i)
        if self.window and not self._tracing and not self._window_done and i >= self.start_step:
            self._start()
            self._window_first = i
        elif self.window and self._tracing and i - self._window_first >= self.num_steps:
            self._stop_and_analyze()
            return
        if self._tracing:
            import jax
            self._end_annotation()
            self._annotation = jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i)
            self._annotation.__enter__()

    def _end_annotation(self):
        ann, self._annotation = self._annotation, None
        if ann is not None:
            ann.__exit__(None, None, None)

    def _stop_trace(self):
        self._end_annotation()
        if self._tracing:
            self._tracing = False
            self._window_done = True
            import jax
            jax.profiler.stop_trace()

    def _stop_and_analyze(self):
        from tracekit.run.capture import new_run
        self._stop_trace()
        run = new_run(self.logdir, self._before)
        if run is None:
            self._warn(f"the profiler wrote no trace under {self.logdir}")
            self._discard()
            return
        if not self.all_processes:
            import jax
            idx = jax.process_index()
            if idx != 0:
                self.log.info("trace in %s; process %d leaves the analysis to process 0", run, idx)
                self._discard()
                return
        if self.temporary and self._at_exit:  # nobody is left to read the report: leave nothing behind
            self._discard()
            return
        self._launch(run)

    def _launch(self, run: Path):
        """Start the analysis child, detached (its own session, output to unlinked temporary files): it finishes
        its report on its own even when the job exits first. One log line says where the report will be; a
        daemon thread (never joined at exit) waits for the child and logs its summary."""
        spec = {"outputs": self.outputs, "fail_on": self.fail_on or "never", "timeout_s": self.timeout_s,
                "options": self.options.to_json() if self.options is not None else {}}
        env = child_env(self.threads)
        root = str(Path(__file__).resolve().parents[2])  # so the child imports this same tracekit
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        try:
            child = subprocess.Popen(analysis_command(run, spec), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                     env=env, start_new_session=True, close_fds=True)
        except BaseException:
            out.close()
            err.close()
            raise
        self._child = (child, out, err)
        hookchild.lower_priority(child.pid)  # at once: its interpreter's start-up must not slow the job's next steps
        where = ", ".join(hookchild.report_paths(run, self.outputs)) or f"{run} (no report files: outputs=())"
        if self.temporary:
            where = "`.report` of the profile (no logdir: its temporary folder is removed once read)"
        self._info("analyzing %s in the background (process %d); the report will be at %s", run,
                   child.pid, where)
        if not self._at_exit:
            self._thread = threading.Thread(target=self._watch, args=(run,), name="tracekit-analysis", daemon=True)
            self._thread.start()

    def _analyze(self, run: Path):
        """Analyze ``run`` and wait for it (at most ``timeout_s``)."""
        self._launch(run)
        self._thread.join()

    def _watch(self, run: Path):
        try:
            self._watch_child(run)
        finally:
            if self.temporary:  # read (or failed): the temporary folder goes
                self._discard()

    def _watch_child(self, run: Path):
        try:
            child, out, err = self._child
            try:
                code = child.wait(timeout=self.timeout_s)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                self._warn(f"the analysis of {run} ran past timeout_s={self.timeout_s} and was stopped")
                return
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode("utf-8", "replace")
            stderr = err.read().decode("utf-8", "replace")
            out.close()
            err.close()
            lines = [ln for ln in stdout.splitlines() if ln.startswith("{")]
            if code != 0 or not lines:
                tail = (stderr.strip().splitlines() or [f"exit status {code}"])[-1]
                self._warn(f"the analysis of {run} failed: {tail}")
                return
            res = json.loads(lines[-1])
            if self.temporary and res.get("json"):  # read before the folder goes
                self._report = _read_report(res["json"])
            self._result = res
            for fmt, why in (res.get("skipped") or {}).items():
                self._info("no %s report: %s", fmt, why)
            # the summary is news, not a fault: INFO, under the logger's name ("tracekit") as its one prefix
            self._info("%s", "\n  ".join(res.get("summary_lines") or []))
        except Exception as e:  # noqa: BLE001
            self._warn(f"the analysis of {run} failed: {type(e).__name__}: {e}")

    def _finish(self, wait: bool = True):
        """Stop tracing (the analysis starts) and, with ``wait``, wait for the analysis (at most ``timeout_s``)."""
        if self._closed:
            return
        self._closed = True
        try:
            atexit.unregister(self._atexit)
        except Exception:  # noqa: BLE001
            pass
        if self._tracing:
            self._stop_and_analyze()
        t = self._thread
        if t is not None and wait:
            t.join(None if self.timeout_s is None else self.timeout_s + 15)
            if t.is_alive():
                self._warn("the analysis is still running; not waiting for it")

    def _abort(self):
        """Stop our trace (if any) without analyzing it."""
        self._closed = True
        try:
            self._end_annotation()
        finally:
            try:
                if self._tracing:
                    self._tracing = False
                    import jax
                    jax.profiler.stop_trace()
            finally:
                if self.temporary and self._child is None:
                    self._discard()

    def _discard(self):
        """Remove the temporary folder of a profile without a logdir (nothing else)."""
        d = self.logdir
        if self.temporary and d and os.path.basename(d).startswith(TEMP_PREFIX):
            import shutil
            shutil.rmtree(d, ignore_errors=True)

    def _atexit(self):
        """The job exits without ``close()``: stop tracing and start the analysis, never wait for it (the child
        finishes its report on its own)."""
        self._at_exit = True  # no watcher thread from here on (none may start at interpreter shutdown)
        self._safe(self._finish, False)
        if self._gate() is not None:
            self._warn(f"fail_on={self.fail_on!r}: a finding reached it, but the job is already exiting")
        self._exiting = True  # the watcher logs nothing more: the job's log may be closing

    def _info(self, msg: str, *args, level: int = logging.INFO) -> None:
        if self._exiting:
            return
        try:
            self.log.log(level, msg, *args)
        except Exception:  # noqa: BLE001 — a broken logger must not break training either
            pass

    def _gate(self) -> FindingsError | None:
        try:
            res = self._result
            if self.fail_on in (None, "never") or not res or not res.get("fails"):
                return None
            hit = [f for f in res.get("findings", [])
                   if SEVERITIES.index(f.get("severity", "info")) >= SEVERITIES.index(self.fail_on)]
            names = ", ".join(f"{f.get('rule_id')} {f.get('name')}" for f in hit[:3])
            rep, path = self.report, None if self.temporary else res.get("json")
            return FindingsError(f"tracekit: {len(hit)} finding(s) reached fail_on={self.fail_on!r}: {names} "
                                 f"(report: {path or res.get('run')})", hit, path, rep)
        except Exception as e:  # noqa: BLE001
            self._warn(f"cannot apply fail_on: {type(e).__name__}: {e}")
            return None


#: What sets the thread count of each library the analysis child uses: tracekit's decoder and rule pools, and the
#: BLAS / OpenMP pools NumPy may start.
THREAD_VARIABLES = ("TRACEKIT_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS")


def _read_report(path: str):
    from tracekit.report.envelope import Report
    with open(path, encoding="utf-8") as fh:
        return Report(json.load(fh))


def child_env(threads: int = 1) -> dict:
    """The analysis child's environment: this one, with every thread pool sized to ``threads`` (it is niced too,
    but on a machine as busy as a training job, a second decoding thread still takes a core from it)."""
    env = dict(os.environ)
    env.update({k: str(threads) for k in THREAD_VARIABLES})
    return env


def analysis_command(run: Path, spec: dict) -> list[str]:
    """The analysis child's command line: :func:`tracekit.run.hookchild.main` as a module of its own, which
    imports none of this parent side (logging, subprocess, tempfile: ~10 ms of every child's start)."""
    return [sys.executable, "-m", "tracekit.run.hookchild", str(run), json.dumps(spec)]
