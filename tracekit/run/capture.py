"""Record a trace and analyze it: from a running job's profiler server, from a script run under the profiler, or
from calls of a Python function.

* :func:`remote` asks a job that called ``jax.profiler.start_server(PORT)`` for ``duration_ms`` of trace, with
  the trace client xprof ships (``xprof.convert._pywrap_profiler_plugin.trace``, the call behind
  ``python -m jax.collect_profile`` and xprof's "Capture profile" button). The client runs in a child process:
  its C++ logging stays out of the terminal and a wedged server cannot hang tracekit past the timeout.
* :func:`run_script` runs ``python [FLAGS] script.py ARGS`` (or ``python -m module ARGS``) with a small stdlib-only
  bootstrap (:data:`_RUNNER`) that starts ``jax.profiler`` tracing right after the script's first XLA compile (so
  the script can still set ``XLA_FLAGS``/``JAX_PLATFORMS`` or call ``jax.distributed.initialize()`` first) and
  stops it when the script ends, also on an exception or ``sys.exit``. If the script starts its own trace,
  tracekit's stops first and gives way.
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

_CLIENT = r"""
import sys
try:
    from xprof.convert import _pywrap_profiler_plugin as client
except ImportError as e:
    print("TRACEKIT_ERROR:import:" + str(e)); sys.exit(3)
addr, logdir, duration_ms, attempts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
opts = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0}
try:
    client.trace(addr, logdir, "", True, duration_ms, attempts, opts)
except Exception as e:
    print("TRACEKIT_ERROR:trace:" + " ".join(str(e).split())); sys.exit(1)
"""


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
        p = subprocess.run([sys.executable, "-c", _CLIENT, addr, d, str(int(duration_ms)), str(int(attempts))],
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

# Runs in the script's own interpreter (which may not have tracekit installed): stdlib and jax only.
_RUNNER = r"""
import importlib.abc, os, runpy, sys
_logdir, _argv = sys.argv[1], sys.argv[2:]
_st = {"on": False, "done": False}
def _warn(msg):
    sys.stderr.write("tracekit: warning: " + msg + "\n"); sys.stderr.flush()
def _stop():
    if not _st["on"]:
        return
    _st["on"] = False
    try:
        _orig_stop()
    except Exception as e:
        _warn("could not stop the trace: %s: %s" % (type(e).__name__, e))
def _start():
    _st["done"] = True
    try:
        import jax
        try:
            opts = jax.profiler.ProfileOptions(); opts.python_tracer_level = 0
            _orig_start(_logdir, profiler_options=opts)
        except (AttributeError, TypeError):
            _orig_start(_logdir)
        _st["on"] = True
    except Exception as e:
        _warn("could not start the trace: %s: %s" % (type(e).__name__, e))
def _on_duration(event, duration, **kw):
    if not _st["done"] and event.endswith("backend_compile_duration"):
        _start()
def _user_start(*a, **k):
    if _st["on"]:
        _warn("the script starts its own profiler trace; tracekit's trace stops here")
        _stop()
    return _orig_start(*a, **k)
def _jax_loaded():
    global _orig_start, _orig_stop
    import jax, jax.monitoring, jax.profiler
    _orig_start, _orig_stop = jax.profiler.start_trace, jax.profiler.stop_trace
    jax.profiler.start_trace = _user_start
    try:
        from jax._src import profiler as _p
        _p.start_trace = _user_start
    except Exception:
        pass
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
class _Finder(importlib.abc.MetaPathFinder):
    busy = False
    def find_spec(self, name, path=None, target=None):
        if name != "jax" or self.busy:
            return None
        self.busy = True
        try:
            import importlib.util
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        sys.meta_path.remove(self)
        orig = spec.loader.exec_module
        def exec_module(module):
            orig(module)
            try:
                _jax_loaded()
            except Exception as e:
                _warn("cannot hook jax (%s: %s); no trace" % (type(e).__name__, e))
        spec.loader.exec_module = exec_module
        return spec
if "jax" in sys.modules:  # imported already (by a sitecustomize, say)
    _jax_loaded()
else:
    sys.meta_path.insert(0, _Finder())
try:
    if _argv[0] == "-m":
        sys.argv = [_argv[1]] + _argv[2:]
        runpy.run_module(_argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = list(_argv)
        sys.path[0] = os.path.dirname(os.path.abspath(_argv[0]))
        runpy.run_path(_argv[0], run_name="__main__")
finally:
    _stop()
"""


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


def run_script(command: list[str], logdir=None) -> tuple[int, Path | None, str]:
    """Run the Python command under the profiler. Returns (exit status, run folder or None, logdir)."""
    interp, target = _python_command(list(command))
    if target[0] != "-m" and not os.path.isfile(target[0]):
        raise TraceError("no such script", target[0])
    d = _logdir(logdir)
    before = trace_files(d)
    try:
        proc = subprocess.Popen(interp + ["-c", _RUNNER, os.path.abspath(d)] + target)
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
    return rc, new_run(d, before), d


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
