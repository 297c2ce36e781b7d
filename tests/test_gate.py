"""The CI gate (`tracekit analyze --fail-on`) cannot pass by mistake and never fails silently: a typo in --select or
--ignore is refused with the known ids, a trace without device work trips every --fail-on, a failing gate names the
findings that tripped it on stderr (also when the reports go to files), and -q prints nothing but errors.

Each case runs the command line in a child process, as CI does."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, cpu_fixture
from tracekit.proto import xplane_pb2

EXE = [sys.executable, "-m", "tracekit.cli"]


def cli(*args):
    return subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, timeout=300)


def builtin_ids() -> list[str]:
    """The built-in rule ids, read from the rule files' names (TK001-name.yaml), not from tracekit."""
    return sorted(p.name.split("-")[0] for p in (ROOT / "rules").glob("TK*.yaml"))


@pytest.mark.parametrize("option,typo", [("--select", "TK0001"), ("--ignore", "TK999")])
def test_unknown_rule_ids_are_refused_with_the_known_ones(option, typo):
    """A typo used to run no rules (or all of them), print "gate passed" and exit 0."""
    p = cli("analyze", cpu_fixture("matvec_b1"), option, typo, "--fail-on", "warning")
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error:"), p.stderr
    assert option in lines[0] and repr(typo) in lines[0], lines[0]
    ids = builtin_ids()
    assert len(ids) >= 10 and all(i in lines[0] for i in ids), lines[0]
    assert not p.stdout


def test_known_selections_still_work_and_a_passing_gate_is_silent():
    """Ids in any case, names and groups are not typos; a gate that passes prints nothing on stderr."""
    p = cli("analyze", cpu_fixture("matvec_b1"), "--select", "tk002", "--select", "device-idle-gaps", "--format",
            "json", "--fail-on", "error")
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr
    ids = {f["rule_id"] for f in json.loads(p.stdout)["findings"]}
    assert ids == {"TK002", "TK003"}, ids


@pytest.fixture(scope="module")
def no_device_work(tmp_path_factory):
    """A real capture whose window held no device work: the train_step trace with only its Python thread's line
    (the XLA executor threads' lines, where the ops are, removed)."""
    src = cpu_fixture("train_step") / "plugins/profile/run1/cpu.xplane.pb"
    sp = xplane_pb2.XSpace.FromString(src.read_bytes())
    kept = 0
    for plane in sp.planes:
        lines = [ln for ln in plane.lines if ln.name == "python"]
        kept += sum(len(ln.events) for ln in lines)
        del plane.lines[:]
        plane.lines.extend(lines)
    assert kept > 0  # host events remain: the capture is not empty, it just ran nothing on a device
    f = tmp_path_factory.mktemp("empty") / "idle.xplane.pb"
    f.write_bytes(sp.SerializeToString())
    return f


def test_a_trace_without_device_ops_trips_every_gate(no_device_work, tmp_path):
    """It used to pass --fail-on info: nothing analyzed, nothing found, "gate passed". Now an error-severity
    finding (so --fail-on error trips, and with it every lower level) and a clear message in the report."""
    out, txt = tmp_path / "r.json", tmp_path / "r.txt"
    p = cli("analyze", no_device_work, "--fail-on", "error", "-o", out, "-o", txt)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "no-device-ops" in p.stderr and "no device op executions" in p.stderr, p.stderr
    text = txt.read_text()
    assert "no device op executions" in text and "nothing was analyzed" in text, text[-2000:]
    data = json.loads(out.read_text())
    assert data["gate"]["failed"] is True
    hit = [f for f in data["findings"] if f["name"] == "no-device-ops"]
    assert len(hit) == 1 and hit[0]["severity"] == "error", data["findings"]


def test_a_failing_gate_names_what_tripped_it_also_with_output_files(tmp_path):
    """`--fail-on warning -o r.md` used to exit 1 and print nothing: the CI log never said which rule failed."""
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    p = cli("analyze", cpu_fixture("matvec_b1"), "--fail-on", "warning", "-o", md, "-o", js)
    assert p.returncode == 1, p.stderr
    assert not p.stdout  # the reports went to the files
    tripped = [f for f in json.loads(js.read_text())["findings"] if f["severity"] in ("warning", "error")]
    assert tripped, "the fixture's memory-bound matmuls should reach warning"
    lines = p.stderr.strip().splitlines()
    assert lines[0] == f"tracekit: gate failed: {len(tripped)} finding(s) reached --fail-on warning", lines
    assert len(lines) == 1 + len(tripped), lines
    for f in tripped:  # one line each, with its id, name and severity
        assert sum(f"[{f['severity']}] {f['rule_id']} {f['name']}:" in ln for ln in lines[1:]) == 1, (f, lines)
    assert md.read_text().startswith("#")


def test_quiet_prints_nothing_but_keeps_the_exit_status_and_the_files(tmp_path):
    out = tmp_path / "r.json"
    p = cli("analyze", cpu_fixture("matvec_b1"), "--fail-on", "warning", "-q", "-o", out)
    assert p.returncode == 1 and p.stdout == "" and p.stderr == "", (p.stdout, p.stderr)
    assert json.loads(out.read_text())["gate"]["failed"] is True
    p = cli("analyze", cpu_fixture("matvec_b1"), "--quiet", "--select", "TK0001")  # errors still print
    assert p.returncode == 2 and "matches no rule" in p.stderr
