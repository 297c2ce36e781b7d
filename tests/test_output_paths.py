"""One output path for every command that writes: ``analyze``, ``export`` (streamed), ``diff``, ``ops``, ``memory``
and ``collectives`` each point ``-o`` at every kind of target — a character device of our own (null and full), a
FIFO, a symlink (to a file, dangling, looping), a read-only file, ``-``, a folder, a file-size limit (a full disk)
— and get the same behaviour, the one of :mod:`tracekit.fileio`; SIGINT while a command works or writes is one
line and exit 130 with nothing partial left (tests/test_outputs.py holds the finer cases for ``analyze``)."""
from __future__ import annotations

import gzip
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import cpu_fixture
from tracekit.cli import main

EXE = [sys.executable, "-m", "tracekit.cli"]
ROOT_USER = hasattr(os, "geteuid") and os.geteuid() == 0


def _big():
    return str(cpu_fixture("big_matmul"))


#: each command that writes: its arguments before -o, and what its JSON output must hold (an oracle independent of
#: the writer: the document the command means to write, parsed back)
COMMANDS = {
    "analyze": (lambda: ["analyze", _big()], lambda d: d["schema"] == "tracekit.report/1"),
    "export": (lambda: ["export", _big()], lambda d: d["otherData"]["producer"] == "tracekit export"
               and any(e.get("ph") == "X" for e in d["traceEvents"])),
    "diff": (lambda: ["diff", _big(), str(cpu_fixture("train_step"))], lambda d: "step_time" in d and "ops" in d),
    "ops": (lambda: ["ops", _big()], lambda d: isinstance(d, list) and d and "op" in d[0]),
    "memory": (lambda: ["memory", _big()], lambda d: "programs" in d),
    "collectives": (lambda: ["collectives", str(cpu_fixture("allreduce_exposed"))],
                    lambda d: "topology" in d and "collectives" in d),
    "whatif": (lambda: ["whatif", _big()], lambda d: d["whatif"]["measured_step_ps"] > 0),
}
#: what each command is asked for when the target's name does not say (a device, a FIFO, stdout)
JSON_FORMAT = {"analyze": ["--format", "json"], "diff": ["--format", "json"], "ops": ["--format", "json"],
               "memory": ["--format", "json"], "collectives": ["--format", "json"], "export": [],
               "whatif": ["--format", "json"]}
OK = {"analyze": 0, "export": 0, "diff": 0, "ops": 0, "memory": 0, "collectives": 0, "whatif": 0}
ALL = sorted(COMMANDS)


def run(cmd: str, target, *extra):
    args, _ = COMMANDS[cmd]
    return CliRunner().invoke(main, [*args(), "-o", str(target), *JSON_FORMAT[cmd], *extra])


def check(cmd: str, text: str) -> None:
    assert COMMANDS[cmd][1](json.loads(text)), text[:300]


def temporaries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".tracekit-"))


def ok(cmd: str, res) -> None:
    assert res.exit_code == OK[cmd], (res.exit_code, res.output[-2000:], res.exception)


