"""Limits (size, events, gzip), never losing data (atomic report files, the input untouched) and determinism
(same input, same bytes: across runs, processes, hash seeds and decoder threads)."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import tracekit
from conftest import ROOT, cpu_fixture, shared_trace, varint
from tracekit import pipeline
from tracekit.cli import main as cli_main
from tracekit.fileio import write_atomic
from tracekit.options import Options
from tracekit.report.engine.host import summarize_file
from tracekit.ingest import paths as loader
from tracekit.report import render
from tracekit.errors import TraceError

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux/macOS
    resource = None

FORMATS = {"json": ".json", "markdown": ".md", "html": ".html", "sarif": ".sarif", "text": ".txt"}


def trace_file(case: str = "train_step") -> Path:
    return cpu_fixture(case) / "plugins/profile/run1/cpu.xplane.pb"


def cli_run(*args):
    """The CLI in-process: (exit code, stderr)."""
    r = CliRunner().invoke(cli_main, list(map(str, args)))
    return r.exit_code, r.stderr


def one_line_error(code, err, *needles):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error:"), err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def padded(tmp_path, size: int) -> Path:
    """A valid trace of about ``size`` bytes: a real one plus an unknown top-level field of padding."""
    data = trace_file().read_bytes()
    pad = size - len(data)
    n = pad - 6
    blob = data + bytes([15 << 3 | 2]) + varint(n) + b"\x00" * n
    f = tmp_path / "big.xplane.pb"
    f.write_bytes(blob)
    return f


# ---- size and event limits ----------------------------------------------------------------------------------------

def test_size_limit_library(tmp_path):
    f = padded(tmp_path, 3 << 20)
    with pytest.raises(TraceError) as e:
        tracekit.load(f, max_bytes=2 << 20)
    msg = str(e.value)
    assert "3.0 MiB, over the 2.0 MiB limit" in msg and "--max-size" in msg and "max_bytes=None" in msg
    assert len(tracekit.load(f, max_bytes=None).ops) == len(tracekit.load(trace_file()).ops)
    assert len(tracekit.load(f, max_bytes=4 << 20).ops) > 0


@pytest.mark.parametrize("cmd", ["analyze", "info", "ops"])
def test_size_limit_cli(tmp_path, cmd):
    f = padded(tmp_path, 3 << 20)
    one_line_error(*cli_run(cmd, f, "--max-size", 2), "over the 2.0 MiB limit", "--max-size")
    assert cli_run(cmd, f, "--max-size", 4)[0] == 0


def test_size_limit_diff(tmp_path):
    f = padded(tmp_path, 3 << 20)
    one_line_error(*cli_run("diff", trace_file(), f, "--max-size", 2), "--max-size")
    assert cli_run("diff", trace_file(), f, "--max-size", 4)[0] == 0


@pytest.mark.parametrize("cmd", ["analyze", "info", "ops"])
def test_event_limit_cli(cmd):
    path = cpu_fixture("sharded8")
    n = sum(line.n_events for p in loader.load_space(loader.resolve(path)[0])[0] for line in p.lines)
    one_line_error(*cli_run(cmd, path, "--max-events", n - 1), f"more than {n - 1:,} events", "--max-events")
    assert cli_run(cmd, path, "--max-events", n)[0] == 0


def test_event_limit_library_and_host_workers():
    with pytest.raises(TraceError, match=r"--max-events \(or max_events=None\)"):
        tracekit.load(trace_file(), max_events=10)
    with pytest.raises(TraceError, match="--max-events"):  # what each worker of a multi-host load runs
        summarize_file(str(trace_file()), "h", Options(max_events=10))
    with pytest.raises(TraceError, match="--max-events"):
        pipeline.analyze(trace_file(), max_events=10)


# ---- gzip -------------------------------------------------------------------------------------------------------

def test_gzip_input_same_as_plain(tmp_path):
    from tracekit.model import machine
    f = tmp_path / "cpu.xplane.pb.gz"
    f.write_bytes(gzip.compress(trace_file().read_bytes()))
    rec = machine.path_for(trace_file())  # (the recording machine's record goes with the trace: its peaks)
    if rec.exists():
        machine.path_for(f).write_bytes(rec.read_bytes())
    a, b = pipeline.analyze(f), pipeline.analyze(trace_file())
    assert a.data["summary"] == b.data["summary"] and a.data["top_ops"] == b.data["top_ops"]


def test_gzip_decompressed_size_is_limited(tmp_path):
    raw = trace_file().read_bytes()
    f = tmp_path / "cpu.xplane.pb.gz"
    f.write_bytes(gzip.compress(raw))
    limit = (len(raw) + f.stat().st_size) // 2  # over the compressed size, under the decompressed one
    with pytest.raises(TraceError, match="decompressed trace is over the .* limit.*--max-size"):
        tracekit.load(f, max_bytes=limit)
    assert len(tracekit.load(f, max_bytes=len(raw)).ops)


def test_gzip_bomb_is_refused_early(tmp_path):
    f = tmp_path / "bomb.xplane.pb.gz"
    f.write_bytes(gzip.compress(b"\x00" * (256 << 20), 6))  # 256 MiB of zeros in about 250 kB
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss if resource else 0
    t0 = time.perf_counter()
    with pytest.raises(TraceError, match="decompression bomb"):
        tracekit.load(f)
    assert time.perf_counter() - t0 < 20
    if resource:
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) * 1024
        assert grown < 3 * loader.GZ_BOMB_FLOOR, f"decompressing the bomb took {grown >> 20} MiB"
    one_line_error(*cli_run("analyze", f), "decompression bomb")


@pytest.mark.parametrize("how", ["truncated", "corrupt", "not-gzip", "crc", "empty"])
def test_corrupt_gzip_is_one_line(tmp_path, how):
    good = gzip.compress(trace_file().read_bytes())
    data = {"truncated": good[: len(good) // 2], "corrupt": good[:12] + bytes(range(256)) * 4,
            "not-gzip": b"plain text, not gzip", "crc": good[:-8] + b"\x00" * 8, "empty": b""}[how]
    f = tmp_path / "bad.xplane.pb.gz"
    f.write_bytes(data)
    with pytest.raises(TraceError):
        tracekit.load(f)
    one_line_error(*cli_run("analyze", f))


# ---- never lose data ------------------------------------------------------------------------------------------

@pytest.fixture
def old_reports(tmp_path):
    out = {fmt: tmp_path / f"report{ext}" for fmt, ext in FORMATS.items()}
    for fmt, p in out.items():
        p.write_text(f"old {fmt} report\n")
    return out


def assert_untouched(old_reports):
    for fmt, p in old_reports.items():
        assert p.read_text() == f"old {fmt} report\n", fmt
    assert not [p.name for p in next(iter(old_reports.values())).parent.iterdir() if p.name.startswith(".tracekit-")]


def outputs(old_reports):
    return [a for p in old_reports.values() for a in ("-o", p)]


def test_renderer_failing_midway_leaves_every_old_report(old_reports, monkeypatch):
    import tracekit.report.render.markdown as md

    def broken(report, **kw):
        md_text = real(report, **kw)
        raise RuntimeError(f"renderer broke after {len(md_text) // 2} characters")
    real = md.render
    monkeypatch.setattr(md, "render", broken)
    code, err = cli_run("analyze", trace_file(), *outputs(old_reports))
    assert code == 3 and "renderer broke" in err
    assert_untouched(old_reports)  # the JSON rendered first is not written either


def test_disk_full_midway_leaves_the_old_report(old_reports, monkeypatch):
    from tracekit import fileio
    real = open

    class HalfWriter:
        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.f.close()

        def write(self, text):
            self.f.write(text[: len(text) // 2])
            self.f.flush()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(fileio, "open", lambda *a, **k: HalfWriter(real(*a, **k)), raising=False)
    one_line_error(*cli_run("analyze", trace_file(), *outputs(old_reports)), "No space left on device")
    assert_untouched(old_reports)


def test_rename_failing_leaves_the_old_report(old_reports, monkeypatch):
    def no_rename(src, dst):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(os, "replace", no_rename)
    one_line_error(*cli_run("analyze", trace_file(), "-o", old_reports["json"]), "cannot write the report")
    assert_untouched(old_reports)


def test_interrupt_while_writing_removes_the_temporary(old_reports, monkeypatch):
    def interrupted(fd):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "fsync", interrupted)
    from tracekit import fileio
    with pytest.raises(KeyboardInterrupt):
        fileio.write_atomic(str(old_reports["json"]), "{}")
    assert_untouched(old_reports)


def test_reports_are_written_whole(old_reports):
    assert cli_run("analyze", trace_file(), *outputs(old_reports))[0] == 0
    json.loads(old_reports["json"].read_text())
    assert old_reports["html"].read_text().rstrip().endswith("</html>")
    assert not [p for p in old_reports["json"].parent.iterdir() if p.name.startswith(".tracekit-")]


def _snapshot(folder: Path) -> dict:
    """Every file under ``folder``: its hash, size and mtime."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size,
                                         p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("which", ["cpu", "v6e", "gz"])
