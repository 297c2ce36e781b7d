"""Many hosts in parallel (tracekit.run.hosts): a process pool and a Dask cluster give the single-process report
(within the README's "Pods" bounds, tests/conftest.py report_diff), and the straggler host is found."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import cpu_fixture, report_diff
from tracekit import pipeline
from tracekit.run import hosts
from tracekit.cli import main
from tracekit.proto import xplane_pb2

N_HOSTS = 16
SLOW = "host11"


def _stretch(space: xplane_pb2.XSpace, f: float) -> None:
    """Scale every host-thread event's time (XLA:CPU ops live there) by ``f``."""
    for p in space.planes:
        if p.name.startswith("/host:CPU"):
            for line in p.lines:
                for e in line.events:
                    e.offset_ps, e.duration_ps = int(e.offset_ps * f), int(e.duration_ps * f)


@pytest.fixture(scope="module")
def run16(tmp_path_factory):
    """16 copies of a CPU trace, each a little slower than the last (0.5 %), and one host twice as slow."""
    src = (cpu_fixture("train_step") / "plugins" / "profile" / "run1" / "cpu.xplane.pb").read_bytes()
    d = tmp_path_factory.mktemp("run16")
    for i in range(N_HOSTS):
        sp = xplane_pb2.XSpace.FromString(src)
        name = f"host{i:02d}"
        _stretch(sp, 2.0 if name == SLOW else 1 + 0.005 * i)
        (d / f"{name}.xplane.pb").write_bytes(sp.SerializeToString())
    return d


@pytest.fixture(scope="module")
def single(run16):
    return pipeline.analyze(run16)


def test_single_process_sees_all_hosts(single):
    assert single.data["summary"]["hosts"] == N_HOSTS
    assert [i["host"] for i in single.data["inputs"]] == [f"host{i:02d}" for i in range(N_HOSTS)]


def test_process_pool_equals_single_process(run16, single):
    rep = hosts.analyze(run16, jobs=2)
    assert report_diff(json.loads(single.to_json()), json.loads(rep.to_json())) == []


def test_workers_join_the_roofline(run16, single, monkeypatch):
    """The 16 copies share device names and HLO: each worker's own roofline join stands for the cluster's, and
    the parent joins nothing."""
    from tracekit.ingest import paths as loader
    from tracekit.model import roofline
    parts = hosts.load_parts(loader.resolve(run16)[:3], jobs=1)
    assert hosts._roofline_per_host_ok(parts)
    assert "roofline_ps" in parts[0].frames.ops.columns
    calls = []
    orig = roofline.join
    monkeypatch.setattr(roofline, "join", lambda tr, chip=None, **kw: calls.append(len(tr.hosts)) or orig(tr, chip, **kw))
    rep = hosts.analyze(run16, jobs=2)
    assert report_diff(json.loads(single.to_json()), json.loads(rep.to_json())) == []
    assert calls == []  # workers (forked) joined their own host; the parent did not join the 16 hosts again


def _copies(tmp_path, srcs: dict):
    for name, src in srcs.items():
        (tmp_path / f"{name}.xplane.pb").write_bytes(src.read_bytes())
    return tmp_path


def test_different_hosts_equal_single_process(tmp_path):
    """Hosts with different programs: the parent joins the roofline itself; still the same report."""
    from tracekit.ingest import paths as loader
    d = _copies(tmp_path, {"a": cpu_fixture("train_step") / "plugins/profile/run1/cpu.xplane.pb",
                           "b": cpu_fixture("sharded8") / "plugins/profile/run1/cpu.xplane.pb",
                           "c": cpu_fixture("matvec_b1") / "plugins/profile/run1/cpu.xplane.pb"})
    assert not hosts._roofline_per_host_ok(hosts.load_parts(loader.resolve(d), jobs=1))
    a, b = json.loads(pipeline.analyze(d).to_json()), json.loads(hosts.analyze(d, jobs=2).to_json())
    tk023 = [i for i, f in enumerate(a["findings"]) if f["rule_id"] == "TK023"]  # (its evidence order differs)
    assert [x for x in report_diff(a, b) if not x.startswith(("/memory/", *(f"/findings[{i}]/evidence"
                                                                              for i in tk023)))] == []


@pytest.mark.parametrize("rel", ["tpu/v6e-4_jax_inference.xplane.pb", "gpu/mi300x_jax_gemm.xplane.pb"])
def test_accelerator_hosts_equal_single_process(tmp_path, rel):
    """TPU hosts (async windows, trace costs) take the per-host roofline; GPU hosts with multi-kernel ops fall
    back to the parent's join. Both give the single-process report."""
    from conftest import shared_trace
    d = _copies(tmp_path, {"h0": shared_trace(rel), "h1": shared_trace(rel)})
    a, b = json.loads(pipeline.analyze(d).to_json()), json.loads(hosts.analyze(d, jobs=2).to_json())
    assert report_diff(a, b) == []


def test_load_equals_single_process_trace(run16):
    from tracekit import load
    a, b = load(run16), hosts.load(run16, jobs=2)
    for name in ("ops", "hlo", "modules", "steps", "lines", "devices", "host_events"):
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.hosts == b.hosts and a.paths == b.paths and a.warnings == b.warnings
    assert [(m.name, m.program_id) for m in a.hlo_modules] == [(m.name, m.program_id) for m in b.hlo_modules]


def test_dask_cluster_equals_single_process(run16, single):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  host="127.0.0.1") as cluster:
        rep = hosts.analyze(run16, dask=cluster.scheduler_address)
        with distributed.Client(cluster) as client:  # a Client object works as well as an address
            rep2 = hosts.analyze(run16, dask=client)
    assert report_diff(json.loads(single.to_json()), json.loads(rep.to_json())) == []
    assert report_diff(json.loads(single.to_json()), json.loads(rep2.to_json())) == []


def test_straggler_host_flagged(single):
    s = hosts.host_summary(single)
    assert len(s) == N_HOSTS and (s["devices"] == 1).all() and (s["steps"] == 5).all()
    assert hosts.stragglers(single) == [SLOW]
    row = s.set_index("host").loc[SLOW]
    assert row["busy_ps_z"] > 3.5 and row["step_ps_mean_z"] > 3.5
    tk9 = [f for f in single.findings if f["rule_id"] == "TK009"]
    assert tk9 and [e["host"] for e in tk9[0]["evidence"]] == [SLOW]


def test_cli_jobs(run16, single, tmp_path):
    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["analyze", str(run16), "--jobs", "2", "-o", str(out)])
    assert res.exit_code == 0, res.output
    a, b = json.loads(out.read_text()), json.loads(single.to_json())
    assert report_diff(b, a) == [] and a["pod"]["hosts"] == N_HOSTS


def test_worker_errors_are_one_line(tmp_path):
    for i in range(2):
        (tmp_path / f"h{i}.xplane.pb").write_bytes(b"\x0a\x05junk")
    res = CliRunner().invoke(main, ["analyze", str(tmp_path), "--jobs", "2"])
    assert res.exit_code == 2, res.output
    assert "not a valid XSpace trace" in res.output
