"""Make large realistic traces by tiling a real trace's device timelines.

    python benchmarks/tile.py SRC.xplane.pb OUT.xplane.pb --events 1500000

Every device plane's lines are repeated back to back (each copy shifted by the span of the original line, on the
host clock of the event times and on the device clock of TPU ops' ``device_offset_ps`` stats alike, and each copy's
module executions given run ids of their own), so the result has the same ops, metadata, HLO and per-op mix as the
source, just more steps of it: each copy's steps cost what the source's do. Host planes are kept as they are
(once)."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tracekit.proto import xplane_pb2  # noqa: E402
from tracekit.ingest.xspace import device_of  # noqa: E402

#: event stats that hold a time on the device's own clock (shifted with the copy, like the event's offset)
DEVICE_TIME_STATS = ("device_offset_ps",)
#: event stats that identify one execution (a copy's executions are new ones: ids shifted past the plane's largest)
EXECUTION_ID_STATS = ("run_id",)


def _int(st) -> int:
    """An integer stat's value (0 when it holds another kind)."""
    kind = st.WhichOneof("value")
    return int(getattr(st, kind)) if kind in ("int64_value", "uint64_value") else 0


def _add(st, delta: int) -> None:
    """Add ``delta`` to an integer stat (a stat holding another kind is left alone)."""
    kind = st.WhichOneof("value")
    if kind in ("int64_value", "uint64_value"):
        setattr(st, kind, getattr(st, kind) + delta)


def tile(src: bytes, target_events: int) -> bytes:
    space = xplane_pb2.XSpace.FromString(src)
    dev_events = sum(len(l.events) for p in space.planes if device_of(p.name) for l in p.lines)
    reps = max(1, math.ceil(target_events / max(dev_events, 1)))
    for p in space.planes:
        if not device_of(p.name):
            continue
        clock_ids = {k for k, m in p.stat_metadata.items() if m.name in DEVICE_TIME_STATS}
        run_ids = {k for k, m in p.stat_metadata.items() if m.name in EXECUTION_ID_STATS}
        runs = 1 + max((_int(st) for line in p.lines for e in line.events for st in e.stats
                        if st.metadata_id in run_ids), default=0)
        for line in p.lines:
            if not line.events:
                continue
            first = min(e.offset_ps for e in line.events)
            span = max(e.offset_ps + e.duration_ps for e in line.events) - first
            span = span + span // 100 + 1
            originals = list(line.events)
            blob = [e.SerializeToString() for e in originals]
            for r in range(1, reps):
                shift = r * span
                for e, b in zip(originals, blob):
                    ne = line.events.add()
                    ne.MergeFromString(b)
                    ne.offset_ps = e.offset_ps + shift
                    for st in ne.stats:
                        if st.metadata_id in clock_ids:
                            _add(st, shift)
                        elif st.metadata_id in run_ids:
                            _add(st, r * runs)
    return space.SerializeToString()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--events", type=int, default=1_500_000, help="device events wanted (approximate)")
    a = ap.parse_args()
    data = tile(Path(a.src).read_bytes(), a.events)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_bytes(data)
    print(f"wrote {a.out}: {len(data) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