def one_line(res, *needles, code=2) -> str:
    code_ = getattr(res, "exit_code", None)
    code_ = res.returncode if code_ is None else code_
    assert code_ == code, (code_, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def device(tmp_path: Path, name: str, minor: int) -> Path:
    """A character device of our own (1,3: null; 1,7: full) in the test's folder — never the machine's. As root
    (CI) it must be made: the test fails instead of skipping."""
    node = tmp_path / name
    try:
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
    except OSError as e:
        if ROOT_USER:
            raise AssertionError(f"root cannot make a device node in {tmp_path}: {e}") from None
        pytest.skip(f"not root: cannot make a device node ({e})")
    assert stat.S_ISCHR(os.stat(node).st_mode)
    return node


# ---- the kinds of target, for every command ---------------------------------------------------------------------

@pytest.mark.parametrize("cmd", ALL)
def test_a_null_device_stays_a_device(tmp_path, cmd):
    """`export -o /dev/null` used to replace the device with a regular file (as root: the machine's)."""
    node = device(tmp_path, "null", 3)
    res = run(cmd, node)
    ok(cmd, res)
    assert stat.S_ISCHR(os.stat(node).st_mode), "the device was replaced by a file"
    assert os.stat(node).st_rdev == os.makedev(1, 3)
    assert temporaries(tmp_path) == []


@pytest.mark.parametrize("cmd", ALL)
def test_a_full_device_is_one_line_and_stays_a_device(tmp_path, cmd):
    """`/dev/full` (every write: ENOSPC) used to exit 0 for export."""
    node = device(tmp_path, "full", 7)
    line = one_line(run(cmd, node), "No space left", str(node))
    assert line.startswith("tracekit: error:")
    assert stat.S_ISCHR(os.stat(node).st_mode) and temporaries(tmp_path) == []


@pytest.mark.parametrize("cmd", ALL)
def test_a_fifo_is_written_through(tmp_path, cmd):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    res = run(cmd, fifo)
    reader.join(60)
    ok(cmd, res)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and temporaries(tmp_path) == []
    check(cmd, got[0].decode())


@pytest.mark.parametrize("cmd", ALL)
def test_a_fifo_without_a_reader_is_one_line_not_a_hang(tmp_path, cmd):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    one_line(run(cmd, fifo), "start the reader first")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize("cmd", ALL)
def test_a_symlink_is_followed_and_stays(tmp_path, cmd):
    real = tmp_path / "reports" / "latest.json"
    real.parent.mkdir()
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    ok(cmd, run(cmd, link))
    assert link.is_symlink() and os.readlink(link) == str(real)
    check(cmd, real.read_text())
    assert temporaries(tmp_path) == [] and temporaries(real.parent) == []


@pytest.mark.parametrize("cmd", ALL)
def test_a_dangling_symlink_creates_its_target(tmp_path, cmd):
    link = tmp_path / "link.json"
    link.symlink_to("made.json")
    ok(cmd, run(cmd, link))
    assert link.is_symlink() and os.readlink(link) == "made.json"
    check(cmd, (tmp_path / "made.json").read_text())
    assert temporaries(tmp_path) == []


@pytest.mark.parametrize("cmd", ALL)
def test_a_looping_symlink_is_one_line(tmp_path, cmd):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    one_line(run(cmd, a), "symbolic links", "loop", str(a))
    assert a.is_symlink() and b.is_symlink() and os.readlink(a) == str(b)
    assert temporaries(tmp_path) == []


@pytest.mark.parametrize("cmd", ALL)
def test_a_read_only_file_is_replaced_and_stays_read_only(tmp_path, cmd):
    """The one behaviour of every output (:func:`tracekit.fileio.write_all`'s): the file is replaced whole, with
    its permissions (export used to make it writable)."""
    f = tmp_path / "out.json"
    f.write_text("old")
    f.chmod(0o444)
    ok(cmd, run(cmd, f))
    assert stat.S_IMODE(f.stat().st_mode) == 0o444
    check(cmd, f.read_text())
    assert temporaries(tmp_path) == []


@pytest.mark.parametrize("cmd", ALL)
def test_dash_is_stdout_and_no_file(tmp_path, cmd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = run(cmd, "-")
    ok(cmd, res)
    check(cmd, res.stdout)
    assert sorted(os.listdir(tmp_path)) == [], "a file named - (or a temporary) was written"


@pytest.mark.parametrize("cmd", ALL)
def test_a_folder_is_refused_in_one_line(tmp_path, cmd):
    d = tmp_path / "reports.json"
    d.mkdir()
    one_line(run(cmd, d), "folder", str(d))
    assert d.is_dir() and list(d.iterdir()) == [] and temporaries(tmp_path) == []


@pytest.mark.parametrize("cmd", ALL)
def test_a_regular_file_gets_the_output(tmp_path, cmd):
    f = tmp_path / "out.json"
    f.write_text("old")
    res = CliRunner().invoke(main, [*COMMANDS[cmd][0](), "-o", str(f)])  # the extension says JSON
    ok(cmd, res)
    check(cmd, f.read_text())
    assert temporaries(tmp_path) == []


def test_export_gz_is_gzip_through_every_kind(tmp_path):
    """The streamed writer's gzip: a file (its header names no temporary) and a symlink to one."""
    real = tmp_path / "t.json.gz"
    link = tmp_path / "l.json.gz"
    link.symlink_to(real)
    ok("export", CliRunner().invoke(main, ["export", _big(), "-o", str(link)]))
    raw = real.read_bytes()
    assert b".tracekit-" not in raw[:64]
    check("export", gzip.decompress(raw).decode())


# ---- processes: a full disk, SIGINT ------------------------------------------------------------------------------

FSIZE_CHILD = textwrap.dedent("""
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
    from tracekit.cli import main
    sys.argv = ["tracekit"] + sys.argv[2:]
    main()
    """)


@pytest.mark.parametrize("cmd", ALL)
def test_a_full_disk_is_one_line_and_the_old_file_stays(tmp_path, cmd):
    """No room for the output (a file-size limit: EFBIG, as ENOSPC on a full disk): one line, the old file as it
    was, no temporary."""
    f = tmp_path / "out.json"
    f.write_text("old")
    p = subprocess.run([sys.executable, "-c", FSIZE_CHILD, "16", *COMMANDS[cmd][0](), "-o", str(f)],
                       capture_output=True, text=True, timeout=300)
    one_line(p, "cannot write", str(f))
    assert f.read_text() == "old" and temporaries(tmp_path) == []


SIGINT_CHILD = textwrap.dedent("""
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job inherits SIGINT ignored
    where = sys.argv[1]
    if where == "write":  # while the output is being written: after its data is on disk, before the rename
        real = os.fsync
        def fsync(fd):
            real(fd)
            os.kill(os.getpid(), signal.SIGINT)
        os.fsync = fsync
    else:  # while the trace is read: before anything is written
        import tracekit.ingest.trace as t
        def interrupting(real):
            def load(*a, **kw):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(30)
                return real(*a, **kw)
            return load
        t.load = interrupting(t.load)  # the commands that read a whole trace
        t.load_host = interrupting(t.load_host)  # analyze: the engine's map reads each host file
    from tracekit.cli.app import entry
    sys.argv = ["tracekit"] + sys.argv[2:]
    entry()
    """)


@pytest.mark.parametrize("where", ["write", "load"])
@pytest.mark.parametrize("cmd", ALL)
def test_sigint_is_130_one_line_nothing_partial(tmp_path, cmd, where):
    f = tmp_path / "out.json"
    f.write_text("old")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", SIGINT_CHILD, where, *COMMANDS[cmd][0](), "-o", str(f)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 130, (p.returncode, p.stderr[-2000:])
    assert p.stderr.strip() == "tracekit: interrupted", p.stderr[-2000:]
    assert f.read_text() == "old" and temporaries(tmp_path) == []
    if where == "load":
        assert time.monotonic() - t0 < 25, "SIGINT did not stop the command at once"


SLOW_EXPORT = textwrap.dedent("""
    import signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from tracekit.report import trace_events
    real = trace_events.Writer._flush
    def slow(self, buf):  # a large trace: chunks keep coming for a while
        real(self, buf)
        self.f.flush()
        time.sleep(0.5)
    trace_events.Writer._flush = slow
    from tracekit.cli.app import entry
    sys.argv = ["tracekit"] + sys.argv[1:]
    entry()
    """)


@pytest.mark.parametrize("name", ["out.json", "out.json.gz"])
def test_sigint_mid_export_from_outside(tmp_path, name):
    """Ctrl-C while ``export`` streams (the signal comes from outside, once its temporary holds data): exit 130,
    one line, the old output unchanged, no temporary."""
    f = tmp_path / name
    f.write_bytes(b"old")
    p = subprocess.Popen([sys.executable, "-c", SLOW_EXPORT, "export", str(cpu_fixture("allreduce_exposed")),
                          "-o", str(f)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and p.poll() is None:
        temps = [tmp_path / t for t in temporaries(tmp_path)]
        if any(t.exists() and t.stat().st_size > 0 for t in temps):
            break
        time.sleep(0.05)
    assert p.poll() is None, ("export ended before it was interrupted", p.returncode, p.stderr.read())
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (p.returncode, err[-2000:])
    assert err.strip() == "tracekit: interrupted", err[-2000:]
    assert f.read_bytes() == b"old" and temporaries(tmp_path) == []


def test_export_to_real_stdout_and_no_file(tmp_path):
    """`-o -` in a real process: the JSON on stdout (fd 1), the summary line on stderr, no file named -."""
    p = subprocess.run(EXE + ["export", _big(), "-o", "-"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    check("export", p.stdout)
    assert os.listdir(tmp_path) == [] and p.stderr.startswith("wrote -:")


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"), reason="needs /proc")
@pytest.mark.parametrize("group", [True, False], ids=["process-group", "parent-only"])
def test_ctrl_c_with_worker_processes_is_130_one_line(tmp_path, group):
    """Ctrl-C at a terminal goes to the whole process group: ``analyze --jobs 2`` and its workers (busy or idle,
    so it is sent at several moments; an idle worker used to print the pool's traceback, CI at a603f59); a SIGINT
    to the parent alone must not wait for the hosts being read. One line, 130, no report, no temporary, no
    worker left."""
    src = cpu_fixture("train_step") / "plugins" / "profile" / "run1" / "cpu.xplane.pb"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for i in range(6):
        (run_dir / f"host{i}.xplane.pb").write_bytes(src.read_bytes())
    for delay in (0.0, 0.15, 0.3, 0.5):
        out = tmp_path / "r.json"
        p = subprocess.Popen(EXE + ["analyze", str(run_dir), "--jobs", "2", "-o", str(out)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None and len(_children(p.pid)) < 1:
            time.sleep(0.02)
        assert p.poll() is None, ("analyze ended before it was interrupted", p.returncode)
        time.sleep(delay)  # the workers are starting, loading hosts, or waiting for the next one
        workers = _children(p.pid)
        if group:
            os.killpg(p.pid, signal.SIGINT)
        else:
            os.kill(p.pid, signal.SIGINT)
        _, err = p.communicate(timeout=120)
        if p.returncode == 0:
            continue  # it finished first: nothing to check at this delay
        assert p.returncode == 130, (delay, p.returncode, err[-2000:])
        assert err.strip() == "tracekit: interrupted", (delay, err[-2000:])
        assert not out.exists() and temporaries(tmp_path) == []
        gone = time.monotonic() + 10
        while time.monotonic() < gone and any(map(_alive, workers)):
            time.sleep(0.05)
        assert not any(map(_alive, workers)), ("a worker is left", delay)


@pytest.mark.parametrize("cmd", ALL + ["info"])
def test_stdout_on_a_full_device_is_one_line(tmp_path, cmd):
    """No -o, stdout redirected to a full device (`> /dev/full`): one line and exit 2 (it used to be exit 3,
    "internal error", for every command)."""
    node = device(tmp_path, "full", 7)
    args = COMMANDS[cmd][0]() if cmd in COMMANDS else ["info", _big()]
    if cmd == "export":
        args += ["-o", "-"]
    with open(node, "w") as out:
        p = subprocess.run(EXE + args, stdout=out, stderr=subprocess.PIPE, text=True, timeout=300)
    one_line(p, "No space left")
    assert stat.S_ISCHR(os.stat(node).st_mode)


def test_keyboard_interrupt_in_process(monkeypatch):
    """The same in a caller's process (click's runner calls main as the console script does): 130 and the line;
    main(standalone_mode=False) leaves the interrupt to its caller (click's Abort, not an exit)."""
    import click

    import tracekit.ingest.trace as trace_mod

    def load(*a, **kw):
        raise KeyboardInterrupt
    monkeypatch.setattr(trace_mod, "load", load)
    res = CliRunner().invoke(main, ["ops", _big()])
    assert res.exit_code == 130 and res.stderr.strip() == "tracekit: interrupted", (res.exit_code, res.output)
    with pytest.raises(click.exceptions.Abort):
        main(["ops", _big()], standalone_mode=False)
    assert CliRunner().invoke(main, ["ops", _big()]).exit_code == 130  # the flag was reset, and set again


# ---- the post-run hook: its analysis child writes <run>/tracekit-report.json through the same writer ------------

def _hook_run(tmp_path: Path) -> Path:
    import shutil
    run_dir = tmp_path / "run1"
    shutil.copytree(cpu_fixture("big_matmul") / "plugins" / "profile" / "run1", run_dir)
    return run_dir


def _hook_child(run_dir: Path):
    from tracekit.run import hook
    return subprocess.run(hook.analysis_command(run_dir, {"outputs": ["json"], "fail_on": "never"}),
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("kind", ["null", "full", "symlink", "dangling", "loop", "read-only", "folder"])
def test_the_hook_report_path_is_the_same_writer(tmp_path, kind):
    """Whatever sits at the report's path in the run folder, the hook's child treats it as `-o` does: a device
    stays a device, a link stays a link (its target gets the report), a read-only report is replaced and stays
    read-only; a full device, a loop or a folder fail the child (the job's hook logs one warning) and leave
    everything as it was."""
    from tracekit.run.hookchild import REPORT_STEM
    run_dir = _hook_run(tmp_path)
    report = run_dir / f"{REPORT_STEM}.json"
    elsewhere = tmp_path / "kept.json"
    if kind in ("null", "full"):
        node = device(run_dir, report.name, 3 if kind == "null" else 7)
    elif kind == "symlink":
        elsewhere.write_text("old")
        report.symlink_to(elsewhere)
    elif kind == "dangling":
        report.symlink_to(elsewhere)
    elif kind == "loop":
        report.symlink_to(report)
    elif kind == "read-only":
        report.write_text("old")
        report.chmod(0o444)
    else:
        report.mkdir()
    p = _hook_child(run_dir)
    if kind in ("full", "loop", "folder"):
        assert p.returncode != 0, p.stdout
        assert "cannot write the report" in p.stderr, p.stderr[-1000:]
    else:
        assert p.returncode == 0, p.stderr[-2000:]
        assert json.loads(p.stdout.strip().splitlines()[-1])["written"] == [str(report)]
    if kind in ("null", "full"):
        assert stat.S_ISCHR(os.stat(node).st_mode)
    elif kind in ("symlink", "dangling"):
        assert report.is_symlink() and os.readlink(report) == str(elsewhere)
        check("analyze", elsewhere.read_text())
    elif kind == "loop":
        assert report.is_symlink()
    elif kind == "read-only":
        assert stat.S_IMODE(report.stat().st_mode) == 0o444
        check("analyze", report.read_text())
    else:
        assert report.is_dir() and list(report.iterdir()) == []
    assert temporaries(run_dir) == []


def test_an_interrupted_commands_teardown_adds_nothing_to_its_one_line(tmp_path):
    """Ctrl-C while ``analyze --jobs`` maps hosts kills the pool's workers; the pool's wake-up pipe was then closed
    under the exit callbacks threading runs as the interpreter ends, and Python printed "Exception ignored in:
    <module 'threading'>" and an OSError traceback after the one line (the process-group case of the test above,
    seen under load). Here the interrupt comes from inside the command and an exit callback fails the same way:
    still only the one line, and 130."""
    src = cpu_fixture("train_step") / "plugins" / "profile" / "run1" / "cpu.xplane.pb"
    script = textwrap.dedent(f"""
        import signal, sys, threading
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job inherits SIGINT ignored
        from tracekit.run import pod
        def interrupted_map(*args, **kwargs):
            def teardown():  # what the pool's closed wake-up pipe raised
                raise OSError(9, "Bad file descriptor")
            threading._register_atexit(teardown)
            signal.raise_signal(signal.SIGINT)
        pod.analyze = interrupted_map
        sys.argv = ["tracekit", "analyze", {str(src)!r}, "-o", "r.json"]
        from tracekit.cli.app import entry
        entry()
        """)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 130, p.stderr
    assert p.stderr.strip() == "tracekit: interrupted", p.stderr
    assert os.listdir(tmp_path) == []
