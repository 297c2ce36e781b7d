"""Limits counted while decoding, before the memory is spent (both decoders alike), and running out of memory as
one line that says how much the trace needs and what to do.

The crafted traces are the kinds of file that used to cost far more than their size: empty lines (1 MB took 20 s and
1.7 GB), empty planes, empty events, one event with a huge number of stats, and a large file under --max-events
(refused only after every event had been decoded)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner

import tracekit
from conftest import cpu_fixture, varint
from tracekit.errors import TraceError
from tracekit.ingest import limits, pywire, wire

EXE = [sys.executable, "-m", "tracekit.cli"]


def ld(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def vi(field: int, n: int) -> bytes:
    return varint(field << 3) + varint(n)


def empty_lines(size: int) -> bytes:
    return ld(1, ld(2, b"/device:TPU:0") + b"\x1a\x00" * (size // 2))


def empty_planes(size: int) -> bytes:
    return b"\x0a\x00" * (size // 2)


def empty_events(size: int) -> bytes:
    line = vi(1, 1) + ld(2, b"XLA Ops") + b"\x22\x00" * (size // 2)
    return ld(1, vi(1, 1) + ld(2, b"/device:TPU:0") + ld(3, line))


def op_events(size: int) -> bytes:
    """Valid device ops (8 bytes each): a trace within the work budget, just large."""
    md = ld(4, vi(1, 1) + ld(2, vi(1, 1) + ld(2, b"fusion.1")))
    ev = ld(4, vi(1, 1) + vi(2, 5) + vi(3, 7))
    line = vi(1, 1) + ld(2, b"XLA Ops") + vi(3, 1) + ev * (size // len(ev))
    return ld(1, vi(1, 1) + ld(2, b"/device:TPU:0") + md + ld(3, line))


def many_stats(n: int) -> bytes:
    """One event carrying ``n`` stats."""
    ev = vi(1, 1) + vi(3, 7) + ld(4, vi(1, 1) + vi(4, 5)) * n
    line = vi(1, 1) + ld(2, b"XLA Ops") + ld(4, ev)
    return ld(1, vi(1, 1) + ld(2, b"/device:TPU:0") + ld(3, line))


HWM_CHILD = textwrap.dedent("""
    import atexit, os, sys
    def report():  # the peak RSS of this process image (VmHWM: since exec, unlike wait4's, which counts the fork)
        hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM")).split()[1]
        os.write(2, f"\\nVmHWM {hwm}\\n".encode())
    atexit.register(report)
    from tracekit.cli import main
    sys.argv = ["tracekit"] + sys.argv[1:]
    main()
    """)


def measured(args, env=None) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in bytes) of `tracekit ARGS` in a child process."""
    p = subprocess.run([sys.executable, "-c", HWM_CHILD, *map(str, args)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, **(env or {})})
    err, _, hwm = p.stderr.rstrip().rpartition("\nVmHWM ")
    return p.returncode, err.strip(), int(hwm.split()[0]) * 1024


@pytest.fixture(scope="module")
def baseline_rss(tmp_path_factory) -> int:
    """Peak RSS of `tracekit info` on a small real trace: what the interpreter and the imports take."""
    if not os.path.exists("/proc/self/status"):
        pytest.skip("needs /proc (Linux)")
    code, err, rss = measured(["info", cpu_fixture("big_matmul")])
    assert code == 0, err
    return rss


@pytest.mark.parametrize("decoder", ["c", "python"])
@pytest.mark.parametrize("craft,size", [(empty_lines, 1 << 20), (empty_planes, 1 << 20), (empty_events, 3 << 20)])
def test_crafted_traces_are_refused_before_the_memory_is_spent(tmp_path, baseline_rss, craft, size, decoder):
    """Each costs less memory than the work budget of its size before it is refused (it used to cost 0.2-1.7 GB
    per MB and be accepted)."""
    if decoder == "c" and wire.wirec is None:
        pytest.skip("C decoder not built")
    f = tmp_path / "crafted.xplane.pb"
    f.write_bytes(craft(size))
    code, err, rss = measured(["info", f], env={"TRACEKIT_NO_C": "1" if decoder == "python" else ""})
    assert code == 2 and "work" in err and len(err.strip().splitlines()) == 1, err
    assert rss - baseline_rss < limits.work_budget(size), f"peak RSS {(rss - baseline_rss) / 2**20:.0f} MiB"


def test_work_budget_is_proportional_and_stated():
    """The budget is WORK_PER_BYTE bytes of work per input byte (plus a floor); the real traces need 3-14."""
    assert limits.WORK_PER_BYTE == 64
    assert limits.work_budget(1 << 20) == 64 * (1 << 20) + limits.WORK_FLOOR
    for case in ("train_step", "sharded8", "allreduce_exposed", "matvec_b1", "big_matmul"):
        data = (cpu_fixture(case) / "plugins/profile/run1/cpu.xplane.pb").read_bytes()
        planes, _ = wire.read_space(data)
        per_byte = limits.work_of(planes) / len(data)
        assert per_byte < limits.WORK_PER_BYTE / 3, (case, per_byte)  # real traces stay far from the budget


