"""A CPU's FLOP/s ceiling: no peak is raised past what its cores can do, and an op measured faster than that is
named as mistimed. The oracle is the formula written out (cores x FLOP/cycle of the widest unit x clock) and, for
the fixture, an experiment: the sharded8 dot (f32 [32,512]^T x [32,512], 16.8 MFLOP) run back to back in a loop
here takes well over 100 us, while its trace events last 26-80 us (up to 649 GFLOP/s on 2 cores at 2.6 GHz)."""
from __future__ import annotations

import json
import math

import pytest

import tracekit
from conftest import FIXTURES, cpu_fixture
from tracekit.model import cpu_limits, machine, roofline

AVX512 = ["avx", "avx2", "avx512_bf16", "avx512_vnni", "avx512f", "avx_vnni", "fma", "sse2"]


def test_ceiling_is_cores_times_flop_per_cycle_times_clock():
    clock = {"max_hz": None, "reported_hz": 2.6e9, "arch": "x86_64"}
    c = cpu_limits.ceilings(2, AVX512, clock)
    # 2 cores x (2 FMA pipes x 16 f32 lanes x 2 FLOP) x 2.6 GHz x 1.5 boost allowance
    assert c["peak_flops_per_s.f32"]["value"] == pytest.approx(2 * 64 * 2.6e9 * 1.5)
    assert c["peak_flops_per_s.f64"]["value"] == pytest.approx(2 * 32 * 2.6e9 * 1.5)
    assert c["peak_flops_per_s.bf16"]["value"] == pytest.approx(2 * 128 * 2.6e9 * 1.5)  # AVX512-BF16
    assert "2.60 GHz reported x 1.5" in c["peak_flops_per_s.f32"]["source"]
    # the true maximum clock, when known, takes no allowance
    m = cpu_limits.ceilings(4, ["avx", "avx2", "fma", "sse2"], {"max_hz": 3.5e9, "reported_hz": 2.0e9})
    assert m["peak_flops_per_s.f32"]["value"] == pytest.approx(4 * 32 * 3.5e9)
    assert m["peak_flops_per_s.bf16"]["value"] == pytest.approx(4 * 32 * 3.5e9)  # no bf16 unit: as f32
    assert cpu_limits.ceilings(1, ["sse2"], {"max_hz": 1e9})["peak_flops_per_s.f32"]["value"] == pytest.approx(8e9)


def test_an_unrecorded_machine_gets_the_most_generous_ceiling():
    c = cpu_limits.ceilings(2, None, None)
    assert c["peak_flops_per_s.f32"]["value"] == pytest.approx(2 * 64 * 6e9)
    assert c["peak_flops_per_s.bf16"]["value"] == pytest.approx(2 * 2048 * 6e9)  # AMX
    assert cpu_limits.ceilings(None, AVX512, None) == {}
    assert cpu_limits.limit({}, "peak_flops_per_s.f32") == math.inf
    # a dtype without its own ceiling takes the largest the chip has (never below the truth)
    assert cpu_limits.limit(c, "peak_flops_per_s.fp8") == c["peak_flops_per_s.int8"]["value"]


def test_the_machine_record_keeps_flags_and_clock():
    rec = machine.describe(calibrate_s=None)
    assert "clock" in rec and "cpu_flags" in rec
    if rec["cpu_flags"] is not None:
        assert set(rec["cpu_flags"]) <= set(cpu_limits.ISA_FLAGS)
    assert json.loads(json.dumps(rec)) == rec


@pytest.fixture(scope="module")
def sharded8():
    tr = tracekit.load(str(cpu_fixture("sharded8")))
    return tr, roofline.device_chips(tr), roofline.join(tr)


