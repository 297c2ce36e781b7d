"""The bootstrap ``tracekit capture -- python script.py`` runs the script under: ``python -m
tracekit.run.script_runner LOGDIR (script.py | -m module) ARGS``, in the script's own interpreter.

It starts ``jax.profiler`` tracing right after the script's first XLA compile (so the script can still set
``XLA_FLAGS``/``JAX_PLATFORMS`` or call ``jax.distributed.initialize()`` first) and stops it when the script ends,
also on an exception or ``sys.exit``. If the script starts its own trace (``jax.profiler.start_trace`` or
``jax.profiler.trace``), tracekit's stops first (or never starts) and gives way, and the script's log folders and
start times are written to :data:`OWN_TRACES` in tracekit's logdir: the parent analyzes the script's own trace.

The script's interpreter need not have tracekit's dependencies: this module uses the standard library and jax
only (importing the ``tracekit`` package itself imports nothing else). :func:`tracekit.run.capture.run_script`
puts tracekit on ``PYTHONPATH`` for the start (``TRACEKIT_RUNNER_PATH``); the runner takes it off again, so the
script and its children see the path they were given.
"""
import importlib.abc
import importlib.util
import os
import runpy
import sys

#: set by the parent: the ``PYTHONPATH`` entry it added, and the value ``PYTHONPATH`` had before (unset: absent)
PATH_ENV, OLD_PYTHONPATH_ENV = "TRACEKIT_RUNNER_PATH", "TRACEKIT_RUNNER_OLD_PYTHONPATH"
#: the file in tracekit's logdir that lists the script's own traces: one JSON line per start, {"logdir", "time"}
OWN_TRACES = ".tracekit-script-traces.jsonl"


class Tracer:
    """The trace's state: started once (after the first compile), stopped at the end or when the script starts
    its own trace."""

    def __init__(self, logdir: str):
        self.logdir, self.on, self.done = logdir, False, False
        self.orig_start = self.orig_stop = None

    @staticmethod
    def warn(msg: str) -> None:
        sys.stderr.write("tracekit: warning: " + msg + "\n")
        sys.stderr.flush()

    def stop(self) -> None:
        if not self.on:
            return
        self.on = False
        try:
            self.orig_stop()
        except Exception as e:  # noqa: BLE001 — the script's outcome is what counts
            self.warn("could not stop the trace: %s: %s" % (type(e).__name__, e))

    def start(self) -> None:
        self.done = True
        try:
            import jax
            try:
                opts = jax.profiler.ProfileOptions()
                opts.python_tracer_level = 0
                self.orig_start(self.logdir, profiler_options=opts)
            except (AttributeError, TypeError):
                self.orig_start(self.logdir)
            self.on = True
        except Exception as e:  # noqa: BLE001
            self.warn("could not start the trace: %s: %s" % (type(e).__name__, e))

    def on_duration(self, event, duration, **kw) -> None:
        if not self.done and event.endswith("backend_compile_duration"):
            self.start()

    def user_start(self, *a, **k):
        """The script's own start_trace: tracekit's trace stops (and never starts later); where the script's
        trace goes is written down for the parent, which analyzes it instead of tracekit's."""
        self.done = True
        if self.on:
            self.stop()
        logdir = a[0] if a else k.get("log_dir")
        if logdir is not None:
            try:
                import json
                import time
                with open(os.path.join(self.logdir, OWN_TRACES), "a", encoding="utf-8") as f:
                    f.write(json.dumps({"logdir": os.path.abspath(os.fspath(logdir)), "time": time.time()}) + "\n")
            except Exception as e:  # noqa: BLE001 — the script's own trace goes on regardless
                self.warn("cannot note the script's own trace: %s: %s" % (type(e).__name__, e))
        return self.orig_start(*a, **k)

    def jax_loaded(self) -> None:
        """Hook the freshly imported jax: its start_trace (so a script's own trace wins) and its compile events."""
        import jax
        import jax.monitoring
        import jax.profiler
        self.orig_start, self.orig_stop = jax.profiler.start_trace, jax.profiler.stop_trace
        jax.profiler.start_trace = self.user_start
        try:
            from jax._src import profiler as jax_profiler_impl  # the name jax's own helpers call
            jax_profiler_impl.start_trace = self.user_start
        except Exception:  # noqa: BLE001 — an older or newer jax: the public name is hooked already
            pass
        jax.monitoring.register_event_duration_secs_listener(self.on_duration)


class JaxFinder(importlib.abc.MetaPathFinder):
    """Hooks jax right after the script imports it (nothing is imported early: the script keeps its settings)."""

    def __init__(self, tracer: Tracer):
        self.tracer, self.busy = tracer, False

    def find_spec(self, name, path=None, target=None):
        if name != "jax" or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.busy = False
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        sys.meta_path.remove(self)
        orig = spec.loader.exec_module
        tracer = self.tracer

        def exec_module(module):
            orig(module)
            try:
                tracer.jax_loaded()
            except Exception as e:  # noqa: BLE001
                tracer.warn("cannot hook jax (%s: %s); no trace" % (type(e).__name__, e))
        spec.loader.exec_module = exec_module
        return spec


def restore_path() -> None:
    """Take tracekit's entry (added by the parent for this start) off ``sys.path`` and ``PYTHONPATH``."""
    added = os.environ.pop(PATH_ENV, None)
    if added and added in sys.path:
        sys.path.remove(added)
    old = os.environ.pop(OLD_PYTHONPATH_ENV, None)
    if added is not None:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def main(argv: list) -> None:
    logdir, target = argv[0], argv[1:]
    restore_path()
    tracer = Tracer(logdir)
    if "jax" in sys.modules:  # imported already (by a sitecustomize, say)
        tracer.jax_loaded()
    else:
        sys.meta_path.insert(0, JaxFinder(tracer))
    try:
        if target[0] == "-m":
            sys.argv = [target[1]] + target[2:]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            sys.path[0] = os.path.dirname(os.path.abspath(target[0]))
            runpy.run_path(target[0], run_name="__main__")
    finally:
        tracer.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
