"""Decode the ``Hlo Proto`` payloads of the ``/host:metadata`` plane into HloModuleProtos and the ``hlo`` frame
(one row per instruction; schema :data:`tracekit.schema.HLO`)."""
from __future__ import annotations

import functools
import hashlib
from dataclasses import field

import numpy as np
import pandas as pd
from google.protobuf.message import DecodeError

from tracekit import schema
from tracekit.columns import column_numpy, gather
from tracekit.grouping import cat_apply, codes_of
from tracekit.ingest import backend_config, hloshape
from tracekit.proto import hlo_pb2, xplane_pb2
from tracekit.ingest.xspace import parse_module_label, stat_names
from tracekit.records import record



@record
class Module:
    """One HLO module of the trace: its name, program id and decoded proto."""

    name: str
    program_id: int
    proto: hlo_pb2.HloModuleProto
    #: XLA's buffer assignment of the compiled program (``xla.HloProto`` field 3); None when the trace has none
    buffers: hlo_pb2.BufferAssignmentProto | None = None
    #: :func:`tracekit.ingest.buffers.tables`' rows of this module, worked out on first use
    buffer_rows: tuple | None = field(default=None, repr=False, compare=False)
    #: a digest of the module's serialized ``HloProto`` as the trace holds it (b"": none): the hosts of one
    #: program hold the same module, and what is worked out from it alone is worked out once per process
    digest: bytes = field(default=b"", repr=False, compare=False)


def modules_from_plane(plane: xplane_pb2.XPlane, warnings: list[str]) -> list[Module]:
    names = stat_names(plane)
    hlo_id = next((k for k, v in names.items() if v == "Hlo Proto"), None)
    out: list[Module] = []
    if hlo_id is None:
        return out
    for md in plane.event_metadata.values():
        for st in md.stats:
            if st.metadata_id != hlo_id or st.WhichOneof("value") != "bytes_value":
                continue
            label_name, pid = parse_module_label(md.name)
            try:  # upb refuses messages nested over 100 deep (a deep tuple shape) with a DecodeError
                whole = hlo_pb2.HloProto.FromString(st.bytes_value)
            except (DecodeError, RecursionError, ValueError) as e:
                why = "nested deeper than protobuf allows" if "depth" in str(e).lower() else "corrupt"
                warnings.append(f"HLO of module {md.name!r} could not be decoded ({why}); its ops have no HLO, the "
                                "rest of the trace is analysed")
                continue
            proto = whole.hlo_module
            if not pid and proto.id:
                pid = proto.id & 0xFFFFFFFFFFFFFFFF
            out.append(Module(proto.name or label_name, pid, proto,
                              whole.buffer_assignment if whole.HasField("buffer_assignment") else None,
                              digest=hashlib.blake2b(st.bytes_value, digest_size=16).digest()))
    out.sort(key=lambda m: (m.name, m.program_id))
    return out


def replica_groups(instr: hlo_pb2.HloInstructionProto) -> tuple[str, int]:
    """(groups as text, participants per group); group size -1 when the groups are empty (all devices)."""
    cdl = instr.collective_device_list
    groups = list(instr.replica_groups) or list(cdl.replica_groups)
    if groups:
        text = "{" + ",".join("{" + ",".join(map(str, g.replica_ids)) + "}" for g in groups) + "}"
        return text, len(groups[0].replica_ids)
    iota = cdl.iota_replica_group_list
    if iota.num_devices_per_group:
        text = f"[{iota.num_replica_groups},{iota.num_devices_per_group}]<=[{','.join(map(str, iota.iota_reshape_dims))}]"
        if list(iota.iota_transpose_perm) and list(iota.iota_transpose_perm) != sorted(iota.iota_transpose_perm):
            text += f"T({','.join(map(str, iota.iota_transpose_perm))})"
        return text, int(iota.num_devices_per_group)
    return "", -1