def test_no_cpu_fixture_peak_is_raised_past_its_ceiling():
    seen = 0
    for case in sorted(p.name for p in (FIXTURES / "cpu").iterdir() if p.is_dir()):
        tr = tracekit.load(str(cpu_fixture(case)))
        for ch in {id(c): c for c in roofline.device_chips(tr).values()}.values():
            assert ch.limits, (case, "the fixture's machine record gives a ceiling")
            for key, v in ch.peak_flops_per_s.items():
                assert v <= cpu_limits.limit(ch.limits, f"peak_flops_per_s.{key}") * (1 + 1e-9), (case, key, v)
                seen += 1
    assert seen


def test_sharded8_dot_is_named_mistimed_and_raises_nothing(sharded8):
    tr, dchips, ops = sharded8
    ch = next(iter(dchips.values()))
    ceiling = ch.limits["peak_flops_per_s.f32"]["value"]
    r = ch.raised["peak_flops_per_s.f32"]
    assert r["op"] != "dot" and r["value"] <= ceiling and r["left_out"] >= 1
    d = ops[(ops["op"].astype(str) == "dot") & (ops["self_ps"] > 0)]
    fastest = float((d["flops"] / (d["self_ps"] / 1e12)).max())
    assert fastest > ceiling  # the trace's own claim, beyond the silicon
    from tracekit.model import peaks
    warns = [w for w in peaks.model_warnings(ops, dchips, limit=None) if w["op"] == "dot"]
    assert warns and "physical ceiling" in warns[0]["message"]
    assert "lower bound" in warns[0]["message"]


def test_a_calibration_on_a_busy_machine_says_its_rates_are_low(tmp_path):
    """The oracle is real contention: two busy loops on this machine's cores while the calibration runs make its
    threads wait for a core (Linux schedstat), and the chip built from that record says its rates are low."""
    import subprocess
    import sys

    from tracekit.model import calibrate as cal

    import glob
    if not glob.glob("/proc/self/task/*/schedstat"):
        pytest.skip("no /proc/self/task/*/schedstat here")
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(max(2, _cores()))]
    try:
        busy = cal.measure(0.3)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert busy["cpu_wait_share"] > cpu_limits.BUSY_WAIT_SHARE
    chip = cal.chip_from_record(busy, "busy.json")
    assert "other work was running" in chip.sources["peak_flops_per_s.f32"]
    quiet = dict(busy, cpu_wait_share=0.01)
    assert "other work" not in cal.chip_from_record(quiet, "quiet.json").sources["peak_flops_per_s.f32"]
    old = {k: v for k, v in busy.items() if k != "cpu_wait_share"}  # a record from before the share was kept
    assert "other work" not in cal.chip_from_record(old, "old.json").sources["peak_flops_per_s.f32"]


def _cores() -> int:
    import os
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def test_record_run_reuses_this_machines_stored_calibration(tmp_path, monkeypatch):
    """A `tracekit calibrate` result of this machine is reused (nothing measured after a capture); one from another
    machine, or measured under load, is not."""
    import os
    import platform

    from tracekit.model import calibrate as cal

    home = tmp_path / "home"
    monkeypatch.setenv("TRACEKIT_HOME", str(home))
    stored = {"version": cal.FORMAT_VERSION, "measured_at": "2026-12-01T00:00:00Z",
              "processor": cal.processor_name(), "cpu_count": os.cpu_count() or 1, "platform": platform.platform(),
              "peak_flops_per_s": {"f32": 1.23e11}, "hbm_bw_bytes_per_s": 4.5e10, "cpu_wait_share": 0.01}
    cal.write_json_atomic(cal.calibration_path(), stored)

    def run_dir(name):
        d = tmp_path / name
        d.mkdir()
        (d / "h.xplane.pb").write_bytes(b"")
        machine.record_run(d, calibrate_s=0)
        return machine.read(d / "h.xplane.pb")["calibration"]

    got = run_dir("same")
    assert got["peak_flops_per_s"] == {"f32": 1.23e11} and got["stored_at"] == str(cal.calibration_path())
    cal.write_json_atomic(cal.calibration_path(), dict(stored, processor="another CPU"))
    assert run_dir("other") is None  # (calibrate_s=0: nothing measured either)
    cal.write_json_atomic(cal.calibration_path(), dict(stored, cpu_wait_share=0.6))
    assert run_dir("busy") is None


