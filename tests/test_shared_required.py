"""../shared/traces: the tests that need its third-party traces skip on a fresh clone without it, and fail instead
when ``TRACEKIT_REQUIRE_SHARED=1`` (set by ``.ci/run``: CI always has the folder beside the clone, so a third-party
check can never quietly stop running there)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, shared_trace

#: the third-party traces of ../shared/traces (its README); tests that glob the folder use whatever is there, so
#: this test is what fails in CI when the folder is missing or incomplete
SHARED_FILES = ["tpu/v6e-4_jax_inference.xplane.pb", "gpu/v100x8_tf_bert.xplane.pb", "gpu/mi300x8_jax_conv3d.xplane.pb",
                "gpu/mi300x_jax_gemm.xplane.pb", "bad/v6e-4_jax_inference.utf8_mangled.xplane.pb"]
#: one test that needs a shared trace (through conftest.shared_trace)
ONE = "tests/test_real_traces.py::test_shared_trace_loads[tpu/v6e-4_jax_inference.xplane.pb]"


@pytest.mark.parametrize("rel", SHARED_FILES)
def test_every_shared_trace_is_there(rel):
    assert shared_trace(rel).stat().st_size > 0


def _pytest(tmp_path, require: str | None):
    empty = tmp_path / "no-traces"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "TRACEKIT_REQUIRE_SHARED"}
    env["TRACEKIT_SHARED_TRACES"] = str(empty)
    if require is not None:
        env["TRACEKIT_REQUIRE_SHARED"] = require
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rsf", ONE],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("require", [None, "", "0"])
def test_a_fresh_clone_without_shared_skips(tmp_path, require):
    p = _pytest(tmp_path, require)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "1 skipped" in p.stdout and "failed" not in p.stdout, p.stdout[-3000:]
    assert "not available" in p.stdout, p.stdout[-3000:]


def test_ci_fails_when_shared_is_missing(tmp_path):
    p = _pytest(tmp_path, "1")
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    assert "1 failed" in p.stdout and "skipped" not in p.stdout, p.stdout[-3000:]
    assert "TRACEKIT_REQUIRE_SHARED=1" in p.stdout and "v6e-4_jax_inference" in p.stdout, p.stdout[-3000:]


def test_ci_script_requires_shared():
    text = (ROOT / ".ci" / "run").read_text()
    lines = text.splitlines()
    at = [i for i, line in enumerate(lines) if line.strip() == "export TRACEKIT_REQUIRE_SHARED=1"]
    run = [i for i, line in enumerate(lines) if line.strip().startswith("python -m pytest")]
    assert at and run and at[0] < run[-1], text
