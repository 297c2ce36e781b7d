"""What a program's HLO says about serving: its KV cache, how many tokens a step writes, what its attention reads.

Per HLO module (:func:`program_shapes`), from the module proto and its buffer assignment:

* **The cache**: entry parameters that the module's input/output alias config aliases to an output (donated, so
  written in place) *and* that a ``dynamic-update-slice`` or ``scatter`` writes, followed back from the write's
  operand 0 through bitcasts, copies and fusion parameters. A program without one is never a decode step.
* **Tokens per sequence** a step writes: the update's extent along the one axis where it is smaller than the
  cache (a decode step writes 1, a prefill its prompt length); that axis's extent in the cache is the cache length.
* **Tokens per step**: the rows of the weight matmuls (dots one of whose operands is an entry parameter other than
  the cache): their other operand's non-contracting, non-batch extent; the count that most weight bytes see.
* **Parameter bytes** read per step: every entry argument but the cache (weights and the step's small inputs),
  from the buffer assignment's argument allocations (the HLO parameter shapes without one).
* **KV bytes read**: what the instructions that use the cache read of it. A slice, dynamic slice or gather reads
  its result; a fusion whose uses of the cache inside are all slices reads those; anything else (dense masked
  attention, a transpose, a copy) reads the whole buffer. Unknown (-1) when the cache reaches a loop or a call.
* **Per layer**: when the cache's parameter names (jax's pytree paths: ``cache_0___k__``) carry layer numbers.

A number the HLO does not give is -1, never 0.
"""
from __future__ import annotations

import re
from dataclasses import field

from tracekit.ingest import hloshape
from tracekit.records import record

#: ops that pass a buffer through unchanged (the cache is the same array after them)
_SAME = frozenset({"bitcast", "copy", "get-tuple-element", "reshape", "convert", "transpose", "optimization-barrier"})
#: ops that read only part of an operand: the bytes they read are their result
_PART = frozenset({"slice", "dynamic-slice", "gather"})
_WRITE = frozenset({"dynamic-update-slice", "scatter"})
#: attention kernels serving stacks run, by custom-call target or fusion name (vLLM-TPU, JetStream, MaxText, SGLang)
ATTENTION_KERNELS = re.compile(r"ragged_paged_attention|paged_attention|flash_decod|decode_attention|"
                               r"splash_attention|flash_attention|ragged_attention|mqa_decode|gqa_decode",
                               re.IGNORECASE)
_LAYER = re.compile(r"(?<![a-zA-Z])(\d+)")


@record(frozen=True)
class ProgramShape:
    """What the HLO of one program says (module docstring); -1: unknown."""

    module: str
    program_id: int
    cache_params: tuple = ()  #: (parameter number, name, shape text, bytes) of each cache parameter
    tokens_per_sequence: int = -1  #: new positions per sequence a step writes into the cache
    tokens_per_step: int = -1  #: rows of the weight matmuls (batch x new tokens per sequence)
    cache_len: int = -1  #: the cache's extent along the axis the writes advance (its positions per sequence)
    param_bytes: int = -1
    kv_cache_bytes: int = 0
    kv_bytes_read: int = -1
    kv_layers: int = -1  #: layers the cache's parameter names tell apart
    weight_bytes_per_param: float = float("nan")  #: element size of the largest weight
    weight_dtype: str = ""
    kernels: tuple = ()  #: known attention kernels found (custom-call targets, fusion names)
    evidence: tuple = field(default=())  #: what the HLO showed, in words

    @property
    def has_cache(self) -> bool:
        return bool(self.cache_params)

    @property
    def kind(self) -> str:
        """decode (one token per sequence written into an in-place cache), prefill (more than one), '' (no cache
        updated in place), unknown (a cache whose writes do not tell)."""
        if not self.cache_params:
            return ""
        if self.tokens_per_sequence == 1:
            return "decode"
        if self.tokens_per_sequence > 1:
            return "prefill"
        return "unknown"


