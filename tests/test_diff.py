"""``tracekit diff``: matching and classification on tiny hand-made frames, then two real JAX CPU captures
recorded here (the same jitted function, a 4x larger matmul in the second run, 12 steps each) where the diff must flag the
slowed ops and exit 1, while a trace compared with itself exits 0."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from click.testing import CliRunner

from tracekit.analysis import diff
from tracekit.report import diff as diff_report
from tracekit.cli import main


def side(rows):
    return pd.DataFrame(rows, columns=["module", "op", "opcode", "shape", "occurrences", "total_ps", "mean_ps"])


BASE = side([("jit_f", "dot.1", "dot", "f32[8,8]", 10, 10_000_000, 1_000_000),
             ("jit_f", "fusion.3", "fusion", "f32[8]", 10, 5_000_000, 500_000),
             ("jit_f", "copy.2", "copy", "f32[4]", 10, 1_000_000, 100_000),
             ("jit_f", "gone", "", "", 1, 7_000_000, 7_000_000)])
NEW = side([("jit_f", "dot.1", "dot", "f32[8,8]", 10, 30_000_000, 3_000_000),   # 3x slower
            ("jit_f", "fusion.4", "fusion", "f32[8]", 10, 5_100_000, 510_000),   # renumbered, same opcode+shape
            ("jit_f", "copy.2", "copy", "f32[4]", 10, 300_000, 30_000),          # faster, but by < min_time
            ("jit_g", "fresh", "add", "f32[2]", 2, 4_000_000, 2_000_000)])


def test_match_by_name_then_opcode_and_shape():
    m = diff.match_ops(BASE, NEW).set_index("op")
    assert m.loc["dot.1", "match"] == "name" and m.loc["copy.2", "match"] == "name"
    assert m.loc["fusion.3", "match"] == "shape" and m.loc["fusion.3", "new_op"] == "fusion.4"
    assert m.loc["gone", "match"] == "base_only" and m.loc["fresh", "match"] == "new_only"
    assert len(m) == 5


@pytest.mark.parametrize("threshold,min_time_ps,expect", [
    (0.1, 1_000_000, {"dot.1": "regression", "fusion.3": "unchanged", "copy.2": "unchanged", "gone": "removed",
                      "fresh": "added"}),
    (0.1, 50_000, {"dot.1": "regression", "copy.2": "improvement"}),
    (5.0, 0, {"dot.1": "unchanged", "fusion.3": "unchanged"}),          # 3x slower is under a 500% threshold
    (0.01, 0, {"fusion.3": "regression"}),                             # +2% against a 1% threshold
])
def test_classify(threshold, min_time_ps, expect):
    m = diff.classify(diff.match_ops(BASE, NEW), threshold, min_time_ps).set_index("op")
    for op, status in expect.items():
        assert m.loc[op, "status"] == status, op
    assert list(m["status"]) == sorted(m["status"], key=diff.STATUSES.index)  # regressions first


def test_impact_is_the_cost_in_new():
    m = diff.classify(diff.match_ops(BASE, NEW), 0.1, 1_000_000).set_index("op")
    assert m.loc["dot.1", "impact_ps"] == 2_000_000 * 10
    assert m.loc["fresh", "impact_ps"] == 4_000_000 and m.loc["gone", "impact_ps"] == -7_000_000


# ------------------------------------------------------------------------------------------------ real captures
RECORD = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp

    out, n = sys.argv[1], int(sys.argv[2])

    @jax.jit
    def step(a, b):
        return jnp.tanh(a @ b) + 1.0

    a = jnp.ones((n, n), jnp.float32)
    b = jnp.ones((n, n), jnp.float32)
    jax.block_until_ready(step(a, b))  # compile outside the trace
    opts = jax.profiler.ProfileOptions()
    opts.python_tracer_level = 0
    jax.profiler.start_trace(out, profiler_options=opts)
    for i in range(12):  # 5 executions a side cannot reach p < 0.01 in the diff's Mann-Whitney test
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            jax.block_until_ready(step(a, b))
    jax.profiler.stop_trace()
""")


@pytest.fixture(scope="module")
def captures(tmp_path_factory):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    root = tmp_path_factory.mktemp("diff")
    script = root / "record.py"
    script.write_text(RECORD)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    out = {}
    for name, n in (("small", 128), ("large", 512)):
        logdir = root / name
        subprocess.run([sys.executable, str(script), str(logdir), str(n)], check=True, env=env, timeout=300,
                       capture_output=True)
        out[name] = logdir
    return out


def test_diff_flags_the_slowed_op_and_exits_1(captures, tmp_path):
    js, md = tmp_path / "d.json", tmp_path / "d.md"
    res = CliRunner().invoke(main, ["diff", str(captures["small"]), str(captures["large"]), "-o", str(js),
                                    "-o", str(md)])
    assert res.exit_code == 1, res.output
    d = json.loads(js.read_text())
    assert d["schema"] == diff_report.SCHEMA and d["failed"]
    reg = [r for r in d["ops"] if r["status"] == "regression"]
    assert reg, d["ops"]
    top = reg[0]  # the matmul, 64x the FLOPs: the largest impact
    assert top["module"] == "jit_step" and top["match"] == "name"
    assert top["base_shape"] != top["new_shape"]
    assert top["change"] > 1 and top["impact_ps"] > 0
    assert d["step_time"]["status"] == "regression"
    text = md.read_text()
    assert text.startswith("## tracekit diff: ❌ FAILED") and top["op"].replace("_", "\\_") in text


def test_diff_text_output_lists_the_regression(captures):
    res = CliRunner().invoke(main, ["diff", str(captures["small"]), str(captures["large"])])
    assert res.exit_code == 1
    assert "Regressions:" in res.output and "FAILED" in res.output and "jit_step" in res.output


def test_identical_traces_pass(captures):
    res = CliRunner().invoke(main, ["diff", str(captures["small"]), str(captures["small"]), "--format", "json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert not d["failed"] and d["summary"]["regression"] == 0 and d["summary"]["added"] == 0
    assert {r["status"] for r in d["ops"]} == {"unchanged"} and d["step_time"]["change"] == 0


def test_thresholds_can_hide_the_regression(captures):
    res = CliRunner().invoke(main, ["diff", str(captures["small"]), str(captures["large"]), "--threshold", "1000"])
    assert res.exit_code == 0, res.output
    assert "passed" in res.output


def test_diff_refuses_formats_it_cannot_write(captures, tmp_path):
    res = CliRunner().invoke(main, ["diff", str(captures["small"]), str(captures["small"]), "-o",
                                    str(tmp_path / "d.sarif")])
    assert res.exit_code == 2 and not (tmp_path / "d.sarif").exists()


@pytest.mark.parametrize("base,new,status", [(side([]), NEW, "added"), (BASE, side([]), "removed")])
def test_one_empty_side(base, new, status):
    m = diff.classify(diff.match_ops(base, new), 0.1, 1_000_000)
    assert len(m) == 4 and set(m["status"]) == {status}
