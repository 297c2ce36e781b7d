"""``tracekit parallelism PATH``: the parallelism the trace ran (mesh axes and their roles, the per-device batch,
d_model, d_ff, the parameters), where each axis stands against the book's limits, and MFU with HFU
(:mod:`tracekit.analysis.parallelism`, :mod:`tracekit.analysis.mfu`): the report's ``parallelism`` section and its
overview's FLOPs, from the same engine as ``tracekit analyze`` (:mod:`tracekit.report.engine`)."""
from __future__ import annotations

import json

import click

from tracekit.cli.console import output_format, output_opt, write_output
from tracekit.cli.options import guarded, limit_opts, limits, path_arg, run_opt, term_width, topology_opt
from tracekit.options import MODELS

#: the only rule the command runs (the findings are not shown): the communication-bound axis
RULE = "TK027"


@click.command("parallelism")
@path_arg
@run_opt
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default=None,
              help="text (default), json or markdown.")
@output_opt("the parallelism section")
@click.option("--chip", default=None, help="Chip name to price the limits as (see `tracekit chips`).")
@topology_opt
@click.option("--model", "model", type=click.Choice(MODELS), default=None,
              help="What the model is, for MFU: transformer = 6 x N x tokens from the recovered shapes.")
@click.option("--model-flops-per-step", "model_flops", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The model's FLOPs of one step, all devices together (for MFU).")
@limit_opts
@guarded
def parallelism_cmd(path, run, fmt, output, chip, topology, model, model_flops, max_size, max_events):
    """The mesh axes the trace's step program ran on and the role of each (data, fsdp, tensor, sequence, expert,
    pipeline or unknown, with what each inference rests on), the per-device batch, d_model and d_ff, each axis
    against the book's limits (How to Scale Your Model), and MFU with HFU."""
    fmt = output_format(fmt, output, ("json", "markdown"), "text")  # a bad -o path fails before the trace is read
    from tracekit import pipeline
    from tracekit.options import Options
    from tracekit.report.render import markdown, sections
    from tracekit.report.render import parallelism as section
    opt = Options(chip=chip, topology=topology, run=run, select=(RULE,), model=model,
                  model_flops_per_step=model_flops, **limits(max_size, max_events))
    data = pipeline.analyze(path, opt).data
    flops = [kv for kv in sections.overview_facts(data) if kv[0] in ("step time", "MFU and HFU")]
    if fmt == "json":
        text = json.dumps({"parallelism": data["parallelism"], "flops": data["overview"].get("flops") or {},
                           "step_time": data["overview"].get("step_time") or {}},
                          indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    elif fmt == "markdown":
        lines = [f"- **{markdown.esc(k, None)}:** {markdown.esc(v, None)}" for k, v in flops]
        text = "\n".join(section.markdown(data, markdown.esc, markdown.table) + lines).rstrip() + "\n"
    else:
        import functools
        from tracekit.report.render.text import fit_para, fit_table
        w = term_width()
        text = section.command_text(data, functools.partial(fit_table, width=w),
                                    functools.partial(fit_para, width=w), flops)
    if output is not None:
        write_output(output, text, "text" if fmt == "text" else fmt)
    else:
        click.echo(text, nl=False)
