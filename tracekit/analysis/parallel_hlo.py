"""What one compiled (SPMD-partitioned) HLO module says about how it is sharded: its weights, the dots that read
them, and where each collective's data comes from and goes to. Facts only; the mesh axes and their roles are
inferred from them in :mod:`tracekit.analysis.parallel_axes`.

The module is one device's program: shapes are local (per device). Definitions:

* a **weight** is an entry parameter of a floating type, rank >= 2, that the step updates (an output of the
  same shape and type, or a donated input: ``input_output_alias``) and that a dot reads (directly, through
  bitcasts, copies, transposes, converts, slices, or after an all-gather);
* a **data input** is any other entry parameter of rank >= 2 (the batch: activations, targets, token ids);
* a dot is a **weight dot** when one operand comes from a weight (activations x weight: a forward or an
  input-gradient matmul), a **gradient dot** when neither does and its result has a weight's shape (up to the
  order of its dimensions: activations x activations contracted over the tokens: a weight gradient), else an
  **activations dot** (activations x activations: attention scores and values);
* a collective operand's **source** is where its data comes from through pass-through ops (bitcast, copy,
  reshape, transpose, convert, slices, fusions that only move data): a weight, a data input, a dot of one of the
  kinds above, another collective, or something computed; its **feeds** are the dots its result reaches within a
  few ops (through fusions, elementwise ops and selects).

What this does not see: loops are read once (a while body's dots and collectives count once, whatever the trip
count); custom-call matmuls (cuBLAS, Pallas kernels) are not dots here.
"""
from __future__ import annotations


from tracekit.analysis.hlo_flow import Index, dot_numbers, feeds, is_dot, origin
from tracekit.ingest.hloshape import FLOAT_DTYPES, array_dims, dtype_name, elements, leaves, nbytes
from tracekit.model import collective_hlo
from tracekit.proto import hlo_pb2
from tracekit.records import record

#: a collective whose operand is this small (bytes) moves a scalar or a few numbers: a loss, a metric, a flag
TINY_BYTES = 64
WEIGHT, DATA = "weight", "data"
WEIGHT_DOT, GRAD_DOT, ACT_DOT = "weight dot", "gradient dot", "activations dot"


@record(frozen=True)
class Param:
    """An entry parameter: ``kind`` weight | data | other; ``dims`` local (this device's shard)."""

    number: int
    name: str
    dims: tuple
    dtype: str
    kind: str
    why: str = ""


@record(frozen=True)
class Dot:
    """A dot of the module. ``weight``: the parameter number of its weight operand (-1: none); ``weight_dims`` the
    weight operand as the dot reads it (after all-gathers: ``gathered``), with the positions of its contracting and
    batch dimensions; ``act_*`` the same for the other operand; ``tokens``: the elements of the activation operand
    outside its contracting and batch dims (weight dot) or the contracted elements (gradient dot)."""

    name: str
    kind: str
    weight: int
    weight_dims: tuple
    weight_contracting: tuple
    weight_batch: tuple
    act_dims: tuple
    act_contracting: tuple
    act_batch: tuple
    result_dims: tuple
    flops: float
    tokens: int
    gathered: tuple = ()
    dtype: str = ""


@record(frozen=True)
class Operand:
    """One operand of a collective: its local ``dims`` (and the result's), bytes, where its data comes from
    (``source_kind`` weight | data | weight dot | gradient dot | activations dot | collective | computed, and
    ``source``: the parameter number or instruction name), and the dots its result feeds ((name, kind), ...)."""

    index: int
    dims: tuple
    result_dims: tuple
    dtype: str
    nbytes: int
    source_kind: str
    source: str
    feeds: tuple = ()
    weight: int = -1  #: the weight parameter the source dot reads, or whose shape the data has (-1: none)


@record(frozen=True)
class Collective:
    """A collective instruction: ``groups`` of device ids (``pairs`` for a permute), ``global_bytes`` V."""

    name: str
    kind: str
    groups: tuple
    pairs: tuple
    global_bytes: float
    operands: tuple


@record(frozen=True)
class ProgramFacts:
    """What one module says (see the module docstring)."""

    module: str
    program_id: int
    params: tuple
    dots: tuple
    collectives: tuple
    data_inputs: tuple = ()  #: (parameter number, dims, tokens, d_model the first weight dot contracts, gather factor)


def _dims(shape) -> tuple:
    return array_dims(shape)