def test_input_is_never_modified(which, tmp_path):
    if which == "cpu":
        folder = cpu_fixture("train_step")
        path = folder
    elif which == "v6e":
        path = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
        folder = path.parent
    else:
        folder = tmp_path / "in"
        folder.mkdir()
        path = folder / "cpu.xplane.pb.gz"
        path.write_bytes(gzip.compress(trace_file().read_bytes()))
    before = _snapshot(folder)
    out = tmp_path / "out"
    out.mkdir()
    args = [a for fmt, ext in FORMATS.items() for a in ("-o", out / f"r{ext}")]
    assert cli_run("analyze", path, *args)[0] == 0
    assert cli_run("info", path)[0] == 0 and cli_run("ops", path, "--format", "csv")[0] == 0
    assert _snapshot(folder) == before
    assert sorted(p.name for p in out.iterdir()) == sorted(f"r{ext}" for ext in FORMATS.values())


# ---- determinism -----------------------------------------------------------------------------------------------

def _targets():
    return {"cpu": cpu_fixture("allreduce_exposed"), "v6e": shared_trace("tpu/v6e-4_jax_inference.xplane.pb")}


@pytest.mark.parametrize("which", ["cpu", "v6e"])
def test_same_bytes_across_runs(which):
    path = _targets()[which]
    a, b = pipeline.analyze(path), pipeline.analyze(path)
    for fmt in ("json", "markdown"):
        assert render.render(a, fmt) == render.render(b, fmt), fmt


