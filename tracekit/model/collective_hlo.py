"""What the HLO says about each collective: its kind, the bytes of the array it moves, who takes part (replica
groups, explicit or iota, mapped to devices by the module's device assignment), source->target pairs, and two
patterns the rules read (an all-reduce whose result is only sliced; an all-gather of a loop-invariant value
inside a while body).

Bytes (``V`` is the book's "bytes of the array", the full, gathered array):

    all-reduce            V = the operand(s)                          nccl-tests size S = V
    all-gather            V = the result (the gathered array)         S = V
    reduce-scatter        V = the operand (the unreduced array)       S = V
    all-to-all            V = operand x N (the global array)          S = the operand (one device's buffer)
    ragged-all-to-all     the bytes the sizes name when ``send_sizes`` is a constant, else unknown
    collective-permute    V = the operand each source sends           S = V
    send / recv           V = the data transferred                    S = V

Replica groups (``HloInstructionProto.replica_groups`` = 49, or ``collective_device_list`` = 87 with explicit
groups or ``iota_replica_group_list``: ``num_replica_groups``, ``num_devices_per_group``, ``iota_reshape_dims``,
``iota_transpose_perm`` -- the ids are ``arange(prod(dims)).reshape(dims).transpose(perm)`` read in groups).
The ids are global device ids (``use_global_device_ids``: replica x partitions + partition), partition ids
(``channel_id`` > 0) or replica ids (no channel), and become devices through ``device_assignment`` (field 15 of
``HloModuleProto``: the device of each partition's replicas); no device assignment: id = device.
"""
from __future__ import annotations

import json
import re

import numpy as np

from tracekit.ingest.hloshape import leaves, nbytes
from tracekit.proto import hlo_pb2
from tracekit.records import record

PT = hlo_pb2.PrimitiveType
KIND_OF = {"all-reduce": "all-reduce", "all-reduce-start": "all-reduce", "all-gather": "all-gather",
           "all-gather-start": "all-gather", "reduce-scatter": "reduce-scatter", "all-to-all": "all-to-all",
           "ragged-all-to-all": "ragged-all-to-all", "collective-permute": "collective-permute",
           "collective-permute-start": "collective-permute", "send": "send", "recv": "recv"}
ALL_REDUCE_THEN_SLICE = "all-reduce then slice"
LOOP_INVARIANT_GATHER = "loop-invariant all-gather"
_PASS_THROUGH = ("bitcast", "copy", "reshape", "convert", "transpose", "optimization-barrier")
_PAIRS_ATTR = "_xla_send_recv_source_target_pairs"


@record(frozen=True)
class CollectiveOp:
    """One collective instruction. ``groups``: tuples of global device ids (empty: not known); ``pairs``:
    (source, target) device ids of a permute or send/recv (empty: not given); ``global_bytes`` V and
    ``size_bytes`` S as in the module docstring (NaN: unknown, with ``reason``); ``pattern`` one of
    :data:`ALL_REDUCE_THEN_SLICE`, :data:`LOOP_INVARIANT_GATHER` or ''; ``trip_count`` of the while loop whose
    body holds it (-1: none or unknown)."""

    program_id: int
    name: str
    kind: str
    global_bytes: float
    size_bytes: float
    groups: tuple
    pairs: tuple = ()
    pattern: str = ""
    trip_count: int = -1
    reason: str = ""

    @property
    def group_size(self) -> int:
        return max((len(g) for g in self.groups), default=-1)

    def group_of(self, gid: int) -> tuple:
        for g in self.groups:
            if gid in g:
                return g
        return ()


def _assignment(module) -> tuple[int, int, dict]:
    """(replicas R, partitions C, (replica, partition) -> device) from the device assignment; identity when absent."""
    da = module.device_assignment if module.HasField("device_assignment") else None
    if da is None or not da.computation_devices:
        return 0, 0, {}
    r, c = int(da.replica_count or 1), int(da.computation_count or len(da.computation_devices))
    table = {}
    for p, cd in enumerate(da.computation_devices):
        for rep, dev in enumerate(cd.replica_device_ids):
            table[(rep, p)] = int(dev)
    return r, c, table


