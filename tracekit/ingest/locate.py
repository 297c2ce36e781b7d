"""Which trace files a path names, and which run of a logdir was taken: one chooser for local folders and URLs.

A path is a trace file, a run folder (every host's file in it), a logdir (its newest run under
``plugins/profile/``, or ``--run NAME``), a folder whose sub-folders are runs (the newest), or a folder above one
logdir (searched :data:`SEARCH_DEPTH` levels down). :func:`choose` walks that list the same way whether the path is
on local disk or a URL read through fsspec (``gs://``, ``s3://``, ``memory://``…): only the listing differs
(:class:`_Local`, :class:`_Remote`). When it had to pick (a run among several, a sub-folder, a logdir below), the
:class:`Choice` carries one line saying what it took and what else is there, in names relative to the path given,
so the line reads the same for the same layout on disk and in a bucket. ``--run NAME`` says nothing.

Every failure is a :class:`~tracekit.errors.TraceError` with a one-line message.
"""
from __future__ import annotations

import os
import stat
from dataclasses import field
from pathlib import Path, PurePosixPath

from tracekit.errors import TraceError
from tracekit.ingest import formats
from tracekit.records import record

SEARCH_DEPTH = 3  #: how far below a folder without a trace the logdirs are looked for
#: how many of the other runs a note names
NAMED_OTHERS = 5
_WHAT = "give a .xplane.pb file, a run folder or a logdir"
_NO_TRACE = ("no *.xplane.pb or *.trace.json.gz trace found",
             "give a .xplane.pb file, a run folder, or a logdir containing plugins/profile/<run>/")


@record(frozen=True)
class HostFile:
    """One host's trace file of a run: the host's name and where its file is."""

    host: str
    path: Path


@record(frozen=True)
class Choice:
    """The files a path names, and ``note``: one line saying which run / sub-folder / logdir was taken and
    which others exist when there was a choice to make (None when there was none, or ``--run`` named it)."""

    files: list[HostFile] = field(default_factory=list)
    note: str | None = None


def host_name(path) -> str:
    name = PurePosixPath(os.fspath(path)).name if "://" in os.fspath(path) else Path(path).name
    if name in ("perfetto_trace.json.gz", "perfetto_trace.json"):
        return "host"
    stripped = formats.strip_suffix(name)
    return (stripped or "host") if stripped != name else (PurePosixPath(name).stem or "host")


def kind_of(p: Path) -> str:
    """'file', 'folder', 'missing', or what else ``p`` is (a device, a FIFO, a socket): only regular files and
    folders are read (a device or FIFO could block forever or never end)."""
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except PermissionError:
        raise TraceError("path is not reachable (permission denied)", str(p), "check the permissions of its folders") \
            from None
    except OSError as e:
        raise TraceError(f"cannot read the path ({e.strerror or type(e).__name__})", str(p)) from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    return {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO (named pipe)",
            stat.S_IFSOCK: "a socket"}.get(stat.S_IFMT(mode), "not a regular file")


def not_regular(kind: str, where: str) -> TraceError:
    return TraceError(f"is {kind}, not a trace file", where, _WHAT)


class _Local:
    """Listing of local folders (pathlib). Every method raises only TraceError."""

    def __init__(self, root):
        self.root = Path(root)

    def kind(self, p) -> str:
        return kind_of(Path(p))

    def is_folder(self, p) -> bool:
        try:
            return Path(p).is_dir()
        except PermissionError:
            raise TraceError("folder is not readable", str(Path(p).parent), "check its permissions") from None

    def join(self, d, *names):
        return Path(d).joinpath(*names)

    def entries(self, d) -> list[tuple[object, str]]:
        """(path, 'dir' | 'file' | 'other') of every entry of folder ``d``."""
        try:
            subs = list(Path(d).iterdir())
            return [(x, "dir" if x.is_dir() else "file" if x.is_file() else "other") for x in subs]
        except PermissionError:
            raise TraceError("folder is not readable", str(d), "check its permissions") from None
        except OSError as e:
            raise TraceError(f"cannot list the folder ({e.strerror or type(e).__name__})", str(d)) from None

    def name(self, p) -> str:
        return Path(p).name

    def where(self, p) -> str:
        return str(p)

    def rel(self, p) -> str:
        return Path(p).relative_to(self.root).as_posix()

    def hostfile(self, p) -> HostFile:
        return HostFile(host_name(p), Path(p))


class _Remote:
    """Listing through fsspec; paths are the filesystem's (no protocol), shown and read as the URL typed."""

    def __init__(self, url: str):
        self.url, self.proto = url, url.split("://", 1)[0]
        try:
            import fsspec.core
        except ImportError:
            raise TraceError("cannot read a URL: fsspec is not installed", url,
                             "pip install fsspec (or tracekit[remote])") from None
        try:
            self.fs, root = fsspec.core.url_to_fs(url)
        except ImportError as e:
            from fsspec.registry import known_implementations
            pkg = known_implementations.get(self.proto, {}).get("class", "").split(".")[0]
            raise TraceError(f"cannot reach {self.proto}://, install {pkg if pkg not in ('', 'fsspec') else 'its driver'}",
                             url, str(e)) from None
        except ValueError as e:
            raise TraceError(f"cannot reach {self.proto}:// ({e})", url,
                             "use gs://, s3://, memory://, … or a local path") from None
        self.root = root.rstrip("/") or root

    def _call(self, fn, *args):
        try:
            return fn(*args)
        except TraceError:
            raise
        except Exception as e:  # noqa: BLE001 — any storage failure (network, credentials) is one line
            first = (str(e).splitlines() or [""])[0]
            raise TraceError(f"cannot reach {self.proto}:// ({type(e).__name__}: {first})", self.url,
                             "check the URL and your credentials") from None

    def kind(self, p) -> str:
        if not self._call(self.fs.exists, p):
            return "missing"
        return "file" if self._call(self.fs.isfile, p) else "folder"

    def is_folder(self, p) -> bool:
        return bool(self._call(self.fs.isdir, p))

    def join(self, d, *names):
        return "/".join([d.rstrip("/"), *names])

    def entries(self, d) -> list[tuple[object, str]]:
        kinds = {"directory": "dir", "file": "file"}
        return [(e["name"].rstrip("/"), kinds.get(e.get("type"), "other"))
                for e in self._call(self.fs.ls, d, True)]

    def name(self, p) -> str:
        return p.rstrip("/").rsplit("/", 1)[-1]

    def where(self, p) -> str:  # the URL the user typed as the prefix
        p = p.rstrip("/")
        return self.url.rstrip("/") + p[len(self.root):] if p.startswith(self.root) else self.fs.unstrip_protocol(p)

    def rel(self, p) -> str:
        return p[len(self.root):].strip("/")

    def hostfile(self, p) -> HostFile:
        return HostFile(host_name(p), self.where(p))


