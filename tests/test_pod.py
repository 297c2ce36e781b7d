"""One engine from one host to a pod (tracekit.report.engine): the same report whichever engine maps the hosts —
this process, a ``--jobs 2`` process pool, a Dask LocalCluster — on every multi-host run below, compared as JSON
without tolerances; a corrupt host left out with a warning; the host that arrives last at collectives found on
clocks that disagree; the host whose op mix differs; the straggler host."""
from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, cpu_fixture, shared_trace
from tracekit import pipeline
from tracekit.cli import main
from tracekit.ingest.synth import SpaceBuilder
from tracekit.proto import xplane_pb2
from tracekit.report import stragglers
from tracekit.run import pod

SRC = "plugins/profile/run1/cpu.xplane.pb"
#: one xdist worker runs this module (``--dist loadgroup``): its module fixtures (run folders analysed alone, a
#: Dask cluster) are built once, not once per worker
pytestmark = pytest.mark.xdist_group("pod")
#: the report fields that may differ between engines (timing, provenance of the engine): the report holds no
#: timing and names no engine, so none — every other field must be equal, value for value
VARIES: tuple = ()
OFFSETS_NS = [0, 37_000, -12_345, 5_555]  # every host's clock is off by a different amount
LATE, STEPS, STEP_PS = 2, 12, 2_000_000
N_SLOW, SLOW = 16, "host11"


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


def _stretched(f: float) -> bytes:
    """The train_step capture with every host-thread event's time (XLA:CPU ops live there) scaled by ``f``."""
    sp = xplane_pb2.XSpace.FromString((cpu_fixture("train_step") / SRC).read_bytes())
    for p in sp.planes:
        if p.name.startswith("/host:CPU"):
            for line in p.lines:
                for e in line.events:
                    e.offset_ps, e.duration_ps = int(e.offset_ps * f), int(e.duration_ps * f)
    return sp.SerializeToString()


def _copies(folder, names_and_sources):
    folder.mkdir(parents=True, exist_ok=True)
    for name, src in names_and_sources:
        if isinstance(src, bytes):
            (folder / f"{name}.xplane.pb").write_bytes(src)
        else:
            shutil.copy(src, folder / f"{name}.xplane.pb")
    return folder


#: the multi-host runs every engine must agree on: (name, [(host, source: a fixture case, a shared trace, bytes)])
RUNS = {
    "copies4": lambda: [(f"host{i}", cpu_fixture("train_step") / SRC) for i in range(4)],
    "programs3": lambda: [(n, cpu_fixture(c) / SRC) for n, c in (("a", "train_step"), ("b", "sharded8"),
                                                                   ("c", "matvec_b1"))],
    "dp8x2": lambda: [(f"h{i}", cpu_fixture("async_dp8") / SRC) for i in range(2)],
    "offset_clocks": lambda: [(f"h{h}", _host(h)) for h in range(4)],
    "stragglers16": lambda: [(f"host{i:02d}", _stretched(2.0 if f"host{i:02d}" == SLOW else 1 + 0.005 * i))
                             for i in range(N_SLOW)],
    "tpu2": lambda: [(f"h{i}", shared_trace("tpu/v6e-4_jax_inference.xplane.pb")) for i in range(2)],
    "gpu2": lambda: [(f"h{i}", shared_trace("gpu/mi300x_jax_gemm.xplane.pb")) for i in range(2)],
    "gpu8x2": lambda: [(f"h{i}", shared_trace("gpu/mi300x8_jax_conv3d.xplane.pb")) for i in range(2)],
    # a serving trace (prefill + decode with a KV cache): the inference section and the serving rules
    "serving2": lambda: [(f"h{i}", FIXTURES / "serving" / "decode_gqa" / SRC) for i in range(2)],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    made = {}

    def get(name):
        if name not in made:
            made[name] = _copies(tmp_path_factory.mktemp(name), RUNS[name]())
        return made[name]
    return get


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("dask.distributed")
    import logging
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       host="127.0.0.1", silence_logs=logging.CRITICAL)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


def _js(rep) -> dict:
    d = json.loads(rep.to_json())
    for path in VARIES:
        *head, last = path.strip("/").split("/")
        node = d
        for k in head:
            node = node[k]
        node.pop(last, None)
    return d


@pytest.fixture(scope="module")
def in_process(runs):
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = pipeline.analyze(runs(name))
        return cache[name]
    return get


@pytest.mark.parametrize("name", list(RUNS))
def test_every_engine_gives_the_same_report(name, runs, in_process, dask_client):
    """In this process, in a pool of 2 processes and on a Dask LocalCluster of 2 workers: equal JSON."""
    one = _js(in_process(name))
    assert one["pod"]["hosts"] == len(RUNS[name]()) and one["pod"]["failed_hosts"] == []
    assert _js(pod.analyze(runs(name), jobs=2)) == one
    assert _js(pod.analyze(runs(name), dask=dask_client)) == one