def source_location(module: hlo_pb2.HloModuleProto, md: hlo_pb2.OpMetadata) -> tuple[str, int]:
    if md.source_file:
        return md.source_file, md.source_line
    sfi = module.stack_frame_index
    fid = md.stack_frame_id  # 1-based ids; anything out of range (negative included) means unknown
    if 0 < fid <= len(sfi.stack_frames):
        loc_id = sfi.stack_frames[fid - 1].file_location_id
        if 0 < loc_id <= len(sfi.file_locations):
            loc = sfi.file_locations[loc_id - 1]
            if 0 < loc.file_name_id <= len(sfi.file_names):
                return sfi.file_names[loc.file_name_id - 1], loc.line
    return "", 0


def fused_computation_ids(module: hlo_pb2.HloModuleProto) -> set[int]:
    ids = {c.id for c in module.computations if c.is_fusion_computation}
    for c in module.computations:
        for ins in c.instructions:
            if ins.opcode == "fusion":
                ids.update(ins.called_computation_ids)
    return ids


_KIND = {"kLoop": "loop fusion", "kInput": "input fusion", "kOutput": "output fusion", "kCustom": "custom fusion"}
_HEAVY = ("convolution", "dot", "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
          "scatter", "gather", "sort", "custom-call")
#: a fusion made only of these moves or re-lays-out data (a transpose or copy fusion): xprof's "data formatting"
_MOVEMENT = frozenset({"parameter", "constant", "bitcast", "copy", "transpose", "reshape", "broadcast", "slice",
                       "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "reverse", "tuple",
                       "get-tuple-element", "gather", "iota"})


def _categories(m: hlo_pb2.HloModuleProto) -> dict[int, str]:
    """instruction id -> category; a fusion is named after the heaviest op it contains, or 'data formatting' when
    it only moves data (a transpose, copy, slice, pad, ... fusion: no arithmetic)."""
    comps = {c.id: c for c in m.computations}
    cache: dict[int, set] = {}

    def opcodes(cid: int, depth: int = 0) -> set:
        if cid in cache or depth > 20 or cid not in comps:
            return cache.get(cid, set())
        found = set()
        for ins in comps[cid].instructions:
            found.add(ins.opcode)
            for c in ins.called_computation_ids:
                found |= opcodes(c, depth + 1)
        cache[cid] = found
        return found

    out = {}
    for comp in m.computations:
        for ins in comp.instructions:
            cat = ins.opcode
            if ins.opcode == "fusion":
                inner = set().union(*(opcodes(c) for c in ins.called_computation_ids)) if ins.called_computation_ids else set()
                heavy = next((h for h in _HEAVY if h in inner), None)
                if inner and inner <= _MOVEMENT and inner & {"copy", "transpose", "gather", "concatenate", "pad",
                                                             "reverse", "slice", "dynamic-slice",
                                                             "dynamic-update-slice", "broadcast"}:
                    cat = "data formatting"
                else:
                    cat = f"{heavy} fusion" if heavy else _KIND.get(ins.fusion_kind, "fusion")
            out[ins.id] = cat
    return out


HOST_MEMORY_SPACE = 5  # XLA's layout memory space S(5): host memory (host offload)


def _on_host(shape: hlo_pb2.ShapeProto) -> bool:
    return any(l.HasField("layout") and l.layout.memory_space == HOST_MEMORY_SPACE for l in hloshape.leaves(shape))


def _dot_numbers(ins: hlo_pb2.HloInstructionProto) -> tuple | None:
    """(lhs contracting, lhs batch, rhs contracting, rhs batch) of a dot, or of a GEMM custom call (its
    GpuBackendConfig.gemm_backend_config.dot_dimension_numbers: cuBLAS, cuBLASLt, hipBLASLt, FP8); else None."""
    if ins.opcode == "dot":
        dn = ins.dot_dimension_numbers
        return (set(dn.lhs_contracting_dimensions), set(dn.lhs_batch_dimensions), set(dn.rhs_contracting_dimensions),
                set(dn.rhs_batch_dimensions))
    if ins.opcode == "custom-call" and b"gemm_backend_config" in ins.backend_config[:4096]:
        dd = backend_config.sub(backend_config.json_config(ins), "gemm_backend_config", "dot_dimension_numbers")
        if dd:
            return tuple(set(backend_config.ints(dd, k)) for k in (
                "lhs_contracting_dimensions", "lhs_batch_dimensions", "rhs_contracting_dimensions",
                "rhs_batch_dimensions"))
    return None


