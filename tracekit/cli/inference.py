"""``tracekit inference PATH``: the serving view of a trace: which programs are prefill and decode steps and on what
evidence, per program its step time, tokens per step and per second per chip, the KV cache, the parameter and KV
bytes a decode step reads and its memory roofline, the batch at which decode turns compute-bound, and the prefill
against its compute roofline (:mod:`tracekit.analysis.inference`)."""
from __future__ import annotations

import json

import click

from tracekit.cli.console import output_format, output_opt, write_output
from tracekit.cli.options import guarded, limit_opts, limits, path_arg, run_opt, term_width, workload_opt


@click.command("inference")
@path_arg
@run_opt
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default=None,
              help="text (default), json or markdown.")
@output_opt("the inference view")
@click.option("--chip", default=None, help="Chip name to use instead of the detected one (its HBM bandwidth, peaks "
                                           "and capacity).")
@workload_opt
@limit_opts
@guarded
def inference_cmd(path, run, fmt, output, chip, workload, max_size, max_events):
    """Prefill and decode steps: step time, tokens/s per chip, the KV cache, and the decode step against its
    memory roofline (parameter + KV bytes read / HBM bandwidth)."""
    fmt = output_format(fmt, output, ("json", "markdown"), "text")  # a bad -o path fails before the trace is read
    from tracekit.analysis import inference_report
    from tracekit.report.engine import inference as engine_inference
    from tracekit.ingest.trace import load
    from tracekit.options import Options
    from tracekit.report.render import inference as section
    from tracekit.report.render import markdown
    lim = limits(max_size, max_events)
    tr = load(path, run=run, **lim)
    view = engine_inference.build(tr, Options(chip=chip, run=run, workload=workload, **lim))
    from tracekit.report.termsafe import safe_tree
    data = {"inference": inference_report.section(view)}
    if fmt == "json":
        text = json.dumps(data["inference"], indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    elif fmt == "markdown":
        text = "\n".join(section.markdown(data, markdown.esc, markdown.table) or
                         [section.workload_line(data)]).rstrip() + "\n"
    else:
        import functools
        from tracekit.report.render.text import fit_para, fit_table
        w = term_width()  # (names from the trace made safe for a terminal first)
        text = "\n".join(section.text(safe_tree(data), fit=functools.partial(fit_table, width=w),
                                       wrap=functools.partial(fit_para, width=w))) + "\n"
    if output is not None:
        write_output(output, text, "text" if fmt == "text" else fmt)
    else:
        click.echo(text, nl=False)