def test_calibrate_command_warns_when_measured_under_load(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from tracekit.cli.app import main
    from tracekit.model import calibrate as cal

    rec = {"version": cal.FORMAT_VERSION, "measured_at": "2026-12-02T00:00:00Z", "processor": "x", "cpu_count": 2,
           "platform": "p", "peak_flops_per_s": {"f32": 5e10}, "hbm_bw_bytes_per_s": 1e10}
    for share, warned in ((0.45, True), (0.05, False)):
        monkeypatch.setattr(cal, "measure", lambda seconds=5.0, share=share: dict(rec, cpu_wait_share=share))
        r = CliRunner().invoke(main, ["calibrate", "--path", str(tmp_path / f"{share}.json")])
        assert r.exit_code == 0, r.output
        # (the line is wrapped at the terminal's width: compared with its words joined)
        assert ("other work was running" in " ".join(r.output.split())) is warned, r.output


def test_info_shows_the_recording_machine_and_its_ceiling():
    from click.testing import CliRunner

    from tracekit.cli.app import main

    path = str(cpu_fixture("sharded8"))
    r = CliRunner().invoke(main, ["info", path])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("recording machine"))
    cont = [ln for ln in lines[i + 1:]]
    cont = cont[:next((k for k, ln in enumerate(cont) if not ln.startswith("  ")), len(cont))]
    line = " ".join([lines[i]] + [ln.strip() for ln in cont])  # the paragraph, wrapped to the width
    # 2 cores x 64 f32 FLOP/cycle x 2.596 GHz reported x 1.5 = 498 GFLOP/s; the calibration as recorded
    assert "AMD EPYC (2 cores)" in line and "f32 48.8 GFLOP/s" in line and "ceiling f32 498 GFLOP/s" in line
    j = json.loads(CliRunner().invoke(main, ["info", path, "--format", "json"]).output)
    (m,) = j["machines"]
    assert m["ceilings"]["f32"] == pytest.approx(2 * 64 * 2596098000.0 * 1.5)


@pytest.mark.parametrize("odd", [{"cpu_flags": "avx512f", "clock": "fast"},
                                 {"cpu_flags": [1, None], "clock": {"max_hz": "x", "reported_hz": -5}},
                                 {"cpu_count": "abc"}, {"cpu_count": 0}, {"clock": {"max_hz": float("nan")}}])
def test_an_odd_machine_record_gives_a_generous_ceiling_or_none(odd):
    """A record is read from disk: flags or a clock it cannot read count as not recorded (the most generous
    ceiling), a core count it cannot read as no ceiling; never an error."""
    rec = json.loads((cpu_fixture("big_matmul") / "plugins/profile/run1/cpu.machine.json").read_text())
    got = machine.ceilings_of({**rec, **odd})
    if "cpu_count" in odd:
        assert got == {}
    else:
        assert got["peak_flops_per_s.f32"]["value"] >= 2 * 64 * 2.596e9 * 1.5


def test_info_skips_a_machine_record_it_cannot_read(tmp_path):
    rec = json.loads((cpu_fixture("big_matmul") / "plugins/profile/run1/cpu.machine.json").read_text())
    trace = tmp_path / "h.xplane.pb"
    trace.write_bytes(b"")
    (tmp_path / "h.machine.json").write_text(json.dumps({**rec, "calibration": {"peak_flops_per_s": "fast"}}))
    assert machine.for_info([str(trace)], ["h"]) == []
    (tmp_path / "h.machine.json").write_text(json.dumps(rec))
    (got,) = machine.for_info([str(trace)], ["h"])
    assert got["summary"].startswith("recording machine (h.machine.json): AMD EPYC (2 cores)")
