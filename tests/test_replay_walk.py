"""The replay's loops in C (``tracekit.analysis.replay.walkc``) against the same loops in Python
(:mod:`tracekit.analysis.replay.walk`): identical orders and identical starts, ends and reasons on every committed
fixture with several steps and on the shared v6e trace, with measured and with changed op times; bad arrays are
refused with ValueError, not read out of bounds. The replay's own correctness (measured times reproduce the
measured step against a raw-XSpace oracle) is tests/test_whatif_replay.py."""
from __future__ import annotations

import numpy as np
import pytest

import tracekit
from conftest import FIXTURES, shared_trace
from tracekit.analysis.replay import engine, walk
from tracekit.analysis.replay import whatif as wi
from tracekit.analysis.replay.graph import DONE, END, WIN

pytestmark = pytest.mark.skipif(walk.walkc is None, reason="the C extension was not built")

#: one fixture of each kind of graph: async dispatch on 8 devices, a loop, collectives on a mesh, and the what-if
#: captures (batch scaling, cores, a slow op)
CASES = [FIXTURES / "cpu" / "async_dp8", FIXTURES / "cpu" / "fori_loop", FIXTURES / "collectives" / "mesh4x4"] + [
    FIXTURES / "whatif" / c for c in ("batch_b256_r1", "cores_2core_r1", "slowop_slow_r1")]


def _setups():
    for case in CASES:
        yield case.name, wi.setup(tracekit.load(case))
    yield "v6e", wi.setup(tracekit.load(shared_trace("tpu/v6e-4_jax_inference.xplane.pb")))


def _variants(j, rng):
    n = len(j.start)
    work = np.concatenate([g.work for g in j.graphs]).astype(np.int64)
    slack = np.concatenate([g.slack for g in j.graphs]).astype(np.int64)
    yield "measured", work, slack, np.zeros(n, bool), j.g_core
    yield "half work", work // 2, slack, np.zeros(n, bool), j.g_core
    yield "random", (work * rng.uniform(0, 3, n)).astype(np.int64), (slack * rng.uniform(0, 2, n)).astype(
        np.int64), rng.random(n) < 0.2, (j.g_core * rng.uniform(0, 2, len(j.g_core))).astype(np.int64)


def test_c_and_python_walk_the_same_order_and_times():
    rng = np.random.default_rng(7)
    seen = 0
    for name, s in _setups():
        st = engine.structure(s.joined)
        n, G = len(s.joined.start), len(s.joined.g_members)
        assert sorted(st["order"].tolist()) == list(range(2 * n + G)), name  # every quantity exactly once
        # the order respects every dependency (each quantity after all it waits for)
        src, dst, key = engine.edges(st, n, G, np.diff(st["pptr"]))
        pos = np.empty(2 * n + G, np.int64)
        pos[st["order"]] = np.arange(2 * n + G)
        assert (pos[src] < pos[dst]).all(), name
        ptr = np.r_[0, np.cumsum(np.bincount(src, minlength=2 * n + G))]
        dep = dst[np.argsort(src * (8 * (n + G) + 8) + key, kind="stable")]
        assert walk.order(ptr, dep, use_c=True).tolist() == walk.order(ptr, dep, use_c=False).tolist(), name
        for what, work, slack, free, core in _variants(s.joined, rng):
            c = walk.run(st, work, slack, free, core, (END, DONE, WIN), use_c=True)
            p = walk.run(st, work, slack, free, core, (END, DONE, WIN), use_c=False)
            for k, a, b in zip(("S", "E", "why_s", "why_e"), c, p):
                assert np.array_equal(a, b), (name, what, k)
        seen += 1
    assert seen >= 3


def test_a_cycle_is_refused_by_both():
    ptr, dep = np.array([0, 1, 2, 2]), np.array([1, 0])  # 0 -> 1 -> 0, 2 alone
    for use_c in (True, False):
        with pytest.raises(ValueError, match="2 of 3 quantities in a dependency cycle"):
            walk.order(ptr, dep, use_c=use_c)