class _Module:
    """Index of one module proto: instructions by id, callers of fused computations, entry parameters."""

    def __init__(self, proto):
        self.proto = proto
        self.comp_of, self.instr = {}, {}
        self.caller = {}  # called computation id -> the instruction calling it
        for c in proto.computations:
            for i in c.instructions:
                self.instr[i.id] = i
                self.comp_of[i.id] = c.id
                for cid in i.called_computation_ids:
                    self.caller.setdefault(cid, i)
        self.entry = proto.entry_computation_id
        self.params = {i.parameter_number: i for c in proto.computations if c.id == self.entry
                       for i in c.instructions if i.opcode == "parameter"}
        self.root_of = {c.id: c.root_id for c in proto.computations}
        self.param_of = {(self.comp_of[i.id], int(i.parameter_number)): i for i in self.instr.values()
                         if i.opcode == "parameter"}
        self.users: dict = {}
        for i in self.instr.values():
            for k, o in enumerate(i.operand_ids):
                self.users.setdefault(o, []).append((i, k))

    def root_param(self, iid: int, through_writes: bool = True) -> int:
        """The entry parameter number a value is (through pass-through ops, fusion parameters and, with
        ``through_writes``, earlier cache writes), -1 when it is something else."""
        seen = 0
        while seen < 10_000:
            seen += 1
            i = self.instr.get(iid)
            if i is None:
                return -1
            if i.opcode == "parameter":
                cid = self.comp_of[iid]
                if cid == self.entry:
                    return int(i.parameter_number)
                call = self.caller.get(cid)
                if call is None or call.opcode != "fusion" or i.parameter_number >= len(call.operand_ids):
                    return -1
                iid = call.operand_ids[i.parameter_number]
            elif i.opcode in _SAME or (through_writes and i.opcode in _WRITE):
                if not i.operand_ids:
                    return -1
                iid = i.operand_ids[0]
            elif i.opcode == "fusion" and through_writes:
                root = self._fused_root(i)
                if root is None or root.opcode not in _WRITE | _SAME:
                    return -1
                iid = root.id
            else:
                return -1
        return -1

    def _fused_root(self, fusion):
        if not fusion.called_computation_ids:
            return None
        return self.instr.get(self.root_of.get(fusion.called_computation_ids[0], -1))


def _dims(shape) -> list:
    return list(hloshape.array_dims(shape))


def _tokens_of_write(cache_dims: list, upd_dims: list) -> tuple[int, int]:
    """(new positions per sequence, cache length) of a write of ``upd_dims`` into ``cache_dims``; (-1, -1) when the
    shapes do not tell (module docstring)."""
    if len(cache_dims) != len(upd_dims) or not cache_dims:
        return -1, -1
    diff = [k for k in range(len(cache_dims)) if upd_dims[k] != cache_dims[k]]
    if not diff:
        return -1, -1
    big = [k for k in diff if upd_dims[k] > 1]
    if len(big) == 1:
        return upd_dims[big[0]], cache_dims[big[0]]
    if not big:
        axis = max(diff, key=lambda k: cache_dims[k])  # the positions: the longest axis the write advances along
        return 1, cache_dims[axis]
    return -1, -1


def _free(shape, contracting, batch) -> int:
    n = 1
    for k, d in enumerate(_dims(shape)):  # (a damaged shape has none: its products stay physical)
        if k not in contracting and k not in batch:
            n *= d
    return n