CHILD = textwrap.dedent("""
    import sys
    from tracekit.cli import main
    out = sys.argv[1]
    for name, path in zip(sys.argv[2::2], sys.argv[3::2]):
        main(["analyze", path, "-o", f"{out}/{name}.json", "-o", f"{out}/{name}.md"], standalone_mode=False)
""")


def test_same_bytes_across_processes(tmp_path):
    """Two processes with different hash seeds and decoder threads write byte-identical JSON and Markdown, equal
    to what this process renders."""
    targets = _targets()
    args = [a for name, p in targets.items() for a in (name, str(p))]
    outs = []
    for seed, threads in (("0", "1"), ("4242", "2")):
        out = tmp_path / f"seed{seed}"
        out.mkdir()
        env = {**os.environ, "PYTHONHASHSEED": seed, "TRACEKIT_THREADS": threads,
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        p = subprocess.run([sys.executable, "-c", CHILD, str(out), *args], env=env, capture_output=True, text=True,
                           timeout=300, cwd=os.getcwd())
        assert p.returncode == 0, p.stderr[-3000:]
        outs.append(out)
    for name, path in targets.items():
        here = pipeline.analyze(str(path))
        for fmt, ext in (("json", ".json"), ("markdown", ".md")):
            first = (outs[0] / f"{name}{ext}").read_bytes()
            second = (outs[1] / f"{name}{ext}").read_bytes()
            assert first == second, (name, fmt)
            assert first.decode() == render.render(here, fmt), (name, fmt)
