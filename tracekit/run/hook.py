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

The trace goes to ``<logdir>/plugins/profile/<run>/``; the analysis runs in a child process (``python -c`` calling
:func:`_analysis_main`, lower CPU priority, killed after ``timeout_s``) started as soon as the trace stops, so in
the step-window form it overlaps the rest of training. The report files (``tracekit-report.json``,
``tracekit-report.html``, ...) land in the run folder and a short summary (the top 3 findings with their savings)
is logged: at WARNING when a finding is a warning or an error, else at INFO.

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
import threading
from pathlib import Path

from tracekit.errors import FindingsError

_LOG = logging.getLogger("tracekit")
SEVERITIES = ("info", "warning", "error")
EXTENSIONS = {"json": ".json", "html": ".html", "markdown": ".md", "md": ".md", "sarif": ".sarif", "text": ".txt"}
REPORT_STEM = "tracekit-report"
DEFAULT_LOGDIR = "tracekit-logs"
STEP_NAME = "train"


def profile(logdir=None, *, outputs=("json", "html"), fail_on: str | None = None, timeout_s: float = 120,
            all_processes: bool = False, log: logging.Logger = _LOG, start_step: int | None = None,
            num_steps: int | None = None, threads: int = 1) -> "Profile":
    """A profiling hook: a context manager, a decorator, or (with ``start_step``/``num_steps``) a step window
    driven by ``hook.step(i)``. ``logdir`` defaults to ``./tracekit-logs``. The analysis child runs on ``threads``
    threads (decoding, rules, BLAS; default 1: training keeps the other cores). See the module docstring."""
    return Profile(logdir, outputs=outputs, fail_on=fail_on, timeout_s=timeout_s, all_processes=all_processes,
                   log=log, start_step=start_step, num_steps=num_steps, threads=threads)


class Profile:
    def __init__(self, logdir=None, *, outputs=("json", "html"), fail_on=None, timeout_s=120, all_processes=False,
                 log=_LOG, start_step=None, num_steps=None, threads=1):
        self.log = log if log is not None else _LOG
        self.threads = 1
        try:
            self.threads = max(1, int(threads))
        except (TypeError, ValueError):
            self._warn(f"threads={threads!r} is not a number; the analysis runs on one thread")
        self.logdir, self.timeout_s, self.all_processes = DEFAULT_LOGDIR, 120.0, False
        self.window, self.start_step, self.num_steps = False, 0, 5
        self.outputs, self.fail_on, self._depth = ["json"], None, 0
        self._reset()
        self._safe(self._configure, logdir, outputs, fail_on, timeout_s, all_processes, start_step, num_steps)

    def _configure(self, logdir, outputs, fail_on, timeout_s, all_processes, start_step, num_steps):
        self.logdir = os.fspath(logdir) if logdir is not None else DEFAULT_LOGDIR
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

    # -- internals ------------------------------------------------------------------------------------------

    def _reset(self):
        self._tracing = False
        self._window_done = False
        self._window_first = None
        self._annotation = None
        self._before = {}
        self._thread = None
        self._result = None
        self._closed = False
        self._gated = False

    def _warn(self, msg: str) -> None:
        try:
            self.log.warning("tracekit: %s; training goes on", msg)
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
            return
        if not self.all_processes:
            import jax
            idx = jax.process_index()
            if idx != 0:
                self.log.info("tracekit: trace in %s; process %d leaves the analysis to process 0", run, idx)
                return
        self._thread = threading.Thread(target=self._analyze, args=(run,), name="tracekit-analysis")
        self._thread.start()

    def _analyze(self, run: Path):
        try:
            spec = {"outputs": self.outputs, "fail_on": self.fail_on or "never"}
            env = child_env(self.threads)
            root = str(Path(__file__).resolve().parents[2])  # so the child imports this same tracekit
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            try:
                p = subprocess.run(analysis_command(run, spec), stdin=subprocess.DEVNULL, capture_output=True,
                                   text=True, timeout=self.timeout_s, env=env)
            except subprocess.TimeoutExpired:
                self._warn(f"the analysis of {run} ran past timeout_s={self.timeout_s} and was stopped")
                return
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            if p.returncode != 0 or not lines:
                tail = (p.stderr.strip().splitlines() or [f"exit status {p.returncode}"])[-1]
                self._warn(f"the analysis of {run} failed: {tail[:300]}")
                return
            res = json.loads(lines[-1])
            self._result = res
            for fmt, why in (res.get("skipped") or {}).items():
                self.log.info("tracekit: no %s report: %s", fmt, why)
            worst = res.get("worst")
            level = logging.WARNING if worst in ("warning", "error") else logging.INFO
            self.log.log(level, "tracekit: %s", "\n  ".join(res.get("summary_lines") or []))
        except Exception as e:  # noqa: BLE001
            self._warn(f"the analysis of {run} failed: {type(e).__name__}: {e}")

    def _finish(self):
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
        if t is not None:
            t.join(None if self.timeout_s is None else self.timeout_s + 15)
            if t.is_alive():
                self._warn("the analysis is still running; not waiting for it")

    def _abort(self):
        """Stop our trace (if any) without analyzing it."""
        self._closed = True
        try:
            self._end_annotation()
        finally:
            if self._tracing:
                self._tracing = False
                import jax
                jax.profiler.stop_trace()

    def _atexit(self):
        self._safe(self._finish)
        if self._gate() is not None:
            self._warn(f"fail_on={self.fail_on!r}: a finding reached it, but the job is already exiting")

    def _gate(self) -> FindingsError | None:
        try:
            res = self._result
            if self.fail_on in (None, "never") or not res or not res.get("fails"):
                return None
            hit = [f for f in res.get("findings", [])
                   if SEVERITIES.index(f.get("severity", "info")) >= SEVERITIES.index(self.fail_on)]
            names = ", ".join(f"{f.get('rule_id')} {f.get('name')}" for f in hit[:3])
            rep, path = None, res.get("json")
            if path:
                from tracekit.report.envelope import Report
                with open(path, encoding="utf-8") as fh:
                    rep = Report(json.load(fh))
            return FindingsError(f"tracekit: {len(hit)} finding(s) reached fail_on={self.fail_on!r}: {names} "
                                 f"(report: {path or res.get('run')})", hit, path, rep)
        except Exception as e:  # noqa: BLE001
            self._warn(f"cannot apply fail_on: {type(e).__name__}: {e}")
            return None


