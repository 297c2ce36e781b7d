"""Where each device of a trace sits in the machine: the torus of a TPU slice (and the slices joined by DCN), or
the NVLink / Infinity Fabric domains of GPU nodes (and the network between them).

Sources, in order:

1. ``--topology SPEC`` (:func:`parse`): ``4x4`` or ``2x2x4`` is one TPU slice of that many chips per axis,
   ``4x4@2`` two such slices joined by DCN, ``2x8gpu`` two GPU nodes of 8, ``8gpu`` one node of 8 (``72gpu``: a
   GB200 NVL72 domain). Used for traces that do not say, and to price a capture as another machine
   (``--chip "TPU v5p" --topology 2x2x2`` on a CPU capture).
2. The trace: a TPU device plane's ``core_details`` stat (``tensorflow.profiler.CoreDetails``: hostname=1,
   device_ordinal=2, core_num=3, local_chip_id=4, global_chip_id=5, global_core_id=6, is_sparse_core=7) gives
   each device's global chip and core id; the slice shape is the standard shape of that many chips for the chip
   family (Google Cloud's slice shapes). GPU planes give host and device ordinal: a node is a host (or, for a chip
   whose NVLink domain spans hosts such as GB200 NVL72, the chip table's domain size).
3. Nothing: device ordinal ``i`` is global device ``i`` and chips are numbered in row-major order over the shape
   (last axis fastest). Real TPU device order is not always row-major; the topology's ``source`` says when this
   was assumed.

A global device id is what XLA's replica groups name (after the module's device assignment). On chips whose
TensorCores are separate devices (TPU v2/v3, TPU7x: ``devices_per_chip`` 2) devices ``2c`` and ``2c+1`` share
chip ``c``.

Wraparound (book part 2): a 2-D torus axis (v5e, v6e) wraps when its size is a multiple of the chip's
``wraparound_multiple`` (16: a full pod axis); a 3-D torus (v4, v5p, TPU7x) wraps on every axis when the whole
slice is made of full 4x4x4 cubes (``2x2x4`` has no wraparound at all), and on none otherwise.
"""
from __future__ import annotations

import math
import re
from dataclasses import field

from tracekit.errors import TraceError
from tracekit.records import record

#: Standard TPU slice shapes by chip count (Google Cloud TPU docs: v5e/v6e slice topologies; v4/v5p topologies).
SHAPES_2D = {1: (1, 1), 4: (2, 2), 8: (2, 4), 16: (4, 4), 32: (4, 8), 64: (8, 8), 128: (8, 16), 256: (16, 16)}
SHAPES_3D = {1: (1, 1, 1), 4: (2, 2, 1), 8: (2, 2, 2), 16: (2, 2, 4), 32: (2, 4, 4), 64: (4, 4, 4),
             128: (4, 4, 8), 256: (4, 8, 8), 512: (8, 8, 8), 1024: (8, 8, 16), 2048: (8, 16, 16),
             4096: (16, 16, 16)}
SHAPE_SOURCE = "Google Cloud TPU docs: the standard slice shape for this many chips"

_SPEC = re.compile(r"^\s*(?P<shape>\d+(?:x\d+)*)\s*(?:@\s*(?P<slices>\d+))?\s*$")
_GPU_SPEC = re.compile(r"^\s*(?:(?P<nodes>\d+)\s*x\s*)?(?P<per>\d+)\s*gpus?\s*$", re.IGNORECASE)


@record(frozen=True)
class Spec:
    """A parsed ``--topology``: ``kind`` 'torus' (TPU slices) or 'nodes' (GPU nodes)."""

    kind: str
    shape: tuple  # torus: chips per axis of one slice; nodes: (devices per node,)
    slices: int  # torus: slices (DCN); nodes: nodes
    text: str


