"""End to end: the CPU fixtures with a known pathology make the matching rule fire with the right evidence; the
savings add up; the v6e overlap classes agree with xprof where both use the same windows; CLI exit codes."""
import json
import subprocess
import sys

import pytest

import tracekit
from conftest import CPU_CASES, cpu_fixture, shared_trace
from tracekit import pipeline
from tracekit.analysis import timeline


def _findings(case):
    rep = pipeline.analyze(cpu_fixture(case))
    return rep, {f["name"]: f for f in rep.findings}


def test_exposed_allreduce_fires_unoverlapped_collective():
    rep, f = _findings("allreduce_exposed")
    fi = f["unoverlapped-collective"]
    ev = fi["evidence"]
    assert all(e["opcode"] == "all-reduce" for e in ev)
    assert len({e["device"] for e in ev}) >= 4
    assert fi["evidence_count"] == 32  # 8 devices x 4 steps
    assert all(e["overlap_ratio"] <= 0.1 for e in ev)


def test_matvec_fires_memory_bound_matmul():
    rep, f = _findings("matvec_b1")
    fi = f["memory-bound-matmul"]
    assert {e["op"] for e in fi["evidence"]} == {"dot.4", "dot.5", "dot.6", "dot.7"}
    assert fi["savings_ps"] > 0


def test_sleepy_steps_fire_device_idle_gaps():
    rep, f = _findings("sleepy_steps")
    fi = f["device-idle-gaps"]
    longest = max(e["duration_ps"] for e in fi["evidence"])
    assert 15e9 < longest < 60e9  # the 20 ms host sleep between steps
    assert fi["share"] > 0.5


def test_healthy_matmul_is_not_memory_bound():
    rep, f = _findings("big_matmul")
    assert "memory-bound-matmul" not in f
    top = rep.data["top_ops"][0]
    assert top["bound_by"] == "compute"


@pytest.mark.parametrize("case", CPU_CASES)
def test_savings_add_up(case):
    rep = pipeline.analyze(cpu_fixture(case))
    profiled = rep.data["summary"]["profiled_ps"]
    assert sum(f["claimed_ps"] for f in rep.findings) <= profiled
    for f in rep.findings:
        assert 0 <= f["claimed_ps"] <= f["savings_ps"] <= profiled
        # no evidence row claims more than its own time
        for e in f["evidence"]:
            own = max(e.get(k) or 0 for k in ("duration_ps", "exposed_ps", "total_ps", "step_ps", "span_ps",
                                               "busy_ps", "headroom_ps"))
            assert e["savings_ps"] <= own + 1


def test_v6e_overlap_agrees_with_xprof_on_shared_windows():
    pytest.importorskip("xprof")
    from tracekit.run import xprof
    path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    ours = timeline.async_overlap(tracekit.load(path).ops)
    ref = xprof.async_overlap(path)
    # TPU:0 is where both take the windows from the trace's "Async XLA Ops" line
    o0 = ours[ours["device"] == "TPU:0"]
    r0 = ref[ref["device"] == "/device:TPU:0"]
    m = o0.merge(r0, left_on=["op", "start_ps"], right_on=["op_name", "start_ps"], suffixes=("", "_x"))
    assert len(m) >= 0.99 * len(r0)
    assert (m["span_ps"] == m["span_ps_x"]).all()
    assert (m["overlap_class"] == m["class"]).mean() >= 0.98


def test_cli_exit_codes(tmp_path):
    exe = [sys.executable, "-m", "tracekit.cli"]
    path = str(cpu_fixture("matvec_b1"))
    ok = subprocess.run(exe + ["analyze", path], capture_output=True, text=True)
    assert ok.returncode == 0 and "memory-bound-matmul" in ok.stdout
    gate = subprocess.run(exe + ["analyze", path, "--fail-on", "warning", "-o", str(tmp_path / "r.json")],
                          capture_output=True, text=True)
    assert gate.returncode == 1
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["schema"] == "tracekit.report/1" and data["gate"]["failed"] is True
    assert subprocess.run(exe + ["analyze", path, "--fail-on", "error"], capture_output=True).returncode == 0
    sel = subprocess.run(exe + ["analyze", path, "--select", "device-idle-gaps", "--format", "json"],
                         capture_output=True, text=True)
    assert {f["name"] for f in json.loads(sel.stdout)["findings"]} <= {"device-idle-gaps"}
    bad = subprocess.run(exe + ["analyze", path, "--param", "nosuchrule.x=1"], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