#: What sets the thread count of each library the analysis child uses: tracekit's decoder and rule pools, and the
#: BLAS / OpenMP pools NumPy may start.
THREAD_VARIABLES = ("TRACEKIT_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMEXPR_NUM_THREADS")


def child_env(threads: int = 1) -> dict:
    """The analysis child's environment: this one, with every thread pool sized to ``threads`` (it is niced too,
    but on a machine as busy as a training job, a second decoding thread still takes a core from it)."""
    env = dict(os.environ)
    env.update({k: str(threads) for k in THREAD_VARIABLES})
    return env


def analysis_command(run: Path, spec: dict) -> list[str]:
    return [sys.executable, "-m", "tracekit.run.hook", str(run), json.dumps(spec)]  # runs _analysis_main


def _summary_lines(rep, written: list[str]) -> list[str]:
    from tracekit.report.render.sections import claim
    from tracekit.units import fmt_time
    s = rep.data["summary"]
    fs = sorted(rep.findings, key=lambda f: -(f.get("savings_ps") or 0))
    head = (f"{len(fs)} finding(s) in {s['steps']} step(s), {fmt_time(s['profiled_ps'])} profiled; "
            f"findings claim ~{fmt_time(s.get('claimed_savings_ps') or 0)} together"
            + (f", {fmt_time(s['above_roofline_floor_ps'])} above the roofline floor"
               if s.get("above_roofline_floor_ps") is not None else ""))
    lines = [head + (f"; report: {', '.join(written)}" if written else "")]
    for n, f in enumerate(fs[:3], 1):
        msg = " ".join(str(f.get("message", "")).split())
        time, share = claim(f)
        lines.append(f"{n}. [{f['severity']}] {f.get('rule_id')} {f.get('name')}: {time}"
                     + (f" ({share})" if f.get("claims_time") is not False else "") + f" — {msg[:160]}")
    from tracekit.report.termsafe import safe
    return [safe(line) for line in lines]  # the job's log is often a terminal: nothing from the trace drives it


def _analysis_main() -> None:
    """Child side: analyze the run folder, write the reports there, print one JSON line for the parent."""
    run, spec = sys.argv[1], json.loads(sys.argv[2])
    try:
        os.nice(10)  # leave the CPU to training
    except (AttributeError, OSError):
        pass
    if os.environ.get("TRACEKIT_HOOK_FAIL", "") not in ("", "0"):
        raise RuntimeError("TRACEKIT_HOOK_FAIL is set: failing the analysis on purpose")
    from tracekit import collector
    collector.pause()  # as the tracekit command: no cyclic collection while importing; load() resumes it
    from tracekit import pipeline
    from tracekit.report import render
    from tracekit import fileio
    fail_on = spec.get("fail_on") or "never"
    from tracekit.ingest.trace import load
    from tracekit.model import machine
    from tracekit.threads import mark_one_shot
    mark_one_shot()  # a one-shot child that hands no frame on: constant columns held once
    tr = load(run)
    if machine.is_cpu_trace(tr):  # this process runs on the recording machine: keep its CPU and calibration
        machine.record_run(run)
    rep = pipeline.analyze(tr, fail_on=fail_on)
    items, skipped, json_path = [], {}, None
    for fmt in spec.get("outputs", []):
        path = os.path.join(run, REPORT_STEM + EXTENSIONS[fmt])
        try:
            items.append((path, render.render(rep, fmt)))
        except ImportError as e:  # a renderer that has not landed yet
            skipped[fmt] = f"renderer not available ({e})"
            continue
        json_path = path if fmt == "json" else json_path
    fileio.write_all(items, what="the report")  # all written, or none replaced
    written = [p for p, _ in items]
    print(json.dumps({"run": run, "written": written, "skipped": skipped, "json": json_path,
                      "worst": rep.worst_severity(), "fails": rep.fails(fail_on),
                      "findings": [{k: f.get(k) for k in ("rule_id", "name", "severity", "savings_ps", "share")}
                                   for f in rep.findings],
                      "summary_lines": _summary_lines(rep, written)}))


if __name__ == "__main__":  # the analysis child (:func:`analysis_command`)
    _analysis_main()