def module_facts(program_id: int, module: hlo_pb2.HloModuleProto) -> ProgramFacts:
    """The :class:`ProgramFacts` of one module."""
    ix = Index(module)
    entry = ix.comps.get(ix.entry)
    if entry is None:
        return ProgramFacts(module.name, int(program_id), (), (), ())
    root = ix.inst.get(entry.root_id)
    outs = {(_dims(s), s.element_type) for s in leaves(root.shape)} if root is not None else set()
    aliased = {int(a.parameter_number) for a in module.input_output_alias.entries}
    plist = sorted((i for i in entry.instructions if i.opcode == "parameter"), key=lambda i: i.parameter_number)
    # every dot (fused ones too), the origin of both operands
    dots_raw = []
    for c in module.computations:
        for i in c.instructions:
            if is_dot(i) and len(i.operand_ids) >= 2 and dot_numbers(i) is not None and _numbers_fit(ix, i):
                dots_raw.append((i, origin(ix, ix.op(i, 0)), origin(ix, ix.op(i, 1))))
    read_by_dot = {o[1] for _, a, b in dots_raw for o in (a, b) if o[0] == "param"}
    params = []
    for p in plist:
        dims, dt = _dims(p.shape), dtype_name(p.shape.element_type)
        n = int(p.parameter_number)
        updated = n in aliased or (dims, p.shape.element_type) in outs
        if dt in FLOAT_DTYPES and len(dims) >= 2 and updated and n in read_by_dot:
            why = "donated and read by a dot" if n in aliased else "an output of its shape and read by a dot"
            params.append(Param(n, p.name, dims, dt, WEIGHT, why))
        elif len(dims) >= 2:
            params.append(Param(n, p.name, dims, dt, DATA, "read by a dot" if n in read_by_dot else "not updated"))
        else:
            params.append(Param(n, p.name, dims, dt, "other"))
    weights = {p.number: p for p in params if p.kind == WEIGHT}
    wshapes: dict = {}
    for p in weights.values():
        _shape_keys(wshapes, p.dims, p.number)
    dots = [_dot(ix, d, a, b, weights, wshapes) for d, a, b in dots_raw]
    for d in list(dots):  # a gradient of a gathered weight has the gathered shape
        if d.kind == WEIGHT_DOT:  # as the dot reads it: gathered, a stage's slice of a stacked weight
            _shape_keys(wshapes, d.weight_dims, d.weight)
    dots = [_dot(ix, d, a, b, weights, wshapes) for d, a, b in dots_raw]
    by_name = {d.name: d for d in dots}
    colls = []
    for name, op in collective_hlo.module_collectives(int(program_id), module).items():
        inst = ix.by_name.get(name)
        if inst is None:
            continue
        # (an operand id the module does not hold — a damaged module — gives no operand: the others stand)
        colls.append(Collective(name, op.kind, op.groups, op.pairs, op.global_bytes,
                                tuple(_operand(ix, inst, k, by_name, weights, wshapes)
                                      for k in range(len(inst.operand_ids)) if ix.op(inst, k) is not None)))
    data = tuple(_data_input(ix, ix.inst[next(i.id for i in plist if i.parameter_number == p.number)], p, by_name)
                 for p in params if p.kind == DATA)
    return ProgramFacts(module.name, int(program_id), tuple(params), tuple(dots), tuple(colls),
                        tuple(d for d in data if d is not None))


def _numbers_fit(ix: Index, inst) -> bool:
    """Both operands are in the module and every contracting and batch dimension the dot names is one of theirs (a
    damaged module names others, or negative ones)."""
    lhs, rhs = ix.op(inst, 0), ix.op(inst, 1)
    if lhs is None or rhs is None:
        return False
    lc, rc, lb, rb = dot_numbers(inst)
    nl, nr = len(_dims(lhs.shape)), len(_dims(rhs.shape))
    return all(0 <= int(i) < nl for i in (*lc, *lb)) and all(0 <= int(i) < nr for i in (*rc, *rb))


def _shape_keys(table: dict, dims: tuple, number: int) -> None:
    """Index weight ``number`` under its dims: as they are, then in any order and without size-1 dimensions."""
    table.setdefault(tuple(dims), number)
    table.setdefault(("any",) + tuple(sorted(d for d in dims if d != 1)), number)


def _weight_of(table: dict, dims: tuple) -> int:
    """The weight whose shape ``dims`` is (exactly, else up to order and size-1 dimensions); -1: none."""
    hit = table.get(tuple(dims))
    if hit is None:
        hit = table.get(("any",) + tuple(sorted(d for d in dims if d != 1)), -1)
    return hit


