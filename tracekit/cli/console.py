"""What the command line prints, and how: usage errors as one line, machine-readable output made safe for a terminal,
reports written through :mod:`tracekit.fileio`, and the findings that failed a CI gate, one line each.

Everything here that came from a trace passes through :mod:`tracekit.report.termsafe` before it reaches a terminal.
"""
from __future__ import annotations

import sys

import click

from tracekit.errors import EXIT_BAD_INPUT
from tracekit.report.termsafe import safe, safe_block

quiet_opt = click.option("-q", "--quiet", is_flag=True,
                         help="Print nothing but errors (the exit status says how it went; -o files are written).")


class OneLineErrors(click.Group):
    """Usage errors (a missing argument, a bad option value, an unknown option) as the one ``tracekit: error:``
    line with exit code 2, like every other bad input, instead of click's usage block."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
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
        except click.exceptions.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


def echo_out(text: str) -> None:
    """Print machine-readable output (CSV, JSON, Markdown, HTML, SARIF) on stdout with its control and bidi
    characters escaped (newlines kept): a pipe often ends in a terminal (``| less -R``, a CI log), and none of these
    formats needs a raw control character (JSON escapes them itself). Files written with ``-o`` keep the text as
    the format escapes it. (The text report is already safe, and is printed with click.echo for its colours.)"""
    click.echo(safe_block(text), nl=False)


def write_reports(items: list[tuple[str, str]], fmts: list[str]) -> None:
    """Write every ``(path, text)`` through :func:`tracekit.fileio.write_all` (all or none replaced); a report sent
    to stdout (``-o -``) that is not the text report gets escaped like :func:`echo_out`."""
    from tracekit import fileio
    items = [(p, safe_block(t) if p in fileio.STDOUT_PATHS and f != "text" else t) for (p, t), f in zip(items, fmts)]
    fileio.write_all(items, what="the report")


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


def regression_lines(data: dict, limit: int = 20) -> list[str]:
    """What made ``tracekit diff`` fail, one line each, for stderr: the step time, then the regressed ops."""
    from tracekit.units import fmt_pct, fmt_time
    rows = [r for r in data["ops"] if r["status"] == "regression"]
    st = data["step_time"]
    out = [f"tracekit: regression: {len(rows)} op(s)" + (" and the step time" if st["status"] == "regression" else "")]
    if st["status"] == "regression":
        out.append(f"  step time (median): {fmt_time(st['base']['median_ps'])} -> {fmt_time(st['new']['median_ps'])}"
                   f" (+{fmt_pct(st['change'])})")
    for r in rows[:limit]:
        out.append(safe(f"  {r['op']} ({r['module']}): mean {fmt_time(r.get('base_mean_ps'))} -> "
                        f"{fmt_time(r.get('new_mean_ps'))} (+{fmt_pct(r.get('change'))})"))
    if len(rows) > limit:
        out.append(f"  … and {len(rows) - limit} more")
    return out
