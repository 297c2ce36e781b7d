"""One host, analyzed: what every report section's ``summarize`` reads on the worker (the map side of the engine,
:mod:`tracekit.report.engine`).

:func:`build` runs the per-host stages on one host's :class:`~tracekit.ingest.trace.Trace`: the roofline join
(its chips and collective model handed on, :class:`tracekit.model.roofline.Joined`), the timeline's rule frames,
the memory view and the utilization overview of this host alone (the frames the memory and utilization rules
read), and every rule's evidence on this host's frames (:func:`tracekit.analysis.hostrules.evaluate`). A single
trace is the one-host case: the report of one host is reduced from its one :class:`HostView`'s summaries.
"""
from __future__ import annotations

from dataclasses import field, replace

import pandas as pd

from tracekit.columns import without_columns
from tracekit.options import Options
from tracekit.records import record

#: the trace's own model FLOPs per op (:data:`tracekit.schema.OPS`): only the overview's device parts read it
MODEL_FLOPS = "trace_model_flops"


@record
class HostView:
    """One host's analysis, as the sections' ``summarize`` read it (see the module docstring)."""

    host: str  #: the host's name
    path: str  #: its trace file (as given)
    hosts: tuple  #: every host of the run, in order (this one among them)
    trace: object  #: the host's :class:`tracekit.ingest.trace.Trace` (``trace.hosts == [host]``)
    options: Options
    joined: object  #: :class:`tracekit.model.roofline.Joined`: ``ops``, ``chips``, ``model``, ``disagreements``
    frames: object  #: :class:`tracekit.analysis.rule_checks.RuleFrames` of this host, memory and overview ones too
    memory: object  #: :class:`tracekit.analysis.memory.MemoryView` of this host (no offload times added)
    overview_parts: pd.DataFrame  #: :func:`tracekit.analysis.overview.device_parts`
    step_summary: object  #: :class:`tracekit.analysis.stepstats.StepSummary` of this host's steps
    step_source: tuple  #: where this host's steps came from
    cost_table: pd.DataFrame | None  #: :func:`tracekit.model.identity.costs` (None without HLO)
    #: :class:`tracekit.analysis.inference.HostServing`: this host's part of the serving view (its rule frame is
    #: ``frames.serving``)
    serving: object = None
    #: :func:`tracekit.analysis.opstats.op_sums` of ``ops`` (the rules' ``op_stats`` and the ops section read them)
    op_sums: tuple | None = None
    #: what one section works out for a later one on the same host (never leaves the host): ``"evidence"``, rule
    #: id -> (evidence rows, summary or None) of the rules whose fix the replay plays, from the findings section
    shared: dict = field(default_factory=dict)
    #: whether the run has more than one host file (only then does the reduce read the pod section's host parts)
    pod: bool = True

    @property
    def ops(self) -> pd.DataFrame:
        """The roofline-joined ops frame."""
        return self.joined.ops

    @property
    def chips(self) -> dict:
        """(host, device) -> the Chip the roofline priced the device's ops on."""
        return self.joined.chips


def build(tr, options: Options, *, path: str = "", hosts: tuple = (), ops: pd.DataFrame | None = None,
          release_trace_costs: bool = False, progress=None, pod: bool = True) -> HostView:
    """The :class:`HostView` of a one-host trace ``tr``. ``hosts``: every host of the run in order (GPU device ids
    count the hosts before this one); ``ops``: the caller's own roofline-joined ops (else joined here);
    ``release_trace_costs``: the trace's own cost stats (and its model FLOPs) leave ``tr.ops`` once they have
    served; ``pod``: the run has more than one host file."""
    from tracekit.analysis import inference, inference_report, memory, opstats, overview, rule_checks, stepstats
    from tracekit.ingest import steps as steps_mod
    from tracekit.model import collective_model, identity, roofline
    from tracekit.progress import NULL
    from tracekit.threads import one_shot
    progress = progress or NULL
    (host,) = tr.hosts
    path = str(path or (tr.paths[0] if tr.paths else ""))
    progress.stage("roofline")
    cost_table = identity.costs(tr) if tr.has_hlo else None
    run_hosts = tuple(hosts) or (host,)
    # the join sees the run's hosts (GPU global ids count the hosts before this one), each with its path where
    # it has one (a CPU host's recording machine is read beside its own file)
    paths = list(tr.paths)
    tr.hosts, tr.paths = list(run_hosts), [path if h == host else "" for h in run_hosts]
    try:
        if ops is None:
            j = roofline.joined(tr, options.chip, options.topology, cost_table,
                                release_trace_costs=release_trace_costs, per_identity_table=one_shot())
        else:
            dchips = roofline.device_chips(tr, options.chip)
            j = roofline.Joined(ops, dchips, collective_model.build(tr, dchips, options.topology))
    finally:
        tr.hosts, tr.paths = [host], paths
    progress.stage("timelines")
    sums = opstats.op_sums(j.ops)
    fr = rule_checks.frames_for_rules(j.ops, tr.steps, tr.host_events, modules=tr.modules,
                                      kernel_profile=tr.kernel_profile, sums=sums, **options.timeline())
    step_source = tuple(sorted({str(x) for x in tr.steps["step_source"].unique()})) if len(tr.steps) else ()
    parts = overview.device_parts(j.ops, fr.steps, j.chips)
    if release_trace_costs and MODEL_FLOPS in j.ops.columns:
        # the trace's model FLOPs stat has served its one reader (the device parts): it leaves every frame of the
        # host before the memory view and the sections (a row-sized float64 column fewer through them)
        tr.ops = without_columns(tr.ops, [MODEL_FLOPS])
        j = replace(j, ops=without_columns(j.ops, [MODEL_FLOPS]))
        fr = replace(fr, ops=without_columns(fr.ops, [MODEL_FLOPS]))
    mem = memory.build(tr, j.chips)
    ss = stepstats.summary(fr.steps)
    ov = overview.finish(ss, parts, step_source=", ".join(step_source),
                         model_flops_per_step=options.model_flops_per_step)
    fr = replace(fr, **memory.rule_frames(memory.with_offload_time(mem, ov.devices), ov.devices, fr.devices))
    serving = inference.host_summary(host, tr.modules, tr.hlo_modules, j.ops, j.chips, options.workload,
                                     steps_mod.main_program(tr.modules) if len(tr.modules) else None,
                                     memory_programs=mem.programs)
    # the serving rules' frame of this host alone (where its rules lay their claims; training rules skip its
    # programs); the report's is the reduce's, over every host (tracekit.report.engine.inference)
    fr = replace(fr, serving=inference_report.rule_frame(inference.reduce([serving])))
    return HostView(host=host, path=path, hosts=run_hosts, trace=tr,
                    options=options, joined=j, frames=fr, memory=mem, overview_parts=parts, step_summary=ss,
                    step_source=step_source, cost_table=cost_table, serving=serving, op_sums=sums, pod=pod)
