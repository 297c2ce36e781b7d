"""``tracekit hlo PATH OP``: one op's HLO instruction, its fusion body, its operands' producers, and its JAX name
stack (``op_name``) and source line, read from the HLO protos in the trace."""
from __future__ import annotations

import json

import click

from tracekit.cli.options import fit_lines, guarded, limit_opts, limits, load_trace, path_arg, run_opt


@click.command("hlo")
@path_arg
@click.argument("op")
@run_opt
@click.option("--module", default=None, metavar="M", help="The module holding OP when its name is in several.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@limit_opts
@guarded
def hlo_cmd(path, op, run, module, fmt, max_size, max_events):
    """The HLO of op OP (a name from `tracekit ops`, e.g. fusion.3): its instruction, the instructions of the
    computation it calls (a fusion's body), the instruction producing each operand, and its op_name and source.
    An unknown OP: one line with close matches, exit 2."""
    from tracekit.analysis import hloview
    tr = load_trace(path, run=run, **limits(max_size, max_events))
    v = hloview.view(tr.hlo_modules, op, module, where=str(path))
    if fmt == "json":
        click.echo(json.dumps(v, indent=1, ensure_ascii=False))
    else:
        click.echo(fit_lines(hloview.view_text(v), hang=4), nl=False)  # a long instruction wraps between words