def choose(path: str | os.PathLike, run: str | None = None) -> Choice:
    """The trace files ``path`` names and, when there was a choice, the line saying what was taken (see the
    module docstring). A URL's HostFile paths are URL strings (read by :func:`tracekit.ingest.paths.read_bytes`)."""
    url = os.fspath(path)
    ls = _Remote(url) if "://" in url else _Local(path)
    root = ls.root
    kind = ls.kind(root)
    if kind == "missing":
        raise TraceError("no such file or folder", ls.where(root), _WHAT)
    if kind == "file":
        if run:
            raise TraceError("--run applies to a logdir, not a file", ls.where(root))
        return Choice([ls.hostfile(root)])
    if kind != "folder":
        raise not_regular(kind, ls.where(root))
    return _folder(ls, root, run)


def _traces(ls, d) -> list:
    """The trace files directly in folder ``d`` (its .xplane.pb files when it has both formats), sorted."""
    names = {str(p): p for p, k in ls.entries(d) if k == "file" and formats.is_trace_name(ls.name(p))}
    return [names[n] for n in sorted(formats.pick(list(names)))]


def _runs(ls, d) -> list:
    """The sub-folders of ``d`` that hold a trace file, by name (jax names runs by their start time)."""
    return sorted((p for p, k in ls.entries(d) if k == "dir" and _traces(ls, p)), key=ls.name)


def _folder(ls, p, run: str | None) -> Choice:
    files = _traces(ls, p)
    if files and not run:
        return Choice([ls.hostfile(f) for f in files])
    for where in (("plugins", "profile"), ("profile",), ()):
        pdir = ls.join(p, *where)
        if where and not ls.is_folder(pdir):
            continue
        runs = _runs(ls, pdir)
        if not runs:
            continue
        if run:
            chosen = [d for d in runs if ls.name(d) == run]
            if not chosen:
                names = ", ".join(ls.name(d) for d in runs[-NAMED_OTHERS:])
                raise TraceError(f"no run named {run!r}", ls.where(pdir), f"runs here include: {names}")
            return Choice([ls.hostfile(f) for f in _traces(ls, chosen[0])])
        return Choice([ls.hostfile(f) for f in _traces(ls, runs[-1])], run_note(where, [ls.name(d) for d in runs]))
    below = logdirs_below(ls, p)
    if len(below) == 1:  # the folder above a logdir: the one logdir under it
        inner = _folder(ls, below[0], run)
        note = f"took the logdir {ls.rel(below[0])}, the only one below this folder"
        return Choice(inner.files, note + (f"; {inner.note}" if inner.note else ""))
    if below:
        names = ", ".join(ls.where(d) for d in below[:NAMED_OTHERS]) + (" …" if len(below) > NAMED_OTHERS else "")
        raise TraceError(f"{len(below)} logdirs under this folder", ls.where(p), f"give one of them: {names}")
    raise TraceError(_NO_TRACE[0], ls.where(p), _NO_TRACE[1])


def run_note(where: tuple, runs: list[str]) -> str | None:
    """The line for a run taken from ``runs`` (sorted names; the last is taken) found in the folder ``where``
    (relative parts: ``("plugins", "profile")``, or ``()`` for the folder given itself): None for a logdir's only
    run (nothing was chosen)."""
    taken, others = runs[-1], runs[-2::-1]
    if where and not others:
        return None
    what = "run" if where else "sub-folder"
    place = f" under {'/'.join(where)}" if where else " holding traces (this folder has none itself)"
    if not others:
        return f"took the {what} {taken}, the only one{place}"
    named = ", ".join(others[:NAMED_OTHERS]) + (" …" if len(others) > NAMED_OTHERS else "")
    return (f"took the {what} {taken}, the newest (last by name) of {len(runs)}{place}; the others: {named}; "
            "--run NAME takes another")


def logdirs_below(ls, p, depth: int = SEARCH_DEPTH) -> list:
    """The folders at most ``depth`` levels below ``p`` that hold ``plugins/profile/<run>/`` with a trace, sorted;
    hidden folders and unreadable ones are not searched."""
    found, level = [], [p]
    for _ in range(depth):
        nxt = []
        for d in level:
            try:
                subs = sorted((x for x, k in ls.entries(d) if k == "dir" and not ls.name(x).startswith(".")),
                              key=ls.name)
            except TraceError:
                continue
            for x in subs:
                prof = ls.join(x, "plugins", "profile")
                try:
                    if ls.is_folder(prof) and _runs(ls, prof):
                        found.append(x)
                        continue
                except TraceError:
                    continue
                nxt.append(x)
        level = nxt
    return sorted(found, key=str)
