"""A few hundred files of the XSpace mutation run (tests/xspace_mutation.py; the manual run of 2,000 and its figures
are in docs/reliability.md): byte flips, truncation, wrong length prefixes and damage nested in the ``Hlo Proto``
payloads, each file analyzed by the command in its own process. Criteria: only documented exit codes (0, 1, 2; a 2
with exactly one line on stderr), no case over 30 s, peak RSS at most 4x the decoded size + 200 MB.

``TRACEKIT_FUZZ=long`` runs the manual run's 2,000 files. The runner is its own process: a child forked from
pytest would count pytest's memory as its own."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

LONG = os.environ.get("TRACEKIT_FUZZ", "ci") == "long"
FILES = 2000 if LONG else 200  # 68 s here with 2 at a time on a 2-core machine at load 5 (178 s at load 8)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork and wait4's ru_maxrss in KiB: Linux")
def test_xspace_mutation_run():
    if not (FIXTURES / "cpu" / "big_matmul").exists():
        pytest.skip("CPU fixtures not captured")
    parallel = max(1, min(4, os.cpu_count() or 1))
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "xspace_mutation.py"), "--files", str(FILES),
                        "--seed", "7", "--parallel", str(parallel)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=FILES * 35 + 120, cwd=ROOT)
    assert p.stdout.strip(), p.stderr[-3000:]
    figures = json.loads(p.stdout)
    assert not figures["failures"], figures["failures"][:10]
    assert p.returncode == 0, p.stderr[-3000:]
    codes = figures["exit_codes"]
    assert set(codes) <= {"0", "1", "2"} and sum(codes.values()) == FILES
    # the mutations reach both outcomes, and every mutator ran
    assert codes.get("0") and codes.get("2"), codes
    assert set(figures["by_mutator"]) == {"flip", "truncate", "length", "hlo", "tree"}
    assert figures["max_seconds"] < 30 and figures["max_rss_over_bound"] <= 1.0


MUTATED = sorted((ROOT / "tests" / "data" / "mutated").glob("*.xplane.pb"))


@pytest.mark.parametrize("path", MUTATED, ids=[p.name.split(".")[0] for p in MUTATED])
def test_damaged_hlo_found_by_the_long_run(path, tmp_path):
    """Files of the 2,000-file run (seed 7) that stopped the command with an internal error (exit 3): a dot whose
    operand is not in its module, shapes whose element counts no array has (a parameter count past float's range,
    a token count of thousands of digits); and one of the long property run of tests/test_fuzz.py
    (test_bit_flips, big_matmul with bit 0 of byte 445 flipped): two buffer allocations of one module with the
    same index. They are analyzed now, the damaged parts left out, with nothing on stderr."""
    out = tmp_path / "report.json"
    p = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(path), "--format", "json", "-o",
                        str(out)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr == "" and json.loads(out.read_text())["schema"] == "tracekit.report/1"
