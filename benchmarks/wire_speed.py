"""Events per second of tracekit.ingest.wire's C and Python decoders (and of a bare upb parse), on a tiled real trace.

    python benchmarks/wire_speed.py [SRC.xplane.pb] [--events 1500000] [--repeat 5] [--keep OUT.xplane.pb]

SRC defaults to ../shared/traces/tpu/v6e-4_jax_inference.xplane.pb; it is tiled to about --events device
events with benchmarks/tile.py (the tiled file is cached under --keep, default /tmp)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from tile import tile  # noqa: E402
from tracekit.ingest import wire  # noqa: E402
from tracekit.proto import xplane_pb2  # noqa: E402
from tracekit.threads import default_threads  # noqa: E402


def best_of(fn, repeat):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", nargs="?", default=str(ROOT.parent / "shared" / "traces" / "tpu" /
                                                  "v6e-4_jax_inference.xplane.pb"))
    ap.add_argument("--events", type=int, default=1_500_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--keep", default=None, help="where to cache the tiled trace")
    ap.add_argument("--skip-python", action="store_true", help="skip the (slow) Python path")
    a = ap.parse_args()

    src = Path(a.src)
    out = Path(a.keep or f"/tmp/tracekit_tiled_{src.stem}_{a.events}.xplane.pb")
    if not out.exists():
        t = time.perf_counter()
        out.write_bytes(tile(src.read_bytes(), a.events))
        print(f"tiled {src.name} -> {out} in {time.perf_counter() - t:.1f}s")
    data = out.read_bytes()

    n = ns = None
    if wire.wirec is not None:
        # the C decoder first, while the process is fresh: its first call pays for all its page faults, as in a
        # real run (later calls may reuse memory freed by earlier ones)
        for threads in sorted({default_threads(), 1}, reverse=True):
            t = time.perf_counter()
            planes, _ = wire.read_space_c(data, threads)
            t_first = time.perf_counter() - t
            n = sum(line.n_events for p in planes for line in p.lines)
            ns = sum(len(line.stat_id) for p in planes for line in p.lines)
            del planes
            t_c, _ = best_of(lambda: wire.read_space_c(data, threads), a.repeat)
            print(f"wire C, {threads} thread(s): first call {t_first * 1e3:7.1f} ms {n / t_first / 1e6:6.1f} M events/s;"
                  f"  best of {a.repeat} {t_c * 1e3:7.1f} ms {n / t_c / 1e6:6.1f} M events/s")
    else:
        print("wire C: tracekit.ingest.wirec not built")

    t_upb, space = best_of(lambda: xplane_pb2.XSpace.FromString(data), a.repeat)
    if n is None:
        n = sum(len(line.events) for p in space.planes for line in p.lines)
        ns = sum(len(e.stats) for p in space.planes for line in p.lines for e in line.events)
    del space
    print(f"upb XSpace.FromString (parse only, no field access): {t_upb * 1e3:7.1f} ms "
          f"{n / t_upb / 1e6:6.1f} M events/s")
    if not a.skip_python:
        t_py, (planes, _) = best_of(lambda: wire.read_space_python(data), 1)
        assert sum(line.n_events for p in planes for line in p.lines) == n
        print(f"wire Python (upb objects):                           {t_py * 1e3:7.1f} ms "
              f"{n / t_py / 1e6:6.1f} M events/s")
    print(f"trace: {len(data) / 1e6:.1f} MB, {n:,} events, {ns:,} event stats")


if __name__ == "__main__":
    main()
