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
from dataclasses import field

from tracekit.ingest import hloscan
from tracekit.proto import hlo_pb2
from tracekit.records import record

_NAME = re.compile(r"\s*%?([\w.\-]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([a-z][\w\-]*)\(")
_INTS = re.compile(r"-?\d+")
_NONBLANK = re.compile(r"\S")
_DOT_DIMS = ("lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims")
split_top, parse_shape = hloscan.split_top, hloscan.parse_shape


@record
class Parsed:
    """One instruction: the proto (no ids yet), its operands as (name, shape), the computations it names."""
    proto: hlo_pb2.HloInstructionProto
    operands: list = field(default_factory=list)
    called: list = field(default_factory=list)


def _strip_comments(s: str) -> str:
    """``s`` without its ``/* ... */`` comments (one pass: an unclosed one is left as it is)."""
    out, i = [], 0
    while True:
        a = s.find("/*", i)
        b = s.find("*/", a + 2) if a >= 0 else -1
        if b < 0:
            break
        out.append(s[i:a])
        i = b + 2
    out.append(s[i:])
    return "".join(out)


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
    """``text`` as an instruction, or None when it is not HLO instruction text (a short op name, a label);
    :class:`tracekit.ingest.hloscan.OverBound` when it is over one of the bounds stated there. Time and memory
    are linear in the length of the text."""
    try:
        return _parse(text)
    except (ValueError, IndexError):
        return None


def _parse(text: str) -> Parsed | None:
    if len(text) > hloscan.MAX_TEXT:  # before any work on it
        raise hloscan.OverBound("text length")
    s = _strip_comments(text).strip()
    m = _NAME.match(s)
    if not m:
        return None
    p = Parsed(hlo_pb2.HloInstructionProto(name=m.group(1)))
    scan, budget = hloscan.Scan(s), hloscan.Budget()
    shape, i = hloscan.parse_shape(s, m.end(), scan, budget)
    p.proto.shape.CopyFrom(shape)
    m = _OPCODE.match(s, i)
    if not m:
        return None
    p.proto.opcode = m.group(1)
    open_at = m.end() - 1
    if scan.count(open_at) >= hloscan.MAX_OPERANDS:  # operands = commas + 1, counted before any is parsed
        raise hloscan.OverBound("operands")
    end = scan.end(open_at)
    for a, b in scan.pieces(open_at):
        ref = s.rfind("%", a, b)
        if ref < 0:  # a literal (constant's value) or an operand without a name
            continue
        name = s[ref + 1:b].strip()
        oshape = None
        if _NONBLANK.search(s, a, ref):
            try:
                oshape, _ = hloscan.parse_shape(s, a, scan, budget, end=ref)
            except ValueError:
                oshape = None
        p.operands.append((name, oshape))
    for a, b in scan.pieces(-1, end):
        key, eq, v = s[a:b].partition("=")
        if eq:
            _attribute(key.strip(), v.strip(), p)
    return p


@record
class Op:
    """An instruction text as a trace gives it, with what the trace says beside it."""
    text: str
    op_name: str = ""       # framework op (tf_op)
    source: str = ""        # "file.py:37"


def module(name: str, program_id: int, ops: list[Op], over: dict | None = None) -> hlo_pb2.HloModuleProto | None:
    """A one-computation module holding the instructions ``ops`` name (one per name; later duplicates are
    ignored). Operands that are not among them become parameters of the shape the text gives. None when no text
    parses. An op whose text is over a bound of :mod:`tracekit.ingest.hloscan` is left out (so without HLO) and
    counted in ``over`` (bound name -> ops): :func:`over_bound_warning` makes the one warning for them."""
    parsed: dict[str, tuple[Parsed, Op]] = {}
    for op in ops:
        try:
            p = parse_instruction(op.text)
        except hloscan.OverBound as e:
            if over is not None:
                over[e.what] = over.get(e.what, 0) + 1
            continue
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


def over_bound_warning(over: dict, where: str) -> str | None:
    """The one warning for the ops :func:`module` left out over a bound (None when there were none)."""
    n = sum(over.values())
    if not n:
        return None
    kinds = ", ".join(f"{k} x{v:,}" for k, v in sorted(over.items()))
    return (f"{where}: {n:,} op{'s' if n != 1 else ''} whose HLO text is over tracekit's bounds ({kinds}; at most "
            f"{hloscan.MAX_TEXT:,} characters, nesting {hloscan.MAX_DEPTH}, {hloscan.MAX_OPERANDS:,} operands, "
            f"{hloscan.MAX_ELEMENTS:,} shape elements) {'were' if n != 1 else 'was'} left without HLO (no roofline "
            "prediction for them)")
