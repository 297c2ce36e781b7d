"""Section ``inference``: the serving view (prefill and decode programs, their steps, tokens per second, the KV cache,
the decode step against its memory roofline; :mod:`tracekit.analysis.inference`), and the pod-wide ``serving`` rule
frame the serving rules (and the ``workload: training`` filter) read in ``findings``.

Per host: the host's :class:`tracekit.analysis.inference.HostServing` (built with its view,
:func:`tracekit.analysis.hostview.build`): its serving programs, one row per run of them (O(steps)), their ops
summed per device (O(distinct ops)), its devices' chips and the programs' live peaks. The reduce is
:func:`tracekit.analysis.inference.reduce` of the hosts' parts in host order — on one host, of its one part, so the
one-host report is what one process computes. On a pod, a program's step percentiles are over every host's steps
and its live peak the largest any host holds; each host's rules still lay their claims with that host's own
figures (:mod:`tracekit.report.engine.findings`)."""
from __future__ import annotations

NAME = "inference"


def summarize(hv):
    """The host's :class:`tracekit.analysis.inference.HostServing`."""
    return hv.serving


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import inference, inference_report
    view = inference.reduce([p for p in parts if p is not None])
    ctx.frames["serving"] = inference_report.rule_frame(view)
    return {"inference": inference_report.section(view)}


def _serving(hv):
    """The host's serving part; the view's prediction table (a one-shot process's) goes with the view."""
    from tracekit.model import predictions
    predictions.release(hv.ops)
    return hv.serving


def build(tr, options=None, **given):
    """The :class:`tracekit.analysis.inference.InferenceView` of a loaded :class:`tracekit.ingest.trace.Trace` as the
    engine builds it, without the rest of the report (``tracekit inference``): each host's part
    (:func:`tracekit.analysis.hostview.build`, with ``options``: :class:`tracekit.options.Options`, its fields also
    as keywords, e.g. ``workload="serving"``, ``chip="v5e"``), then the one reduce, with its ``serving`` rule
    frame as ``per_device``."""
    from dataclasses import replace
    from tracekit import options as options_mod
    from tracekit.analysis import hostview, inference, inference_report
    from tracekit.ingest.split import per_host
    opt = options_mod.make(options, **given)
    parts = per_host(tr)
    run_hosts = tuple(t.hosts[0] for t in parts)
    view = inference.reduce([_serving(hostview.build(t, opt, hosts=run_hosts)) for t in parts])
    return replace(view, per_device=inference_report.rule_frame(view))