def raw_groups(inst) -> list[list[int]]:
    """The replica groups as written (ids, not yet devices): explicit or expanded from the iota form; [] when
    empty (meaning: every participant)."""
    groups = [list(g.replica_ids) for g in inst.replica_groups]
    if groups:
        return groups
    cdl = inst.collective_device_list
    groups = [list(g.replica_ids) for g in cdl.replica_groups]
    if groups:
        return groups
    iota = cdl.iota_replica_group_list
    if iota.num_devices_per_group and iota.num_replica_groups:
        dims = list(iota.iota_reshape_dims) or [int(iota.num_replica_groups * iota.num_devices_per_group)]
        total = int(np.prod(dims))
        if total != iota.num_replica_groups * iota.num_devices_per_group or total > 1 << 20:
            return []
        ids = np.arange(total).reshape(dims)
        perm = list(iota.iota_transpose_perm)
        if perm and sorted(perm) == list(range(len(dims))):
            ids = ids.transpose(perm)
        return ids.reshape(int(iota.num_replica_groups), int(iota.num_devices_per_group)).tolist()
    return []


def device_groups(inst, module) -> tuple:
    """The replica groups of ``inst`` as tuples of device ids (see the module docstring for the id modes); ()
    when the groups are empty and the module has no device assignment to say who "everyone" is."""
    r, c, table = _assignment(module)
    groups = raw_groups(inst)
    flat, by_partition = bool(inst.use_global_device_ids), inst.channel_id > 0
    if not groups:
        if not table:
            return ()
        groups = [list(range(r * c if flat else c if by_partition else r))]
    if not table:
        return tuple(tuple(int(x) for x in g) for g in groups)
    if flat:  # global ids: replica x C + partition
        return tuple(tuple(table.get(divmod(int(x), c), int(x)) for x in g) for g in groups)
    if by_partition:  # partition ids, one set of groups per replica
        return tuple(tuple(table.get((rep, int(x)), int(x)) for x in g) for rep in range(r) for g in groups)
    # replica ids (cross-replica), one set of groups per partition
    return tuple(tuple(table.get((int(x), p), int(x)) for x in g) for p in range(c) for g in groups)


def _pairs(inst, module) -> tuple:
    pairs = [(int(p.source), int(p.target)) for p in inst.source_target_pairs]
    if not pairs and inst.opcode in ("send", "recv"):
        text = inst.frontend_attributes.map.get(_PAIRS_ATTR, "")
        pairs = [(int(a), int(b)) for a, b in re.findall(r"\{\s*(-?\d+)\s*,\s*(-?\d+)\s*\}", text)]
    if not pairs:
        return ()
    r, c, table = _assignment(module)
    if not table:
        return tuple(pairs)
    if inst.channel_id > 0 or c > 1:  # partition ids
        return tuple((table.get((rep, s), s), table.get((rep, t), t)) for rep in range(max(r, 1)) for s, t in pairs)
    return tuple((table.get((s, 0), s), table.get((t, 0), t)) for s, t in pairs)


def _constant_ints(inst) -> list | None:
    if inst is None or inst.opcode != "constant" or not inst.HasField("literal"):
        return None
    lit = inst.literal
    for field in ("s32s", "s64s", "u32s", "u64s"):
        vals = list(getattr(lit, field))
        if vals:
            return [int(v) for v in vals]
    return None


