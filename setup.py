"""Build configuration for the optional C decoder only; all package metadata lives in pyproject.toml.

`tracekit._wire` speeds up reading .xplane.pb files. It is optional: when no C compiler is available the build
carries on without it and tracekit uses its pure-Python reader (same results, slower)."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "tracekit._wire",
            ["tracekit/_wire.c"],
            optional=True,
            extra_compile_args=["-O2"] if __import__("os").name != "nt" else [],
        )
    ]
)
