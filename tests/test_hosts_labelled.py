"""Issue 38: hosts labelled everywhere (two hosts never look like two identical rows in a table), and one warning
when the hosts' profiles do not overlap in time or the hosts ran different programs, alike in process and on the
pod path (--jobs). The oracle for the times is the Task Environment plane read with protobuf alone."""
from __future__ import annotations

import datetime as dt
import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli.app import main
from tracekit.proto import xplane_pb2

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cpu"


def _file(case: str) -> Path:
    return FIX / case / "plugins" / "profile" / "run1" / "cpu.xplane.pb"


def _run(tmp_path, a: str, b: str) -> Path:
    d = tmp_path / f"{a}+{b}"
    d.mkdir()
    shutil.copy(_file(a), d / "hostA.xplane.pb")
    shutil.copy(_file(b), d / "hostB.xplane.pb")
    return d


def _window(case: str) -> tuple[int, int]:
    """(profile_start_time, profile_stop_time) in ns, read with protobuf alone."""
    space = xplane_pb2.XSpace.FromString(_file(case).read_bytes())
    plane = next(p for p in space.planes if p.name == "Task Environment")
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    st = {names[s.metadata_id]: s.uint64_value or s.int64_value for s in plane.stats}
    return st["profile_start_time"], st["profile_stop_time"]


def _utc(ns: int) -> str:
    t = dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}"


