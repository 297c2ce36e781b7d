"""XLA's buffer assignment (``xla.HloProto`` field 3, kept on :class:`tracekit.ingest.hlo.Module` as ``buffers``)
as three frames, one row per allocation, per logical buffer and per heap-simulator event.

Terms (XLA's): a *logical buffer* is one array an instruction defines (at a shape index of its result); an
*allocation* is a block of memory that holds one or more logical buffers (at offsets; temporaries whose lives do
not overlap share space); the *heap-simulator trace* replays the program in its schedule order: ALLOC when a buffer
comes to life, FREE when it dies, SHARE_WITH when it reuses a canonical buffer's memory. ``color`` is the memory
space: 0 the device's main memory (HBM), 5 host memory (host offload, layout ``S(5)``), others on-chip spaces.

An allocation's *kind*: ``argument`` (an entry parameter), ``output`` (maybe live out), ``argument+output`` (a
parameter whose buffer is also an output: aliased, e.g. donated), ``thread-local``, ``constant`` or ``temp``.
"""
from __future__ import annotations


import pandas as pd

from tracekit import schema
from tracekit.ingest import hloshape
from tracekit.ingest.hlo import HOST_MEMORY_SPACE, source_location
from tracekit.records import record

#: memory space (buffer color) -> name; others are "space N"
SPACES = {0: "device", HOST_MEMORY_SPACE: "host"}

ALLOCATIONS = {
    "module": "HLO module name", "program_id": "module id", "allocation": "allocation index",
    "size_bytes": "bytes of the allocation", "color": "memory space (0 device, 5 host, others on-chip)",
    "memory_space": "device | host | space N", "kind": "argument | output | argument+output | temp | constant | "
    "thread-local", "parameter_number": "entry parameter number, -1 when not a parameter",
    "is_tuple": "the allocation holds a tuple's index table (a few bytes per element)",
}
BUFFERS = {
    "module": "", "program_id": "", "allocation": "allocation index holding it", "buffer_id": "logical buffer id",
    "offset_bytes": "offset inside the allocation", "size_bytes": "bytes of the logical buffer",
    "color": "memory space", "instruction": "HLO instruction that defines it", "opcode": "its opcode",
    "computation": "computation of that instruction", "shape": "shape of the buffer (at its shape index)",
    "shape_index": "index into a tuple result, e.g. '{0}' ('' for an array result)",
    "source_file": "Python source of the instruction", "source_line": "line, 0 when unknown",
    "from_host": "True when the instruction copies an array out of host memory onto this space (a staging copy "
                 "of an offloaded array)",
}
HEAP = {
    "module": "", "program_id": "", "trace": "index of the heap-simulator trace in the assignment",
    "seq": "event order within the trace", "kind": "0 ALLOC, 1 FREE, 2 SHARE_WITH", "buffer_id": "logical buffer",
    "share_with": "canonical buffer of a SHARE_WITH, -1 otherwise", "instruction": "instruction being processed",
}


@record(frozen=True)
class BufferTables:
    """The buffer assignments of every module that has one (frames with the columns of :data:`ALLOCATIONS`,
    :data:`BUFFERS`, :data:`HEAP`)."""
    allocations: pd.DataFrame
    buffers: pd.DataFrame
    heap: pd.DataFrame


def space_name(color: int) -> str:
    return SPACES.get(int(color), f"space {int(color)}")


def _kind(a) -> str:
    if a.is_entry_computation_parameter:
        return "argument+output" if a.maybe_live_out else "argument"
    if a.maybe_live_out:
        return "output"
    if a.is_thread_local:
        return "thread-local"
    if a.is_constant:
        return "constant"
    return "temp"


def _at(shape, index) -> object:
    """The sub-shape of ``shape`` at tuple ``index`` (the whole shape for an empty index; None when invalid)."""
    for i in index:
        if not hloshape.is_tuple(shape) or not 0 <= i < len(shape.tuple_shapes):
            return None
        shape = shape.tuple_shapes[i]
    return shape


def _on_host(shape) -> bool:
    return any(s.HasField("layout") and s.layout.memory_space == HOST_MEMORY_SPACE for s in hloshape.leaves(shape))


def tables(modules: list) -> BufferTables:
    """The three frames for ``modules`` (:class:`tracekit.ingest.hlo.Module` with ``buffers``). Each module's rows
    are read from its protos once (kept in ``Module.buffer_rows``: the memory view, the serving view and the
    serving rules ask for the same modules)."""
    al = {k: [] for k in ALLOCATIONS}
    bu = {k: [] for k in BUFFERS}
    hp = {k: [] for k in HEAP}
    for mod in modules:
        if getattr(mod, "buffers", None) is None:
            continue
        rows = getattr(mod, "buffer_rows", None)
        if rows is None:
            rows = _module_rows(mod)
            if hasattr(mod, "buffer_rows"):
                mod.buffer_rows = rows
        for acc, part in zip((al, bu, hp), rows):
            for k, v in part.items():
                acc[k].extend(v)
    return BufferTables(_frame(al, _ALLOCATION_TYPES), _frame(bu, _BUFFER_TYPES), _frame(hp, _HEAP_TYPES))


