"""Remote storage through fsspec: fsspec's in-memory filesystem stands in for gs:// and s3://. A file, a run folder
and a logdir load and analyze exactly as the same layout on local disk."""
from __future__ import annotations

import gzip
import importlib.util
import json
import uuid

import pytest

from conftest import cpu_fixture
from tracekit import load, pipeline
from tracekit.ingest import paths as loader
from tracekit.errors import TraceError

fsspec = pytest.importorskip("fsspec")


def _trace(case: str) -> bytes:
    return (cpu_fixture(case) / "plugins" / "profile" / "run1" / "cpu.xplane.pb").read_bytes()


@pytest.fixture
def mem():
    """A fresh folder in fsspec's memory filesystem: (filesystem, 'memory://<folder>'), removed afterwards."""
    fs = fsspec.filesystem("memory")
    root = f"tk-{uuid.uuid4().hex[:8]}"
    yield fs, f"memory://{root}"
    if fs.exists(f"/{root}"):
        fs.rm(f"/{root}", recursive=True)


def _put(fs, tmp_path, url: str, files: dict) -> None:
    """The same files under ``url`` (memory) and under ``tmp_path`` (local disk)."""
    for rel, data in files.items():
        fs.pipe(url + "/" + rel, data)
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def _same(remote: str, local, **kw) -> None:
    a, b = load(remote, **kw), load(local, **kw)
    for name in ("ops", "hlo", "modules", "steps", "lines", "devices", "host_events"):
        assert getattr(a, name).equals(getattr(b, name)), name
    assert a.hosts == b.hosts
    ra, rb = json.loads(pipeline.analyze(remote, **kw).to_json()), json.loads(pipeline.analyze(local, **kw).to_json())
    assert all(p.startswith("memory://") for p in a.paths)
    assert [i["host"] for i in ra["inputs"]] == [i["host"] for i in rb["inputs"]]
    ra.pop("inputs"), rb.pop("inputs")
    assert ra == rb


def test_single_file(mem, tmp_path):
    fs, url = mem
    _put(fs, tmp_path, url, {"cpu.xplane.pb": _trace("train_step")})
    files = loader.resolve(url + "/cpu.xplane.pb")
    assert [(f.host, f.path) for f in files] == [("cpu", url + "/cpu.xplane.pb")]
    _same(url + "/cpu.xplane.pb", tmp_path / "cpu.xplane.pb")


def test_gzipped_file(mem, tmp_path):
    fs, url = mem
    _put(fs, tmp_path, url, {"cpu.xplane.pb.gz": gzip.compress(_trace("train_step"))})
    _same(url + "/cpu.xplane.pb.gz", tmp_path / "cpu.xplane.pb.gz")


def test_run_folder_two_hosts(mem, tmp_path):
    fs, url = mem
    _put(fs, tmp_path, url, {"hostA.xplane.pb": _trace("train_step"), "hostB.xplane.pb": _trace("sharded8"),
                             "notes.txt": b"not a trace"})
    assert [f.host for f in loader.resolve(url)] == ["hostA", "hostB"]
    _same(url, tmp_path)
    assert load(url).hosts == ["hostA", "hostB"]


def test_logdir_newest_run(mem, tmp_path):
    fs, url = mem
    _put(fs, tmp_path, url, {"plugins/profile/2024_01_01_00_00_00/h.xplane.pb": _trace("train_step"),
                             "plugins/profile/2024_06_01_00_00_00/h.xplane.pb": _trace("sharded8"),
                             "plugins/profile/empty_run/readme.txt": b"x"})
    files = loader.resolve(url)
    assert [f.path for f in files] == [url + "/plugins/profile/2024_06_01_00_00_00/h.xplane.pb"]
    _same(url, tmp_path)
    _same(url, tmp_path, run="2024_01_01_00_00_00")
    with pytest.raises(TraceError, match="no run named 'nope'.*runs here include: 2024_01_01"):
        loader.resolve(url, run="nope")


def test_remote_errors_are_one_line(mem, tmp_path):
    fs, url = mem
    fs.pipe(url + "/big.xplane.pb", _trace("train_step"))
    fs.pipe(url + "/empty/readme.txt", b"x")
    with pytest.raises(TraceError, match="no such file or folder"):
        loader.resolve(url + "/missing.xplane.pb")
    with pytest.raises(TraceError, match=r"no \*\.xplane\.pb (or \*\.trace\.json\.gz )?trace found"):
        loader.resolve(url + "/empty")
    with pytest.raises(TraceError, match="over the .* limit"):
        loader.read_bytes(url + "/big.xplane.pb", max_bytes=1000)
    with pytest.raises(TraceError, match="cannot read file"):
        loader.read_bytes(url + "/gone.xplane.pb")
    with pytest.raises(TraceError, match="is a folder"):
        loader.read_bytes(url + "/empty")
    with pytest.raises(TraceError, match="cannot reach nosuchproto://"):
        loader.resolve("nosuchproto://bucket/x.xplane.pb")
    with pytest.raises(TraceError) as err:
        loader.resolve(url + "/missing")
    assert "\n" not in str(err.value) and str(err.value).startswith(url + "/missing: ")


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
def test_missing_protocol_package_says_what_to_install():
    with pytest.raises(TraceError, match=r"cannot reach s3://, install s3fs"):
        loader.resolve("s3://bucket/logs")
    with pytest.raises(TraceError, match=r"cannot reach s3://, install s3fs"):
        loader.read_bytes("s3://bucket/logs/h.xplane.pb")


def test_cli_reads_a_url(mem, tmp_path):
    from click.testing import CliRunner
    from tracekit.cli import main
    fs, url = mem
    _put(fs, tmp_path, url, {"hostA.xplane.pb": _trace("train_step"), "hostB.xplane.pb": _trace("train_step")})
    res = CliRunner().invoke(main, ["analyze", url, "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [i["host"] for i in data["inputs"]] == ["hostA", "hostB"]


def test_the_run_taken_is_said_alike_on_disk_and_in_a_bucket(mem, tmp_path):
    """One chooser for both: the same layout gives the same files and the same one-line note, local or URL."""
    from tracekit.ingest import locate
    fs, url = mem
    _put(fs, tmp_path, url, {"exp/plugins/profile/2024_01_01/h.xplane.pb": _trace("train_step"),
                             "exp/plugins/profile/2024_06_01/h.xplane.pb": _trace("train_step"),
                             "exp/plugins/profile/2024_03_01/h.xplane.pb": _trace("train_step"),
                             "other/run_a/h.xplane.pb": _trace("train_step")})
    for rel in ("", "/exp", "/other"):
        remote, local = locate.choose(url + rel), locate.choose(str(tmp_path) + rel)
        assert remote.note == local.note and remote.note, rel
        assert [str(f.path)[len(url):] for f in remote.files] == [str(f.path)[len(str(tmp_path)):] for f in local.files]
    assert locate.choose(url + "/exp", run="2024_03_01").note is None
    note = ("took the run 2024_06_01, the newest (last by name) of 3 under plugins/profile; the others: 2024_03_01, "
            "2024_01_01; --run NAME takes another")
    assert locate.choose(url + "/exp").note == note
    assert note in json.loads(pipeline.analyze(url + "/exp").to_json())["warnings"]
