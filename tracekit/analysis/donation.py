"""Arguments a program could have donated (``donate_argnums``), from XLA's buffer assignment, and which programs
ran in the trace's window.

An argument is a donation candidate when no output aliases it (the module's input/output alias config) and an
output allocation exists that is not itself an argument and holds an array of the **same shape and dtype** (XLA
can alias an input to an output only then: a buffer of equal size but another shape is not a candidate). Each
output is matched at most once, the largest arguments first; the parameters are listed in number order.

``executions``: a program's runs in the window (module executions where the trace has them, else its distinct
run ids on each device, else 1 for a program with any op). A program that never ran in the window (an init or
a conversion compiled earlier) holds no memory there, so the rule on undonated arguments reads only those that ran.
"""
from __future__ import annotations

import numpy as np

from tracekit.grouping import distinct_rows, group_index


def allocation_shapes(buffers: list) -> dict:
    """allocation index -> the shapes (text, dtype included) of the arrays it holds whole (a logical buffer at
    offset 0 of the allocation's own size: the parameter itself, the output array)."""
    size = {}
    for x in buffers:
        size[x["allocation"]] = max(size.get(x["allocation"], 0), int(x["offset_bytes"]) + int(x["size_bytes"]))
    out: dict = {}
    for x in buffers:
        if int(x["offset_bytes"]) == 0 and int(x["size_bytes"]) == size[x["allocation"]] and x["shape"]:
            out.setdefault(x["allocation"], set()).add(str(x["shape"]))
    return out


def undonated(g: list, a: list, aliased: set | None, shapes: dict) -> tuple[int, str]:
    """(bytes, parameter numbers comma-separated in number order) of the arguments in one memory space (``g``)
    that an output of the same shape and dtype could reuse but none aliases (``a``: every allocation of the
    program; ``shapes``: :func:`allocation_shapes`)."""
    c = g[0]["color"]
    outs = [(x["size_bytes"], shapes.get(x["allocation"], set())) for x in a
            if x["kind"] == "output" and not x["is_tuple"] and x["color"] == c and x["size_bytes"] > 0]
    args = [(x["parameter_number"], x["size_bytes"], shapes.get(x["allocation"], set())) for x in g
            if x["kind"] == "argument" and x["size_bytes"] > 0 and not x["is_tuple"]]
    total, params = 0, []
    for p, size, shp in sorted(args, key=lambda t: (-t[1], t[0])):
        if aliased and p in aliased:
            continue
        i = next((i for i, (s, o) in enumerate(outs) if s == size and shp & o), None)
        if i is not None:
            outs.pop(i)
            total += size
            params.append(int(p))
    return total, ",".join(str(p) for p in sorted(params))


def executions(tr) -> dict:
    """(module, program_id) -> its runs in the trace's window (see the module docstring); keyed by name too: hosts
    of one trace may give one program id to different programs."""
    out: dict = {}
    mods = getattr(tr, "modules", None)
    if mods is not None and len(mods) and "program_id" in mods.columns:
        g = mods.assign(module=mods["module"].astype(str)).groupby(["module", "program_id"], observed=True).size()
        out = {(str(m), int(p)): int(v) for (m, p), v in g.items() if v}
    ops = tr.ops
    if not len(ops):
        return out
    # the project's grouping (integer codes, a dense key), not text or a pandas frame of keys: a 1.5 M-row copy of
    # five key columns and its hashing were the analysis' peak memory
    if not {"module", "program_id"} <= set(ops.columns):
        return out
    cols = [c for c in ("module", "program_id", "host", "device", "run_id") if c in ops.columns]
    _, first = group_index(ops, cols)  # the distinct runs, by their first row
    prog, pfirst, programs = distinct_rows(ops, cols[:2])
    per_program = np.bincount(prog[first], minlength=len(pfirst))  # runs of each (module, program_id)
    runs: dict = {}
    for t, n in zip(programs, per_program.tolist()):
        if t[0] is not None and t[1] is not None:
            k = (str(t[0]), int(t[1]))
            runs[k] = runs.get(k, 0) + n
    for k, n in runs.items():  # programs with ops but no module execution events
        out.setdefault(k, n)
    return out