def _dot_dims(ins: hlo_pb2.HloInstructionProto, shapes: dict) -> tuple[int, int, int]:
    """(M, N, K) of a dot (or GEMM custom call) from its operand shapes and dimension numbers; (-1, -1, -1) when
    not one."""
    numbers = _dot_numbers(ins) if len(ins.operand_ids) >= 2 else None
    if numbers is None:
        return -1, -1, -1
    lhs, rhs = shapes.get(ins.operand_ids[0]), shapes.get(ins.operand_ids[1])
    if lhs is None or rhs is None:
        return -1, -1, -1
    lc, lb, rc, rb = numbers
    if any(i >= len(lhs.dimensions) for i in lc | lb) or any(i >= len(rhs.dimensions) for i in rc | rb):
        return -1, -1, -1
    def prod(dims, keep):
        out = 1
        for i, d in enumerate(dims):
            if keep(i):
                out *= d
        return out
    m = prod(lhs.dimensions, lambda i: i not in lc and i not in lb)
    n = prod(rhs.dimensions, lambda i: i not in rc and i not in rb)
    k = prod(lhs.dimensions, lambda i: i in lc)
    return m, n, k


def _extras(m: hlo_pb2.HloModuleProto) -> dict[int, tuple]:
    """instruction id -> (host_memory, to_host, transfer_bytes, dot_m, dot_n, dot_k); a fusion reports the dims of
    the first dot it holds."""
    shapes = {i.id: i.shape for c in m.computations for i in c.instructions}
    comps = {c.id: c for c in m.computations}
    comp_dot: dict[int, tuple] = {}
    for c in m.computations:
        for i in c.instructions:
            if i.opcode == "dot":
                comp_dot.setdefault(c.id, _dot_dims(i, shapes))
    out = {}
    for c in m.computations:
        for i in c.instructions:
            host = _on_host(i.shape) or any(_on_host(shapes[o]) for o in i.operand_ids if o in shapes)
            dest = None  # a copy's destination array: copy-start's result tuple holds it first
            if i.opcode == "copy-start" and i.shape.tuple_shapes:
                dest = i.shape.tuple_shapes[0]
            elif i.opcode in ("copy", "copy-done"):
                dest = i.shape
            tb = hloshape.nbytes(dest) if dest is not None else 0
            to_host = host and dest is not None and _on_host(dest)
            dims = _dot_dims(i, shapes)
            if dims[0] < 0 and i.opcode == "fusion":
                dims = next((comp_dot[cid] for cid in i.called_computation_ids if cid in comp_dot and cid in comps),
                            dims)
            out[i.id] = (host, to_host, tb) + tuple(dims)
    return out


_I64 = (1 << 63) - 1


def _i64(v: int) -> int:
    """Clamp to int64 (absurd shapes in a corrupt HLO give sizes no int64 column holds)."""
    return max(-_I64 - 1, min(_I64, v))


def done_to_start(h: pd.DataFrame) -> dict:
    """(program_id, '-done' instruction) -> the '-start' instruction it completes (its first operand)."""
    rows = np.flatnonzero(cat_apply(h["opcode"], lambda v: str(v).endswith("-done")))  # (once per opcode)
    return {(int(p), n): o.split(",")[0] for p, n, o in zip(column_numpy(h, "program_id")[rows].tolist(),
                                                          column_numpy(h, "name")[rows],
                                                          column_numpy(h, "operands")[rows])}


