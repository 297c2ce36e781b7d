"""One HLO instruction as users read it (``tracekit hlo PATH OP``): its text, its fusion body (the instructions of
the computation it calls), the producer of each operand, and its JAX name stack (``op_name``) and source line,
from the decoded HLO modules of the trace.

``short_op_name`` is the shortened name stack the tables show: the innermost primitive kept, ``(bwd)`` marked when
the op is under ``transpose(jvp(...))`` (JAX's backward pass)."""
from __future__ import annotations

import difflib

from tracekit.errors import TraceError
from tracekit.ingest import hloshape
from tracekit.ingest.hlo import source_location
from tracekit.proto import hlo_pb2


def is_backward(op_name: str) -> bool:
    """Whether a JAX name stack is the backward pass: a ``transpose(`` frame (the transpose of a ``jvp``)."""
    return "transpose(" in (op_name or "")


def short_op_name(op_name: str, width: int = 40) -> str:
    """The name stack cut to ``width`` characters from the left, the innermost primitive kept; ``(bwd)`` first
    for backward ops. ``""`` for none."""
    if not op_name:
        return ""
    mark = "(bwd) " if is_backward(op_name) else ""
    op_name = op_name.split(";")[0]  # a fusion names each fused op: the first stands for it
    head, sep, rest = op_name.partition("/")
    if sep and head.startswith(("jit(", "pjit(")):
        op_name = rest  # the jit frame is the module's name already
    room = max(width - len(mark), 8)
    tail = op_name if len(op_name) <= room else "…" + op_name[-(room - 1):]
    return mark + tail


def instruction_text(ins: hlo_pb2.HloInstructionProto, names: dict[int, str], shapes: dict[int, str],
                     comps: dict[int, str]) -> str:
    """``%name = shape opcode(shape %operand, ...), calls=%comp, custom_call_target="..."`` (an outline of XLA's
    printer: the fields a user reads, not every attribute)."""
    args = ", ".join(f"{shapes.get(i, '?')} %{names.get(i, i)}" for i in ins.operand_ids)
    extra = [f"calls=%{comps.get(c, c)}" for c in ins.called_computation_ids]
    if ins.fusion_kind:
        extra.insert(0, f"kind={ins.fusion_kind}")
    if ins.custom_call_target:
        extra.append(f'custom_call_target="{ins.custom_call_target}"')
    return f"%{ins.name} = {hloshape.text(ins.shape)} {ins.opcode}({args})" + "".join(", " + e for e in extra)


def _candidates(modules: list, op: str, module: str | None) -> list:
    return [(m, c, i) for m in modules if module is None or m.name == module
            for c in m.proto.computations for i in c.instructions if i.name == op]


def find(modules: list, op: str, module: str | None = None, where: str | None = None):
    """(module, computation, instruction) of the op named ``op`` (in ``module`` when given); TraceError naming
    close matches when there is none, or the modules when the name is in several (``--module`` picks one)."""
    if module is not None and not any(m.name == module for m in modules):
        close = difflib.get_close_matches(module, sorted({m.name for m in modules}), n=5)
        raise TraceError(f"no module {module!r} in the trace's HLO", where,
                         f"close: {', '.join(close)}" if close else "see `tracekit ops PATH` for the modules")
    hits = _candidates(modules, op, module)
    if not hits:
        if not modules:
            raise TraceError("the trace carries no HLO (no `Hlo Proto` in its /host:metadata plane)", where,
                             "capture an .xplane.pb trace with the profiler to see the HLO")
        names = sorted({i.name for m in modules if module is None or m.name == module
                        for c in m.proto.computations for i in c.instructions})
        close = difflib.get_close_matches(op, names, n=5, cutoff=0.5)
        raise TraceError(f"no op {op!r} in the trace's HLO", where,
                         f"close matches: {', '.join(close)}" if close else "see `tracekit ops PATH` for the op names")
    mods = sorted({m.name for m, _, _ in hits})
    if len(mods) > 1:
        raise TraceError(f"op {op!r} is in {len(mods)} modules ({', '.join(mods)})", where,
                         "pick one with --module M")
    return hits[0]


def view(modules: list, op: str, module: str | None = None, where: str | None = None) -> dict:
    """The ``tracekit hlo`` record: module, computation, text, op_name, source, backward, body (instruction texts of
    each called computation), producers (one line per operand: its text and its op_name)."""
    m, comp, ins = find(modules, op, module, where)
    allins = [i for c in m.proto.computations for i in c.instructions]
    names = {i.id: i.name for i in allins}
    shapes = {i.id: hloshape.text(i.shape) for i in allins}
    comps = {c.id: c.name for c in m.proto.computations}
    by_id = {i.id: i for i in allins}
    text = lambda i: instruction_text(i, names, shapes, comps)  # noqa: E731
    src_file, src_line = source_location(m.proto, ins.metadata)
    body = {}
    for cid in ins.called_computation_ids:
        called = next((c for c in m.proto.computations if c.id == cid), None)
        if called is not None:
            body[called.name] = [text(i) for i in called.instructions]
    producers = [{"operand": names.get(o, str(o)), "text": text(by_id[o]) if o in by_id else "",
                  "op_name": by_id[o].metadata.op_name if o in by_id else ""} for o in ins.operand_ids]
    return {"module": m.name, "computation": comp.name, "op": ins.name, "opcode": ins.opcode, "text": text(ins),
            "op_name": ins.metadata.op_name, "backward": is_backward(ins.metadata.op_name),
            "source": f"{src_file}:{src_line}" if src_file else "", "body": body, "producers": producers}


def view_text(v: dict) -> str:
    lines = [f"{v['module']} / {v['computation']}", v["text"],
             f"op_name: {v['op_name'] or '(none)'}" + ("  [backward]" if v["backward"] else ""),
             f"source:  {v['source'] or '(none)'}"]
    for name, instrs in v["body"].items():
        lines.append(f"body %{name} ({len(instrs)} instructions):")
        lines += ["  " + t for t in instrs]
    if v["producers"]:
        lines.append("operands' producers:")
        lines += [f"  {p['text'] or '%' + p['operand']}" + (f"  # {p['op_name']}" if p["op_name"] else "")
                  for p in v["producers"]]
    return "\n".join(lines) + "\n"
