"""Record a trace and analyze it: from a running job's profiler server, from a script run under the profiler, or
from calls of a Python function.

* :func:`remote` asks a job that called ``jax.profiler.start_server(PORT)`` for ``duration_ms`` of trace, with
  the trace client xprof ships (``xprof.convert._pywrap_profiler_plugin.trace``, the call behind
  ``python -m jax.collect_profile`` and xprof's "Capture profile" button). The client runs in a child process:
  its C++ logging stays out of the terminal and a wedged server cannot hang tracekit past the timeout.
* :func:`run_script` runs ``python [FLAGS] script.py ARGS`` (or ``python -m module ARGS``) under a small
  stdlib-only bootstrap (:mod:`tracekit.run.script_runner`) that starts ``jax.profiler`` tracing right after the
  script's first XLA compile (so the script can still set ``XLA_FLAGS``/``JAX_PLATFORMS`` or call
  ``jax.distributed.initialize()`` first) and stops it when the script ends, also on an exception or
  ``sys.exit``. If the script starts its own trace, tracekit's stops first and gives way, and the script's own
  trace is the one analyzed (:func:`own_run`).
* :func:`capture` traces ``steps`` calls of a function after one warm-up call and returns the Report.

Every failure is a :class:`~tracekit.errors.TraceError` with a one-line message.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tracekit.errors import TraceError
from tracekit.run import script_runner

TRACE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
STEP_NAME = "train"
DEFAULT_ATTEMPTS = 3
_PY_FLAGS_WITH_VALUE = ("-W", "-X")


# ----------------------------------------------------------------------------------------------------------
# Finding what a capture wrote
# ----------------------------------------------------------------------------------------------------------

def trace_files(logdir) -> dict[str, tuple[float, int]]:
    """Every trace file under ``<logdir>/plugins/profile/*/`` -> (mtime, size): a snapshot to compare against."""
    root = Path(logdir) / "plugins" / "profile"
    out: dict[str, tuple[float, int]] = {}
    try:
        runs = list(root.iterdir())
    except OSError:
        return out
    for d in runs:
        try:
            for f in d.iterdir():
                if f.name.endswith(TRACE_SUFFIXES) and f.is_file():
                    st = f.stat()
                    out[str(f)] = (st.st_mtime, st.st_size)
        except OSError:
            continue
    return out


def new_run(logdir, before: dict) -> Path | None:
    """The run folder holding the newest trace file written (or rewritten) since the ``before`` snapshot."""
    fresh = [(v[0], p) for p, v in trace_files(logdir).items() if before.get(p) != v]
    return Path(max(fresh)[1]).parent if fresh else None


#: the folder holding this tracekit package: children started with ``-m tracekit.run...`` import it from there
ROOT = str(Path(__file__).resolve().parents[2])


def _with_tracekit_path(env: dict) -> dict:
    """``env`` with :data:`ROOT` first on ``PYTHONPATH`` (a child interpreter then imports this same tracekit)."""
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    return env


def _logdir(logdir) -> str:
    d = str(logdir) if logdir else tempfile.mkdtemp(prefix="tracekit-")
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as e:
        raise TraceError(f"cannot create the log folder ({e.strerror})", d, "give a writable --logdir") from None
    return d


# ----------------------------------------------------------------------------------------------------------
# From a running job's profiler server
# ----------------------------------------------------------------------------------------------------------

def remote(port: int, duration_ms: int = 2000, logdir=None, host: str = "localhost",
           attempts: int = DEFAULT_ATTEMPTS, timeout_s: float | None = None) -> Path:
    """Record ``duration_ms`` from the profiler server at ``host:port``; return the run folder written."""
    if not 1 <= int(port) <= 65535:
        raise TraceError(f"bad port {port}", hint="give the port the job passed to jax.profiler.start_server")
    if duration_ms < 1:
        raise TraceError("--duration-ms must be at least 1")
    d = _logdir(logdir)
    addr = f"{host}:{port}"
    before = trace_files(d)
    limit = timeout_s if timeout_s is not None else attempts * (duration_ms / 1000 + 10) + 30
    try:
        p = subprocess.run([sys.executable, "-m", "tracekit.run.trace_client", addr, d, str(int(duration_ms)),
                            str(int(attempts))], env=_with_tracekit_path(dict(os.environ)),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise TraceError(f"the profiler at {addr} did not finish the capture within {limit:.0f} s", addr,
                         "check that the job is alive and not stuck") from None
    err = next((ln.split(":", 2) for ln in p.stdout.splitlines() if ln.startswith("TRACEKIT_ERROR:")), None)
    if err and err[1] == "import":
        raise TraceError(f"the xprof trace client is not installed ({err[2]})",
                         hint="pip install 'tracekit[xprof]' (tensorboard-plugin-profile / xprof)")
    if err:
        msg = err[2]
        if re.search(r"errors resolving|lookup failed|dns resolution", msg + " " + p.stderr, re.I):
            raise TraceError(f"cannot resolve the host {host!r}", addr, "check --host")
        if re.search(r"failed to connect|connection refused", msg + " " + p.stderr, re.I):
            raise TraceError("nothing is listening there (connection refused)", addr,
                             "start the job with jax.profiler.start_server(PORT) and check --host/--port")
        if re.search(r"no trace event", msg, re.I):
            raise TraceError(f"empty capture: the job recorded no trace events in {attempts} attempt(s) of "
                             f"{duration_ms} ms", addr, "capture while the job is running steps, or longer")
        if re.search(r"deadline|timed? ?out", msg, re.I):
            raise TraceError(f"the capture timed out ({msg[:160]})", addr, "check that the job is alive")
        raise TraceError(f"the capture failed: {msg[:200]}", addr)
    if p.returncode != 0:
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise TraceError(f"the trace client exited with status {p.returncode}: {tail[:200]}", addr)
    run = new_run(d, before)
    if run is None:
        raise TraceError("empty capture: the trace client wrote no trace file", d,
                         "capture while the job is running steps, or longer")
    return run


# ----------------------------------------------------------------------------------------------------------
# A script run under the profiler
# ----------------------------------------------------------------------------------------------------------

def _python_command(command: list[str]) -> tuple[list[str], list[str]]:
    """Split ``python [FLAGS] (script.py | -m module) ARGS`` into (interpreter + flags, script or -m part)."""
    if not command:
        raise TraceError("no command after --", hint="write: tracekit capture -- python train.py ARGS")
    exe = command[0]
    if not (re.fullmatch(r"python[0-9.]*(\.exe)?", os.path.basename(exe)) or os.path.realpath(exe) ==
            os.path.realpath(sys.executable)):
        raise TraceError(f"the command must start with a Python interpreter, not {exe!r}",
                         hint="write: tracekit capture -- python train.py ARGS (or python -m package ARGS)")
    flags: list[str] = []
    i = 1
    while i < len(command):
        a = command[i]
        if a == "-m":
            if i + 1 >= len(command):
                raise TraceError("-m needs a module name")
            return [exe] + flags, command[i:]
        if a == "-c" or a == "-":
            raise TraceError(f"python {a} is not supported by tracekit capture", hint="put the code in a script")
        if a in _PY_FLAGS_WITH_VALUE:
            flags += command[i:i + 2]
            i += 2
            continue
        if a.startswith("-"):
            flags.append(a)
            i += 1
            continue
        return [exe] + flags, command[i:]
    raise TraceError("no script to run", hint="write: tracekit capture -- python train.py ARGS")


def run_script(command: list[str], logdir=None) -> tuple[int, Path | None, str, str | None]:
    """Run the Python command under the profiler. Returns (exit status, run folder or None, logdir, note): when
    the script traced itself, the run folder is its own trace's and ``note`` says so (:func:`own_run`)."""
    interp, target = _python_command(list(command))
    if target[0] != "-m" and not os.path.isfile(target[0]):
        raise TraceError("no such script", target[0])
    d = _logdir(logdir)
    before = trace_files(d)
    try:
        os.remove(os.path.join(d, script_runner.OWN_TRACES))  # (left by an earlier capture into this logdir)
    except OSError:
        pass
    # the bootstrap is tracekit.run.script_runner, run in the script's interpreter (which may not have tracekit
    # installed: tracekit goes on PYTHONPATH for the start, and the runner takes it off again)
    env = _with_tracekit_path({**os.environ, script_runner.PATH_ENV: ROOT})
    if "PYTHONPATH" in os.environ:
        env[script_runner.OLD_PYTHONPATH_ENV] = os.environ["PYTHONPATH"]
    try:
        proc = subprocess.Popen(interp + ["-m", "tracekit.run.script_runner", os.path.abspath(d)] + target, env=env)
    except OSError as e:
        raise TraceError(f"cannot start the command ({e.strerror})", interp[0]) from None
    while True:
        try:
            rc = proc.wait()
            break
        except KeyboardInterrupt:  # the child got the signal too; let it finish writing the trace
            continue
    if rc < 0:
        rc = 128 - rc
    own, note = own_run(d)
    return rc, own or new_run(d, before), d, note


def own_run(logdir) -> tuple[Path | None, str | None]:
    """When the script run under tracekit started its own trace(s) (listed by the runner in
    :data:`tracekit.run.script_runner.OWN_TRACES`): the run folder holding the newest trace file it wrote, and
    one line saying that this, not tracekit's trace of the start, is analyzed; else (None, None)."""
    import json
    try:
        with open(os.path.join(logdir, script_runner.OWN_TRACES), encoding="utf-8") as f:
            starts = [json.loads(ln) for ln in f if ln.strip()]
    except (OSError, ValueError):
        return None, None
    fresh: dict[str, float] = {}
    for s in starts:  # trace files written in the script's log folders since it started tracing there
        for p, (mtime, _) in trace_files(s.get("logdir", "")).items():
            if mtime >= float(s.get("time", 0)) - 1.0:
                fresh[p] = mtime
    if not fresh:
        return None, (f"the script started its own trace ({len(starts)} time(s)) but wrote no trace file "
                      f"under {', '.join(sorted({str(s.get('logdir')) for s in starts}))}")
    run = Path(max(fresh, key=fresh.get)).parent
    runs = {str(Path(p).parent) for p in fresh}
    more = f" (the newest of {len(runs)} runs it wrote)" if len(runs) > 1 else ""
    return run, f"the script traced itself: its own trace {run}{more} is analyzed, not tracekit's trace of its start"


# ----------------------------------------------------------------------------------------------------------
# A Python function
# ----------------------------------------------------------------------------------------------------------

def capture(fn, *args, logdir=None, steps: int = 1, **kwargs):
    """Trace ``steps`` calls of ``fn(*args, **kwargs)`` and return the :class:`~tracekit.report.envelope.Report`.

    One warm-up call runs first so compilation stays out of the trace; each traced call is one
    ``StepTraceAnnotation`` step and is waited for (``block_until_ready``). With ``logdir=None`` the trace goes to
    a temporary folder that is removed afterwards; give ``logdir`` to keep it (newest run under
    ``<logdir>/plugins/profile/``)."""
    import jax

    from tracekit import pipeline
    if not isinstance(steps, int) or steps < 1:
        raise TraceError(f"steps must be a positive integer, not {steps!r}")
    jax.block_until_ready(fn(*args, **kwargs))
    tmp = logdir is None
    d = _logdir(logdir)
    try:
        before = trace_files(d)
        opts = jax.profiler.ProfileOptions()
        opts.python_tracer_level = 0
        try:
            jax.profiler.start_trace(d, profiler_options=opts)
        except RuntimeError as e:
            raise TraceError(f"cannot start the profiler ({e})", hint="stop the other trace first") from None
        try:
            for i in range(steps):
                with jax.profiler.StepTraceAnnotation(STEP_NAME, step_num=i):
                    jax.block_until_ready(fn(*args, **kwargs))
        finally:
            jax.profiler.stop_trace()
        run = new_run(d, before)
        if run is None:
            raise TraceError("the profiler wrote no trace", d)
        if jax.default_backend() == "cpu":  # the CPU that ran it and its calibration, beside the trace
            from tracekit.model import machine
            machine.record_run(run)
        return pipeline.analyze(str(run))
    finally:
        if tmp:
            shutil.rmtree(d, ignore_errors=True)
