"""Section ``parallelism``: the mesh axes the step program ran on and the role of each, the per-device batch,
d_model, d_ff and the parameters, each axis against the book's limits (:mod:`tracekit.analysis.parallelism`), and
the model's FLOPs for MFU under ``--model transformer``.

Per host: :class:`tracekit.analysis.parallelism.HostParallelism` (the step program's HLO facts: its collectives,
dots and weights, O(instructions of one program); its op time, steps and devices). Once: the program most op time
ran, its facts from the first host that has them, priced on the chip and the topology of every analyzed host (the
interconnect section's, :func:`tracekit.report.engine.interconnect.machine`). On one host the reduce reads that
host's facts and topology; a pod changes only which program wins (the op time summed over hosts), the device
count (the devices of every host that ran it) and the topology the limits are priced on.

It reduces before ``overview`` (which reads the model FLOPs it hands on in ``ctx.shared["model_flops"]`` when
``Options.model`` declares the model) and before ``findings`` (its ``parallel_axes`` rule frame goes in
``ctx.frames``).
"""
from __future__ import annotations

NAME = "parallelism"
TITLE = "Parallelism"


def summarize(hv):
    """The host's :class:`tracekit.analysis.parallelism.HostParallelism`."""
    from tracekit.analysis import parallelism
    return parallelism.host_summary(hv.trace, hv.ops)


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import parallelism
    from tracekit.report.engine import interconnect
    from tracekit.report.envelope import clean
    chip, topo = interconnect.machine(ctx)
    par = parallelism.reduce(parts, chip=chip, topology=topo)
    ctx.shared["model_flops"] = parallelism.model_flops_for(par, ctx.options.model)
    ctx.frames["parallel_axes"] = parallelism.rule_frame(par)
    return {"parallelism": clean(par.to_dict())}


def facts(data: dict) -> list:
    """The section's lines in the text, Markdown and HTML reports (:func:`tracekit.report.render.parallelism.
    report_facts`)."""
    from tracekit.report.render import parallelism as render
    return render.report_facts(data)
