"""Start-up cost of the command line: what a command imports and how its process is set up (issue 18)."""
from __future__ import annotations

import subprocess
import sys


def _run(code: str, env_extra: dict | None = None) -> str:
    import os
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    env.update(env_extra or {})
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip()


def test_cli_import_is_light():
    """Importing the command line imports neither NumPy nor pandas: the group's callback can still set NumPy's
    BLAS threads, and `tracekit --help` stays fast."""
    out = _run("import sys, tracekit.cli.app; print(sorted(m for m in ('numpy', 'pandas', 'jax') if m in sys.modules))")
    assert out == "[]"


def test_blas_one_thread_before_numpy_only():
    """One BLAS thread when NumPy is not imported yet and the user did not choose; never overrides a choice, and
    does nothing once NumPy is loaded (a library caller's process)."""
    probe = "import os; from tracekit import threads; print(threads.blas_one_thread(), os.environ.get('OPENBLAS_NUM_THREADS'))"
    assert _run(probe) == "True 1"
    assert _run(probe, {"OPENBLAS_NUM_THREADS": "4"}) == "False 4"
    assert _run("import numpy; " + probe) == "False None"


def test_cli_sets_blas_threads_except_for_blas_commands():
    """Analysis commands run NumPy's BLAS on one thread; calibrate (a matmul benchmark) and capture (which runs the
    user's script with this environment) keep the default."""
    code = ("import click\nfrom tracekit.cli.app import main\nfrom tracekit import threads\nfrom tracekit.run import alloc\n"
            "alloc.tune = lambda: None\n"
            "threads.blas_one_thread = lambda: print('one-thread', end=' ')\n"
            "for cmd in ('analyze', 'info', 'calibrate', 'capture'):\n"
            "    ctx = click.Context(main, info_name='tracekit'); ctx.invoked_subcommand = cmd\n"
            "    print(cmd, end=' ')\n"
            "    with ctx: main.callback()\n")
    assert _run(code).split() == ["analyze", "one-thread", "info", "one-thread", "calibrate", "capture"]


def test_info_process_never_imports_pandas():
    """`tracekit info` as the process runs it (the console script's entry) reads headers only: no pandas, no
    NumPy frames. The entry marks the process one-shot without importing the frame code."""
    from conftest import cpu_fixture
    path = str(cpu_fixture("train_step"))
    out = _run("import sys\nfrom tracekit.cli import entry\nsys.argv = ['tracekit', 'info', %r]\ntry:\n    entry()\n"
               "except SystemExit as e:\n    assert not e.code, e.code\nfrom tracekit import threads\n"
               "print('pandas' in sys.modules, threads.one_shot())" % path)
    assert out.splitlines()[-1] == "False True"


_GC_PROBE = ("import gc, sys\nfrom tracekit.cli import entry\nsys.argv = ['tracekit'] + %r\ntry:\n    entry()\n"
             "except SystemExit as e:\n    assert not e.code, e.code\n"
             "print(gc.isenabled(), gc.get_threshold()[0], gc.get_freeze_count() > 0)")


def test_cli_collector_paused_while_importing_and_tuned_for_the_analysis(tmp_path):
    """The command line stops the cyclic collector while it imports and, once a trace is being loaded, freezes the
    imported objects and collects again with a larger first-generation threshold (tracekit.collector)."""
    from conftest import cpu_fixture
    from tracekit import collector
    path = str(cpu_fixture("train_step"))
    out = _run(_GC_PROBE % ["analyze", path, "-o", str(tmp_path / "r.json"), "--quiet"])
    assert out.splitlines()[-1] == f"True {collector.YOUNG_THRESHOLD} True"
    assert (tmp_path / "r.json").stat().st_size > 0


def test_library_and_user_code_keep_their_collector():
    """A library caller's load leaves the collector as it was; a command that runs the user's code (capture,
    calibrate) gets it back untouched, not frozen or re-tuned."""
    from conftest import cpu_fixture
    path = str(cpu_fixture("train_step"))
    lib = _run("import gc\nimport tracekit\nbefore = gc.get_threshold()\ntracekit.load(%r)\n"
               "print(gc.isenabled(), gc.get_threshold() == before, gc.get_freeze_count())" % path)
    assert lib == "True True 0"
    code = ("import click, gc\nfrom tracekit import collector\nfrom tracekit.cli.app import main\n"
            "from tracekit.run import alloc\nalloc.tune = lambda: None\nbefore = gc.get_threshold()\n"
            "collector.pause()\nctx = click.Context(main, info_name='tracekit'); ctx.invoked_subcommand = 'capture'\n"
            "with ctx: main.callback()\n"
            "print(gc.isenabled(), gc.get_threshold() == before, gc.get_freeze_count(), collector.paused())")
    assert _run(code) == "True True 0 False"
