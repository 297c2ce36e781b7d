"""Peaks inside physics (issue 31, item 2): every raised CPU peak stays under the recording machine's ceiling, a
raise needs an op's median over several executions (never one, never an in-place op, never a cache rate for
memory), virtual devices share their host's peak, and on a CPU the roofline findings are indicative.

The ceilings here are the oracle written out in the test from the machine record (or this machine's
/proc/cpuinfo): cores x f32 FLOP/cycle of the widest vector unit its flags name x clock, not by calling
tracekit.model.cpu_limits."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from conftest import FIXTURES, REPORTS_GROUP, cpu_fixture, default_report
from tracekit.cli.app import main

pytestmark = pytest.mark.xdist_group(REPORTS_GROUP)  # one worker: each trace analyzed once (default_report)


def _cases() -> list:
    return sorted(p.name for p in (FIXTURES / "cpu").iterdir() if p.is_dir())


def _per_cycle(flags: set, vendor: str, family) -> dict:
    """f32 and bf16 FLOP per cycle per core: two FMA pipes of the widest vector the flags name (512-bit: 16 f32
    lanes, 256-bit: 8), x 2 FLOP per FMA; AMD Zen 4 (family 0x19, or AVX-512 without AVX-VNNI when the family
    is not recorded) runs AVX-512 as two 256-bit halves. bf16: AMX tiles 1024 multiply-adds per cycle,
    AVX512-BF16 pairs 2 x 32 x 2, else the f32 rate."""
    zen4 = "AMD" in vendor.upper() and "avx512f" in flags and (family == 25 if family else "avx_vnni" not in flags)
    if "avx512f" in flags:
        f32 = 32 if zen4 else 64
    elif "fma" in flags:
        f32 = 32
    elif "avx" in flags:
        f32 = 16
    else:
        f32 = 8
    bf16 = 2048 if "amx_bf16" in flags else (64 if zen4 else 128) if "avx512_bf16" in flags else f32
    return {"f32": f32, "bf16": bf16, "f16": bf16, "f64": f32 // 2}


def _clock(clock: dict) -> float:
    """The fastest a core of the record runs: cpufreq's maximum, else the reported clock with 50 % for boost."""
    if clock.get("max_hz"):
        return float(clock["max_hz"])
    return float(clock["reported_hz"]) * 1.5


def _report(path, *extra) -> dict:
    out = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", *extra], catch_exceptions=False)
    assert out.exit_code in (0, 1), out.output
    return json.loads(out.output)


def _fixture_reports(case: str) -> tuple[dict, str]:
    """The JSON report and the text report of a CPU fixture: the session's one analysis of it
    (conftest.default_report, shared with the other modules of the group)."""
    from tracekit.report.render import render
    rep = default_report(str(cpu_fixture(case)))
    return json.loads(rep.to_json()), render(rep, "text")


def _record(case: str) -> dict:
    recs = list((FIXTURES / "cpu" / case).rglob("*.machine.json"))
    assert len(recs) == 1, case
    return json.loads(recs[0].read_text())


@pytest.mark.parametrize("case", _cases())
def test_every_cpu_fixture_peak_is_under_its_recording_machines_ceiling(case):
    rec = _record(case)
    per = _per_cycle(set(rec["cpu_flags"]), rec.get("processor", ""), (rec.get("cpu_identity") or {}).get("family"))
    hz = _clock(rec["clock"])
    cores = rec["cpu_count"]
    rep = _fixture_reports(case)[0]
    assert rep["chips"]
    for chip in rep["chips"]:
        for dtype, v in chip["peak_flops_per_s"].items():
            ceiling = cores * per.get(dtype, max(per.values())) * hz
            assert v <= ceiling * (1 + 1e-9), (case, dtype, v, ceiling)
        # no record names its last-level cache: no rate can be told from a cache rate, so memory is the calibration's
        # (the JSON report keeps 6 significant digits: up to 5e-6 apart)
        assert chip["hbm_bw_bytes_per_s"] == pytest.approx(rec["calibration"]["hbm_bw_bytes_per_s"], rel=1e-5), case
        # a cache rate: at most two 64 B loads and one 64 B store per core and cycle
        cache = chip["raised"].get("cache_bw_bytes_per_s", {}).get("value")
        assert cache is None or cache <= cores * 192 * hz * (1 + 1e-9), case
        for field, r in chip["raised"].items():
            assert r["executions"] >= 2, (case, field)  # a median over executions, never one
    peak = rep["overview"]["flops"].get("peak_flops_per_s")
    if peak:
        assert peak <= cores * max(per.values()) * hz * (1 + 1e-9), case