def start_codes(ops: pd.DataFrame, rows: np.ndarray, start_of: dict) -> np.ndarray:
    """The code (in ``ops``' ``op`` column) of the ``-start`` op each ``-done`` row of ``rows`` completes: its
    program's :func:`done_to_start` entry (``start_of``), else its own name with ``-done`` made ``-start``; -1
    where no op of the frame has that name (or the row has no program or op). Named once per distinct (program,
    op)."""
    pc, pu = pd.factorize(gather(column_numpy(ops, "program_id"), rows))  # (the rows' own: no code per row of ops)
    oc, ou = codes_of(ops["op"], compact=True)
    no = len(ou) + 1
    inv, pairs = pd.factorize(pc.astype(np.int64) * no + gather(oc, rows) + 1)
    names = [start_of.get((int(pu[q // no]), str(ou[q % no - 1])), str(ou[q % no - 1]).replace("-done", "-start", 1))
             if q >= 0 and q % no else None for q in pairs.tolist()]
    index = ops["op"].cat.categories if isinstance(ops["op"].dtype, pd.CategoricalDtype) else pd.Index(ou)
    return gather(index.get_indexer(names), inv) if len(rows) else np.zeros(0, np.int64)


def hlo_frame(modules: list[Module]) -> pd.DataFrame:
    if not modules:  # (a trace without HLO: every host of a pod of them asks for the same empty frame)
        return _no_hlo().copy()  # (a deep copy: see schema.empty)
    cols: dict[str, list] = {c: [] for c in schema.HLO}
    for mod in modules:
        m = mod.proto
        comp_names = {c.id: c.name for c in m.computations}
        fused = fused_computation_ids(m)
        cats = _categories(m)
        extras = _extras(m)
        for comp in m.computations:
            by_id = {i.id: i.name for i in comp.instructions}
            is_entry = comp.id == m.entry_computation_id or comp.name == m.entry_computation_name
            for ins in comp.instructions:
                groups, gsize = replica_groups(ins)
                src_file, src_line = source_location(m, ins.metadata)
                cols["module"].append(mod.name)
                cols["program_id"].append(mod.program_id)
                cols["computation"].append(comp.name)
                cols["name"].append(ins.name)
                cols["opcode"].append(ins.opcode)
                cols["shape"].append(hloshape.text(ins.shape))
                cols["dtype"].append(hloshape.first_dtype(ins.shape))
                cols["result_bytes"].append(_i64(hloshape.nbytes(ins.shape)))
                cols["operands"].append(",".join(by_id.get(o, str(o)) for o in ins.operand_ids))
                cols["fusion_kind"].append(ins.fusion_kind)
                cols["called_computations"].append(",".join(comp_names.get(c, str(c)) for c in ins.called_computation_ids))
                cols["replica_groups"].append(groups)
                cols["group_size"].append(gsize if groups or gsize > 0 else -1)
                cols["channel_id"].append(ins.channel_id)
                cols["op_name"].append(ins.metadata.op_name)
                cols["source_file"].append(src_file)
                cols["source_line"].append(src_line)
                cols["custom_call_target"].append(ins.custom_call_target)
                cols["is_fusion_computation"].append(comp.id in fused)
                cols["is_entry"].append(is_entry)
                cols["category"].append(cats.get(ins.id, ins.opcode))
                hm, th, tb, dm, dn, dk = extras[ins.id]
                cols["host_memory"].append(hm)
                cols["to_host"].append(th)
                cols["transfer_bytes"].append(_i64(tb))
                cols["dot_m"].append(_i64(dm))
                cols["dot_n"].append(_i64(dn))
                cols["dot_k"].append(_i64(dk))
    return schema.frame_of(cols, schema.HLO)


@functools.lru_cache(maxsize=1)
def _no_hlo() -> pd.DataFrame:
    """The HLO frame of no module (built once, only ever copied)."""
    return schema.conform(pd.DataFrame({c: [] for c in schema.HLO}), schema.HLO)
