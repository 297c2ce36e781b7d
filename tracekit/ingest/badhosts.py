"""Hosts of a run folder that cannot be read, handled alike on every path (in-process, ``--jobs``, Dask).

A host whose file is empty, truncated, corrupt or missing (or whose worker dies) is tried :data:`ATTEMPTS` times,
then left out: the analysis covers the other hosts, and each host left out gets the one line :func:`notice`
(in the report's warnings and on stderr). When no host is left, :func:`none_left` is the one error (exit 2).
"""
from __future__ import annotations

from tracekit.errors import TraceError

ATTEMPTS = 2  #: tries per host: the first and one retry (a transient read error, a killed worker)


def reason(e: BaseException) -> str:
    """Why a host was left out, in one line: a TraceError's own line, else the exception's type and text."""
    if isinstance(e, TraceError):
        return str(e)
    name = type(e).__name__
    if name in ("BrokenProcessPool", "KilledWorker"):
        return f"its worker died ({name}: {e})"
    return " ".join(f"{name}: {e}".split())


def attempt(fn, *args, **kw):
    """``(result, None)`` of ``fn(*args, **kw)``, or ``(None, the last exception)`` after :data:`ATTEMPTS` tries.
    Only a KeyboardInterrupt (or another BaseException that is not an Exception) goes through."""
    err = None
    for _ in range(ATTEMPTS):
        try:
            return fn(*args, **kw), None
        except Exception as e:  # noqa: BLE001 - the host is left out and named; the others go on
            err = e
    return None, err


def load_each(files: list, load_host, warnings: list, left_out: list, **kw) -> tuple[list, list]:
    """(parts, the files they came from): ``load_host(file, its warnings, **kw)`` of each file, a file that fails
    :data:`ATTEMPTS` times appended to ``left_out`` as ``(host, path, reason)``; a failed try's warnings are dropped.
    Raises :func:`none_left` when every file failed."""
    parts, kept = [], []
    for hf in files:
        mine: list = []
        part, err = attempt(lambda: load_host(hf, _cleared(mine), **kw))
        if err is not None:
            left_out.append((hf.host, str(hf.path), reason(err)))
            continue
        warnings.extend(mine)
        parts.append(part)
        kept.append(hf)
    if not parts:
        raise none_left(left_out)
    return parts, kept


def _cleared(lst: list) -> list:
    lst.clear()
    return lst


def _short(why: str, path: str) -> str:
    return why[len(path) + 2:] if why.startswith(f"{path}: ") else why


def notice(host: str, path: str, why: str, covered: int) -> str:
    """The one line naming a host left out and why (``covered``: how many hosts the analysis still covers)."""
    return (f"host {host} was left out of the analysis ({path}): {_short(why, str(path))}; tried {ATTEMPTS} times, "
            f"the report covers the other {covered} host(s)")


def notices(failures, covered: int) -> list[str]:
    """:func:`notice` of each ``(host, path, reason)`` in ``failures``."""
    return [notice(h, p, why, covered) for h, p, why in failures]


def none_left(failures) -> TraceError:
    """The error when every host of the run failed: the count, and the first host's reason."""
    host, path, why = failures[0]
    first = "the first, " if len(failures) > 1 else ""
    return TraceError(f"none of the {len(failures)} host file(s) could be analyzed; {first}{host} ({path}): "
                      f"{_short(why, str(path))}")


__all__ = ["ATTEMPTS", "reason", "attempt", "load_each", "notice", "notices", "none_left"]