@pytest.mark.parametrize("case", _cases())
def test_cpu_fixture_roofline_findings_are_indicative_info_below_every_warning(case):
    rep, text = _fixture_reports(case)
    sev = [f["severity"] for f in rep["findings"]]
    tk004 = [i for i, f in enumerate(rep["findings"]) if f["rule_id"] == "TK004"]
    for i in tk004:
        assert rep["findings"][i]["severity"] == "info"
        assert "warning" not in sev[i:] and "error" not in sev[i:], (case, sev)
        assert "indicative" in rep["findings"][i]["message"]
    for word in ("Pallas", "Triton", "CUDA"):
        assert word not in text, (case, word)


def test_chip_flag_on_a_virtual_cpu_capture_prices_one_h100():
    rep = _report(cpu_fixture("allreduce_exposed"), "--chip", "h100")
    # H100 SXM: f32 dots run on TF32 tensor cores under JAX's default precision, 495 TFLOP/s dense (datasheet);
    # the 8 virtual devices are one host: one chip's peak, not 8 x 495 = 3.96 PFLOP/s
    assert rep["overview"]["flops"]["peak_flops_per_s"] == pytest.approx(4.95e14)
    assert rep["overview"]["bandwidth"]["hbm"]["peak_bytes_per_s"] == pytest.approx(3.35e12)


# ------------------------------------------------------------------------------------------ the raise policy
def _chip(**kw):
    from tracekit.model import chips, cpu_limits
    base = chips.estimate_cpu(2, where="test")
    limits = cpu_limits.ceilings(2, ["avx", "avx2", "fma", "sse2"], {"max_hz": 3.0e9})
    from dataclasses import replace
    return replace(base, limits=limits, **kw)


def _ops(rows: list) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    n = len(df)
    defaults = {"host": "h", "device": "CPU:0", "device_kind": "cpu", "module": "m", "is_async": False,
                "bound_by": "compute", "bytes_accessed": 1.0, "net_bytes": 0.0, "compute_dtype": "f32",
                "opcode": "dot", "category": "dot", "start_ps": 0}
    for k, v in defaults.items():
        if k not in df:
            df[k] = [v] * n
    df["duration_ps"] = df["self_ps"]
    df["start_ps"] = np.arange(n, dtype=np.int64) * 10**10  # one after the other: no sharing
    return df