def program_shape(name: str, program_id: int, proto, tables=None) -> ProgramShape:
    """The :class:`ProgramShape` of one module proto; ``tables``: the buffer assignments
    (:func:`tracekit.ingest.buffers.tables` of this module, or of several: its rows are found by name and program
    id) for the argument sizes, when the trace has them."""
    m = _Module(proto)
    aliased = {int(e.parameter_number) for e in proto.input_output_alias.entries}
    alloc = {}
    if tables is not None and len(tables.allocations):
        a = tables.allocations
        a = a[(a["module"] == name) & (a["program_id"] == int(program_id)) & (a["parameter_number"] >= 0)
              & (a["memory_space"] == "device")]
        alloc = dict(zip(a["parameter_number"].astype(int), a["size_bytes"].astype(int)))

    def pbytes(p: int) -> int:
        return int(alloc.get(p, hloshape.nbytes(m.params[p].shape)))

    writes: dict = {}  # cache parameter -> [(tokens per sequence, cache length, write text)]
    kernels = set()
    for i in m.instr.values():
        if i.opcode == "custom-call" and ATTENTION_KERNELS.search(i.custom_call_target or ""):
            kernels.add(i.custom_call_target)
        elif i.opcode == "fusion" and ATTENTION_KERNELS.search(i.name):
            kernels.add(i.name)
        if i.opcode not in _WRITE or not i.operand_ids:
            continue
        p = m.root_param(i.operand_ids[0])
        if p < 0 or p not in aliased or p not in m.params:
            continue
        target = m.instr[i.operand_ids[0]].shape
        upd_at = 1 if i.opcode == "dynamic-update-slice" else 2
        upd = m.instr.get(i.operand_ids[upd_at]) if len(i.operand_ids) > upd_at else None
        tps, clen = _tokens_of_write(_dims(target), _dims(upd.shape)) if (upd is not None and i.opcode ==
                                                                          "dynamic-update-slice") else (-1, -1)
        writes.setdefault(p, []).append((tps, clen, f"{i.opcode} {hloshape.text(upd.shape) if upd else '?'} into "
                                                    f"{hloshape.text(target)}"))
    cache = sorted(writes)
    tps_all = {t for p in cache for t, _, _ in writes[p] if t > 0}
    tps = tps_all.pop() if len(tps_all) == 1 else -1
    clens = {c for p in cache for _, c, _ in writes[p] if c > 0}
    clen = clens.pop() if len(clens) == 1 else -1
    cache_params = tuple((p, m.params[p].name, hloshape.text(m.params[p].shape), pbytes(p)) for p in cache)
    kv_bytes = sum(c[3] for c in cache_params)
    others = [p for p in m.params if p not in writes]
    param_bytes = sum(pbytes(p) for p in others) if m.params else -1
    weights = [p for p in others if hloshape.first_dtype(m.params[p].shape) in hloshape.FLOAT_DTYPES
               or len(m.params[p].shape.dimensions) >= 2]
    big = max(weights, key=pbytes, default=None)
    wdt = hloshape.first_dtype(m.params[big].shape) if big is not None else ""
    wsize = hloshape.nbytes(m.params[big].shape) / max(hloshape.elements(m.params[big].shape), 1) if big is not None \
        else float("nan")
    tokens = _tokens_per_step(m, set(writes), pbytes)
    read = _kv_read(m, set(writes)) if cache else -1
    layers = _layers(cache_params)
    ev = []
    if cache:
        shapes = sorted({c[2] for c in cache_params})
        ev.append(f"KV cache: {len(cache)} donated parameter(s) ({', '.join(shapes)}) aliased to outputs and "
                  f"written in place by {writes[cache[0]][0][2]}")
        if tps > 0:
            ev.append(f"{tps} new position(s) per sequence written per step"
                      + (f" of {clen}" if clen > 0 else ""))
        else:
            ev.append("the writes do not tell how many positions per sequence a step adds")
    if tokens > 0:
        ev.append(f"{tokens} token(s) per step: the rows of the weight matmuls")
    if kernels:
        ev.append("attention kernel(s): " + ", ".join(sorted(kernels)))
    return ProgramShape(name, int(program_id), cache_params, tps, tokens, clen, param_bytes, kv_bytes, read, layers,
                        wsize, wdt, tuple(sorted(kernels)), tuple(ev))


def _tokens_per_step(m: _Module, cache: set, pbytes) -> int:
    """The rows of the weight matmuls, weighted by weight bytes (module docstring); -1 without one."""
    votes: dict = {}
    for i in m.instr.values():
        if i.opcode != "dot" or len(i.operand_ids) != 2:
            continue
        dn = i.dot_dimension_numbers
        sides = ((i.operand_ids[0], set(dn.lhs_contracting_dimensions), set(dn.lhs_batch_dimensions)),
                 (i.operand_ids[1], set(dn.rhs_contracting_dimensions), set(dn.rhs_batch_dimensions)))
        for w, other in ((0, 1), (1, 0)):
            p = m.root_param(sides[w][0], through_writes=False)
            if p < 0 or p in cache or sides[w][2] or p not in m.params:
                continue  # a weight: an entry parameter that is not the cache, with no batch dims
            act = m.instr.get(sides[other][0])
            if act is None:
                continue
            rows = _free(act.shape, sides[other][1], sides[other][2])
            votes[rows] = votes.get(rows, 0) + pbytes(p)
            break
    return max(votes, key=lambda r: (votes[r], r)) if votes else -1


