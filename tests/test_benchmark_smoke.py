"""benchmarks/run.py runs end to end on a tiny tiling and prints its table (no timing assertions)."""
from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, shared_trace


def test_benchmark_quick_prints_table(tmp_path):
    src = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "--quick", "--no-xprof", "--src", str(src),
                        "--sizes", "0,20000,40000", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert "machine:" in out and "cores" in out and "Python" in out
    head = next(line for line in out.splitlines() if line.lstrip().startswith("events"))
    for col in ("tool", "wall s", "CPU s", "peak RSS MB", "analyze/xprof CPU", "info/analyze CPU"):
        assert col in head
    rows = [line.split() for line in out.splitlines() if "tracekit analyze" in line or "tracekit info" in line]
    assert len([r for r in rows if r[0].replace(",", "").isdigit()]) == 6  # one table row per size and command
    table = out[out.index("results (best"):]
    # the source trace as it is (size 0) also measures the hook's analysis child and the import floor
    assert table.count("tracekit hook child") == 1 and table.count("import numpy, pandas") == 1
    assert "linearity tracekit analyze" in out
    code = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    goals = out[out.index("goals (issue 40), code "):].splitlines()
    assert code and code in goals[0], goals[0]  # the code revision measured
    assert goals[1].split() == ["what", "measured", "goal", "verdict", "load", "avg", "(1", "min)"], goals[1]
    rows = goals[3:goals.index(next(g for g in goals[3:] if g.startswith("load average at start")))]
    # every row of issue 40's goal table, measured or saying how to measure it
    assert len([g for g in rows if "info / analyze CPU" in g and g.split("<= 0.5x")[1].split()[0] in ("met", "NOT")]) \
        == 3, rows  # info at each size, with its verdict and the load average after it
    hook = next(g for g in rows if g.startswith("  hook analysis child"))
    assert "CPU-s = floor " in hook and "<= floor + 0.3 CPU-s" in hook and (" met " in hook or " NOT met " in hook)
    assert float(hook.split()[-1].split("-")[-1]) >= 0  # the load average
    assert any("(analyze - floor) / xprof get_hlo_stats CPU" in g and "needs xprof" in g for g in rows), rows
    assert any("1.5 M device events" in g and "not measured (--sizes 0,1.5e6)" in g for g in rows), rows
    assert any("memory per event" in g and "<= 150 B/event" in g for g in rows), rows
    assert any(g.startswith("  pytest") and "not measured (--pytest runs it)" in g for g in rows), rows
    for stage in ("decode", "roofline", "timeline", "rules", "report", "total in-process"):
        assert stage in out
    assert (tmp_path / "results.json").exists() and (tmp_path / "table.txt").exists()
    assert not list(ROOT.glob("benchmarks/*.xplane.pb"))  # nothing written into the repository


def test_tiled_trace_is_more_steps_of_the_same_work(tmp_path):
    """benchmarks/tile.py's copies are new executions later in time on both clocks: three copies give exactly
    three times the op rows, steps and trace-reported FLOPs of the source, each device's ops stay in time order,
    and every copy's module executions carry run ids of their own (so no execution looks three times as long)."""
    import numpy as np

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import tile
    from tracekit.ingest.trace import load

    src = shared_trace("tpu/v6e-4_jax_inference.xplane.pb")
    a = load(src)
    out = tmp_path / "t3.xplane.pb"
    out.write_bytes(tile.tile(src.read_bytes(), 3 * int((a.ops["source"] == "xla_ops").sum())))
    b = load(out)
    assert len(b.ops) == 3 * len(a.ops) and len(b.steps) == 3 * len(a.steps)
    assert np.nansum(b.ops["trace_flops"]) == 3 * np.nansum(a.ops["trace_flops"])
    runs_a = a.ops.groupby("device", observed=True)["run_id"].nunique()
    runs_b = b.ops.groupby("device", observed=True)["run_id"].nunique()
    assert (runs_b > 2.5 * runs_a).all()
    st, dev = b.ops["start_ps"].to_numpy(), b.ops["device"].array.codes
    assert not ((st[1:] < st[:-1]) & (dev[1:] == dev[:-1])).any()  # the device clock moved with the copy