def _analyze(path, *extra, width=200, fmt=None):
    args = ["analyze", str(path), *extra] + (["--format", fmt] if fmt else [])
    r = CliRunner().invoke(main, args, env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    return json.loads(r.output[r.output.index("{"):]) if fmt == "json" else r.output


def _table_rows(text: str) -> list[list[str]]:
    """The rows of every table in a text output (the lines after a ─── rule, up to a blank or note line)."""
    tables, cur = [], None
    for line in text.splitlines():
        if line.strip() and set(line.strip()) == {"─"}:
            cur = []
            tables.append(cur)
        elif cur is not None and line.strip() and not line.startswith(("(", " ")):
            cur.append(line)
        else:
            cur = None
    return tables


@pytest.mark.parametrize("jobs", [[], ["--jobs", "2"]])
def test_hosts_not_profiled_together_are_said(tmp_path, jobs):
    d = _run(tmp_path, "train_step", "sharded8")
    (a0, a1), (b0, b1) = _window("train_step"), _window("sharded8")
    assert b0 > a1  # the fixtures were captured one after the other
    rep = _analyze(d, *jobs, fmt="json")
    want = (f"the hosts were not profiled together: hostB's profile starts at {_utc(b0)} UTC, "
            f"{(b0 - a1) / 1e9:.3g} s after hostA's stops ({_utc(a1)} UTC)")
    assert sum(w.startswith(want) for w in rep["warnings"]) == 1, rep["warnings"]
    assert not any("did not run the same programs" in w for w in rep["warnings"])  # both ran jit_train_step


@pytest.mark.parametrize("jobs", [[], ["--jobs", "2"]])
def test_hosts_that_ran_different_programs_are_said(tmp_path, jobs):
    d = _run(tmp_path, "train_step", "big_matmul")
    rep = _analyze(d, *jobs, fmt="json")
    assert ("the 2 hosts did not run the same programs: jit_matmul only on hostB; jit_train_step only on hostA; "
            "rows of programs with the same name on different hosts are told apart by their host") in rep["warnings"]


def test_one_capture_on_two_hosts_says_nothing(tmp_path):
    d = _run(tmp_path, "sharded8", "sharded8")
    for jobs in ([], ["--jobs", "2"]):
        rep = _analyze(d, *jobs, fmt="json")
        assert not any("hosts" in w and ("profiled together" in w or "same programs" in w) for w in rep["warnings"])
    rows = [r for t in _table_rows(_analyze(d)) for r in t if "/CPU:" in r]
    assert {r.split()[0] for r in rows} == {f"host{h}/CPU:{i}" for h in "AB" for i in range(8)}


def test_folded_device_rows_keep_their_hosts():
    from tracekit.report.render.text import fold_devices
    rows = [[f"host{h}/CPU:{i}", "3", "1 ms"] for h in "AB" for i in range(8)]
    assert fold_devices(rows) == [["hostA/CPU:0–7, hostB/CPU:0–7 (16 devices)", "3", "1 ms"]]
    assert fold_devices([[f"CPU:{i}", "x"] for i in (0, 1, 2, 3)]) == [["CPU:0–3 (4 devices)", "x"]]
    assert fold_devices([[f"GPU:{i}", "x"] for i in (1, 4, 6)]) == [["GPU:1,4,6 (3 devices)", "x"]]


@pytest.mark.parametrize("width", [80, 200])
def test_no_two_rows_of_a_table_look_alike(tmp_path, width):
    """Two hosts with same-named programs (jit_train_step on both): every table row of analyze, ops and memory
    is told apart (device rows as host/device, op and program rows by their host)."""
    d = _run(tmp_path, "train_step", "sharded8")
    outs = {"analyze": _analyze(d, width=width)}
    for cmd in ("ops", "memory"):
        r = CliRunner().invoke(main, [cmd, str(d)], env={"COLUMNS": str(width)})
        assert r.exit_code == 0, r.output
        outs[cmd] = r.output
    for cmd, text in outs.items():
        tables = _table_rows(text)
        assert tables, cmd
        for rows in tables:
            assert len(rows) == len(set(rows)), (cmd, rows)
    steps = next(t for t in _table_rows(outs["analyze"]) if any("CPU:" in r for r in t))
    assert any(r.startswith("hostA/CPU:0 ") for r in steps) and any(r.startswith("hostB/CPU:0") for r in steps)
    assert re.search(r"device peak: .* on host[AB]/CPU:\d", " ".join(outs["memory"].split()))


def test_op_rows_carry_their_hosts_alike_in_process_and_on_the_pod_path(tmp_path):
    d = _run(tmp_path, "train_step", "sharded8")
    a, b = _analyze(d, fmt="json"), _analyze(d, "--jobs", "2", fmt="json")
    key = lambda r: (r["module"], r["program_id"], r["op"])  # noqa: E731
    assert {key(r): r["hosts"] for r in a["top_ops"]} == {key(r): r["hosts"] for r in b["top_ops"]}
    assert {r["hosts"] for r in a["top_ops"]} == {"hostA", "hostB"}
    progs = {(p["module"], p["program_id"]): p["hosts"] for p in a["memory"]["programs"] if p["executions"]}
    assert sorted(progs.values()) == ["hostA", "hostB"]
    assert progs == {(p["module"], p["program_id"]): p["hosts"] for p in b["memory"]["programs"] if p["executions"]}


def _single_ops(case: str) -> set:
    """(module, program id, op) of the collective ops of one fixture analyzed alone (one host: no labels)."""
    rep = _analyze(_file(case), fmt="json")
    return {(r["module"], r["program_id"], r["op"]) for r in rep["interconnect"]["collectives"]}


def test_collective_rows_carry_their_hosts_alike_in_process_and_on_the_pod_path(tmp_path):
    """Each collective op row names the hosts it ran on: the host whose file holds the op (the fixtures analyzed
    alone are the oracle), both hosts where both files hold it; --jobs 2 gives the same."""
    d = _run(tmp_path, "sharded8", "allreduce_exposed")
    a, b = _analyze(d, fmt="json"), _analyze(d, "--jobs", "2", fmt="json")
    key = lambda r: (r["module"], r["program_id"], r["op"])  # noqa: E731
    got = {key(r): r["hosts"] for r in a["interconnect"]["collectives"]}
    assert got == {key(r): r["hosts"] for r in b["interconnect"]["collectives"]}
    only_a, only_b = _single_ops("sharded8"), _single_ops("allreduce_exposed")
    assert got == {k: ",".join(h for h, ops in (("hostA", only_a), ("hostB", only_b)) if k in ops)
                   for k in only_a | only_b}
    both = _run(tmp_path, "async_dp8", "blocking_dp8")  # the same program id and op name on both hosts
    rows = _analyze(both, fmt="json")["interconnect"]["collectives"]
    assert [r["hosts"] for r in rows] == ["hostA,hostB"]


def test_same_named_collectives_of_two_hosts_are_told_apart():
    """Rows of the same op name in same-named programs of different hosts (each process numbers its programs)
    read `op [host]` in every format, as op rows do; one host's rows stay as they are."""
    from tracekit.report.render import collectives, markdown
    row = {"module": "jit_step", "op": "all-reduce.11", "kind": "all-reduce", "executions": 4, "time_ps": 1e6}
    ic = {"collectives": [{**row, "program_id": 12, "hosts": "hostA"}, {**row, "program_id": 7, "hosts": "hostB"}]}
    assert [r[0] for r in collectives.rows(ic, hosts=2)] == ["all-reduce.11 [hostA]", "all-reduce.11 [hostB]"]
    assert [r[0] for r in collectives.rows({"collectives": ic["collectives"][:1]}, hosts=1)] == ["all-reduce.11"]
    d = {"interconnect": ic, "summary": {"hosts": 2}}
    assert "all-reduce.11 \\[hostB\\]" in "\n".join(collectives.markdown_lines(d, markdown.esc, markdown.table))
    assert "all-reduce.11 [hostA]" in collectives.html_section(d)


@pytest.mark.parametrize("width", [80, 200])
def test_collectives_command_shows_the_hosts_of_two_hosts(tmp_path, width):
    d = _run(tmp_path, "sharded8", "allreduce_exposed")
    r = CliRunner().invoke(main, ["collectives", str(d)], env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    assert all(len(line) <= width for line in r.output.splitlines())
    rows = [row for t in _table_rows(r.output) for row in t]
    assert rows and len(rows) == len(set(rows))
    if width == 200:  # (at 80 the hosts column is among those left out, with a note)
        assert all(re.search(r"\bhost[AB]\b", row) for row in rows), rows