def _kv_read(m: _Module, cache: set) -> int:
    """Bytes the cache's users read of it (module docstring); -1 when the cache reaches a loop, call or tuple
    operand other than the program's result."""
    total, seen, stack = 0, set(), [m.params[p].id for p in cache]
    root = m.root_of.get(m.entry, -1)
    while stack:
        vid = stack.pop()
        if vid in seen:
            continue
        seen.add(vid)
        v = m.instr[vid]
        for u, k in m.users.get(vid, []):
            if u.opcode in ("bitcast", "get-tuple-element", "optimization-barrier"):
                stack.append(u.id)
            elif u.opcode in _WRITE and k == 0:
                stack.append(u.id)  # the cache after the write
            elif u.opcode == "fusion" and _writes_operand(m, u, k):
                stack.append(u.id)
            elif u.opcode == "tuple" and u.id == root:
                continue  # handed back (aliased): not read
            elif u.opcode in ("while", "call", "conditional", "tuple", "async-start", "custom-call"):
                return -1
            elif u.opcode in _PART:
                total += hloshape.nbytes(u.shape)
            elif u.opcode == "fusion":
                total += _fusion_read(m, u, k, hloshape.nbytes(v.shape))
            else:
                total += hloshape.nbytes(v.shape)
    return total


def _fused_param(m: _Module, fusion, k: int):
    cid = fusion.called_computation_ids[0] if fusion.called_computation_ids else None
    return m.param_of.get((cid, k))


def _writes_operand(m: _Module, fusion, k: int) -> bool:
    """A fusion whose root writes (dynamic-update-slice / scatter) into its operand ``k``: the cache, updated."""
    root = m._fused_root(fusion)
    while root is not None and root.opcode in _SAME and root.operand_ids:
        root = m.instr.get(root.operand_ids[0])
    if root is None or root.opcode not in _WRITE or not root.operand_ids:
        return False
    fp = _fused_param(m, fusion, k)
    src = m.instr.get(root.operand_ids[0])
    while src is not None and src.opcode in _SAME and src.operand_ids:
        src = m.instr.get(src.operand_ids[0])
    return fp is not None and src is not None and src.id == fp.id


def _fusion_read(m: _Module, fusion, k: int, full: int) -> int:
    """What a fusion reads of its operand ``k``: the slices' results when every use inside is a slice, else all."""
    fp = _fused_param(m, fusion, k)
    uses = m.users.get(fp.id, []) if fp is not None else []
    if uses and all(u.opcode in _PART and j == 0 for u, j in uses):
        return min(full, sum(hloshape.nbytes(u.shape) for u, _ in uses))
    return full


def _layers(cache_params: tuple) -> int:
    """Layers the cache parameters' names tell apart: the first number in each name (jax's pytree path, e.g.
    ``cache_0___k__.1``), when there are at least two and each holds the same bytes; else -1."""
    groups: dict = {}
    for _, name, _, nbytes in cache_params:
        num = _LAYER.search(name.split(".")[0])
        if num is None:
            return -1
        groups.setdefault(int(num.group(1)), []).append(nbytes)
    sizes = {sum(v) for v in groups.values()}
    return len(groups) if len(groups) >= 2 and len(sizes) == 1 else -1


def program_shapes(modules: list) -> dict:
    """(module name, program id) -> :class:`ProgramShape` of every HLO module (:class:`tracekit.ingest.hlo.Module`)."""
    from tracekit.ingest import buffers as buf
    with_buffers = [mod for mod in modules if getattr(mod, "buffers", None) is not None]
    # one table of every buffer assignment: each module finds its own rows (a module without one finds none)
    tables = buf.tables(with_buffers) if with_buffers else None
    return {(mod.name, int(mod.program_id)): program_shape(mod.name, mod.program_id, mod.proto, tables)
            for mod in modules}


__all__ = ["ProgramShape", "program_shape", "program_shapes", "ATTENTION_KERNELS"]
