"""What the replay needs from a loaded trace, host by host: which steps to replay, and each host's graph
(:func:`tracekit.analysis.replay.graph.build`). The analysis replays each host on its own worker
(:mod:`tracekit.analysis.replay.savings`)."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.analysis import stepstats
from tracekit.analysis.replay import graph

_DONE = re.compile(r"-done(\.\d+)?$")
#: at most this many nodes are replayed (built and walked node by node): steps beyond it are sampled
MAX_NODES = 200_000


def choose_steps(steps: pd.DataFrame, ops_rows: int, max_nodes: int = MAX_NODES) -> tuple[list, str]:
    """(the step numbers to replay, how they were chosen). Closed steps (a device's last run has no next start)
    present on every device; when their op rows would pass ``max_nodes``, the ones whose measured time on the
    slowest device (largest median) lies nearest its median."""
    if steps is None or not len(steps):
        return [], "the trace has no steps"
    closed = steps[~column_numpy(steps, "open_end", bool)] if "open_end" in steps else steps
    if not len(closed):
        return [], "every step is a device's last run (no next start to end it)"
    ndev = closed.groupby(["host", "device"], observed=True).ngroups
    per = closed.groupby("step")["device"].size()
    common = per[per == ndev].index.to_numpy(np.int64)
    if not len(common):
        common = per.index.to_numpy(np.int64)
    total_steps = max(int(steps["step"].nunique()), 1)
    per_step = max(ops_rows / total_steps, 1.0)
    cap = max(int(max_nodes // per_step), 1)
    if len(common) <= cap:
        return sorted(common.tolist()), f"all {len(common)} closed step(s)"
    # the slowest device (largest median step time; the first in text order among equal ones), its steps of
    # ``common`` in frame order, the ``cap`` nearest its median (ties in frame order)
    dur = column_numpy(closed, "duration_ps", np.float64)
    step = column_numpy(closed, "step", np.int64)
    per_device = [rows for _, rows in stepstats.device_rows(closed)]
    meds = [float(np.median(dur[rows])) for rows in per_device]
    mine = per_device[meds.index(max(meds))]
    mine = mine[np.isin(step[mine], common)]
    if not len(mine):
        return [], "no closed step of the slowest device is on every device"
    near = np.argsort(np.abs(dur[mine] - np.median(dur[mine])), kind="stable")
    pick = sorted(step[mine][near[:cap]].tolist())
    return pick, (f"{len(pick)} of {len(common)} closed steps, those nearest the median step time of the slowest "
                  f"device (the replay is capped at {max_nodes:,} op executions)")


def member_function(tr, ops_chip: str | None = None, topology: str | None = None, model=None):
    """``member_of(device, program_id, op)`` for :func:`graph.build` on trace ``tr``'s hosts: the devices of the
    replica group (or of the send/recv pairs) the collective runs in on that device, from the HLO; None where the
    HLO does not say. ``model``: the collective model the ops were priced on (:attr:`tracekit.model.roofline.Joined.model`),
    when the caller has it (else built here)."""
    if not getattr(tr, "has_hlo", False):
        return None
    if model is None:
        from tracekit.model import collective_model, roofline
        model = collective_model.build(tr, roofline.device_chips(tr, ops_chip), topology)

    def of(host: str):
        def member_of(device: str, program_id: int, op: str):
            o = model.op(program_id, _DONE.sub(lambda m: "-start" + (m.group(1) or ""), op))
            if o is None:
                return None
            if o.pairs:
                return tuple(sorted({x for p in o.pairs for x in p}))
            gid = model.ids.get((str(host), str(device)))
            if not o.groups or gid is None:
                return None
            g = o.group_of(gid)
            return tuple(g) if g else None
        return member_of
    return of


def host_graph(host: str, ops: pd.DataFrame, steps: pd.DataFrame, step_numbers, d2s: dict, prod: dict,
               member_of=None) -> graph.HostGraph:
    """One host's graph: ``ops``/``steps`` the whole trace's frames (this host's rows are taken there by their
    codes); its ``rows`` are positions in ``ops``."""
    return graph.build(host, ops, steps, step_numbers, d2s, prod, member_of)


def graphs(tr, ops: pd.DataFrame, step_numbers, chip: str | None = None, topology: str | None = None,
           model=None) -> list:
    """Every host's graph of the steps ``step_numbers`` (``ops``: ``tr``'s ops with the roofline columns;
    ``model``: the collective model they were priced on, when the caller has it)."""
    from tracekit.ingest import hlo as hlo_mod
    d2s = hlo_mod.done_to_start(tr.hlo) if len(tr.hlo) else {}
    prod = graph.producers(tr.hlo)
    members = member_function(tr, chip, topology, model)
    return [host_graph(str(h), ops, tr.steps, step_numbers, d2s, prod, members(str(h)) if members else None)
            for h in tr.hosts]
