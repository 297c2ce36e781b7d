"""Writing reports (-o): only regular files are replaced (devices and FIFOs are written through, folders refused,
symlinks followed, ``-`` is stdout), every file of a run is written before any is renamed into place, and a signal
or a kill never leaves a temporary behind for long."""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from conftest import cpu_fixture

EXE = [sys.executable, "-m", "tracekit.cli"]
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0


def trace() -> str:
    return str(cpu_fixture("train_step"))


def cli(*args, **kw):
    return subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, timeout=300, **kw)


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".tracekit-"))


def one_line(p, *needles):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error:"), p.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


# ---- what the path is -----------------------------------------------------------------------------------------

def test_a_character_device_is_written_through_not_replaced(tmp_path):
    """`-o /dev/null` used to turn /dev/null into a regular file (as root). Tested on a null device node of our own:
    after the run it is still a character device."""
    if not ROOT_USER:
        pytest.skip("making a device node needs root")
    node = tmp_path / "null"
    try:
        os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot make a device node here ({e})")
    p = cli("analyze", trace(), "-o", node, "--format", "sarif")
    assert p.returncode == 0, p.stderr
    assert stat.S_ISCHR(os.stat(node).st_mode), "the device was replaced by a file"
    assert not temporaries(tmp_path)


def test_a_fifo_is_written_through(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    p = cli("analyze", trace(), "-o", fifo)
    reader.join(60)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(got[0])["schema"] == "tracekit.report/1"


def test_a_fifo_without_reader_is_one_line_not_a_hang(tmp_path):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    one_line(cli("analyze", trace(), "-o", fifo), "start the reader first")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_folder_is_refused_in_one_line(tmp_path):
    one_line(cli("analyze", trace(), "-o", tmp_path), "folder")
    one_line(cli("diff", trace(), trace(), "-o", tmp_path), "folder")


def test_a_symlink_is_followed_not_replaced(tmp_path):
    target = tmp_path / "reports" / "latest.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    p = cli("analyze", trace(), "-o", link)
    assert p.returncode == 0, p.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["schema"] == "tracekit.report/1"  # the target is the new report
    assert not temporaries(tmp_path) and not temporaries(target.parent)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_symlink_to_a_pipe_is_written_through(tmp_path):
    """A link to the process's stdout (a pipe here, whose real path is no path: pipe:[N]) is written through: the
    report goes down the pipe and the link stays (it used to look for a folder /proc/<pid>/fd to write a file in)."""
    link = tmp_path / "out.json"
    link.symlink_to("/proc/self/fd/1")
    p = cli("analyze", trace(), "-o", link)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["schema"] == "tracekit.report/1"
    assert link.is_symlink() and not temporaries(tmp_path)


def test_dash_is_stdout(tmp_path):
    p = cli("analyze", trace(), "-o", "-", "--format", "json", "-o", tmp_path / "r.md")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["schema"] == "tracekit.report/1"
    assert (tmp_path / "r.md").read_text().startswith("#")
    text = cli("analyze", trace(), "-o", "-")
    assert text.returncode == 0 and "Top ops" in text.stdout  # text when --format does not say


def test_stdout_paths_are_never_replaced():
    """/dev/stdout, /dev/fd/1 and - mean this process's stdout (checked without writing: replacing /dev/stdout as
    root would break the machine)."""
    from tracekit import fileio
    for p in ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"):
        assert fileio.target(p).kind == "stdout"
    assert fileio.target("/dev/stderr").kind == "stderr"


def test_a_replaced_report_keeps_its_permissions(tmp_path):
    f = tmp_path / "r.json"
    f.write_text("old")
    f.chmod(0o640)
    assert cli("analyze", trace(), "-o", f).returncode == 0
    assert stat.S_IMODE(f.stat().st_mode) == 0o640 and f.read_text() != "old"


# ---- all or nothing -------------------------------------------------------------------------------------------

FSIZE_CHILD = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
    from tracekit.cli import main
    sys.argv = ["tracekit"] + sys.argv[2:]
    main()
    """)


def test_a_write_failing_on_the_second_file_replaces_none(tmp_path):
    """Two -o files and a file-size limit that the first (Markdown) fits under and the second (HTML) does not: the
    run fails in one line and both old files are as they were (the first used to be replaced already)."""
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    md.write_text("old md")
    html.write_text("old html")
    sizes = {}
    for f in ("md", "html"):
        p = cli("analyze", trace(), "-o", tmp_path / f"probe.{f}")
        assert p.returncode == 0, p.stderr
        sizes[f] = (tmp_path / f"probe.{f}").stat().st_size
    assert sizes["md"] < sizes["html"]
    limit = (sizes["md"] + sizes["html"]) // 2
    p = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(limit), "analyze", trace(), "-o", str(md), "-o",
                        str(html)], capture_output=True, text=True, timeout=300)
    one_line(p, "cannot write the report", str(html))
    assert md.read_text() == "old md" and html.read_text() == "old html"
    assert not temporaries(tmp_path)


SIGNAL_CHILD = textwrap.dedent("""
    import os, signal, sys
    sig = getattr(signal, sys.argv[1])
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job inherits SIGINT ignored
    real = os.fsync
    def fsync(fd):  # the signal arrives while a report is being written
        real(fd)
        os.kill(os.getpid(), sig)
    os.fsync = fsync
    from tracekit.cli import main
    sys.argv = ["tracekit"] + sys.argv[2:]
    main()
    """)


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP", "SIGINT"])
def test_a_signal_while_writing_leaves_no_temporary(tmp_path, sig):
    out = tmp_path / "r.json"
    out.write_text("old")
    p = subprocess.run([sys.executable, "-c", SIGNAL_CHILD, sig, "analyze", trace(), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert out.read_text() == "old" and not temporaries(tmp_path), (p.returncode, p.stderr[-500:])
    assert p.returncode == 128 + getattr(signal, sig), p.returncode  # the usual exit status (SIGINT: 130)
    if sig == "SIGINT":
        assert p.stderr.strip() == "tracekit: interrupted", p.stderr[-500:]  # it used to be click's "Aborted!", 1


def test_a_kill_leaves_a_temporary_that_the_next_run_removes(tmp_path):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-c", SIGNAL_CHILD, "SIGKILL", "analyze", trace(), "-o", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == -signal.SIGKILL
    left = temporaries(tmp_path)
    assert left, "SIGKILL cannot be caught: its temporary stays until the next run"
    live = tmp_path / f".tracekit-{os.getpid()}-abcdef12.tmp"  # a live process's temporary is not touched
    live.write_text("in progress")
    assert cli("analyze", trace(), "-o", out, "-q").returncode == 0
    assert temporaries(tmp_path) == [live.name]
    assert json.loads(out.read_text())["schema"] == "tracekit.report/1"


def test_format_is_for_stdout_when_the_extension_says(tmp_path):
    """``--format`` sets stdout's format and that of an -o without a known extension; a file's extension wins."""
    p = cli("analyze", trace(), "-o", tmp_path / "r.json", "--format", "markdown")
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "r.json").read_text())["schema"] == "tracekit.report/1"
    assert p.stdout.startswith("#")  # stdout in the asked format
    q = cli("analyze", trace(), "-o", tmp_path / "report", "--format", "json", "-q")
    assert q.returncode == 0, q.stderr
    assert json.loads((tmp_path / "report").read_text())["schema"] == "tracekit.report/1"