def _bytes(kind: str, inst, operands: list, n: int) -> tuple[float, float, str]:
    """(V, S, reason) for one collective."""
    nan = float("nan")
    out = inst.shape
    if inst.opcode in ("all-gather-start", "collective-permute-start") and out.element_type == PT.TUPLE \
            and len(out.tuple_shapes) >= 2:
        out = out.tuple_shapes[1]
    read = float(sum(nbytes(o.shape) for o in operands))
    if kind == "all-gather":
        v = float(nbytes(out))
        return v, v, ""
    if kind in ("all-reduce", "reduce-scatter"):
        return read, read, ""
    if kind == "all-to-all":
        return (read * n if n > 0 else nan), read, ("" if n > 0 else "group size unknown")
    if kind == "collective-permute":
        v = float(nbytes(operands[0].shape)) if operands else nan
        return v, v, ""
    if kind == "send":
        v = float(nbytes(operands[0].shape)) if operands else nan
        return v, v, ""
    if kind == "recv":
        arrays = [s for s in leaves(inst.shape) if s.element_type not in (PT.TOKEN, PT.OPAQUE_TYPE)]
        v = float(nbytes(arrays[0])) if arrays else nan
        return v, v, ""
    if kind == "ragged-all-to-all":
        if len(operands) < 6:
            return nan, nan, "ragged-all-to-all without its six operands"
        data = operands[0].shape
        sizes = _constant_ints(operands[3])
        if sizes is None or not data.dimensions or data.dimensions[0] <= 0:
            return nan, nan, (f"ragged-all-to-all: the send sizes are runtime values (at most the "
                              f"{nbytes(data):,}-byte input buffer per device)")
        row = nbytes(data) / data.dimensions[0]
        sent = float(sum(max(s, 0) for s in sizes) * row)
        return (sent * n if n > 0 else nan), sent, ""
    return nan, nan, f"not a collective: {inst.opcode}"


class _Index:
    def __init__(self, module):
        self.module = module
        self.comps = {c.id: c for c in module.computations}
        self.inst = {i.id: i for c in module.computations for i in c.instructions}
        self.comp_of = {i.id: c.id for c in module.computations for i in c.instructions}
        self.users: dict[int, list] = {}
        for c in module.computations:
            for i in c.instructions:
                for o in i.operand_ids:
                    self.users.setdefault(o, []).append(i)
        self.body_of: dict[int, object] = {}  # while body computation id -> the while instruction
        for c in module.computations:
            for i in c.instructions:
                if i.opcode == "while" and i.called_computation_ids:
                    self.body_of[i.called_computation_ids[0]] = i

    def operands(self, inst) -> list:
        return [self.inst[o] for o in inst.operand_ids if o in self.inst]


def _only_sliced(ix: _Index, inst, result_bytes: float) -> bool:
    """True when every use of ``inst``'s result is a slice / dynamic-slice (directly, or of the fused parameter
    it feeds) and the slices keep at most half of it."""
    target = inst
    if inst.opcode.endswith("-start"):
        dones = [u for u in ix.users.get(inst.id, []) if u.opcode.endswith("-done")]
        if len(dones) != 1:
            return False
        target = dones[0]
    comp = ix.comps.get(ix.comp_of.get(target.id))
    if comp is None or comp.root_id == target.id:
        return False
    users = ix.users.get(target.id, [])
    if not users:
        return False
    kept = 0.0
    for u in users:
        if u.opcode in ("slice", "dynamic-slice"):
            if u.operand_ids[0] != target.id:
                return False
            kept += nbytes(u.shape)
        elif u.opcode == "fusion" and u.called_computation_ids:
            fc = ix.comps.get(u.called_computation_ids[0])
            if fc is None:
                return False
            idx = [k for k, o in enumerate(u.operand_ids) if o == target.id]
            params = [p for p in fc.instructions if p.opcode == "parameter" and p.parameter_number in idx]
            for p in params:
                pu = ix.users.get(p.id, [])
                if not pu or any(x.opcode not in ("slice", "dynamic-slice") or x.operand_ids[0] != p.id for x in pu):
                    return False
                kept += sum(nbytes(x.shape) for x in pu)
        else:
            return False
    return result_bytes > 0 and kept <= result_bytes / 2


