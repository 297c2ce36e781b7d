"""Where a value of an HLO module comes from and where it goes: the data-flow walks the parallelism facts
(:mod:`tracekit.analysis.parallel_hlo`) stand on.

* :func:`origin` walks back from an instruction through ops that only move data (bitcast, copy, reshape,
  transpose, convert, slices, async ``-done`` ops, fusions whose root only moves one parameter, fused parameters
  to the fusion's operands, a while body's carry to what enters the loop there: weights scanned over layers) to an
  entry parameter, a dot, a collective or something computed, noting the all-gathers it passes.
* :func:`feeds` walks forward from an instruction through its users (into and out of fusions and while bodies,
  through tuples, elementwise ops and selects, crossing at most :data:`FLOW_STEPS` computing ops) to the dots its
  value reaches.
"""
from __future__ import annotations

from tracekit.ingest import backend_config as bc
from tracekit.model import collective_hlo
from tracekit.model.custom_calls import GEMM_TARGETS
from tracekit.proto import hlo_pb2

#: ops that pass their (first) operand's data on unchanged in substance
PASS = frozenset({"bitcast", "copy", "reshape", "transpose", "convert", "slice", "dynamic-slice",
                  "optimization-barrier", "copy-start", "copy-done", "bitcast-convert"})
#: ops the forward walk (what a value feeds) goes through without counting a step
FLOW_FREE = PASS | {"get-tuple-element", "tuple", "broadcast", "concatenate", "pad"}
#: how many computing ops the forward walk crosses before it gives up
FLOW_STEPS = 6


def is_dot(inst) -> bool:
    """A dot, or a GPU GEMM custom call (cuBLAS / cuBLASLt / hipBLASLt: XLA:GPU rewrites dots into them)."""
    return inst.opcode == "dot" or (inst.opcode == "custom-call" and inst.custom_call_target in GEMM_TARGETS)


def dot_numbers(inst) -> tuple[tuple, tuple, tuple, tuple] | None:
    """(lhs contracting, rhs contracting, lhs batch, rhs batch) dimensions of a dot or a GEMM custom call (from
    ``GpuBackendConfig.gemm_backend_config.dot_dimension_numbers``); None when a GEMM's config does not say."""
    if inst.opcode == "dot":
        dn = inst.dot_dimension_numbers
        return (tuple(int(x) for x in dn.lhs_contracting_dimensions),
                tuple(int(x) for x in dn.rhs_contracting_dimensions),
                tuple(int(x) for x in dn.lhs_batch_dimensions), tuple(int(x) for x in dn.rhs_batch_dimensions))
    dd = bc.sub(bc.json_config(inst), "gemm_backend_config", "dot_dimension_numbers")
    if not dd:
        return None
    return tuple(tuple(bc.ints(dd, k)) for k in ("lhs_contracting_dimensions", "rhs_contracting_dimensions",
                                                   "lhs_batch_dimensions", "rhs_batch_dimensions"))


class Index:
    """Instructions by id, their computation, users, the fusion calling each fused computation and the while loop
    whose body each loop body is (a while's ``called_computation_ids`` are (body, condition))."""

    def __init__(self, module: hlo_pb2.HloModuleProto):
        self.module = module
        self.inst = {}
        self.by_name = {}
        self.comp_of = {}
        self.users: dict[int, list] = {}
        self.caller: dict[int, object] = {}
        self.loop: dict[int, object] = {}
        self.comps = {c.id: c for c in module.computations}
        for c in module.computations:
            for i in c.instructions:
                self.inst[i.id] = i
                self.by_name.setdefault(i.name, i)
                self.comp_of[i.id] = c.id
                for o in i.operand_ids:
                    self.users.setdefault(o, []).append(i)
                if i.opcode == "fusion":
                    for cid in i.called_computation_ids:
                        self.caller[cid] = i
                elif i.opcode == "while" and i.called_computation_ids:
                    self.loop[i.called_computation_ids[0]] = i
        self.entry = module.entry_computation_id
        self.root = {c.id: c.root_id for c in module.computations}

    def op(self, inst, k: int = 0):
        return self.inst.get(inst.operand_ids[k]) if len(inst.operand_ids) > k else None

    def loop_init(self, param, tuple_index: int):
        """The value a while body's parameter holds at ``tuple_index`` on entry: that element of the loop's init
        tuple (None when the body is not a loop's, or its init is not a tuple instruction)."""
        loop = self.loop.get(self.comp_of.get(param.id))
        init = self.op(loop) if loop is not None else None
        if init is None or init.opcode != "tuple" or tuple_index >= len(init.operand_ids):
            return None
        return self.inst.get(init.operand_ids[tuple_index])

    def body_param(self, loop):
        """Parameter 0 of a while loop's body."""
        comp = self.comps.get(loop.called_computation_ids[0]) if loop.called_computation_ids else None
        return next((i for i in comp.instructions if i.opcode == "parameter"), None) if comp is not None else None

    def fused_param(self, fusion, k: int):
        comp = self.comps.get(fusion.called_computation_ids[0]) if fusion.called_computation_ids else None
        if comp is None:
            return None
        return next((i for i in comp.instructions if i.opcode == "parameter" and i.parameter_number == k), None)