def parse(text: str) -> Spec:
    """``4x4``, ``2x2x4``, ``4x4@2`` (two slices), ``8gpu``, ``2x8gpu`` -> :class:`Spec`; bad text -> TraceError."""
    t = str(text or "").strip().lower()
    m = _GPU_SPEC.match(t)
    if m:
        nodes, per = int(m.group("nodes") or 1), int(m.group("per"))
        if nodes < 1 or per < 1:
            raise TraceError(f"bad --topology {text!r}", hint="node and GPU counts must be >= 1, e.g. 2x8gpu")
        return Spec("nodes", (per,), nodes, t)
    m = _SPEC.match(t)
    if not m:
        raise TraceError(f"bad --topology {text!r}",
                         hint="write a TPU slice as 4x4 or 2x2x4 (4x4@2: two slices joined by DCN), "
                              "GPU nodes as 8gpu or 2x8gpu")
    shape = tuple(int(x) for x in m.group("shape").split("x"))
    slices = int(m.group("slices") or 1)
    if any(d < 1 for d in shape) or slices < 1 or len(shape) > 3:
        raise TraceError(f"bad --topology {text!r}", hint="1 to 3 axes, each >= 1 (e.g. 16, 4x4, 4x4x4)")
    return Spec("torus", shape, slices, t)


@record(frozen=True)
class Place:
    """Where one global device sits: ``group`` is the slice (torus) or node (switch/mesh); ``coords`` its chip's
    coordinates in the slice (torus) or ``(local index,)`` in the node; ``chip`` the global chip id."""

    group: int
    coords: tuple
    chip: int


@record(frozen=True)
class Topology:
    """The machine the devices of a trace form.

    kind: ``torus`` (TPU ICI, slices joined by DCN), ``switch`` (NVLink/NVSwitch nodes joined by NICs),
    ``mesh`` (AMD Infinity Fabric: every pair of a node's GPUs has its own link), ``shared`` (CPU devices of one
    process: shared memory), ``none`` (nothing known). ``shape``: chips per axis of one slice (torus) or
    ``(devices per node,)``; ``groups``: slices or nodes; ``wrap``: per torus axis."""

    kind: str
    shape: tuple
    groups: int = 1
    wrap: tuple = ()
    devices_per_chip: int = 1
    source: str = ""
    devices: tuple = field(default=(), compare=False)  # ((host, device, global id, global chip id or -1), ...)
    notes: tuple = ()

    @property
    def chips_per_group(self) -> int:
        return int(math.prod(self.shape)) if self.shape else 1

    @property
    def devices_per_group(self) -> int:
        return self.chips_per_group * (self.devices_per_chip if self.kind == "torus" else 1)

    @property
    def size(self) -> int:
        return self.devices_per_group * self.groups

    def global_id(self) -> dict:
        """(host, device) -> global device id, for every device of the trace."""
        return {(h, d): g for h, d, g, _ in self.devices}

    def place(self, gid: int) -> Place:
        """Where global device ``gid`` sits (ids beyond :attr:`size` wrap into the last group's range)."""
        gid = int(gid)
        if self.kind == "torus":
            chip = gid // max(self.devices_per_chip, 1)
            group, local = divmod(chip, self.chips_per_group)
            return Place(group, _unravel(local, self.shape), chip)
        per = max(self.devices_per_group, 1)
        group, local = divmod(gid, per)
        return Place(group, (local,), gid)

    def describe(self) -> str:
        if self.kind == "torus":
            axes = "x".join(str(d) for d in self.shape)
            w = ",".join("w" if x else "-" for x in self.wrap)
            s = f"TPU slice {axes} (wraparound per axis: {w})"
            if self.devices_per_chip > 1:
                s += f", {self.devices_per_chip} devices per chip"
            return s + (f" x {self.groups} slices over DCN" if self.groups > 1 else "")
        if self.kind in ("switch", "mesh"):
            link = "NVLink/NVSwitch" if self.kind == "switch" else "Infinity Fabric mesh"
            return f"{self.groups} node(s) x {self.shape[0]} GPUs ({link})"
        if self.kind == "shared":
            return f"{self.shape[0]} devices sharing one host's memory"
        return "unknown"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "shape": list(self.shape), "groups": self.groups, "wrap": list(self.wrap),
                "devices_per_chip": self.devices_per_chip, "source": self.source, "description": self.describe(),
                "devices": [{"host": h, "device": d, "global_id": g, "chip": c} for h, d, g, c in self.devices],
                "notes": list(self.notes)}


def _unravel(i: int, shape: tuple) -> tuple:
    out = []
    for d in reversed(shape):  # row-major: last axis fastest
        i, r = divmod(i, d)
        out.append(r)
    return tuple(reversed(out))


