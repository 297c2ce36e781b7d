"""One HLO instruction as text (``%all-reduce = f32[8]{0} all-reduce(f32[8]{0} %x), replica_groups={{0,1}}``)
-> ``HloInstructionProto``, and the instructions a trace names -> a small ``HloModuleProto``.

Trace-viewer JSON carries no HLO proto, only each device op's own text (its ``long_name``). What that text tells is
kept: name, opcode, result and operand shapes with element types and layouts (memory space ``S(5)`` = host
memory), replica groups (explicit ``{{0,1},{2,3}}`` or iota ``[2,2]<=[4]``), channel id, fusion kind, custom-call
target, dimensions and dot dimension numbers. What it does not tell is missing from the module built here: fused
and applied computations (a fusion's body, a reducer), instructions that never ran on the device (their results
become parameters of the shape the text shows), and buffer assignment.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from tracekit.ingest import hloshape
from tracekit.proto import hlo_pb2

_PT = hloshape.PT
#: HLO text element type name -> PrimitiveType
_TYPE = {name: pt for pt, (name, _) in hloshape.DTYPES.items()}
_NAME = re.compile(r"\s*%?([\w.\-]+)\s*=\s*")
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_COMMENT = re.compile(r"/\*.*?\*/")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_MEMSPACE = re.compile(r"S\((\d+)\)")
_ELEMBITS = re.compile(r"E\((\d+)\)")
_INTS = re.compile(r"-?\d+")
_CLOSE = {"(": ")", "{": "}", "[": "]"}
_DOT_DIMS = ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims")


@dataclass
class Parsed:
    """One instruction: the proto (no ids yet), its operands as (name, shape), the computations it names."""
    proto: hlo_pb2.HloInstructionProto
    operands: list = field(default_factory=list)
    called: list = field(default_factory=list)


def _match(s: str, i: int) -> int:
    """Index just past the bracket that closes the one at ``s[i]`` (len(s) when it never closes)."""
    stack, j = [], i
    while j < len(s):
        c = s[j]
        if c == '"':  # skip a quoted string
            k = s.find('"', j + 1)
            if k < 0:
                return len(s)
            j = k
        elif c in _CLOSE:
            stack.append(_CLOSE[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return j + 1
        j += 1
    return len(s)


def split_top(s: str, sep: str = ",") -> list[str]:
    """``s`` split at ``sep`` outside brackets and quotes."""
    out, depth, start, quoted = [], 0, 0, False
    for j, c in enumerate(s):
        if c == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        elif c == sep and depth == 0:
            out.append(s[start:j])
            start = j + 1
    out.append(s[start:])
    return [p.strip() for p in out if p.strip()]


def parse_shape(s: str, i: int = 0) -> tuple[hlo_pb2.ShapeProto, int]:
    """The shape starting at ``s[i]`` (leading spaces skipped) and the index after it; ValueError if none."""
    while i < len(s) and s[i] == " ":
        i += 1
    shape = hlo_pb2.ShapeProto()
    if s.startswith("(", i):
        end = _match(s, i)
        shape.element_type = _PT.TUPLE
        for part in split_top(s[i + 1:end - 1]):
            sub, _ = parse_shape(part)
            shape.tuple_shapes.append(sub)
        return shape, end
    m = _ARRAY.match(s, i)
    if not m or m.group(1) not in _TYPE:
        raise ValueError(f"no shape at {s[i:i + 20]!r}")
    shape.element_type = _TYPE[m.group(1)]
    for d in filter(None, (x.strip() for x in m.group(2).split(","))):
        dynamic = d.startswith("<=")
        shape.dimensions.append(int(d[2:] if dynamic else d))
        shape.is_dynamic_dimension.append(dynamic)
    i = m.end()
    if s.startswith("{", i):
        end = _match(s, i)
        body = s[i + 1:end - 1]
        order, _, tail = body.partition(":")
        shape.layout.minor_to_major.extend(int(x) for x in _INTS.findall(order))
        ms, eb = _MEMSPACE.search(tail), _ELEMBITS.search(tail)
        if ms:
            shape.layout.memory_space = int(ms.group(1))
        if eb:
            shape.layout.element_size_in_bits = int(eb.group(1))
        i = end
    return shape, i


def _replica_groups(v: str, ins: hlo_pb2.HloInstructionProto) -> None:
    v = v.strip()
    if v.startswith("{"):
        for g in re.findall(r"\{([^{}]*)\}", v[1:-1]):
            ins.replica_groups.add().replica_ids.extend(int(x) for x in _INTS.findall(g))
        return
    m = re.match(r"\[(\d+),(\d+)\]<=\[([\d,]*)\](?:T\(([\d,]*)\))?", v)
    if m:
        iota = ins.collective_device_list.iota_replica_group_list
        iota.num_replica_groups, iota.num_devices_per_group = int(m.group(1)), int(m.group(2))
        iota.iota_reshape_dims.extend(int(x) for x in _INTS.findall(m.group(3)))
        if m.group(4):
            iota.iota_transpose_perm.extend(int(x) for x in _INTS.findall(m.group(4)))


def _attribute(key: str, v: str, p: Parsed) -> None:
    ins = p.proto
    if key == "replica_groups":
        _replica_groups(v, ins)
    elif key == "channel_id" and v.isdigit():
        ins.channel_id = int(v)
    elif key == "kind" and v.startswith("k"):
        ins.fusion_kind = v
    elif key == "custom_call_target":
        ins.custom_call_target = v.strip('"')
    elif key == "dimensions":
        ins.dimensions.extend(int(x) for x in _INTS.findall(v))
    elif key in _DOT_DIMS:
        dims = [int(x) for x in _INTS.findall(v)]
        dn = ins.dot_dimension_numbers
        target = {"lhs_contracting_dims": dn.lhs_contracting_dimensions, "rhs_contracting_dims":
                  dn.rhs_contracting_dimensions, "lhs_batch_dims": dn.lhs_batch_dimensions,
                  "rhs_batch_dims": dn.rhs_batch_dimensions}[key]
        target.extend(dims)
    elif key == "source_target_pairs":
        for a, b in re.findall(r"\{(-?\d+),(-?\d+)\}", v):
            ins.source_target_pairs.add(source=int(a), target=int(b))
    elif key in ("calls", "to_apply", "body", "condition", "branch_computations"):
        p.called.extend(n.lstrip("%") for n in split_top(v.strip("{}")))
    elif key == "use_global_device_ids":
        ins.use_global_device_ids = v == "true"


def parse_instruction(text: str) -> Parsed | None:
    """``text`` as an instruction, or None when it is not HLO instruction text (a short op name, a label)."""
    try:
        return _parse(text)
    except (ValueError, IndexError):
        return None


def _parse(text: str) -> Parsed | None:
    s = _COMMENT.sub("", text).strip()
    m = _NAME.match(s)
    if not m:
        return None
    p = Parsed(hlo_pb2.HloInstructionProto(name=m.group(1)))
    shape, i = parse_shape(s, m.end())
    p.proto.shape.CopyFrom(shape)
    m = _OPCODE.match(s, i)
    if not m:
        return None
    p.proto.opcode = m.group(1)
    open_at = m.end() - 1
    end = _match(s, open_at)
    for arg in split_top(s[open_at + 1:end - 1]):
        ref = arg.rfind("%")
        if ref < 0:  # a literal (constant's value) or an operand without a name
            continue
        name = arg[ref + 1:].strip()
        try:
            oshape, _ = parse_shape(arg[:ref]) if arg[:ref].strip() else (None, 0)
        except ValueError:
            oshape = None
        p.operands.append((name, oshape))
    for attr in split_top(s[end:].lstrip(", ")):
        key, eq, v = attr.partition("=")
        if eq:
            _attribute(key.strip(), v.strip(), p)
    return p


@dataclass
class Op:
    """An instruction text as a trace gives it, with what the trace says beside it."""
    text: str
    op_name: str = ""       # framework op (tf_op)
    source: str = ""        # "file.py:37"


def module(name: str, program_id: int, ops: list[Op]) -> hlo_pb2.HloModuleProto | None:
    """A one-computation module holding the instructions ``ops`` name (one per name; later duplicates are
    ignored). Operands that are not among them become parameters of the shape the text gives. None when no text
    parses."""
    parsed: dict[str, tuple[Parsed, Op]] = {}
    for op in ops:
        p = parse_instruction(op.text)
        if p is not None and p.proto.name not in parsed:
            parsed[p.proto.name] = (p, op)
    if not parsed:
        return None
    m = hlo_pb2.HloModuleProto(name=name, id=program_id & ((1 << 63) - 1), entry_computation_name="main",
                               entry_computation_id=1)
    comp = m.computations.add(name="main", id=1)
    ids = {n: k + 1 for k, n in enumerate(parsed)}
    params: dict[str, int] = {}
    for nm, (p, op) in parsed.items():
        ins = p.proto
        ins.id = ids[nm]
        for oname, oshape in p.operands:
            if oname in ids:
                ins.operand_ids.append(ids[oname])
                continue
            if oname not in params:
                pid = len(ids) + len(params) + 1
                params[oname] = pid
                comp.instructions.add(name=oname, opcode="parameter", id=pid, parameter_number=len(params) - 1,
                                      shape=oshape if oshape is not None else hlo_pb2.ShapeProto())
            ins.operand_ids.append(params[oname])
        if op.op_name:
            ins.metadata.op_name = op.op_name
        file, _, line = op.source.rpartition(":")
        if file and line.isdigit():
            ins.metadata.source_file, ins.metadata.source_line = file, int(line)
        comp.instructions.append(ins)
    comp.root_id = comp.instructions[-1].id
    return m