def test_budget_can_be_lifted(tmp_path, monkeypatch):
    f = tmp_path / "lines.xplane.pb"
    f.write_bytes(empty_lines(100_000))  # 50,000 lines: 154 MB of work for 100 kB, over the 38 MB budget
    with pytest.raises(TraceError, match="TRACEKIT_WORK_PER_BYTE=0"):
        tracekit.load(f)
    monkeypatch.setenv("TRACEKIT_WORK_PER_BYTE", "0")
    assert tracekit.load(f) is not None
    monkeypatch.delenv("TRACEKIT_WORK_PER_BYTE")
    assert tracekit.load(f, max_bytes=None) is not None


@pytest.mark.parametrize("decoder", ["c", "python"])
def test_max_events_stops_the_decoder_before_it_decodes(tmp_path, baseline_rss, decoder):
    """A 40 MB file of 5 M valid ops under --max-events 1000: refused while the framing is read, before any event
    column exists (it used to decode all 5 M events first, then refuse)."""
    if decoder == "c" and wire.wirec is None:
        pytest.skip("C decoder not built")
    f = tmp_path / "ops.xplane.pb"
    f.write_bytes(op_events(40 << 20))
    code, err, rss = measured(["info", f, "--max-events", "1000"],
                              env={"TRACEKIT_NO_C": "1" if decoder == "python" else ""})
    assert code == 2 and "more than 1,000 events" in err, err
    limit = (40 << 20) + (24 << 20)  # the file (mapped, or read), and no event column
    assert rss - baseline_rss < limit, f"peak RSS {(rss - baseline_rss) / 2**20:.0f} MiB over the baseline"


def test_stats_count_too(tmp_path):
    """One event with 100,000 stats: --max-events 1000 allows 64 stats per event (it used to pass any number)."""
    f = tmp_path / "stats.xplane.pb"
    f.write_bytes(many_stats(100_000))
    for impl in ("c", "python"):
        if impl == "c" and wire.wirec is None:
            continue
        read = wire.read_space_c if impl == "c" else wire.read_space_python
        with pytest.raises(pywire.LimitError) as e:
            read(f.read_bytes(), max_events=1000)
        assert e.value.args[0] == "stats" and e.value.args[2] == 64_000
    with pytest.raises(TraceError, match="more than 64,000 stats"):
        tracekit.load(f, max_events=1000)
    assert tracekit.load(f, max_events=2000) is not None  # 128,000 allowed


def test_limits_are_the_same_in_both_decoders():
    """Same counts, same order: a limit stops both decoders at the same item, with the same numbers."""
    if wire.wirec is None:
        pytest.skip("C decoder not built")
    data = (cpu_fixture("sharded8") / "plugins/profile/run1/cpu.xplane.pb").read_bytes()
    planes, _ = wire.read_space(data)
    events = sum(line.n_events for p in planes for line in p.lines)
    work = limits.work_of(planes)
    for kw in ({"max_events": events - 1}, {"max_events": 10}, {"budget": work // 2}, {"budget": 5000}):
        errs = []
        for read in (wire.read_space_c, wire.read_space_python):
            with pytest.raises(pywire.LimitError) as e:
                read(data, **kw)
            errs.append(e.value.args)
        assert errs[0] == errs[1], (kw, errs)
    for read in (wire.read_space_c, wire.read_space_python):  # exactly at the limits: accepted
        read(data, max_events=events)


# ---- running out of memory -------------------------------------------------------------------------------------

def cli(*args):
    from tracekit.cli import main
    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stderr


@pytest.mark.parametrize("where", ["decoder", "frames", "rules"])
def test_memory_error_is_one_line_with_the_options(where, monkeypatch):
    """Wherever memory runs out: one line, exit 2, how much the trace needs, and --jobs / --dask / a bigger machine
    (it used to say "not a valid XSpace trace (MemoryError)", or exit 3)."""
    from tracekit.analysis import rules
    from tracekit.ingest import trace

    def oom(*a, **k):
        raise MemoryError()
    target = {"decoder": (wire, "read_space"), "frames": (trace, "_host"), "rules": (rules, "evidence_rows")}[where]
    monkeypatch.setattr(*target, oom)
    code, err = cli("analyze", cpu_fixture("train_step"))
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line and line.startswith("tracekit: error:"), err
    for needle in ("out of memory", "needs about", "--jobs", "--dask", "more memory"):
        assert needle in line, (needle, line)
    assert "not a valid" not in line


OOM_CHILD = textwrap.dedent("""
    import resource, sys
    from tracekit.cli import main
    import pandas, numpy  # imported before the limit: only the analysis has to fit in it
    from tracekit import pipeline
    vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[2]), resource.RLIM_INFINITY))
    sys.argv = ["tracekit", "analyze", sys.argv[1]]
    main()
    """)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc are Linux's")
def test_a_real_memory_limit_is_one_line(tmp_path):
    """A valid 8 MB trace (1 M ops) under an address-space limit 96 MB above what the imports took."""
    f = tmp_path / "ops.xplane.pb"
    f.write_bytes(op_events(8 << 20))
    p = subprocess.run([sys.executable, "-c", OOM_CHILD, str(f), str(96 << 20)], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "TRACEKIT_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"})
    assert p.returncode == 2, p.stderr[-2000:]
    line = p.stderr.strip()
    assert "\n" not in line and "out of memory" in line and "--jobs" in line, line