def wraparound(chip, shape: tuple) -> tuple:
    """Per axis of a slice of ``shape`` on ``chip``: True where that axis has its wraparound links."""
    mult = int(getattr(chip, "wraparound_multiple", 0) or 0)
    if mult <= 0:
        return tuple(False for _ in shape)
    if getattr(chip, "topology", "") == "torus3d":  # optical wraparound only on slices of whole cubes
        whole = all(d % mult == 0 for d in shape)
        return tuple(whole and d > 1 for d in shape)
    return tuple(d > 1 and d % mult == 0 for d in shape)


def default_shape(chip, n_chips: int) -> tuple[tuple, str]:
    """The standard slice shape of ``n_chips`` chips of ``chip`` and where it comes from; a count without a
    standard shape gives a 1-D ring of that size."""
    table = SHAPES_3D if getattr(chip, "topology", "") == "torus3d" else SHAPES_2D
    if n_chips in table:
        return table[n_chips], f"{SHAPE_SOURCE} ({n_chips} chips)"
    return (max(n_chips, 1),), f"assumed: {n_chips} chips is not a standard slice size; treated as one ring"


# ------------------------------------------------------------------------------------------------ from a trace

def core_details(raw) -> dict:
    """Decode a ``core_details`` stat (a serialized ``CoreDetails``) -> {field name: value}; {} when it is not
    bytes or does not decode."""
    names = {1: "hostname", 2: "device_ordinal", 3: "core_num", 4: "local_chip_id", 5: "global_chip_id",
             6: "global_core_id", 7: "is_sparse_core"}
    if not isinstance(raw, (bytes, bytearray)):
        return {}
    out: dict = {}
    i, n = 0, len(raw)
    try:
        while i < n:
            key, i = _varint(raw, i)
            num, wt = key >> 3, key & 7
            if wt == 0:
                v, i = _varint(raw, i)
            elif wt == 2:
                ln, i = _varint(raw, i)
                if i + ln > n:
                    return {}
                v = bytes(raw[i:i + ln]).decode("utf-8", "replace")
                i += ln
            elif wt == 1:
                i += 8
                continue
            elif wt == 5:
                i += 4
                continue
            else:
                return {}
            if num in names:
                out[names[num]] = v
    except IndexError:
        return {}
    return out


