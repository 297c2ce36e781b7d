"""A pod's analysis mapped on workers and reduced on the driver (tracekit.run.pod): the single-process report
within the README's stated bounds, a corrupt host left out with a warning, and the host that arrives last at
collectives found on clocks that disagree."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import cpu_fixture, report_diff
from tracekit import pipeline
from tracekit.cli import main
from tracekit.ingest.synth import SpaceBuilder
from tracekit.run import pod

SRC = "plugins/profile/run1/cpu.xplane.pb"


@pytest.fixture(scope="module")
def run4(tmp_path_factory):
    d = tmp_path_factory.mktemp("run4")
    src = (cpu_fixture("train_step") / SRC).read_bytes()
    for i in range(4):
        (d / f"host{i}.xplane.pb").write_bytes(src)
    return d


def _js(rep) -> dict:
    return json.loads(rep.to_json())


def test_in_process_and_pool_equal_single_process(run4):
    single = _js(pipeline.analyze(run4))
    one = _js(pod.analyze(run4, jobs=1))
    assert report_diff(single, one) == []
    assert report_diff(single, _js(pod.analyze(run4, jobs=2))) == []
    assert one["pod"]["hosts"] == 4 and one["pod"]["failed_hosts"] == []


def test_different_programs_per_host(tmp_path):
    """Hosts running different programs: op statistics, findings, steps and devices still agree."""
    for name, case in (("a", "train_step"), ("b", "sharded8"), ("c", "matvec_b1")):
        (tmp_path / f"{name}.xplane.pb").write_bytes((cpu_fixture(case) / SRC).read_bytes())
    a, b = _js(pipeline.analyze(tmp_path)), _js(pod.analyze(tmp_path, jobs=1))
    # the README's bounds for hosts with different programs: the memory view's buffers and the memory findings'
    # evidence hold the same sizes, rows of equal size or savings in another order; device peaks are per host's own
    # programs (the single process keys programs by program id across hosts, conflating different programs)
    memory = tuple(f"/findings[{i}]/evidence" for i, f in enumerate(a["findings"]) if f["rule_id"] >= "TK020")
    diffs = [d for d in report_diff(a, b) if not d.startswith(("/memory/buffers", "/memory/devices") + memory)]
    assert diffs == []
    assert [r["size_bytes"] for r in a["memory"]["buffers"]] == [r["size_bytes"] for r in b["memory"]["buffers"]]


def test_corrupt_host_among_good_ones(run4, tmp_path):
    for f in run4.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "host9.xplane.pb").write_bytes(b"\x0a\x05junk")
    rep = _js(pod.analyze(tmp_path, jobs=2))
    assert [i["host"] for i in rep["inputs"]] == ["host0", "host1", "host2", "host3"]
    (failed,) = rep["pod"]["failed_hosts"]
    assert failed["host"] == "host9" and "not a valid XSpace trace" in failed["reason"]
    assert any(w.startswith("host host9 was left out") and "tried 2 times" in w for w in rep["warnings"])
    good = _js(pipeline.analyze(run4))
    assert report_diff(good, {**rep, "warnings": good["warnings"], "inputs": good["inputs"]}) == []
    res = CliRunner().invoke(main, ["analyze", str(tmp_path), "--jobs", "2", "--format", "json", "-q", "-o", "-"])
    assert res.exit_code == 0, res.output


OFFSETS_NS = [0, 37_000, -12_345, 5_555]  # every host's clock is off by a different amount
LATE, STEPS, STEP_PS = 2, 12, 2_000_000


def _host(h: int) -> bytes:
    """Two devices; each step a fusion then an all-reduce that ends at the same true time on every host. Host
    ``LATE``'s fusion takes 900 ns instead of 500 ns: it arrives last, the others wait 400 ns for it."""
    b = SpaceBuilder(hostname=f"h{h}")
    for dev in range(2):
        p = b.plane(f"/device:TPU:{dev}", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0})
        ops = p.line("XLA Ops", timestamp_ns=1_000_000 + OFFSETS_NS[h])
        fus = 900_000 if h == LATE else 500_000
        for i in range(STEPS):
            t = i * STEP_PS
            ops.event("%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop", t, fus, display="fusion.1",
                      md_stats={"program_id": 7, "hlo_category": "loop fusion"})
            ops.event("%all-reduce.3 = f32[8]{0} all-reduce(f32[8]{0} %fusion.1), replica_groups={}", t + fus,
                      1_200_000 - fus, display="all-reduce.3", md_stats={"program_id": 7, "hlo_category": "all-reduce"})
    return b.serialize()


def test_straggler_at_collective_on_offset_clocks(tmp_path):
    for h in range(4):
        (tmp_path / f"h{h}.xplane.pb").write_bytes(_host(h))
    sec = pod.analyze(tmp_path, jobs=1).data["pod"]
    arr = sec["collective_arrival"]
    assert arr["instances"] == STEPS and arr["last_host"] == f"h{LATE}" and arr["last_host_share"] == 1
    assert arr["alignment_ps"] == 0  # the ends line up exactly once shifted
    rows = {r["host"]: r for r in sec["stragglers_at_collectives"]}
    for h in range(4):
        assert rows[f"h{h}"]["clock_offset_ps"] == (OFFSETS_NS[h] - OFFSETS_NS[0]) * 1000
    # the three others wait 900 - 500 ns for it at each of the 12 instances
    assert rows[f"h{LATE}"]["waited_for_ps"] == STEPS * 3 * 400_000
    assert rows[f"h{LATE}"]["last_at"] == STEPS and rows["h0"]["last_at"] == 0
    assert rows[f"h{LATE}"]["late_ps_max"] == 400_000


def test_op_mix_and_step_spread(tmp_path):
    """One host runs another program: its op mix differs; the step spread is per host."""
    srcs = ["train_step"] * 5 + ["matvec_b1"]
    for i, case in enumerate(srcs):
        (tmp_path / f"host{i}.xplane.pb").write_bytes((cpu_fixture(case) / SRC).read_bytes())
    sec = pod.analyze(tmp_path, jobs=1).data["pod"]
    differs = [r["host"] for r in sec["op_mix"] if r["differs"]]
    assert differs == ["host5"]
    assert {r["host"] for r in sec["step_spread"]} >= {"host0"}
