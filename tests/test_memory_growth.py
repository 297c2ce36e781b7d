"""Memory does not grow over repeated analyses in one process (a notebook, a training job's hook, a service).

One analysis of a synthetic 2-device TPU trace of 15,000 op executions allocates tens of MB; the memory still held
(``tracemalloc``, after a garbage collection) once an analysis has returned must not grow from one analysis to
the next. A cache that kept each analysis' per-device groupings alive (as a global cache keyed by ``id(df)``
once did) holds about 0.4 MB per analysis of this trace; what the libraries keep (interned strings, type caches)
is a few KB. The bound sits between the two.
"""
from __future__ import annotations

import gc
import tracemalloc

from tracekit import pipeline
from tracekit.ingest.synth import SpaceBuilder

DEVICES, STEPS, OPS_PER_STEP = 2, 25, 300
#: growth allowed over the measured analyses (all of them together)
MAX_GROWTH_BYTES = 256 * 1024


def _trace(path) -> None:
    b = SpaceBuilder(hostname="h")
    for d in range(DEVICES):
        p = b.plane(f"/device:TPU:{d}", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0,
                                         "peak_hbm_bw_gigabytes_per_second": 1640.0})
        ops, steps = p.line("XLA Ops"), p.line("Steps")
        t = 0
        for s in range(STEPS):
            start = t
            for i in range(OPS_PER_STEP):
                kind = ("fusion", "convolution", "all-reduce")[i % 3]
                name = f"{kind}.{i % 7}"
                dur = 900 + 37 * (i % 11)
                ops.event(f"%{name} = f32[8]{{0}} {kind}(f32[8]{{0}} %p)", t, dur, display=name,
                          md_stats={"program_id": 7, "flops": 1.0e6 * (i % 5), "bytes_accessed": 4.0e4})
                t += dur + 100 * (i % 4)  # idle gaps of several sizes
            steps.event(str(s), start, t - start, stats={"step_num": s})
            t += 5_000
    b.write(path)


def _interpreter_tables(snap) -> int:
    """Bytes of blocks of 1 MiB or more allocated by a ``sys.intern`` call: CPython's table of interned strings,
    which doubles (one block) whenever it fills, at whatever call happens to intern the string that fills it. It
    belongs to the interpreter, is never freed and grows once per doubling, not per analysis."""
    out = 0
    for st in snap.statistics("lineno"):
        frame = st.traceback[0]
        if st.size >= 1 << 20 and "intern(" in _source_line(frame.filename, frame.lineno):
            out += st.size
    return out


def _source_line(path: str, lineno: int) -> str:
    """One line of a source file, read without a cache (linecache's would be memory held between samples)."""
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if i == lineno:
                    return line
    except OSError:
        pass
    return ""


def _held_after_each(run, times: int = 8) -> list[int]:
    """Bytes still allocated (tracemalloc, after a collection) after each of ``times`` calls of ``run``, less
    the interpreter's interned-string table (:func:`_interpreter_tables`)."""
    for _ in range(2):  # warm-up: imports, the rule files, the chip table, library caches
        run()
    gc.collect()
    tracemalloc.start()
    try:
        held = []
        for _ in range(times):
            run()
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0] - _interpreter_tables(tracemalloc.take_snapshot()))
    finally:
        tracemalloc.stop()
    return held


def test_memory_does_not_grow_over_repeated_analyses(tmp_path):
    path = tmp_path / "two_tpus.xplane.pb"
    _trace(path)

    def run():
        rep = pipeline.analyze(str(path))
        assert rep.data["summary"]["op_executions"] == DEVICES * STEPS * OPS_PER_STEP

    held = _held_after_each(run)
    growth = max(held) - held[0]
    assert growth < MAX_GROWTH_BYTES, f"memory held after each analysis (bytes): {held}"


def test_memory_does_not_grow_over_repeated_inventories(tmp_path):
    """``tracekit info``'s header scan, repeated (a notebook listing many traces)."""
    from tracekit.ingest import inventory
    path = tmp_path / "two_tpus.xplane.pb"
    _trace(path)

    def run():
        assert inventory.scan(str(path))["device_events"] == DEVICES * STEPS * (OPS_PER_STEP + 1)

    held = _held_after_each(run)
    assert max(held) - held[0] < MAX_GROWTH_BYTES // 4, f"memory held after each scan (bytes): {held}"