def _varint(b, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        if c < 0x80 or shift > 63:
            return v, i
        shift += 7


def _ordinal(device: str) -> int:
    tail = str(device).rpartition(":")[2]
    return int(tail) if tail.isdigit() else 0


def from_trace(devices, device_stats: dict, chip, *, spec: str | Spec | None = None, max_device_id: int = -1,
               hosts: list | None = None) -> Topology:
    """The :class:`Topology` of a trace's devices.

    ``devices``: (host, device) pairs of the trace (its device planes, in order); ``device_stats``: plane stats
    by (host, device); ``chip``: the :class:`tracekit.model.chips.Chip` the devices are priced as;
    ``spec``: ``--topology`` (wins over the trace); ``max_device_id``: the largest device id the HLO's replica
    groups and device assignments name (so devices on other hosts count); ``hosts``: host order (GPU global ids
    are host index x devices per host + ordinal)."""
    devices = [(str(h), str(d)) for h, d in devices]
    sp = parse(spec) if isinstance(spec, str) else spec
    family = getattr(chip, "family", "")
    if sp is not None and (sp.kind == "torus") != (family == "tpu"):
        want = "a TPU, e.g. --chip 'TPU v5p'" if sp.kind == "torus" else "a GPU, e.g. --chip H100"
        raise TraceError(f"--topology {sp.text} describes {'a TPU slice' if sp.kind == 'torus' else 'GPU nodes'}, "
                         f"but the devices are priced as {getattr(chip, 'name', 'an unknown chip')}",
                         hint=f"pass --chip with {want}")
    if family == "tpu" or (sp is not None and sp.kind == "torus"):
        return _tpu(devices, device_stats, chip, sp, max_device_id)
    if family == "gpu" or (sp is not None and sp.kind == "nodes"):
        return _gpu(devices, chip, sp, max_device_id, hosts)
    if family == "cpu":
        n = max(len(devices), max_device_id + 1, 1)
        return Topology("shared", (n,), 1, source="trace: CPU devices of one process share the host's memory",
                        devices=tuple((h, d, _ordinal(d), -1) for h, d in devices))
    return Topology("none", (max(len(devices), 1),), source=f"unknown: no interconnect known for {chip!r}",
                    devices=tuple((h, d, _ordinal(d), -1) for h, d in devices))


def _tpu(devices, device_stats, chip, sp, max_device_id) -> Topology:
    dpc_table = max(int(getattr(chip, "devices_per_chip", 1) or 1), 1)
    rows, notes = [], []
    details = {k: core_details((device_stats.get(k) or {}).get("core_details")) for k in devices}
    have = all("global_core_id" in v or "global_chip_id" in v for v in details.values()) and bool(details)
    if have:
        for h, d in devices:
            cd = details[(h, d)]
            gid = int(cd.get("global_core_id", cd.get("global_chip_id", 0)))
            rows.append((h, d, gid, int(cd.get("global_chip_id", gid // dpc_table))))
        per_chip: dict = {}
        for _, _, g, c in rows:
            per_chip.setdefault(c, set()).add(g)
        dpc = max(max(len(v) for v in per_chip.values()), 1) if per_chip else dpc_table
        if dpc == 1:  # one device per chip (megacore, or one TensorCore): device ids count chips
            rows = [(h, d, c, c) for h, d, _, c in rows]
        src = "trace: core_details (global_chip_id, global_core_id)"
        notes.append("chip coordinates from the global chip ids in row-major order (the trace names chips, not "
                     "their coordinates)")
    else:
        dpc = dpc_table
        rows = [(h, d, _ordinal(d), _ordinal(d) // dpc) for h, d in devices]
        src = "assumed: device ordinal = global device id (the trace has no core_details)"
    n_dev = max([g for _, _, g, _ in rows] + [max_device_id, -1]) + 1
    n_chips = max(-(-n_dev // dpc), 1)
    if sp is not None and sp.kind == "torus":
        shape, slices = sp.shape, sp.slices
        if math.prod(shape) * slices < n_chips:
            raise TraceError(f"--topology {sp.text} holds {math.prod(shape) * slices} chips, but the trace names "
                             f"{n_chips}", hint="give a topology with at least as many chips as the trace uses")
        shape_src = f"--topology {sp.text}"
    else:
        slices = 1
        shape, shape_src = default_shape(chip, n_chips)
        if not have:
            notes.append("chip coordinates assumed row-major (last axis fastest) over the device ids")
    wrap = wraparound(chip, shape)
    return Topology("torus", tuple(shape), slices, wrap, dpc, f"{src}; shape: {shape_src}", tuple(rows), tuple(notes))


def _gpu(devices, chip, sp, max_device_id, hosts) -> Topology:
    hosts = list(hosts or dict.fromkeys(h for h, _ in devices))
    per_host = max([sum(1 for h, _ in devices if h == x) for x in hosts] + [1])
    rows = [(h, d, hosts.index(h) * per_host + _ordinal(d) if h in hosts else _ordinal(d), -1) for h, d in devices]
    n_dev = max([g for _, _, g, _ in rows] + [max_device_id, -1]) + 1
    kind = "mesh" if getattr(chip, "topology", "") == "infinity-fabric" else "switch"
    if sp is not None and sp.kind == "nodes":
        per, nodes, src = sp.shape[0], sp.slices, f"--topology {sp.text}"
        if per * nodes < n_dev:
            raise TraceError(f"--topology {sp.text} holds {per * nodes} GPUs, but the trace names {n_dev}",
                             hint="give at least as many GPUs as the trace uses")
    else:
        dom = float(getattr(chip, "node_size", float("nan")))
        if math.isfinite(dom) and dom >= 1:
            per, what = int(dom), f"the chip table's {int(dom)}-GPU domain"
        else:
            per, what = (max(per_host, 1), "one host") if len(hosts) > 1 else (max(n_dev, 1), "all the trace's GPUs")
        nodes = max(-(-n_dev // per), 1)
        src = f"trace: {len(hosts)} host(s) x {per_host} GPU(s); node = {what}"
    return Topology(kind, (per,), nodes, (), 1, src, tuple(rows))
