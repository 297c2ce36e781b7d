"""The ``tracekit`` command group: the analysis commands (:mod:`tracekit.cli.commands`) and the reference commands
(:mod:`tracekit.cli.reference`) under one name.

Exit codes: 0 ok; 1 a finding reached ``--fail-on`` (``analyze``) or a regression (``diff``); 2 bad input or usage
(one line on stderr saying what, where, and what to do); 3 an internal error (a bug: please report it); 130
interrupted (SIGINT, Ctrl-C: one line, no partial output).
"""
from __future__ import annotations

import click

from tracekit.cli import collectives, commands, hlo, inference, memory, parallelism, reference, whatif
from tracekit.cli.console import OneLineErrors, interrupted
from tracekit.errors import EXIT_INTERRUPTED


@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tracekit")
@click.pass_context
def main(ctx):
    """Where your JAX/XLA program loses time, from a profiler trace, and what to do about it."""
    from tracekit import collector, threads
    from tracekit.run import alloc
    if ctx.invoked_subcommand in threads.BLAS_COMMANDS:
        collector.resume(tune=False)  # the user's program runs under this process's settings: leave them
    alloc.tune()  # a one-shot process: large arrays from the heap, freed memory reused (see tracekit/run/alloc.py)
    if ctx.invoked_subcommand not in threads.BLAS_COMMANDS:
        threads.blas_one_thread()  # no BLAS thread pool started with NumPy (see tracekit/threads.py)


for _command in (commands.info, commands.ops, commands.analyze, commands.capture_cmd, commands.diff_cmd,
                 commands.export_cmd, memory.memory_cmd, inference.inference_cmd,
                 reference.chips_cmd, reference.calibrate,
                 reference.rules_cmd, collectives.collectives_cmd, hlo.hlo_cmd,
                 parallelism.parallelism_cmd, whatif.whatif_cmd):
    main.add_command(_command)


def entry():
    """The ``tracekit`` command as a process (the console script, ``python -m tracekit.cli``): a process that hands
    no frame to a caller, so its constant columns are held once (:func:`tracekit.threads.mark_one_shot`) and its
    garbage collector waits while it imports (:mod:`tracekit.collector`);
    :func:`main` called in a caller's process (click's test runner, a notebook) leaves its frames writable."""
    try:
        from tracekit import collector
        from tracekit.threads import mark_one_shot
        mark_one_shot()  # (no pandas import here: `tracekit info` never loads it)
        collector.pause()  # no cyclic collection while the command imports; loading a trace resumes it
        main()
    except KeyboardInterrupt:  # before or after a command (its own SIGINT is main's): the same line and 130
        _bounded_exit()
        interrupted()
    except SystemExit as e:
        if e.code == EXIT_INTERRUPTED:
            _bounded_exit()
        raise


#: seconds an interrupted command's normal exit (atexit handlers, thread joins) may take before it is cut short
EXIT_GRACE_S = 5.0


def _bounded_exit() -> None:
    """An interrupted process ends within :data:`EXIT_GRACE_S`: its exit must not wait on what the interrupt cut
    short (a process pool's threads, joined at exit, once held a CI run for 120 s). Everything is written or
    removed by then. Only here, in the command's own process: never in a caller's (click's runner, a notebook)."""
    import os
    import sys
    import threading
    t = threading.Timer(EXIT_GRACE_S, os._exit, (EXIT_INTERRUPTED,))
    t.daemon = True
    t.start()
    # the one line is written: what the interrupt left half done must not add a traceback as the interpreter
    # ends (a process pool's wake-up pipe, closed when its workers died of the terminal's SIGINT, raised
    # OSError in threading's exit callbacks, printed as "Exception ignored in: <module 'threading'>")
    sys.unraisablehook = _silent
    threading.excepthook = _silent


def _silent(*_args) -> None:
    """An exception hook that prints nothing (an interrupted command's teardown)."""
