"""The collective model of one trace: its topology, the collectives of its HLO, and the predicted time of each
collective on each device (:mod:`tracekit.model.collective_cost`), built once and shared by the roofline, the
collectives view and the rules."""
from __future__ import annotations

from dataclasses import field

from tracekit.model import collective_cost, collective_hlo, topology as topo_mod
from tracekit.model.topology import Topology
from tracekit.records import record


@record
class Model:
    """``topology``; ``chip``: what the collectives are priced as; ``ops``: (program id, instruction) ->
    :class:`tracekit.model.collective_hlo.CollectiveOp`; ``ids``: (host, device) -> global device id."""

    topology: Topology
    chip: object
    ops: dict
    ids: dict
    _memo: dict = field(default_factory=dict, repr=False)

    def op(self, program_id: int, name: str):
        return self.ops.get((int(program_id), str(name)))

    def predict(self, program_id: int, name: str, host: str, device: str):
        """The :class:`tracekit.model.collective_cost.Prediction` of one collective on one traced device; None when
        the instruction is not a collective of the trace's HLO."""
        op = self.op(program_id, name)
        if op is None:
            return None
        gid = self.ids.get((str(host), str(device)))
        if gid is None:
            return collective_cost.unknown(f"device {host}/{device} is not in the topology")
        key = (op.program_id, op.name, gid if (op.pairs or len(op.groups) != 1) else -1)
        if key not in self._memo:
            self._memo[key] = collective_cost.predict(op, gid, self.topology, self.chip)
        return self._memo[key]


def _pricing_chip(dchips: dict):
    """The chip collectives are priced as: the first accelerator of the trace, else the first device's chip."""
    chips = list(dchips.values())
    for c in chips:
        if c.family in ("tpu", "gpu"):
            return c
    return chips[0] if chips else None


def build(tr, dchips: dict, topology: str | None = None) -> Model:
    """The :class:`Model` of trace ``tr`` with ``dchips`` ((host, device) -> Chip, as the roofline detected or
    ``--chip`` chose them) and ``topology`` (``--topology``). The roofline join builds it once and hands it on
    (:attr:`tracekit.model.roofline.Joined.model`)."""
    ops = collective_hlo.collectives(tr.hlo_modules) if tr.has_hlo else {}
    chip = _pricing_chip(dchips)
    devices = [(str(h), str(d)) for h, d in zip(tr.devices["host"], tr.devices["device"])] if len(tr.devices) else []
    topo = topo_mod.from_trace(devices, tr.device_stats, chip, spec=topology,
                               max_device_id=collective_hlo.max_device_id(ops, tr.hlo_modules),
                               hosts=[str(h) for h in tr.hosts])
    return Model(topo, chip, ops, topo.global_id())
