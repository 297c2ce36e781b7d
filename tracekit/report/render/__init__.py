"""Renderers: each module has ``EXTENSIONS`` and ``render(report) -> str``. The output format follows the
``-o`` file's extension unless ``--format`` says otherwise."""
from __future__ import annotations

import importlib

from tracekit.errors import TraceError

FORMATS = {"text": "text", "json": "json", "markdown": "markdown", "md": "markdown", "html": "html",
           "sarif": "sarif"}
EXTENSIONS = {".txt": "text", ".json": "json", ".md": "markdown", ".markdown": "markdown", ".html": "html",
              ".htm": "html", ".sarif": "sarif"}


def format_for(path: str | None, fmt: str | None) -> str:
    if fmt:
        if fmt not in FORMATS:
            raise TraceError(f"unknown format {fmt!r}", hint=f"use one of {', '.join(sorted(set(FORMATS.values())))}")
        return FORMATS[fmt]
    if path:
        for ext, f in EXTENSIONS.items():
            if str(path).lower().endswith(ext):
                return f
        raise TraceError("cannot tell the format from the file name", str(path),
                         "use an extension (.json .md .html .sarif .txt) or --format")
    return "text"


def render(report, fmt: str, **kw) -> str:
    mod = importlib.import_module(f"tracekit.report.render.{FORMATS.get(fmt, fmt)}")
    return mod.render(report, **kw)
