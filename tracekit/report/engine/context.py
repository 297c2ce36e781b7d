"""What the reduce hands from section to section (:class:`Reduction`), and what the map hands the reduce
(:class:`HostSummary`)."""
from __future__ import annotations

from dataclasses import field

import pandas as pd

from tracekit.options import Options
from tracekit.records import record


@record(frozen=True)
class HostSummary:
    """One host, summarized on its worker: every section's part, by the section's ``NAME``."""

    host: str
    path: str
    parts: dict  #: section name -> its part (small, picklable)
    seconds: float = 0.0  #: wall time the map spent on this host


@record
class Reduction:
    """The reduce's state: the hosts' summaries and, as the sections run in order, what each merged for the ones
    after it. A new section reads what it needs here; what it merges for later sections goes in ``shared``."""

    summaries: list  #: :class:`HostSummary` per analyzed host, in host order
    failures: list  #: (host, path, reason) of each host left out
    options: Options
    rules: list  #: [(rule, resolved params)] of every rule, in rule order
    files: int  #: host files of the run (analyzed or left out): more than one makes it a pod
    hosts: list = field(default_factory=list)  #: the analyzed hosts, in order
    notes: tuple = ()  #: the driver's warnings, before the hosts' (which run of the path was taken)
    chips: dict = field(default_factory=dict)  #: (host, device) -> Chip (``chips``)
    devices: pd.DataFrame | None = None  #: the devices frame, busy_ps_z across the pod (``devices``)
    span: dict = field(default_factory=dict)  #: (host, device) -> span_ps (``devices``)
    profiled: float = 0.0  #: the sum of the device spans (``devices``)
    totals: object = None  #: :class:`tracekit.report.engine.ops.Totals` (``ops``)
    op_stats: pd.DataFrame | None = None  #: every op aggregated over the pod (``ops``)
    step_summary: object = None  #: :class:`tracekit.analysis.stepstats.StepSummary` (``steps``)
    step_source: tuple = ()  #: where the steps came from (``steps``)
    overview: object = None  #: :class:`tracekit.analysis.overview.Overview` (``overview``)
    memory: object = None  #: :class:`tracekit.analysis.memory.MemoryView`, offload times added (``memory``)
    frames: dict = field(default_factory=dict)  #: the pod-wide rule frames (``devices``, ``ops``, ``memory``)
    findings: list = field(default_factory=list)  #: Finding objects, sorted (``findings``)
    headline: dict = field(default_factory=dict)  #: claims_union_ps, above_roofline_floor_ps (``findings``)
    shared: dict = field(default_factory=dict)  #: anything else a section hands on, by name

    def parts(self, name: str) -> list:
        """Every analyzed host's part of section ``name``, in host order."""
        return [s.parts[name] for s in self.summaries]

    @property
    def pod(self) -> bool:
        """Whether the run has more than one host file."""
        return self.files > 1
