"""The one analysis engine: map each host to small typed summaries, reduce them into the one Report.

Every analysis — one trace file in this process, a run folder's hosts in this process, in a ``--jobs N`` process
pool, or on a Dask cluster — is the same two steps:

* **map**, once per host, where the host's file is read (:func:`tracekit.report.engine.host.summarize_file`): the
  host's trace is loaded, joined with its roofline and turned into a :class:`tracekit.analysis.hostview.HostView`
  (ops, chips, collective model, rule frames, memory view, overview parts); each registered section's
  ``summarize`` turns it into a small picklable *part*; the :class:`~tracekit.report.engine.host.HostSummary`
  (the parts, by section name) is all that leaves the worker;
* **reduce**, once, on the driver (:func:`tracekit.report.engine.reduce.report`): each section's ``reduce`` merges
  the hosts' parts (in host order) into its part of the report, in the order of :data:`SECTIONS`.

A single host is the one-host case of the same code: each section's reduce of one part gives exactly what one
process computes on the whole trace. The engines differ only in where the map runs (:mod:`tracekit.pipeline` in
this process, :mod:`tracekit.run.pod` on workers), so their reports are equal.

Adding a section
----------------
A section is one module here with three names, listed once in :data:`SECTIONS`::

    NAME = "parallelism"                       # its key in HostSummary.parts (and, usually, in the report)

    def summarize(hv) -> Part:                 # on the worker, per host; hv: tracekit.analysis.hostview.HostView
        ...                                    # (hv.ops, hv.chips, hv.joined.model, hv.frames, hv.trace,
        return Part(...)                       #  hv.options, hv.host, hv.hosts); small and picklable: no frame
                                               #  of one row per event leaves the worker

    def reduce(parts: list, ctx) -> dict:      # on the driver: the hosts' parts in host order;
        return {"parallelism": {...}}          # ctx: tracekit.report.engine.context.Reduction (what the
                                               # sections before it merged: ctx.devices, ctx.op_stats,
                                               # ctx.overview, ctx.findings, ctx.options, ...); returns report
                                               # keys -> JSON-ready values (tracekit.report.envelope.clean)

and, to be shown, optionally ``TITLE = "Parallelism"`` and ``facts(data) -> [(label, text), ...]``: the text,
Markdown and HTML reports lay those lines out under the title (:func:`rendered`). A section that needs another's
result comes after it in :data:`SECTIONS`; a value later sections read goes on ``ctx`` (``ctx.shared[name]``).
``docs/architecture.md`` says the same, with the rules for what a part may hold.
"""
from __future__ import annotations

import importlib

#: the sections, in reduce order (each a module of this package; see the module docstring)
SECTIONS = ("chips", "devices", "ops", "steps", "parallelism", "overview", "memory", "collectives", "interconnect",
            "custom_calls", "modelwarnings", "inference", "findings", "replay", "pod")


def sections() -> list:
    """The section modules, in :data:`SECTIONS` order."""
    return [importlib.import_module(f"{__name__}.{name}") for name in SECTIONS]


def rendered() -> list:
    """The sections that show themselves (``TITLE`` and ``facts``), in order: what the renderers lay out after the
    built-in parts of the report."""
    return [m for m in sections() if hasattr(m, "facts") and hasattr(m, "TITLE")]
