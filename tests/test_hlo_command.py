"""`tracekit hlo PATH OP` against the trace's HLO proto read directly (an oracle independent of tracekit.ingest)."""
from __future__ import annotations

import glob
import os

from click.testing import CliRunner

from tracekit.cli.app import main
from tracekit.proto import hlo_pb2, xplane_pb2

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "cpu")


def _modules(name):
    path = glob.glob(os.path.join(FIX, name, "**", "*.xplane.pb"), recursive=True)[0]
    space = xplane_pb2.XSpace.FromString(open(path, "rb").read())
    out = []
    for plane in space.planes:
        if plane.name != "/host:metadata":
            continue
        ids = {k for k, v in plane.stat_metadata.items() if v.name == "Hlo Proto"}
        for md in plane.event_metadata.values():
            out += [hlo_pb2.HloProto.FromString(s.bytes_value).hlo_module for s in md.stats if s.metadata_id in ids]
    return out


def _fusions(name):
    for m in _modules(name):
        comps = {c.id: c for c in m.computations}
        for c in m.computations:
            for i in c.instructions:
                if i.opcode == "fusion" and i.metadata.op_name:
                    yield m, i, comps[i.called_computation_ids[0]]


def _run(*args):
    return CliRunner().invoke(main, ["hlo", *args])


def test_fusion_body_op_name_and_source_from_the_proto():
    m, ins, body = next(_fusions("train_step"))
    r = _run(os.path.join(FIX, "train_step"), ins.name, "--module", m.name)
    assert r.exit_code == 0, r.output
    assert f"op_name: {ins.metadata.op_name}" in r.output
    assert f"%{ins.name} = " in r.output
    lines = r.output.splitlines()
    head = next(k for k, l in enumerate(lines) if l.startswith(f"body %{body.name} "))
    got = [l.strip().split(" = ")[0] for l in lines[head + 1:head + 1 + len(body.instructions)]]
    assert got == ["%" + i.name for i in body.instructions]


def test_backward_op_is_marked_and_forward_is_not():
    seen = set()
    for m, ins, _ in _fusions("train_step"):
        bwd = "transpose(jvp" in ins.metadata.op_name
        if bwd in seen:
            continue
        seen.add(bwd)
        r = _run(os.path.join(FIX, "train_step"), ins.name, "--module", m.name)
        assert r.exit_code == 0, r.output
        assert ("[backward]" in r.output) == bwd
    assert seen == {True, False}


def test_producers_one_line_per_operand():
    m, ins, _ = next(_fusions("attention"))
    names = {i.id: i.name for c in m.computations for i in c.instructions}
    r = _run(os.path.join(FIX, "attention"), ins.name, "--module", m.name)
    assert r.exit_code == 0, r.output
    tail = r.output.split("operands' producers:\n")[1].splitlines()
    assert [l.split(" = ")[0].strip() for l in tail] == ["%" + names[o] for o in ins.operand_ids]


def test_unknown_op_is_one_line_exit_2_with_close_matches():
    m, ins, _ = next(_fusions("train_step"))
    r = _run(os.path.join(FIX, "train_step"), ins.name + "9")
    assert r.exit_code == 2
    assert len(r.output.strip().splitlines()) == 1
    assert "no op" in r.output and ins.name in r.output and "Traceback" not in r.output


def test_ops_op_name_column_equals_the_proto_metadata():
    import json
    want = {(m.name, i.name): i.metadata.op_name for m in _modules("train_step")
            for c in m.computations for i in c.instructions}
    r = CliRunner().invoke(main, ["ops", os.path.join(FIX, "train_step"), "--format", "json", "--limit", "0"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    named = [row for row in rows if want.get((row["module"], row["op"]))]
    assert named and all(row["op_name"] == want[(row["module"], row["op"])] for row in named)
    # (wide enough to keep the op_name column: it is the first one left out on a narrow terminal)
    table = CliRunner().invoke(main, ["ops", os.path.join(FIX, "train_step"), "--limit", "0"],
                               env={"COLUMNS": "250"}).output
    bwd = [row["op"] for row in named if "transpose(jvp" in row["op_name"]]
    fwd = [row["op"] for row in named if "transpose(" not in row["op_name"]]
    assert bwd and fwd
    line = {l.split()[1]: l for l in table.splitlines()[2:] if len(l.split()) > 1}
    assert all("(bwd)" in line[o] for o in bwd) and not any("(bwd)" in line[o] for o in fwd)


def test_report_top_ops_carry_op_name_and_source():
    import json
    want = {(m.name, i.name): i.metadata for m in _modules("attention") for c in m.computations for i in c.instructions}
    r = CliRunner().invoke(main, ["analyze", os.path.join(FIX, "attention"), "--format", "json"])
    assert r.exit_code == 0, r.output
    top = json.loads(r.output[r.output.index("{"):])["top_ops"]
    named = [t for t in top if (t["module"], t["op"]) in want and want[(t["module"], t["op"])].op_name]
    assert named
    for t in named:
        md = want[(t["module"], t["op"])]
        assert t["op_name"] == md.op_name
        if md.source_file:
            # the JSON keeps the recorded path whole; the shown form is its tail (project or site-packages)
            assert t["source_file"] == md.source_file
            assert t["source"].endswith(f"/{os.path.basename(md.source_file)}:{md.source_line}")
            assert md.source_file.endswith("/" + t["source"].rsplit(":", 1)[0])


def test_text_report_prefixes_the_module_only_for_colliding_names():
    from tracekit.report.render import text
    base = {"category": "custom-call", "occurrences": 1, "total_ps": 10**6, "busy_share": 0.1}
    ops = [dict(base, module="jit_a", op="custom-call.1"), dict(base, module="jit_b", op="custom-call.1"),
           dict(base, module="jit_a", op="fusion.2")]
    o = text._Out(200, False)
    text._ops(o, {"top_ops": ops}, {"op_executions": 3}, 12)
    out = o.buf.getvalue()
    assert "jit_a:custom-call.1" in out and "jit_b:custom-call.1" in out
    assert "jit_a:fusion.2" not in out and "fusion.2" in out
