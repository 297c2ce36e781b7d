"""``tracekit memory PATH``: where device memory goes, from XLA's buffer assignment in the trace (per program:
arguments, outputs, aliased, temporaries, live peak; the largest buffers and the source lines that create them;
the device-level peak; host offload and whether it would fit in HBM; the allocator's events when present)."""
from __future__ import annotations

import json

import click

from tracekit.cli.console import output_format, output_opt, write_output
from tracekit.cli.options import guarded, limit_opts, limits, load_trace, path_arg, run_opt, term_width


@click.command("memory")
@path_arg
@run_opt
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default=None,
              help="text (default), json or markdown.")
@output_opt("the memory view")
@click.option("--chip", default=None, help="Chip name to use instead of the detected one (its HBM capacity).")
@click.option("--top", type=click.IntRange(0, 1000), default=10, show_default=True, help="Largest buffers to list.")
@limit_opts
@guarded
def memory_cmd(path, run, fmt, output, chip, top, max_size, max_events):
    """Memory per program and device from XLA's buffer assignment (argument, output, alias, temp and peak live
    bytes, the largest buffers, the device-level peak, host offload), and memory use over time when the trace
    has allocator events."""
    fmt = output_format(fmt, output, ("json", "markdown"), "text")  # a bad -o path fails before the trace is read
    from tracekit.analysis import memory
    from tracekit.report import envelope
    from tracekit.report.render import markdown, memview
    tr = load_trace(path, run=run, **limits(max_size, max_events))
    from tracekit.model import roofline
    mv = memory.build(tr, roofline.device_chips(tr, chip))
    from tracekit.report.engine import memory as memory_section
    data = {"memory": memory_section.section(mv), "summary": {"hosts": len(tr.hosts)}}  # (hosts: host/device labels)
    data["memory"]["buffers"] = envelope.records(mv.buffers.head(top))
    if fmt == "json":
        text = json.dumps(data["memory"], indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    elif not data["memory"].get("programs"):
        text = "no buffer assignment in this trace (its HLO protos carry none): no memory view\n"
    elif fmt == "markdown":
        text = "\n".join(memview.markdown(data, markdown.esc, markdown.table)).rstrip() + "\n"
    else:
        import functools
        from tracekit.report.render.text import fit_para, fit_table
        w = term_width()
        text = "\n".join(memview.memory_text(data, buffers=top, fit=functools.partial(fit_table, width=w),
                                               wrap=functools.partial(fit_para, width=w))) + "\n"
    if output is not None:
        write_output(output, text, "text" if fmt == "text" else fmt)
    else:
        click.echo(text, nl=False)
