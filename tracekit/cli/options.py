"""What every ``tracekit`` command shares: the error guard (exit codes), the common arguments and options, and
the plain table a command prints."""
from __future__ import annotations

import errno
import functools
import os
import sys

import click

from tracekit.errors import EXIT_BAD_INPUT, TraceError
from tracekit.options import DEFAULT_MAX_BYTES, DEFAULTS, WORKLOADS
from tracekit.report.termsafe import safe
from tracekit.units import table

EXIT_INTERNAL = 3  #: an internal error (a bug: please report it)
#: no room to write (a full disk or device, a quota, a file-size limit): what no file output lets through (those
#: are :mod:`tracekit.fileio`'s TraceErrors), so stdout's
NO_ROOM = (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC), errno.EFBIG)


def guarded(fn):
    """Turn TraceError (and MemoryError) into one stderr line + exit 2, and any other exception into one line +
    exit 3. The line is made safe for a terminal (it may quote names from the trace)."""

    @functools.wraps(fn)
    def wrapper(*a, **kw):
        try:
            return fn(*a, **kw)
        except TraceError as e:
            click.echo(f"tracekit: error: {safe(e)}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except MemoryError:
            from tracekit.ingest import limits as limits_mod
            click.echo(f"tracekit: error: {safe(limits_mod.out_of_memory(None))}", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except (click.exceptions.Exit, click.ClickException, SystemExit, KeyboardInterrupt):
            raise
        except BrokenPipeError:
            sys.exit(0)
        except Exception as e:  # noqa: BLE001 — the CLI never shows a traceback unless asked
            if os.environ.get("TRACEKIT_DEBUG"):
                raise
            if isinstance(e, OSError) and e.errno in NO_ROOM:  # files are the writer's: this is stdout, full
                click.echo(f"tracekit: error: cannot write stdout ({e.strerror}) — free some space, or give -o FILE",
                           err=True)
                _drop_stdout()
                sys.exit(EXIT_BAD_INPUT)
            click.echo(f"tracekit: internal error: {type(e).__name__}: {safe(e)} (set TRACEKIT_DEBUG=1 for the "
                       "traceback, and please report it)", err=True)
            sys.exit(EXIT_INTERNAL)

    return wrapper


def _drop_stdout() -> None:
    """Forget what stdout still buffers (it cannot be written), so that the interpreter's last flush at exit adds
    no second message to the one line."""
    try:
        sys.stdout = None  # the interpreter flushes sys.stdout at exit: nothing to flush
    except Exception:  # noqa: BLE001
        pass


class Duration(click.ParamType):
    """A duration with a unit (``10ms``, ``50us``, ``50µs``, ``2s``, ``100ns``; a bare number is picoseconds), as
    integer picoseconds; a bad value is click's one-line usage error (exit 2)."""

    name = "DURATION"

    def convert(self, value, param, ctx):
        from tracekit.units import parse_quantity
        if isinstance(value, int) and not isinstance(value, bool):
            ps = value
        else:
            try:
                ps = parse_quantity(value, "duration")
            except ValueError as e:
                self.fail(f"{value!r}: {e} (e.g. 10ms, 50us)", param, ctx)
        if ps < 0:
            self.fail(f"{value!r}: a duration cannot be negative", param, ctx)
        return int(round(ps))


DURATION = Duration()

#: what every PATH argument may be, appended to the --help of each command that takes one
PATH_HELP = ("PATH: a trace file (.xplane.pb, .xplane.pb.gz, .trace.json, .trace.json.gz), a run folder (every host "
             "in it), a logdir (its newest run under plugins/profile/, or --run NAME), or a folder above one logdir "
             "(searched 3 levels down); each may be a URL (gs://, s3://, …).")


DIFF_PATH_HELP = "BASE and NEW: each " + PATH_HELP.split(": ", 1)[1]


def paths_help(what: str):
    """A decorator appending ``what`` to the help text of a command function (its docstring, cleaned)."""
    def add(f):
        import inspect
        doc = inspect.cleandoc(f.__doc__ or "")
        f.__doc__ = (doc + "\n\n" if doc else "") + what
        return f
    return add


def path_arg(f):
    """The PATH argument of a command, with what PATH may be in its --help."""
    return paths_help(PATH_HELP)(click.argument("path", type=click.Path(path_type=str))(f))


WORKLOAD_HELP = ("What the trace runs: training or serving (default: what the trace shows; a program that writes a "
                 "KV cache in place serves). serving silences the training-only findings on every program; training "
                 "classes nothing as serving.")
workload_opt = click.option("--workload", type=click.Choice(WORKLOADS), default=DEFAULTS.workload,
                            help=WORKLOAD_HELP)
run_opt = click.option("--run", default=None, help="Run folder name under <logdir>/plugins/profile (default: newest).")
topology_opt = click.option("--topology", default=None, metavar="SPEC",
                            help="Machine the collectives run on, when the trace does not say or to price another: "
                                 "TPU slice 4x4 / 2x2x4 (4x4@2: two slices over DCN), GPU nodes 8gpu / 2x8gpu.")
color_opt = click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto",
                         show_default=True, help="Colour in the text report (auto: on a terminal, unless NO_COLOR "
                         "is set).")


def term_width(default: int = 100) -> int:
    """The width text output is laid out to: ``COLUMNS`` when set (a positive integer), else the terminal's,
    looked up on stdout, then stderr, then stdin (``tracekit ops … | less`` still has a terminal on stderr),
    else ``default``."""
    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    for fd in (1, 2, 0):
        try:
            w = os.get_terminal_size(fd).columns
        except (OSError, ValueError):
            continue
        if w > 0:
            return w
    return default


def terminal(color: str) -> dict:
    """The text renderer's ``color`` and ``width`` for stdout: ``--color``, ``NO_COLOR`` (any non-empty value
    turns auto colour off), and :func:`term_width`."""
    tty = sys.stdout.isatty()
    on = color == "always" or (color == "auto" and tty and not os.environ.get("NO_COLOR"))
    return {"color": on, "width": term_width()}


def limit_opts(fn):
    """--max-size / --max-events: the limits a trace must stay within (the refusal message names them)."""
    fn = click.option("--max-events", type=click.IntRange(min=1), default=None,
                      help="Refuse traces with more events.")(fn)
    return click.option("--max-size", type=click.IntRange(min=1), default=None,
                        help=f"Refuse traces larger than this many MiB (default {DEFAULT_MAX_BYTES >> 20}; a .gz: "
                             "decompressed).")(fn)


def limits(max_size, max_events) -> dict:
    """The loader's keyword arguments for ``--max-size`` / ``--max-events``."""
    return {"max_bytes": max_size * 2**20 if max_size else DEFAULT_MAX_BYTES, "max_events": max_events}


def frame_table(df, columns=None, max_width: int = 60, width: int | None = None, shrink=(), drop=None,
                right=()) -> str:
    """A frame as a text table. With ``width``: laid out by the text report's engine
    (:func:`tracekit.report.render.text.fit_table`): within the width, one line per row, numbers never cut, the
    ``shrink`` columns (names) cut first, then the ``drop`` columns left out (default: from the last column back,
    keeping the first). Without: the plain aligned table of :func:`tracekit.units.table`, cells cut to
    ``max_width``."""
    cols = columns or list(df.columns)
    right = {i for i, c in enumerate(cols) if df[c].dtype.kind in "iuf" or c in right}
    if width is None:
        rows = [[safe(v)[:max_width] for v in r] for r in df[cols].itertuples(index=False)]
        return "\n".join(table([safe(c) for c in cols], rows, right=right))
    from tracekit.report.render.text import fit_table
    rows = [[str(v) for v in r] for r in df[cols].itertuples(index=False)]
    idx = {c: i for i, c in enumerate(cols)}
    shrink_i = tuple(idx[c] for c in shrink if c in idx)
    drop_i = tuple(idx[c] for c in drop if c in idx) if drop is not None else tuple(range(len(cols) - 1, 0, -1))
    return fit_table([str(c) for c in cols], rows, width=width, right=right, shrink=shrink_i, drop=drop_i)


def fit_lines(text: str, width: int | None = None, hang: int = 2) -> str:
    """``text`` with every line longer than ``width`` (default: the terminal's) wrapped between words by the text
    report's engine, its continuation lines indented ``hang`` past the line's own indent; shorter lines as they
    are. A word longer than the width (a path) stands whole on its own line."""
    from tracekit.report.render.text import fit_para
    w = width or term_width()
    out = []
    for line in text.split("\n"):
        if len(line) <= w:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip(" "))
        out.append(fit_para(line.lstrip(" "), width=w, indent=lead, hang=hang))
    return "\n".join(out)


def load_trace(path, run=None, **lim):
    """:func:`tracekit.ingest.trace.load` for a command that prints no report: the line saying which run or
    sub-folder of ``path`` was taken, when there was a choice, goes to stderr (a report carries it in its
    warnings)."""
    from tracekit.ingest.trace import load
    tr = load(path, run=run, **lim)
    if tr.path_note:
        click.echo(fit_lines(f"tracekit: warning: {safe(tr.path_note)}"), err=True)
    return tr
