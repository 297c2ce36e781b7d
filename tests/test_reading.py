"""Reading traces: regular files only, a trace that changes while it is read, permissions anywhere in a logdir,
and click's usage errors as one line. Every refusal is one line on stderr with exit code 2."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import cpu_fixture
from tracekit.ingest import wire

EXE = [sys.executable, "-m", "tracekit.cli"]
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0


def cli(*args, env=None):
    return subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def one_line(p, *needles, code=2) -> str:
    assert p.returncode == code, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error:"), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def fixture_file(case="train_step") -> Path:
    return cpu_fixture(case) / "plugins/profile/run1/cpu.xplane.pb"


# ---- regular files only -------------------------------------------------------------------------------------

@pytest.mark.parametrize("dev", ["/dev/null", "/dev/zero"])
@pytest.mark.parametrize("cmd", ["analyze", "info"])
def test_devices_are_refused(dev, cmd):
    if not os.path.exists(dev):
        pytest.skip(f"no {dev}")
    one_line(cli(cmd, dev), "character device", dev)


def test_fifo_is_refused_without_blocking(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "pipe.xplane.pb"
    os.mkfifo(fifo)
    one_line(cli("info", fifo), "FIFO")  # a blocking open would hang here until the timeout


def test_fifo_swapped_in_after_the_check_is_refused(tmp_path, monkeypatch):
    """The file is checked on the open descriptor, so a path that turns into a FIFO after resolving is refused too."""
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    import tracekit
    from tracekit.ingest import paths
    fifo = tmp_path / "x.xplane.pb"
    fifo.write_bytes(fixture_file().read_bytes())
    real = paths.choose

    def swap(path, run=None):
        out = real(path, run)
        fifo.unlink()
        os.mkfifo(fifo)
        return out
    monkeypatch.setattr(paths, "choose", swap)
    with pytest.raises(tracekit.TraceError, match="FIFO"):
        tracekit.load(fifo)


def test_fifo_in_a_run_folder_is_not_a_trace(tmp_path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    run = tmp_path / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    os.mkfifo(run / "host.xplane.pb")
    one_line(cli("info", tmp_path), "trace found")


# ---- permissions ----------------------------------------------------------------------------------------------

def _unreadable(tmp_path, which: str) -> Path:
    logdir = tmp_path / "logs"
    run = logdir / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    (run / "host.xplane.pb").write_bytes(fixture_file().read_bytes())
    target = {"profile": logdir / "plugins" / "profile", "plugins": logdir / "plugins", "run": run}[which]
    target.chmod(0)
    return logdir


@pytest.mark.parametrize("which", ["plugins", "profile", "run"])
def test_permission_errors_anywhere_in_a_logdir_are_one_line(tmp_path, which, monkeypatch):
    """As root, chmod 0 does not stop reading: the permission error is then injected where a listing happens."""
    logdir = _unreadable(tmp_path, which)
    try:
        if ROOT_USER:
            code = textwrap.dedent(f"""
                import os, sys
                from pathlib import Path
                real_iterdir, real_is_dir = Path.iterdir, Path.is_dir
                def iterdir(self):
                    if os.stat(self).st_mode & 0o777 == 0:
                        raise PermissionError(13, "Permission denied", str(self))
                    return real_iterdir(self)
                def is_dir(self):
                    if self.parent.exists() and os.stat(self.parent).st_mode & 0o777 == 0:
                        raise PermissionError(13, "Permission denied", str(self))
                    return real_is_dir(self)
                Path.iterdir, Path.is_dir = iterdir, is_dir
                from tracekit.cli import main
                sys.argv = ["tracekit", "info", {str(logdir)!r}]
                main()
                """)
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        else:
            p = cli("info", logdir)
        one_line(p, "not readable" if which != "plugins" else "")
        assert "Traceback" not in p.stderr and "internal error" not in p.stderr
    finally:
        for d in logdir.rglob("*"):
            os.chmod(d, 0o755) if d.is_dir() else None
        for d in (logdir / "plugins", logdir / "plugins" / "profile", logdir / "plugins" / "profile" / "run1"):
            os.chmod(d, 0o755)


def test_unreadable_trace_file_is_one_line(tmp_path):
    f = tmp_path / "t.xplane.pb"
    f.write_bytes(fixture_file().read_bytes())
    if ROOT_USER:
        code = ("import builtins, os, sys\nreal = os.open\n"
                "def deny(p, *a, **k):\n"
                f"    if str(p) == {str(f)!r}: raise PermissionError(13, 'Permission denied', str(p))\n"
                "    return real(p, *a, **k)\n"
                "os.open = deny\nfrom tracekit.cli import main\n"
                f"sys.argv = ['tracekit', 'analyze', {str(f)!r}]\nmain()\n")
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    else:
        f.chmod(0)
        p = cli("analyze", f)
    one_line(p, "not readable")


# ---- click's usage errors ------------------------------------------------------------------------------------

def test_output_naming_a_folder_is_one_line(tmp_path):
    one_line(cli("analyze", cpu_fixture("big_matmul"), "-o", tmp_path), "folder")


def test_usage_errors_are_one_line():
    one_line(cli("analyze"), "PATH")  # a missing argument
    one_line(cli("ops", cpu_fixture("big_matmul"), "--limit", "-3"), "--limit")
    one_line(cli("analyze", cpu_fixture("big_matmul"), "--no-such-option"), "--no-such-option")
    one_line(cli("analyze", cpu_fixture("big_matmul"), "--rules", "/no/such/rules/dir"), "--rules")
    assert cli("--help").returncode == 0 and "Usage" in cli("--help").stdout


# ---- a trace that changes while it is read --------------------------------------------------------------------

def _tiled(tmp_path, min_size=(1 << 20) + 4096) -> tuple[Path, bytes]:
    """A valid trace of at least ``min_size`` bytes (big enough to be memory-mapped): a fixture's planes, repeated."""
    one = fixture_file("sharded8").read_bytes()
    data = one * (min_size // len(one) + 1)
    f = tmp_path / "big.xplane.pb"
    f.write_bytes(data)
    return f, data


def _one_big_event(tmp_path) -> tuple[Path, bytes]:
    """A valid trace whose only event carries 1.5 MB of stats: framing reads only its first page, so the pages past
    it are read first by the event decoder (phase 2, on the decoder's threads)."""
    from conftest import varint

    def ld(f, p):
        return varint(f << 3 | 2) + varint(len(p)) + p
    stat = ld(4, b"\x08\x01\x20\x05")  # metadata_id 1, int64 5
    event = ld(4, b"\x08\x01\x10\x01\x18\x02" + stat * (1_500_000 // len(stat)))
    line = b"\x08\x01" + ld(2, b"XLA Ops") + event
    data = ld(1, b"\x08\x01" + ld(2, b"/device:TPU:0") + ld(3, line))
    f = tmp_path / "big.xplane.pb"
    f.write_bytes(data)
    return f, data


SHRINK = """
import os, sys
from tracekit.ingest import paths
path, restore = sys.argv[1], sys.argv[2] == "restore"
data = open(path, "rb").read()
real_mapped, real_read = paths._mapped, paths.read_bytes
def mapped(p, m):
    out = real_mapped(p, m)
    assert out is not None, "not memory-mapped"
    os.truncate(p, 4096)  # the file shrinks under the map (a profiler rewriting it)
    return out
def read(p, m):
    if restore:
        open(p, "wb").write(data)  # ... and is whole again when it is read a second time
    return real_read(p, m)
paths._mapped, paths.read_bytes = mapped, read
from tracekit.cli import main
sys.argv = ["tracekit", "info", path, "--format", "json"]
main()
"""


@pytest.mark.skipif(not getattr(wire.wirec, "HAVE_BUS_GUARD", 0), reason="needs the C decoder's SIGBUS guard (POSIX)")
@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("shape", ["tiled", "one-big-event"])
def test_file_shrinking_under_the_memory_map_is_one_line_not_sigbus(tmp_path, shape, threads):
    f, _ = (_tiled if shape == "tiled" else _one_big_event)(tmp_path)
    p = subprocess.run([sys.executable, "-c", SHRINK, str(f), "keep"], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "TRACEKIT_THREADS": threads})
    assert p.returncode != -7 and p.returncode != 135, "died of SIGBUS"
    one_line(p, "changed while it was being read", "wait until the profiler has finished writing it")


@pytest.mark.skipif(not getattr(wire.wirec, "HAVE_BUS_GUARD", 0), reason="needs the C decoder's SIGBUS guard (POSIX)")
def test_file_that_shrank_and_is_whole_again_is_read_again(tmp_path):
    f, data = _tiled(tmp_path)
    p = subprocess.run([sys.executable, "-c", SHRINK, str(f), "restore"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    plain = cli("info", f, "--format", "json")
    assert p.stdout == plain.stdout


def test_file_growing_while_mapped_is_read_again(tmp_path, monkeypatch):
    """A file that changes size after it was mapped is decoded again from a fresh read: the result is the file as
    it is now, not a mix."""
    if not wire.HAVE_C:
        pytest.skip("the memory map path needs the C decoder")
    import tracekit
    from tracekit.ingest import paths
    f, data = _tiled(tmp_path)
    reads = []
    real_mapped, real_read = paths._mapped, paths.read_bytes

    def mapped(p, m):
        out = real_mapped(p, m)
        with open(p, "ab") as fh:  # a profiler appending more planes meanwhile
            fh.write(fixture_file("train_step").read_bytes())
        return out

    def read(p, m):
        reads.append(p)
        return real_read(p, m)
    monkeypatch.setattr(paths, "_mapped", mapped)
    monkeypatch.setattr(paths, "read_bytes", read)
    tr = tracekit.load(f)
    monkeypatch.undo()
    assert reads, "the changed file was not read again"
    assert len(tr.ops) == len(tracekit.load(f).ops)
