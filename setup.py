"""Build configuration for the optional C extensions only; all package metadata lives in pyproject.toml.

`tracekit.ingest.wirec` speeds up reading .xplane.pb files (and walks events nested on a line);
`tracekit.analysis.replay.walkc` runs the replay's loops. Both are optional: when no C compiler is available the build carries on without them and tracekit uses the
same code in Python (same results, slower)."""
import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.ingest.wirec",
            ["tracekit/ingest/wirec.c"],
            optional=True,
            # decoding threads (pthreads) on POSIX; Windows builds decode on one thread
            extra_compile_args=["-pthread"] if os.name == "posix" else [],
            extra_link_args=["-pthread"] if os.name == "posix" else [],
        ),
        Extension("tracekit.analysis.replay.walkc", ["tracekit/analysis/replay/walkc.c"], optional=True),
    ]
)