@pytest.mark.parametrize("name", ["copies4", "programs3"])
def test_a_loaded_trace_gives_the_report_of_its_files(name, runs, in_process):
    """``pipeline.analyze(tracekit.load(run))`` (the hook's and capture's way) splits the trace per host: the
    report of the files, and every op in ``ops_frame()``, the same on a pod engine."""
    import tracekit
    rep = pipeline.analyze(tracekit.load(runs(name)))
    assert _js(rep) == _js(in_process(name))
    pooled = pod.analyze(runs(name), jobs=2)
    assert rep.ops_frame().equals(pooled.ops_frame())
    assert rep.ops_frame()["total_ps"].sum() == rep.data["summary"]["op_time_ps"]  # every op of every host


def test_one_host_has_no_pod_section():
    rep = json.loads(pipeline.analyze(cpu_fixture("train_step")).to_json())
    assert "pod" not in rep and rep["summary"]["hosts"] == 1


def test_the_pod_part_is_worked_out_only_for_a_run_of_several_files(monkeypatch):
    """A run of one host file skips the pod section's per-host work (the reduce reads no host part): its report
    is the one the worked-out part gives. A run of several files works it out, and so does a loaded trace whose
    load left a host out (two files: a pod of one analyzed host)."""
    import tracekit
    from tracekit.options import Options
    from tracekit.report.engine import host, pod as pod_section
    run = FIXTURES / "cpu" / "allreduce_exposed"
    (f,) = sorted(run.rglob("*.xplane.pb"))
    assert host.summarize_file(str(f), "h", Options(), use_hostname=True).parts["pod"].keys == ()
    two = host.summarize_file(str(f), "h", Options(), hosts=("h", "other")).parts["pod"]
    assert two.keys and two.spread["steps"] > 0
    skipped = _js(pipeline.analyze(run))
    real = pod_section.summarize

    def worked_out(hv):
        hv.pod = True
        return real(hv)
    monkeypatch.setattr(pod_section, "summarize", worked_out)
    assert _js(pipeline.analyze(run)) == skipped
    monkeypatch.undo()
    left_out = [("ghost", "ghost.xplane.pb", "unreadable")]
    rep = json.loads(pipeline.analyze(tracekit.load(run), left_out=left_out).to_json())
    (row,) = rep["pod"]["step_spread"]
    assert [h["host"] for h in rep["pod"]["failed_hosts"]] == ["ghost"] and row["steps"] == two.spread["steps"]


def test_corrupt_host_among_good_ones(runs, tmp_path):
    for f in runs("copies4").iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    (tmp_path / "host9.xplane.pb").write_bytes(b"\x0a\x05junk")
    rep = _js(pod.analyze(tmp_path, jobs=2))
    assert [i["host"] for i in rep["inputs"]] == ["host0", "host1", "host2", "host3"]
    (failed,) = rep["pod"]["failed_hosts"]
    assert failed["host"] == "host9" and "not a valid XSpace trace" in failed["reason"]
    assert any(w.startswith("host host9 was left out") and "tried 2 times" in w for w in rep["warnings"])
    good = _js(pipeline.analyze(runs("copies4")))
    assert {**rep, "warnings": good["warnings"], "inputs": good["inputs"],
            "pod": {**rep["pod"], "failed_hosts": []}} == good
    res = CliRunner().invoke(main, ["analyze", str(tmp_path), "--jobs", "2", "--format", "json", "-q", "-o", "-"])
    assert res.exit_code == 0, res.output


def test_straggler_at_collective_on_offset_clocks(runs, in_process):
    sec = in_process("offset_clocks").data["pod"]
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


def test_straggler_host_flagged(in_process):
    rep = in_process("stragglers16")
    s = stragglers.host_summary(rep)
    assert len(s) == N_SLOW and (s["devices"] == 1).all() and (s["steps"] == 5).all()
    assert stragglers.stragglers(rep) == [SLOW]
    row = s.set_index("host").loc[SLOW]
    assert row["busy_ps_z"] > 3.5 and row["step_ps_mean_z"] > 3.5
    tk9 = [f for f in rep.findings if f["rule_id"] == "TK009"]
    assert tk9 and [e["host"] for e in tk9[0]["evidence"]] == [SLOW]


def test_cli_jobs(runs, in_process, tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["analyze", str(runs("stragglers16")), "--jobs", "2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text()) == _js(in_process("stragglers16"))


def test_worker_errors_are_one_line(tmp_path):
    for i in range(2):
        (tmp_path / f"h{i}.xplane.pb").write_bytes(b"\x0a\x05junk")
    res = CliRunner().invoke(main, ["analyze", str(tmp_path), "--jobs", "2"])
    assert res.exit_code == 2, res.output
    assert "not a valid XSpace trace" in res.output