def test_the_c_loops_refuse_arrays_that_point_outside():
    with pytest.raises(ValueError, match="out of range"):
        walk.walkc.order(np.array([0, 1], np.int64), np.array([5], np.int64), np.empty(1, np.int64))
    with pytest.raises(ValueError, match="does not span"):
        walk.walkc.order(np.array([0, 3], np.int64), np.array([0], np.int64), np.empty(1, np.int64))
    st = {"order": np.array([0, 1]), "pptr": np.array([0, 1]), "psrc": np.array([9]), "pkind": np.array([END]),
          "gptr": np.array([0]), "gmem": np.zeros(0, np.int64), "has_child": np.zeros(1, bool),
          **{k: np.full(1, -1) for k in walk.NODE_FIELDS}}
    with pytest.raises(ValueError, match="out of range"):
        walk.run(st, np.zeros(1), np.zeros(1), np.zeros(1, bool), np.zeros(0), (END, DONE, WIN), use_c=True)
    st["psrc"] = np.array([0])
    with pytest.raises(ValueError, match="expected 1 items"):
        walk.run(st, np.zeros(2), np.zeros(1), np.zeros(1, bool), np.zeros(0), (END, DONE, WIN), use_c=True)


@pytest.mark.parametrize("seed", range(5))
def test_step_rows_ranges_equal_the_latest_window_search(seed):
    """graph._in_windows (each step's rows as a range of the device's sorted starts) against the search it replaces:
    each row to the latest window starting at or before it, kept when it starts before that window's end."""
    from tracekit.analysis.replay import graph
    rng = np.random.default_rng(seed)
    start = np.sort(rng.integers(0, 1000, 500))
    ws = np.sort(rng.choice(np.arange(0, 1000, 7), 30))  # (duplicates: several windows may start together)
    we = ws + rng.integers(-5, 120, len(ws))  # (overlapping, short, even negative windows)
    pos = np.searchsorted(ws, start, "right") - 1
    ok = pos >= 0
    ok &= start < we[np.maximum(pos, 0)]
    rows, win = graph._in_windows(start, ws, we)
    assert rows.tolist() == np.flatnonzero(ok).tolist() and win.tolist() == pos[ok].tolist()


def test_tracekit_no_c_runs_the_python_loops_with_the_same_whatif():
    """``TRACEKIT_NO_C=1`` (README, Install) turns the replay's C loops off; the what-if answer is the same."""
    import json
    import os
    import subprocess
    import sys
    case = FIXTURES / "cpu" / "async_dp8"
    code = ("import json, sys, tracekit; from tracekit.analysis.replay import walk, whatif as wi; "
            "out = wi.whatif(tracekit.load(sys.argv[1]), wi.Request()); "
            "print(json.dumps([walk.HAVE_C, out['predicted_step_ps'], out['replayed_step_ps']]))")
    got = {}
    for flag in ("0", "1"):
        env = {**os.environ, "TRACEKIT_NO_C": flag}
        r = subprocess.run([sys.executable, "-c", code, str(case)], env=env, capture_output=True, text=True,
                           check=True)
        got[flag] = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["0"][0] is True and got["1"][0] is False
    assert got["0"][1:] == got["1"][1:]


@pytest.mark.parametrize("n", [0, 1, 300])
def test_operand_lookup_equals_the_row_by_row_loop(n):
    """The replay graph's data edges look each (program, op) up once: the (row, operand) pairs equal the loop over
    every row, in the same order."""
    from tracekit.analysis.replay import graph
    rng = np.random.default_rng(n)
    names = np.array(["fusion", "dot.1", "all-reduce-start", "copy"], object)
    pid = rng.integers(1, 3, n).astype(np.uint64)
    opname = names[rng.integers(0, len(names), n)]
    prod = {(1, "fusion"): ("dot.1", "copy"), (2, "dot.1"): ("fusion",), (2, "copy"): ()}
    rows = np.sort(rng.choice(n, size=n // 2, replace=False)) if n else np.zeros(0, np.int64)
    want = [(int(i), x) for i in rows.tolist() for x in prod.get((int(pid[i]), opname[i]), ())]
    dq, dname = graph._operand_rows(prod, rows, pid, opname)
    assert list(zip(dq.tolist(), dname.tolist())) == want and dname.dtype == object