def origin(ix: Index, inst, gathered=()):
    """(kind, instruction or parameter number, all-gathers passed) of the data ``inst`` holds, walking back through
    pass-through ops; kind: 'param' (entry parameter number), 'dot', 'collective' (with the tuple index as
    (name, index)), 'computed'."""
    seen = 0
    tuple_index = -1
    while inst is not None and seen < 64:
        seen += 1
        op = inst.opcode
        if op == "parameter":
            cid = ix.comp_of.get(inst.id)
            if cid == ix.entry:
                return "param", int(inst.parameter_number), tuple(gathered)
            fusion = ix.caller.get(cid)
            if fusion is None:
                return "computed", inst, tuple(gathered)
            inst = ix.op(fusion, int(inst.parameter_number))
        elif op == "get-tuple-element":
            src = ix.op(inst)
            if src is not None and src.opcode in collective_hlo.KIND_OF:
                return "collective", (src, int(inst.tuple_index)), tuple(gathered)
            if src is not None and is_dot(src) and int(inst.tuple_index) == 0:  # a GEMM's (result, workspace)
                return "dot", src, tuple(gathered)
            tuple_index = int(inst.tuple_index)
            if src is not None and src.opcode == "tuple" and tuple_index < len(src.operand_ids):
                inst = ix.inst.get(src.operand_ids[tuple_index])
            elif src is not None and src.opcode == "parameter" and ix.loop_init(src, tuple_index) is not None:
                inst = ix.loop_init(src, tuple_index)  # a loop carry: what enters the loop there
            else:
                return "computed", inst, tuple(gathered)
        elif op in PASS or op.endswith("-done"):
            inst = ix.op(inst)
        elif op in ("all-gather", "all-gather-start"):
            gathered = gathered + (inst.name,)
            inst = ix.op(inst)
        elif is_dot(inst):
            return "dot", inst, tuple(gathered)
        elif op == "fusion" and inst.called_computation_ids:
            root = ix.inst.get(ix.root.get(inst.called_computation_ids[0]))
            kind, what, g = origin_in_fusion(ix, root)
            if kind == "param":  # a fusion that only moves its parameter k
                inst = ix.op(inst, what)
            elif kind == "dot":
                return "dot", what, tuple(gathered)
            else:
                return "computed", inst, tuple(gathered)
        elif op in collective_hlo.KIND_OF:
            return "collective", (inst, -1), tuple(gathered)
        else:
            return "computed", inst, tuple(gathered)
    return "computed", inst, tuple(gathered)


def origin_in_fusion(ix: Index, inst):
    """Inside a fused computation: ('param', k) when the root only moves fused parameter k, ('dot', dot) when it is
    a dot (after pass-through ops) or an output fusion of one (elementwise work on the result of the one dot the
    fused computation holds: a bias, a scale, a convert), else ('computed', inst)."""
    for _ in range(32):
        if inst is None:
            break
        if inst.opcode == "parameter":
            return "param", int(inst.parameter_number), ()
        if is_dot(inst):
            return "dot", inst, ()
        if inst.opcode in PASS:
            inst = ix.op(inst)
            continue
        comp = ix.comps.get(ix.comp_of.get(inst.id))
        inner = [i for i in comp.instructions if is_dot(i)] if comp is not None else []
        if len(inner) == 1 and _depends_on(ix, inst, inner[0]):
            return "dot", inner[0], ()
        break
    return "computed", inst, ()


def _depends_on(ix: Index, inst, target, limit: int = 64) -> bool:
    """``inst`` reads ``target``'s value, directly or through ops of the same computation."""
    stack, seen = [inst], set()
    while stack and len(seen) < limit:
        x = stack.pop()
        if x.id == target.id:
            return True
        if x.id in seen:
            continue
        seen.add(x.id)
        stack += [ix.inst[o] for o in x.operand_ids if o in ix.inst]
    return False


def feeds(ix: Index, start, tuple_index: int = -1) -> list:
    """The dots (instruction, operand position) the value of ``start`` reaches: forward through users, into and
    out of fusions, crossing at most :data:`FLOW_STEPS` computing ops; stops at dots and collectives."""
    out, seen = [], set()
    frontier = [(start, tuple_index, 0)]
    while frontier and len(seen) < 400:
        inst, ti, cost = frontier.pop()
        for u in ix.users.get(inst.id, []):
            key = (u.id, inst.id)
            if key in seen:
                continue
            seen.add(key)
            if u.opcode == "get-tuple-element" and ti >= 0 and int(u.tuple_index) != ti:
                continue
            nti = -1 if u.opcode == "get-tuple-element" else list(u.operand_ids).index(inst.id) \
                if u.opcode == "tuple" else ti
            if u.opcode == "while" and nti >= 0:  # into the loop body: its parameter's element nti
                p = ix.body_param(u)
                if p is not None:
                    frontier.append((p, nti, cost))
            if is_dot(u):
                out.append((u, list(u.operand_ids).index(inst.id)))
                continue
            if u.opcode in collective_hlo.KIND_OF and not u.opcode.endswith("-done"):
                continue
            step = cost + (0 if u.opcode in FLOW_FREE or u.opcode.endswith("-done") else 1)
            if step > FLOW_STEPS:
                continue
            if u.opcode == "fusion":
                for k, o in enumerate(u.operand_ids):
                    if o == inst.id:
                        p = ix.fused_param(u, k)
                        if p is not None:
                            frontier.append((p, -1, step))
                continue
            frontier.append((u, nti, step))
        # the fused root reached: go on with the fusion's users outside
        cid = ix.comp_of.get(inst.id)
        if cid in ix.caller and ix.root.get(cid) == inst.id:
            frontier.append((ix.caller[cid], ti, cost))
    return out
