"""Which ops scale with the batch (``tracekit whatif --batch-scale K``), decided from the HLO shapes.

One decision, in :func:`scale_factors`: an instruction whose result or operand shapes hold a dimension of the batch
size is batch-proportional: its FLOPs scale by K (a matmul over the batch, or a reduction over it: a weight
gradient contracts the batch away and still does K times the work), and each of its arrays' bytes scales by K when
that array holds the batch dimension (activations), else stays (weights). Every other instruction is kept.

The batch size is what :func:`batch_size` finds: ``--batch-size N`` when given, else the leading dimension of the
step program's last parameter (JAX flattens a ``step(params, batch)`` call's arguments in order, so the batch
comes last). Both are guesses a reader should check, and the output says which was used. The parallelism view
(per-device batch and the roles of the mesh axes) can replace this module's two functions.
"""
from __future__ import annotations

import numpy as np

from tracekit.ingest import hloshape


def _dims(shape) -> list:
    """(dims, bytes) of each array leaf of a ShapeProto."""
    out = []
    for leaf in hloshape.leaves(shape):
        out.append((tuple(int(d) for d in leaf.dimensions), hloshape.nbytes(leaf)))
    return out


def batch_size(modules, program: tuple[str, int] | None, given: int | None = None) -> tuple[int | None, str]:
    """(the batch size, how it was found): ``given``, else the leading dimension of the last parameter of
    ``program``'s entry computation (None when it has no array parameter)."""
    if given:
        return int(given), f"--batch-size {given}"
    mod = next((m for m in modules if program and m.name == program[0] and m.program_id == program[1]), None)
    if mod is None:
        mod = modules[0] if modules else None
    if mod is None:
        return None, "no HLO: the batch dimension cannot be found"
    proto = mod.proto
    entry = next((c for c in proto.computations if c.id == proto.entry_computation_id
                  or c.name == proto.entry_computation_name), None)
    params = sorted((i for i in (entry.instructions if entry else []) if i.opcode == "parameter"),
                    key=lambda i: i.parameter_number)
    for p in reversed(params):
        dims = _dims(p.shape)
        if dims and dims[0][0]:
            return int(dims[0][0][0]), (f"the leading dimension of {mod.name}'s last parameter ({p.name}, "
                                       f"{hloshape.text(p.shape)}); give --batch-size N if that is not the batch")
    return None, f"{mod.name} has no array parameter: give --batch-size N"


def scale_factors(modules, k: float, batch: int) -> dict:
    """(program_id, instruction) -> (FLOPs factor, bytes factor) for every instruction of every module that holds
    the batch dimension (module docstring); instructions not listed are kept."""
    out: dict = {}
    for mod in modules:
        for comp in mod.proto.computations:
            by_id = {i.id: i for i in comp.instructions}
            for ins in comp.instructions:
                arrays = _dims(ins.shape)
                for oid in ins.operand_ids:
                    if oid in by_id:
                        arrays += _dims(by_id[oid].shape)
                hit = [batch in d for d, _ in arrays]
                if not any(hit):
                    continue
                total = sum(b for _, b in arrays)
                scaled = sum(b * (k if h else 1.0) for (_, b), h in zip(arrays, hit))
                out[(int(mod.program_id), ins.name)] = (float(k), float(scaled / total) if total else float(k))
    return out


def row_factors(ops, factors: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per op row: (FLOPs factor, bytes factor), 1 where the instruction is not batch-proportional."""
    from tracekit.grouping import distinct_rows
    inv, _, keys = distinct_rows(ops, ["program_id", "op"])
    f = np.array([factors.get((int(p), str(o)), (1.0, 1.0)) if p is not None else (1.0, 1.0) for p, o in keys],
                 float).reshape(-1, 2)
    return f[inv, 0], f[inv, 1]
