"""The child of ``tracekit capture --port``: ``python -m tracekit.run.trace_client ADDR LOGDIR DURATION_MS ATTEMPTS``
asks a job's profiler server for a trace with the client xprof ships (``xprof.convert._pywrap_profiler_plugin``,
the call behind ``python -m jax.collect_profile``). It runs in a child so that the client's C++ logging stays out
of the terminal and a wedged server cannot hang tracekit past its timeout. It reports a failure as one stdout line
``TRACEKIT_ERROR:<kind>:<message>`` (kind ``import`` or ``trace``), which :func:`tracekit.run.capture.remote`
turns into a one-line error."""
import sys


def main(argv: list) -> int:
    try:
        from xprof.convert import _pywrap_profiler_plugin as client  # xprof's own (private) trace client
    except ImportError as e:
        print("TRACEKIT_ERROR:import:" + str(e))
        return 3
    addr, logdir, duration_ms, attempts = argv[0], argv[1], int(argv[2]), int(argv[3])
    opts = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0}
    try:
        client.trace(addr, logdir, "", True, duration_ms, attempts, opts)
    except Exception as e:  # noqa: BLE001 — reported to the parent as one line
        print("TRACEKIT_ERROR:trace:" + " ".join(str(e).split()))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