def _dot(ix: Index, inst, lo, ro, weights: dict, wshapes: dict) -> Dot:
    lhs, rhs = ix.op(inst, 0), ix.op(inst, 1)
    ld, rd = _dims(lhs.shape), _dims(rhs.shape)
    lc, rc, lb, rb = dot_numbers(inst)
    res = next(iter(leaves(inst.shape)), inst.shape)  # (a GEMM custom call's result is (result, workspace))
    out = _dims(res)
    k = 1
    for i in lc:
        k *= ld[i] if i < len(ld) else 1
    flops = 2.0 * elements(res) * k
    lw = lo[0] == "param" and lo[1] in weights
    rw = ro[0] == "param" and ro[1] in weights
    if lw != rw:  # one side is a weight
        w, a = ((lo, ld, lc, lb), (ro, rd, rc, rb)) if lw else ((ro, rd, rc, rb), (lo, ld, lc, lb))
        free = 1
        for i, d in enumerate(a[1]):
            if i not in a[2] and i not in a[3]:
                free *= d
        return Dot(inst.name, WEIGHT_DOT, int(w[0][1]), w[1], w[2], w[3], a[1], a[2], a[3], out, flops, free,
                   tuple(w[0][2]), dtype_name(lhs.shape.element_type))
    wnum = _weight_of(wshapes, out) if not (lw or rw) else -1
    kind = GRAD_DOT if wnum >= 0 else ACT_DOT
    batch = 1
    for i in lb:
        batch *= ld[i]
    return Dot(inst.name, kind, wnum, (), (), (), ld, lc, lb, out, flops, k * batch if kind == GRAD_DOT else 0,
               (), dtype_name(lhs.shape.element_type))


def _operand(ix: Index, inst, k: int, dots: dict, weights: dict, wshapes: dict) -> Operand:
    o = ix.op(inst, k)
    res = inst.shape
    if res.element_type == hlo_pb2.PrimitiveType.TUPLE:
        shapes = list(leaves(res))
        if inst.opcode.endswith("-start") and len(shapes) >= 2 * len(inst.operand_ids):
            shapes = shapes[len(inst.operand_ids):]  # (operands, results) of an async start
        res = shapes[k] if k < len(shapes) else o.shape
    dims, rdims = _dims(o.shape), _dims(res)
    kind, what, _g = origin(ix, o)
    weight = -1
    if kind == "param":
        skind, src = (WEIGHT if what in weights else DATA), str(what)
        weight = what if what in weights else -1
    elif kind == "dot":
        d = dots.get(what.name)
        skind, src = (d.kind if d is not None else ACT_DOT), what.name
        weight = d.weight if d is not None else -1
    elif kind == "collective":
        skind, src = "collective", what[0].name
    else:
        skind, src = "computed", getattr(what, "name", "")
    if weight < 0 and kind != "param":  # data of a weight's shape (a gradient combined before it is reduced)
        weight = max(_weight_of(wshapes, dims), _weight_of(wshapes, rdims)) \
            if inst.opcode in ("all-reduce", "all-reduce-start", "reduce-scatter") else -1
    tuple_out = inst.shape.element_type == hlo_pb2.PrimitiveType.TUPLE and not inst.opcode.endswith("-start")
    fed = feeds(ix, inst, k if tuple_out else -1)
    reached = tuple((d.name, dots[d.name].kind if d.name in dots else ACT_DOT) for d, _ in fed)
    return Operand(k, dims, rdims, dtype_name(o.shape.element_type), int(nbytes(o.shape)), skind, src,
                   tuple(dict.fromkeys(reached)), int(weight))


def _data_input(ix: Index, inst, p: Param, dots: dict):
    """(parameter number, local dims, tokens, d_model, gather factor) of a data input that reaches a weight dot:
    d_model = what that dot contracts on the activation side; tokens = the input's elements over its last
    dimension, times what all-gathers on the way multiply them by; None when it reaches no weight dot."""
    fed = feeds(ix, inst)
    for d, pos in fed:
        f = dots.get(d.name)
        if f is None or f.kind != WEIGHT_DOT:
            continue
        d_model = 1
        for i in f.act_contracting:
            d_model *= f.act_dims[i]
        factor = _gather_factor(ix, d, p.number)
        last = p.dims[-1] if p.dims else 1
        n = 1
        for x in p.dims:
            n *= x
        return (p.number, p.dims, int(n // max(last, 1) * factor), int(d_model), factor)
    return None


def _gather_factor(ix: Index, dot, number: int) -> int:
    """How many times the all-gathers between data input ``number`` and ``dot`` (a pass-through path) multiply
    the data (1: none)."""
    f = 1
    for k in range(len(dot.operand_ids)):
        kind, num, gathers = origin(ix, ix.op(dot, k))
        if kind != "param" or num != number or not gathers:
            continue
        for name in gathers:
            ag = ix.by_name.get(name)
            src = ix.op(ag) if ag is not None else None
            if src is not None and elements(src.shape):
                f *= max(elements(ag.shape) // elements(src.shape), 1)
    return f
