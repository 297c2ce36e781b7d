"""Bad input: one clear line on stderr, exit code 2, no traceback; the library raises TraceError."""
import subprocess
import sys

import pytest

import tracekit
from conftest import cpu_fixture, shared_trace

EXE = [sys.executable, "-m", "tracekit.cli"]


def _cli(*args):
    return subprocess.run(EXE + list(args), capture_output=True, text=True)


def _assert_one_line_error(p, needle=None):
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error:"), p.stderr
    assert "Traceback" not in p.stderr
    if needle:
        assert needle in lines[0]


@pytest.fixture
def good_bytes():
    return (cpu_fixture("train_step") / "plugins/profile/run1/cpu.xplane.pb").read_bytes()


@pytest.mark.parametrize("cmd", ["info", "ops", "analyze"])
def test_not_a_protobuf(tmp_path, cmd):
    f = tmp_path / "x.xplane.pb"
    f.write_text("this is not a trace\n" * 50)
    _assert_one_line_error(_cli(cmd, str(f)), "not a valid XSpace")


def test_truncated(tmp_path, good_bytes):
    f = tmp_path / "t.xplane.pb"
    f.write_bytes(good_bytes[: len(good_bytes) // 2])
    _assert_one_line_error(_cli("analyze", str(f)))


def test_empty(tmp_path):
    f = tmp_path / "e.xplane.pb"
    f.write_bytes(b"")
    _assert_one_line_error(_cli("info", str(f)), "empty")


def test_folder_without_trace(tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    _assert_one_line_error(_cli("ops", str(tmp_path)), "no *.xplane.pb")


def test_missing_path(tmp_path):
    _assert_one_line_error(_cli("info", str(tmp_path / "nope.xplane.pb")), "no such file")


def test_corrupt_real_file():
    _assert_one_line_error(_cli("analyze", str(shared_trace("bad/v6e-4_jax_inference.utf8_mangled.xplane.pb"))))


def test_unreadable_file_library(tmp_path, monkeypatch, good_bytes):
    f = tmp_path / "u.xplane.pb"
    f.write_bytes(good_bytes)

    def deny(*a, **k):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr("builtins.open", deny)
    with pytest.raises(tracekit.TraceError, match="not readable"):
        tracekit.load(f)


def test_unknown_chip_and_bad_output(tmp_path):
    path = str(cpu_fixture("big_matmul"))
    _assert_one_line_error(_cli("ops", path, "--chip", "nosuchchip"))
    _assert_one_line_error(_cli("analyze", path, "-o", str(tmp_path / "report.unknownext")))
    _assert_one_line_error(_cli("analyze", path, "-o", str(tmp_path / "missing-dir" / "r.json")))
    assert not list(tmp_path.glob("**/.tracekit-*"))  # no partial file left behind


def test_size_and_event_limits(tmp_path):
    path = str(cpu_fixture("sharded8"))
    _assert_one_line_error(_cli("analyze", path, "--max-events", "10"), "--max-events")
    with pytest.raises(tracekit.TraceError, match="limit"):
        tracekit.load(path, max_bytes=100)
