"""tracekit.ingest.nesting: self times and parents of events nested on a trace line, against the definition
written out pair by pair (properly nested lines), and the C walk (wirec.nest) against the Python one on any line,
partial overlaps included."""
from __future__ import annotations

import numpy as np
import pytest

from tracekit.ingest import nesting, wire


def _nested_line(rng, t0: int, t1: int, depth: int, out: list) -> None:
    """Events inside [t0, t1) that nest or follow each other, never partly overlap (appended as (start, dur))."""
    t = t0
    while t < t1 and rng.random() < 0.8:
        s = int(rng.integers(t, t1))
        e = int(rng.integers(s, t1 + 1))
        out.append((s, e - s))
        if depth and e - s > 2:
            _nested_line(rng, s, e, depth - 1, out)
        t = e if e > s else s + 1


def _oracle(line, start, dur):
    """Per event: its parent is the shortest event of its line that comes first in the line's order (earlier
    start, or the same start and longer), is still open when it starts (ends after its start) and ends at or
    after its end; the self time is the duration less the children's, at least 0."""
    n = len(start)
    end = start + dur
    parent = np.full(n, -1, np.int64)
    for i in range(n):
        best = -1
        for j in range(n):
            if j == i or line[j] != line[i] or not (start[j] <= start[i] < end[j] and end[i] <= end[j]):
                continue
            first = start[j] < start[i] or (start[j] == start[i] and (dur[j] > dur[i] or (dur[j] == dur[i] and j < i)))
            if first and (best < 0 or dur[j] < dur[best] or (dur[j] == dur[best] and
                                                             (start[j], -j) > (start[best], -best))):
                best = j
        parent[i] = best
    own = dur.astype(np.int64).copy()
    for i in range(n):
        if parent[i] >= 0:
            own[parent[i]] -= dur[i]
    return np.maximum(own, 0), parent


def _both(fn):
    """``fn()`` with the C walk (when built) and with the Python one."""
    out = []
    for c in ([True] if wire.HAVE_C else []) + [False]:
        saved = nesting.HAVE_C
        nesting.HAVE_C = c
        try:
            out.append(fn())
        finally:
            nesting.HAVE_C = saved
    return out


def test_nested_lines_equal_the_definition():
    rng = np.random.default_rng(3)
    for _ in range(150):
        ev, line = [], []
        for ln in range(int(rng.integers(1, 4))):
            part: list = []
            _nested_line(rng, 0, 400, 3, part)
            ev += part
            line += [ln * 7] * len(part)  # (any integer codes)
        perm = rng.permutation(len(ev))  # rows in any order
        start = np.array([ev[i][0] for i in perm], np.int64).reshape(-1)
        dur = np.array([ev[i][1] for i in perm], np.int64).reshape(-1)
        line = np.array([line[i] for i in perm], np.int64).reshape(-1)
        if len({(s, d, ln) for s, d, ln in zip(start, dur, line)}) < len(start):
            continue  # (two identical events: which is the parent is a tie the definition leaves open)
        want = _oracle(line, start, dur)
        for own, parent in _both(lambda: nesting.self_times(line, start, dur)):
            assert np.array_equal(parent, want[1]) and np.array_equal(own, want[0])


def test_c_walk_equals_python_walk_on_any_line():
    if not wire.HAVE_C:
        pytest.skip("tracekit.ingest.wirec is not built")
    rng = np.random.default_rng(4)
    for _ in range(300):
        n = int(rng.integers(0, 80))
        line = rng.integers(0, 3, n)
        start = rng.integers(0, 300, n).astype(np.int64)
        dur = rng.integers(0, 120, n).astype(np.int32)  # (a narrower duration column, as a caller may pass)
        c, py = _both(lambda: nesting.self_times(line, start, dur))
        assert np.array_equal(c[0], py[0]) and np.array_equal(c[1], py[1])
        assert c[0].dtype == py[0].dtype == np.int64


def test_c_walk_refuses_bad_arrays():
    if not wire.HAVE_C:
        pytest.skip("tracekit.ingest.wirec is not built")
    z = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="out of range"):
        wire.wirec.nest(np.array([0, 3], np.int64), z, z, z, z.copy(), z.copy())
    with pytest.raises(ValueError, match="int64"):
        wire.wirec.nest(np.array([0], np.int32), z, z, z, z.copy(), z.copy())
    with pytest.raises(ValueError, match="int64"):
        wire.wirec.nest(np.array([0], np.int64), z, z[:2].copy(), z, z.copy(), z.copy())
    with pytest.raises((ValueError, BufferError, TypeError)):
        ro = z.copy()
        ro.flags.writeable = False
        wire.wirec.nest(np.array([0], np.int64), z, z, z, ro, z.copy())


def test_no_c_switch_turns_the_c_walk_off():
    """``TRACEKIT_NO_C=1`` (README, Install) takes the Python walk, as it takes the Python decoder."""
    import os
    import subprocess
    import sys
    code = "from tracekit.ingest import nesting; print(nesting._NEST is None)"
    for flag, want in (("1", "True"), ("0", str(not wire.HAVE_C))):
        out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TRACEKIT_NO_C": flag},
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == want, flag
