"""Section ``interconnect``: the machine's topology and, per collective op, measured vs predicted
(:mod:`tracekit.analysis.interconnect`: each host's executions summarized on its worker, met across hosts here)."""
from __future__ import annotations

from tracekit.records import record

NAME = "interconnect"
LIMIT = 50  #: collective ops listed


@record(frozen=True)
class Part:
    """One host's part of the interconnect section."""

    collectives: object  #: :class:`tracekit.analysis.interconnect.HostPart`
    devices: tuple  #: (host, device) of the host's device planes, in order
    device_stats: dict  #: their plane stats (the topology reads core_details)
    chip: object  #: the chip the host's collectives were priced as
    max_device_id: int  #: the largest device id the host's HLO names


def summarize(hv) -> Part:
    from tracekit.analysis import interconnect
    from tracekit.model import collective_hlo
    tr, model = hv.trace, hv.joined.model
    devs = tuple((str(h), str(d)) for h, d in zip(tr.devices["host"], tr.devices["device"])) if len(tr.devices) else ()
    return Part(interconnect.host_part(hv.ops, model), devs,
                {k: v for k, v in tr.device_stats.items() if (str(k[0]), str(k[1])) in set(devs)}, model.chip,
                collective_hlo.max_device_id(model.ops, tr.hlo_modules))


def machine(ctx) -> tuple:
    """(the chip collectives are priced as, the :class:`tracekit.model.topology.Topology` of every analyzed host's
    devices): worked out once per reduce from this section's parts and kept on ``ctx.shared["machine"]`` (the
    parallelism section, which reduces before this one, prices its limits on the same)."""
    if "machine" not in ctx.shared:
        from tracekit.model import topology as topo_mod
        parts = ctx.parts(NAME)
        chip = next((p.chip for p in parts if getattr(p.chip, "family", "") in ("tpu", "gpu")), parts[0].chip)
        stats: dict = {}
        for p in parts:
            stats.update(p.device_stats)
        topo = topo_mod.from_trace([d for p in parts for d in p.devices], stats, chip, spec=ctx.options.topology,
                                   max_device_id=max(p.max_device_id for p in parts),
                                   hosts=list(ctx.hosts))  # (the hosts the report covers)
        ctx.shared["machine"] = (chip, topo)
    return ctx.shared["machine"]


def reduce(parts: list, ctx) -> dict:
    from tracekit.analysis import interconnect
    from tracekit.report.envelope import records
    summary = interconnect.reduce([p.collectives for p in parts])
    chip, topo = machine(ctx)
    t = topo.to_dict()
    t.pop("devices")
    t["devices_traced"] = len(topo.global_id())
    t["chip"] = getattr(chip, "name", "")
    return {"interconnect": {"topology": t, "collectives": records(summary.head(LIMIT)),
                             "collective_ops": int(len(summary))}}