def _loop_invariant(ix: _Index, inst) -> tuple[bool, int]:
    """(the gathered operand is the same on every iteration of the enclosing while, its known trip count)."""
    cid = ix.comp_of.get(inst.id)
    loop = ix.body_of.get(cid)
    if loop is None or not inst.operand_ids:
        return False, -1
    try:
        n = json.loads(loop.backend_config or b"{}").get("known_trip_count", {}).get("n")
        trips = int(n) if n is not None else -1
    except (ValueError, TypeError, AttributeError):
        trips = -1
    x = ix.inst.get(inst.operand_ids[0])
    while x is not None and x.opcode in _PASS_THROUGH and x.operand_ids:
        x = ix.inst.get(x.operand_ids[0])
    if x is None or x.opcode != "get-tuple-element" or not x.operand_ids:
        return False, trips
    param = ix.inst.get(x.operand_ids[0])
    body = ix.comps.get(cid)
    if param is None or param.opcode != "parameter" or body is None:
        return False, trips
    root = ix.inst.get(body.root_id)
    if root is None or root.opcode != "tuple" or x.tuple_index >= len(root.operand_ids):
        return False, trips
    back = ix.inst.get(root.operand_ids[x.tuple_index])
    same = back is not None and back.opcode == "get-tuple-element" and back.tuple_index == x.tuple_index and \
        back.operand_ids and back.operand_ids[0] == param.id
    return bool(same), trips


def module_collectives(program_id: int, module) -> dict:
    """name -> :class:`CollectiveOp` for every collective instruction of one ``HloModuleProto``."""
    if not any(i.opcode in KIND_OF for c in module.computations for i in c.instructions):
        return {}  # most modules have none: skip building the use lists
    ix = _Index(module)
    out = {}
    for c in module.computations:
        for inst in c.instructions:
            kind = KIND_OF.get(inst.opcode)
            if kind is None or (kind in ("send", "recv") and inst.is_host_transfer):
                continue  # a host transfer rides the host link, not the interconnect
            try:
                groups = device_groups(inst, module) if kind not in ("collective-permute", "send", "recv") else ()
                pairs = _pairs(inst, module) if kind in ("collective-permute", "send", "recv") else ()
                n = max((len(g) for g in groups), default=0)
                ops = ix.operands(inst)
                v, s, reason = _bytes(kind, inst, ops, n)
                pattern, trips = "", -1
                if kind == "all-reduce" and _only_sliced(ix, inst, v):
                    pattern = ALL_REDUCE_THEN_SLICE
                if kind == "all-gather":
                    inv, trips = _loop_invariant(ix, inst)
                    pattern = LOOP_INVARIANT_GATHER if inv else ""
                elif c.id in ix.body_of:
                    trips = _loop_invariant(ix, inst)[1]
            except (IndexError, KeyError, ValueError, OverflowError, MemoryError) as e:
                out[inst.name] = CollectiveOp(program_id, inst.name, kind, float("nan"), float("nan"), (),
                                              reason=f"malformed collective ({type(e).__name__})")
                continue
            out[inst.name] = CollectiveOp(program_id, inst.name, kind, v, s, groups, pairs, pattern, trips, reason)
    return out


def collectives(modules) -> dict:
    """(program_id, instruction name) -> :class:`CollectiveOp` over the trace's HLO modules
    (:class:`tracekit.ingest.hlo.Module` list)."""
    out = {}
    for m in modules:
        proto = m.proto.hlo_module if isinstance(m.proto, hlo_pb2.HloProto) else m.proto
        for name, op in module_collectives(int(m.program_id), proto).items():
            out[(int(m.program_id), name)] = op
    return out


def max_device_id(ops: dict, modules=()) -> int:
    """The largest device id the collectives (or the modules' device assignments) name; -1 when none."""
    best = -1
    for op in ops.values():
        for g in op.groups:
            best = max(best, max(g, default=-1))
        for s, t in op.pairs:
            best = max(best, s, t)
    for m in modules:
        proto = m.proto.hlo_module if isinstance(m.proto, hlo_pb2.HloProto) else m.proto
        if proto.HasField("device_assignment"):
            for cd in proto.device_assignment.computation_devices:
                best = max([best] + [int(x) for x in cd.replica_device_ids])
    return best
