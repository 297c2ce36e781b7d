"""Source paths as a reader knows them: a file of an installed package from its ``site-packages`` (or
``dist-packages``) folder, a file of the user's project from the folder all the trace's project files share (its
last part kept, e.g. ``fixtures/capture_cpu.py``). The trace records absolute paths of the machine that recorded it;
the report's JSON keeps them whole in ``source_file``, the short form is only what tables show."""
from __future__ import annotations

import posixpath

PACKAGE_DIRS = ("site-packages/", "dist-packages/")


def package_relative(path: str) -> str | None:
    """The part after the last site-packages/dist-packages folder, or None when the file is not in one."""
    cut = max((path.rfind(d) + len(d) for d in PACKAGE_DIRS if d in path), default=-1)
    return path[cut:] if cut > 0 else None


def shortener(paths) -> dict[str, str]:
    """Each distinct path -> its short form (see the module docstring)."""
    paths = sorted({p for p in paths if isinstance(p, str) and p})
    own = [p for p in paths if package_relative(p) is None and p.startswith("/")]
    root = posixpath.dirname(posixpath.commonpath(own)) if len(own) > 1 else \
        posixpath.dirname(posixpath.dirname(own[0])) if own else ""
    out = {}
    for p in paths:
        pkg = package_relative(p)
        if pkg is not None:
            out[p] = pkg
        elif root not in ("", "/") and p.startswith(root + "/"):
            out[p] = p[len(root) + 1:]
        else:
            out[p] = p
    return out
