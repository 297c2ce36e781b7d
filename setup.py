"""Build configuration for the optional C decoder only; all package metadata lives in pyproject.toml.

`tracekit.ingest._wire` speeds up reading .xplane.pb files. It is optional: when no C compiler is available the build
carries on without it and tracekit uses its pure-Python reader (same results, slower)."""
import os

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit.ingest._wire",
            ["tracekit/ingest/_wire.c"],
            optional=True,
            # decoding threads (pthreads) on POSIX; Windows builds decode on one thread
            extra_compile_args=["-pthread"] if os.name == "posix" else [],
            extra_link_args=["-pthread"] if os.name == "posix" else [],
        )
    ]
)
