"""What the command line prints, and how: usage errors as one line, machine-readable output made safe for a terminal,
reports written through :mod:`tracekit.fileio`, and the findings that failed a CI gate, one line each.

Everything here that came from a trace passes through :mod:`tracekit.report.termsafe` before it reaches a terminal.
"""
from __future__ import annotations

import os
import sys

import click

from tracekit.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED
from tracekit.report.termsafe import safe, safe_block

quiet_opt = click.option("-q", "--quiet", is_flag=True,
                         help="Print nothing but errors (the exit status says how it went; -o files are written).")


INTERRUPTED_LINE = "tracekit: interrupted"


class Interrupted(Exception):
    """SIGINT (KeyboardInterrupt) inside a command, carried past click (which would print a blank line and exit 1)
    to :meth:`OneLineErrors.main`: one line and exit 130. Every writer has removed its temporaries by then."""


def interrupted() -> None:
    """Say so in one line on stderr and exit 130 (128 + SIGINT)."""
    try:
        sys.stderr.write(INTERRUPTED_LINE + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_INTERRUPTED)


class OneLineErrors(click.Group):
    """Usage errors (a missing argument, a bad option value, an unknown option) as the one ``tracekit: error:``
    line with exit code 2, like every other bad input, instead of click's usage block; SIGINT (Ctrl-C) anywhere in a
    command as the one line ``tracekit: interrupted`` and exit 130."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            if not getattr(self, "_one_line", False):  # main(standalone_mode=False): the caller's to handle
                raise
            raise Interrupted() from None

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        self._one_line = True
        try:
            self._one_line_main(args, prog_name, complete_var, **extra)
        finally:
            self._one_line = False

    def _one_line_main(self, args, prog_name, complete_var, **extra):
        try:
            rv = super().main(args, prog_name or "tracekit", complete_var, standalone_mode=False, **extra)
        except click.UsageError as e:
            words = e.ctx.command_path.split(" ")[1:] if e.ctx is not None else []
            msg = " ".join(e.format_message().split())
            click.echo(f"tracekit: error: {safe(msg)} — see `{' '.join(['tracekit', *words])} --help`", err=True)
            sys.exit(EXIT_BAD_INPUT)
        except click.ClickException as e:
            click.echo(f"tracekit: error: {safe(' '.join(e.format_message().split()))}", err=True)
            sys.exit(e.exit_code or EXIT_BAD_INPUT)
        except (Interrupted, KeyboardInterrupt):
            interrupted()
        except click.exceptions.Abort as e:
            if isinstance(e.__cause__, KeyboardInterrupt):  # SIGINT while click parsed the arguments
                interrupted()
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def echo_out(text: str) -> None:
    """Print machine-readable output (CSV, JSON, Markdown, HTML, SARIF) on stdout with its control and bidi
    characters escaped (newlines kept): a pipe often ends in a terminal (``| less -R``, a CI log), and none of these
    formats needs a raw control character (JSON escapes them itself). Files written with ``-o`` keep the text as
    the format escapes it. (The text report is already safe, and is printed with click.echo for its colours.)"""
    click.echo(safe_block(text), nl=False)


def output_opt(what: str):
    """``-o/--output FILE`` of a command that prints one table or document (``ops``, ``memory``, ``collectives``):
    written through :mod:`tracekit.fileio` like every report; ``--format`` unset takes the file's extension."""
    return click.option("-o", "--output", "output", default=None, metavar="FILE",
                        help=f"Write {what} here instead of stdout (- is stdout; a file is replaced whole or not at "
                             "all). Without --format the extension says: .json .csv .md.")


#: the format an -o file's extension names, for commands whose --format is unset
EXTENSION_FORMATS = {".json": "json", ".csv": "csv", ".md": "markdown", ".markdown": "markdown"}


def output_format(fmt: str | None, output: str | None, choices, default: str) -> str:
    """``--format`` when given, else the ``-o`` file's extension when ``choices`` has that format, else ``default``.
    The output path is checked first (a folder, a block device, a symlink loop: one line, before any work)."""
    from tracekit import fileio
    if output is not None:
        fileio.target(output, what="the output")
    if fmt:
        return fmt
    ext = os.path.splitext(output or "")[1].lower()
    got = EXTENSION_FORMATS.get(ext)
    return got if got in choices else default


def write_output(output: str, text: str, fmt: str) -> None:
    """One command's whole output to ``-o`` (:func:`write_reports` of one file; ``fmt`` "text"/"table": printed as it
    is on stdout, else escaped like :func:`echo_out`)."""
    write_reports([(output, text)], ["text" if fmt == "table" else fmt], what="the output")


def write_reports(items: list[tuple[str, str]], fmts: list[str], what: str = "the report") -> None:
    """Write every ``(path, text)`` through :func:`tracekit.fileio.write_all` (all or none replaced); a report sent
    to stdout (``-o -``) that is not the text report gets escaped like :func:`echo_out`."""
    from tracekit import fileio
    items = [(p, safe_block(t) if p in fileio.STDOUT_PATHS and f != "text" else t) for (p, t), f in zip(items, fmts)]
    fileio.write_all(items, what=what)


def gate_lines(findings: list[dict], fail_on: str) -> list[str]:
    """The findings that reached ``--fail-on``, one line each, most severe first, for stderr when the gate fails
    (a CI log then says which rule failed it, also when the reports went to files)."""
    from tracekit.report.envelope import SEVERITIES
    from tracekit.report.render.sections import claim
    hit = [f for f in findings if SEVERITIES.index(f["severity"]) >= SEVERITIES.index(fail_on)]
    hit.sort(key=lambda f: (-SEVERITIES.index(f["severity"]), -(f.get("savings_ps") or 0), f["rule_id"]))
    out = [f"tracekit: gate failed: {len(hit)} finding(s) reached --fail-on {fail_on}"]
    for f in hit:
        msg = " ".join(str(f.get("message", "")).split())
        msg = msg if len(msg) <= 160 else msg[:159] + "…"
        out.append(safe(f"  [{f['severity']}] {f['rule_id']} {f['name']}: {claim(f)[0]} — {msg}"))
    return out


def _signed(ps) -> str:
    from tracekit.units import fmt_time
    return "—" if ps is None else ("+" if ps > 0 else "-" if ps < 0 else "") + fmt_time(abs(ps))


def regression_lines(data: dict, limit: int = 20) -> list[str]:
    """What made ``tracekit diff`` fail, one stderr line per tripping item (the step time, then each regressed op),
    each line whole on its own (grep-able); past ``limit`` ops one line says how many more."""
    from tracekit.units import fmt_pct, fmt_time
    rows = [r for r in data["ops"] if r["status"] == "regression"]
    st = data["step_time"]
    out = []
    if st["status"] == "regression":
        out.append(f"tracekit: regression: step time (median) {fmt_time(st['base']['median_ps'])} -> "
                   f"{fmt_time(st['new']['median_ps'])} (+{fmt_pct(st['change'])}, p {st.get('p_value') or 0:.2g})")
    for r in rows[:limit]:
        p = r.get("p_holm")
        out.append(safe(f"tracekit: regression: {r['op']} ({r['module']}): median "
                        f"{fmt_time(r.get('base_median_ps'))} -> {fmt_time(r.get('new_median_ps'))} "
                        f"(+{fmt_pct(r.get('median_change'))}, {_signed(r.get('impact_ps'))} total, "
                        f"p {'—' if p is None else format(p, '.2g')} Holm)"))
    if len(rows) > limit:
        out.append(f"tracekit: regression: … and {len(rows) - limit} more op(s) (see the JSON output)")
    return out
