"""benchmarks/run.py runs end to end on a tiny tiling and prints its table (no timing assertions)."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, shared_trace


def test_benchmark_quick_prints_table(tmp_path):
    src = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--no-xprof", "--src", str(src),
                        "--sizes", "20000,40000", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "machine:" in out and "cores" in out and "Python" in out
    head = next(line for line in out.splitlines() if line.lstrip().startswith("events"))
    for col in ("tool", "wall s", "CPU s", "peak RSS MB", "analyze/xprof CPU", "info/analyze CPU"):
        assert col in head
    rows = [line.split() for line in out.splitlines() if "tracekit analyze" in line or "tracekit info" in line]
    assert len([r for r in rows if r[0].replace(",", "").isdigit()]) == 4  # one table row per size and command
    assert "linearity tracekit analyze" in out
    for stage in ("decode", "roofline", "timeline", "rules", "report", "total in-process"):
        assert stage in out
    assert (tmp_path / "results.json").exists() and (tmp_path / "table.txt").exists()
    assert not list(ROOT.glob("benchmarks/*.xplane.pb"))  # nothing written into the repository