_I64 = "int64"
_ALLOCATION_TYPES = {"program_id": "uint64", "allocation": _I64, "size_bytes": _I64, "color": _I64,
                     "parameter_number": _I64, "is_tuple": bool}
_BUFFER_TYPES = {"program_id": "uint64", "allocation": _I64, "buffer_id": _I64, "offset_bytes": _I64,
                 "size_bytes": _I64, "color": _I64, "source_line": _I64, "from_host": bool}
_HEAP_TYPES = {"program_id": "uint64", "trace": _I64, "seq": _I64, "kind": _I64, "buffer_id": _I64,
               "share_with": _I64}


def _frame(columns: dict, types: dict) -> pd.DataFrame:
    """One table of column lists, its numeric columns made arrays of their type as they are put in (a frame of
    lists typed afterwards builds every column twice: a few ms per table, asked for a few times per analysis)."""
    return pd.DataFrame({k: schema.typed_array(v, types[k]) if k in types else v for k, v in columns.items()},
                        copy=False)


def _module_rows(mod) -> tuple[dict, dict, dict]:
    """One module's rows of the three tables, as column lists."""
    al = {k: [] for k in ALLOCATIONS}
    bu = {k: [] for k in BUFFERS}
    hp = {k: [] for k in HEAP}
    ba = mod.buffers
    m = mod.proto
    instr = {}
    for comp in m.computations:
        for ins in comp.instructions:
            instr[ins.id] = (ins, comp.name)
    by_name = {ins.name: i for i, (ins, _) in instr.items()}
    seen = set()  # an allocation index names one allocation of the module: a damaged proto's repeat is left out
    for a in ba.buffer_allocations:
        if a.index in seen:
            continue
        seen.add(a.index)
        al["module"].append(mod.name)
        al["program_id"].append(mod.program_id)
        al["allocation"].append(a.index)
        al["size_bytes"].append(max(int(a.size), 0))
        al["color"].append(int(a.color))
        al["memory_space"].append(space_name(a.color))
        al["kind"].append(_kind(a))
        al["parameter_number"].append(int(a.parameter_number) if a.is_entry_computation_parameter else -1)
        al["is_tuple"].append(bool(a.is_tuple))
    where = {}  # logical buffer id -> (allocation index, offset)
    for a in ba.buffer_allocations:  # (a repeated index's buffers stay with the first allocation of that index)
        for s in a.assigned:
            where.setdefault(s.logical_buffer_id, (a.index, s.offset))
    for lb in ba.logical_buffers:
        loc = lb.defined_at
        iid = loc.instruction_id if loc.instruction_id or not loc.instruction_name else \
            by_name.get(loc.instruction_name, -1)
        ins, comp = instr.get(iid, (None, ""))
        shape = _at(ins.shape, list(loc.shape_index)) if ins is not None else None
        src_file, src_line = source_location(m, ins.metadata) if ins is not None else ("", 0)
        from_host = False
        dest = list(loc.shape_index) == ([0] if ins is not None and ins.opcode == "copy-start" else [])
        if ins is not None and ins.opcode in ("copy-start", "copy") and dest and ins.operand_ids and \
                lb.color != HOST_MEMORY_SPACE:
            op = instr.get(ins.operand_ids[0])
            from_host = op is not None and _on_host(op[0].shape)
        alloc, off = where.get(lb.id, (-1, 0))
        bu["module"].append(mod.name)
        bu["program_id"].append(mod.program_id)
        bu["allocation"].append(alloc)
        bu["buffer_id"].append(int(lb.id))
        bu["offset_bytes"].append(int(off))
        bu["size_bytes"].append(max(int(lb.size), 0))
        bu["color"].append(int(lb.color))
        bu["instruction"].append(ins.name if ins is not None else loc.instruction_name)
        bu["opcode"].append(ins.opcode if ins is not None else "")
        bu["computation"].append(comp)
        bu["shape"].append(hloshape.text(shape) if shape is not None else "")
        bu["shape_index"].append("{" + ",".join(map(str, loc.shape_index)) + "}" if loc.shape_index else "")
        bu["source_file"].append(src_file)
        bu["source_line"].append(int(src_line))
        bu["from_host"].append(from_host)
    for t, tr in enumerate(ba.heap_simulator_traces):
        for i, ev in enumerate(tr.events):
            hp["module"].append(mod.name)
            hp["program_id"].append(mod.program_id)
            hp["trace"].append(t)
            hp["seq"].append(i)
            hp["kind"].append(int(ev.kind))
            hp["buffer_id"].append(int(ev.buffer_id))
            hp["share_with"].append(int(ev.share_with_canonical_id) if ev.kind == 2 else -1)
            hp["instruction"].append(ev.instruction_name)
    return al, bu, hp
