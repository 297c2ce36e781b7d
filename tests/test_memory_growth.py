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


def test_memory_does_not_grow_over_repeated_analyses(tmp_path):
    path = tmp_path / "two_tpus.xplane.pb"
    _trace(path)
    for _ in range(2):  # warm-up: imports, the rule files, the chip table, library caches
        pipeline.analyze(str(path))
    gc.collect()
    tracemalloc.start()
    try:
        held = []
        for _ in range(8):
            rep = pipeline.analyze(str(path))
            assert rep.data["summary"]["op_executions"] == DEVICES * STEPS * OPS_PER_STEP
            del rep
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    growth = max(held) - held[0]
    assert growth < MAX_GROWTH_BYTES, f"memory held after each analysis (bytes): {held}"