def test_one_execution_raises_nothing_two_raise_to_their_median():
    from tracekit.model import peaks
    ch = _chip()
    est = ch.peak_flops_per_s["f32"]  # 2 x 64 GFLOP/s
    # one dot at 150 GFLOP/s (under the 192 GFLOP/s ceiling: 2 cores x 32 x 3 GHz), one execution
    one = _ops([{"op": "dot.1", "flops": 1.5e9, "self_ps": 10**10}])
    assert peaks.raise_estimates({("h", "CPU:0"): ch}, one)[("h", "CPU:0")].peak_flops_per_s["f32"] == est
    # three executions at 140, 150 and 180 GFLOP/s: median 150, but over all three the op ran 4.5 GFLOP in
    # their summed time (154.9 GFLOP/s): the higher, so the op that sets the peak reads at most 100 % of it
    times = (10**10 * 15 // 14, 10**10, 10**10 * 15 // 18)
    three = _ops([{"op": "dot.1", "flops": 1.5e9, "self_ps": t} for t in times])
    got = peaks.raise_estimates({("h", "CPU:0"): ch}, three)[("h", "CPU:0")]
    assert got.peak_flops_per_s["f32"] == pytest.approx(4.5e9 / (sum(times) / 1e12), rel=1e-6)
    # executions at 140, 150 and 150: the median (150) is above the rate over all three (146.7): the median
    flat = _ops([{"op": "dot.1", "flops": 1.5e9, "self_ps": t} for t in (10**10 * 15 // 14, 10**10, 10**10)])
    got_flat = peaks.raise_estimates({("h", "CPU:0"): ch}, flat)[("h", "CPU:0")]
    assert got_flat.peak_flops_per_s["f32"] == pytest.approx(1.5e11, rel=1e-6)
    assert got.raised["peak_flops_per_s.f32"]["executions"] == 3
    # an op with one execution above the ceiling is a timing artefact: it raises nothing
    fake = _ops([{"op": "dot.2", "flops": 3e9, "self_ps": 10**10}, {"op": "dot.2", "flops": 1.5e9, "self_ps": 10**10}])
    got = peaks.raise_estimates({("h", "CPU:0"): ch}, fake)[("h", "CPU:0")]
    assert got.peak_flops_per_s["f32"] == est
    # ... in no term: its bytes (10 GB in 10 ms: 1 TB/s, under the 1.15 TB/s cache ceiling of 2 cores x 192 B x
    # 3 GHz) demonstrate no cache rate either
    heavy = fake.assign(bytes_accessed=1e10)
    slow = __import__("dataclasses").replace(ch, hbm_bw_bytes_per_s=1e8)
    assert not peaks.raise_estimates({("h", "CPU:0"): slow}, heavy)[("h", "CPU:0")].raised
    # (the same bytes from an op within its ceiling do)
    assert "cache_bw_bytes_per_s" in peaks.raise_estimates({("h", "CPU:0"): slow}, heavy.iloc[1:].assign(
        op="dot.3").pipe(lambda d: pd.concat([d, d]).assign(start_ps=[0, 10**11])))[("h", "CPU:0")].raised


def test_no_ceiling_no_raise_and_no_raise_from_in_place_ops_or_cache_rates():
    from dataclasses import replace

    from tracekit.model import cpu_limits, peaks
    fast = [{"op": "dot.1", "flops": 1.5e9, "self_ps": 10**10}] * 3
    ch = _chip()
    assert peaks.raise_estimates({("h", "CPU:0"): replace(ch, limits={})}, _ops(fast))[("h", "CPU:0")] \
        .peak_flops_per_s["f32"] == ch.peak_flops_per_s["f32"]  # (an unknown recording machine: no ceiling)
    scatter = [dict(r, opcode="scatter", category="scatter") for r in fast]
    assert not peaks.raise_estimates({("h", "CPU:0"): ch}, _ops(scatter))[("h", "CPU:0")].raised
    # memory: 1 GB/s estimate; ops at 50 GB/s move 0.5 GB each
    mem = [{"op": "fusion.1", "flops": 0.0, "bytes_accessed": 5e8, "self_ps": 10**10, "bound_by": "memory"}] * 3
    slow = replace(ch, hbm_bw_bytes_per_s=1e9)
    big_cache = replace(slow, cache_bytes=4e8)  # 0.5 GB < 2 x 0.4 GB: could be the cache's rate
    unknown = replace(slow, cache_bytes=math.nan)
    for ch_ in (big_cache, unknown):  # a cache rate, kept apart: the memory bandwidth stays
        got = peaks.raise_estimates({("h", "CPU:0"): ch_}, _ops(mem))[("h", "CPU:0")]
        assert list(got.raised) == ["cache_bw_bytes_per_s"] and got.hbm_bw_bytes_per_s == 1e9
        assert got.cache_bw_bytes_per_s == pytest.approx(5e10)
        assert cpu_limits.in_cache(got, 5e8) and cpu_limits.in_cache(got, np.array([5e8])).all()
    small_cache = replace(slow, cache_bytes=32e6)
    got = peaks.raise_estimates({("h", "CPU:0"): small_cache}, _ops(mem))[("h", "CPU:0")]
    assert got.hbm_bw_bytes_per_s == pytest.approx(5e10) and "cache_bw_bytes_per_s" not in got.raised
    assert not cpu_limits.in_cache(got, 5e8)
    # the links of a CPU are its memory: collectives are priced at the same raised bandwidth
    assert got.link_bw_bytes_per_s == got.egress_bw_bytes_per_s == got.host_link_bw_bytes_per_s == pytest.approx(5e10)


def test_zen4_avx512_is_two_256_bit_halves():
    from tracekit.model import cpu_limits
    flags = ["avx", "avx2", "avx512_bf16", "avx512_vnni", "avx512f", "fma", "sse2"]
    clock = {"max_hz": 3.0e9}
    zen4 = cpu_limits.ceilings(2, flags, clock, {"vendor": "AuthenticAMD", "family": 0x19})
    assert zen4["peak_flops_per_s.f32"]["value"] == pytest.approx(2 * 32 * 3e9)
    zen5 = cpu_limits.ceilings(2, flags + ["avx_vnni"], clock, {"vendor": "AuthenticAMD", "family": 0x1A})
    assert zen5["peak_flops_per_s.f32"]["value"] == pytest.approx(2 * 64 * 3e9)
    intel = cpu_limits.ceilings(2, flags, clock, {"vendor": "GenuineIntel", "family": 6})
    assert intel["peak_flops_per_s.f32"]["value"] == pytest.approx(2 * 64 * 3e9)
    # no family recorded: AVX-512 without AVX-VNNI on an AMD part is Zen 4
    assert cpu_limits.ceilings(2, flags, clock, {"processor": "AMD EPYC 9B14"})["peak_flops_per_s.f32"]["value"] \
        == pytest.approx(2 * 32 * 3e9)
    # SMT siblings share one core's units: physical cores, when known, set the ceiling
    assert cpu_limits.ceilings(4, flags, clock, {"vendor": "GenuineIntel", "physical_cores": 2})[
        "peak_flops_per_s.f32"]["value"] == pytest.approx(2 * 64 * 3e9)


# ---------------------------------------------------------------------------------- devices sharing a host
def test_concurrency_is_the_time_weighted_devices_in_flight():
    """Oracle: a brute-force count over every picosecond-bin of a small timeline."""
    from tracekit.model import sharing
    rows = [("CPU:0", 0, 100), ("CPU:1", 50, 100), ("CPU:2", 120, 10), ("CPU:0", 100, 40), ("CPU:1", 60, 20)]
    ops = pd.DataFrame({"host": "h", "device": [r[0] for r in rows], "device_kind": "cpu", "is_async": False,
                        "start_ps": [r[1] for r in rows], "duration_ps": [r[2] for r in rows]})
    got = sharing.concurrency(ops)
    busy = np.zeros((3, 200), bool)
    for d, s, n in rows:
        busy[int(d[-1]), s:s + n] = True
    count = busy.sum(axis=0)
    want = [count[s:s + n].mean() for _, s, n in rows]
    assert got == pytest.approx(want)
    # one device, or a GPU host: nothing is shared
    assert sharing.concurrency(ops.assign(device="CPU:0")) is None
    assert sharing.concurrency(ops.assign(device_kind="NVIDIA H100")) is None


def test_virtual_devices_are_judged_against_their_share_of_the_host():
    """sharded8: 8 virtual devices on 2 cores. An op that runs while k devices are busy gets 1/k of the host:
    its roofline time is k times its time at the whole host's peak."""
    import tracekit
    from tracekit.model import roofline, sharing

    tr = tracekit.load(str(cpu_fixture("sharded8")))
    ops = roofline.join(tr)
    c = sharing.concurrency(tr.ops)
    assert c is not None and c.max() > 2
    ch = next(iter(roofline.device_chips(tr).values()))
    comp = ops["compute_ps"].to_numpy(float)
    alone = ops["flops"].to_numpy(float) / ch.peak_flops_per_s["f32"] * 1e12
    m = (ops["compute_dtype"].astype(str) == "f32").to_numpy() & (ops["flops"].to_numpy(float) > 0) & \
        ~ops["is_async"].to_numpy(bool) & ~ops["is_host_transfer"].to_numpy(bool)
    assert m.any()
    assert comp[m] == pytest.approx(alone[m] * c[m], rel=1e-4)


# ------------------------------------------------------------------------------------ traces made here
@pytest.fixture(scope="module")
def here_capture(tmp_path_factory):
    pytest.importorskip("jax")
    import jax
    import jax.numpy as jnp

    import tracekit
    d = tmp_path_factory.mktemp("here")
    old = os.environ.get("TRACEKIT_MACHINE_CALIBRATE_S")
    os.environ["TRACEKIT_MACHINE_CALIBRATE_S"] = "0"
    try:
        f = jax.jit(lambda a, b: jnp.tanh(a @ b) @ b)
        x = jnp.ones((384, 384))
        tracekit.capture(f, x, x, steps=4, logdir=d)
    finally:
        if old is None:
            os.environ.pop("TRACEKIT_MACHINE_CALIBRATE_S", None)
        else:
            os.environ["TRACEKIT_MACHINE_CALIBRATE_S"] = old
    (trace,) = list(d.rglob("*.xplane.pb"))
    return trace


def _this_machine() -> tuple[set, str, int | None, int, float]:
    flags, vendor, family, cores, mhz = set(), "", None, set(), []
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        pkg = None
        for ln in f:
            k, _, v = ln.partition(":")
            k, v = k.strip().lower(), v.strip()
            if k in ("flags", "features"):
                flags = set(v.split())
            elif k == "vendor_id":
                vendor = v
            elif k == "cpu family" and family is None:
                family = int(v)
            elif k == "physical id":
                pkg = v
            elif k == "core id":
                cores.add((pkg, v))
            elif k == "cpu mhz":
                mhz.append(float(v) * 1e6)
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", encoding="ascii") as f:
            hz = float(f.read()) * 1e3
    except OSError:
        hz = max(mhz) * 1.5
    return flags, vendor, family, len(cores) or (os.cpu_count() or 1), hz


def test_a_trace_recorded_here_stays_under_this_machines_ceiling(here_capture):
    if not os.path.exists("/proc/cpuinfo"):
        pytest.skip("no /proc/cpuinfo")
    flags, vendor, family, cores, hz = _this_machine()
    per = _per_cycle(flags, vendor, family)
    rep = _report(here_capture)
    (chip,) = rep["chips"]
    assert chip["limits"], "the record written at capture gives a ceiling"
    for dtype, v in chip["peak_flops_per_s"].items():
        assert v <= cores * per.get(dtype, max(per.values())) * hz * (1 + 1e-9), (dtype, v)


def test_a_trace_without_a_record_raises_nothing_and_names_no_core_count(here_capture, tmp_path):
    import shutil
    t = tmp_path / "run" / here_capture.name
    t.parent.mkdir()
    shutil.copy(here_capture, t)  # (the trace alone: its record left behind)
    rep = _report(t)
    (chip,) = rep["chips"]
    assert not chip["raised"] and not chip["limits"]
    assert "cores" not in chip["name"] and "unknown" in chip["name"]


def test_a_partial_record_from_this_machine_is_completed_here_one_from_elsewhere_is_not(here_capture, tmp_path):
    import shutil

    from tracekit.model import machine
    rec = json.loads(machine.path_for(here_capture).read_text())
    partial = {k: v for k, v in rec.items() if k not in ("cpu_flags", "clock", "cpu_identity")}
    for name, r in (("here", partial), ("elsewhere", dict(partial, fingerprint="0" * 32))):
        t = tmp_path / name / here_capture.name
        t.parent.mkdir()
        shutil.copy(here_capture, t)
        machine.path_for(t).write_text(json.dumps(r))
        chip, _ = machine.cpu_chip_for(t)
        src = chip.limits["peak_flops_per_s.f32"]["source"]
        if name == "here":  # this machine's flags and clock
            assert "flags not recorded" not in src and "no clock recorded" not in src
        else:  # the most generous assumption: never below what that machine could do
            assert "flags not recorded" in src and "no clock recorded" in src


def test_a_record_without_a_core_count_is_not_labelled_with_this_machines_cores(tmp_path):
    """A record from elsewhere that lost its core count: no ceiling (so no raise), and its name and notes say
    the cores are unknown instead of borrowing this machine's (or the number of virtual devices)."""
    import shutil

    from tracekit.model import machine
    src = cpu_fixture("sharded8") / "plugins/profile/run1/cpu.xplane.pb"
    t = tmp_path / "cpu.xplane.pb"
    shutil.copy(src, t)
    rec = json.loads(machine.path_for(src).read_text())
    rec.update(cpu_count=None, calibration=None, fingerprint="0" * 32)
    machine.path_for(t).write_text(json.dumps(rec))
    rep = _report(t)
    (chip,) = rep["chips"]
    assert "cores unknown" in chip["name"] and not chip["limits"] and not chip["raised"]
    assert " 2 cores" not in chip["name"] and " 8 cores" not in chip["name"]
