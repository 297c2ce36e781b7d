"""TPU op times from the device clock, on the plane's own timeline.

A TPU ``XLA Ops`` event carries two clocks: its event time (``XLine.timestamp_ns`` + ``offset_ps``, the host's
clock: the ``XLA Modules`` and ``Steps`` lines are on it too) and the stats ``device_offset_ps`` /
``device_duration_ps`` (the chip's own clock). xprof takes the device clock for TPU ops wherever it has it (its
aggregated trace and all-reduce timings read ``device_offset_ps`` as the op's start and ``device_duration_ps`` as
its length); the host stamps can be corrupt: on the shared v6e trace runs of ops sit up to 200 ms late on the host
clock and snap back later (three ops stamped at the same picosecond, host durations of 0 where the chip ran 8 ms,
a ``copy-done`` of 171 ms on the host that took 194 ms on the chip), which made 5 GB host-offload copies look
faster than PCIe.

So, per device plane:

1. **A robust linear fit** ``host = h0 + slope * (device - d0)`` over the plane's op events that carry both clocks:
   the densest :data:`TOL_PS`-wide band of (host - device) offsets seeds the inliers, then a least-squares line
   through the inliers, re-selected three times (events more than :data:`TOL_PS` off the line are the corrupt
   ones and do not pull it). A fit whose slope is more than :data:`MAX_RATE_ERROR` away from 1 is not a clock
   mapping (another unit or epoch): the plane keeps its host times.
2. **Op starts** become the fitted image of their device start; durations are the device durations (as before).
3. **Module executions and steps** (host clock only) are re-spanned around their ops: the ops each contained by
   host time (the clock they share) keep that container, whose new span runs from its first op's new start to its
   last op's new end, keeping the lead-in and tail the host clock showed (a container with no op keeps its times).
   So every op stays inside the module run and step it was in, and those extents follow the chip's clock.
"""
from __future__ import annotations


import numpy as np

from tracekit.ingest.order import last_at_or_before
from tracekit.records import record

#: residual (ps) beyond which an event's host stamp does not follow the plane's clock mapping (1 ms; the host and
#: device clocks of a sane TPU trace agree within tens of microseconds after the fit)
TOL_PS = 1_000_000_000
#: largest |slope - 1| accepted as the same time unit on both clocks
MAX_RATE_ERROR = 1e-3


@record(frozen=True)
class ClockFit:
    """``host_ps = h0 + slope * (device_ps - d0)``; ``inliers`` of ``events`` followed it within :data:`TOL_PS`."""
    d0: int
    h0: int
    slope: float
    inliers: int
    events: int

    def map(self, device_ps: np.ndarray) -> np.ndarray:
        """Device-clock times (ps) on the plane's timeline (int64 ps)."""
        rel = (np.asarray(device_ps, np.int64) - self.d0).astype(np.float64)
        return self.h0 + np.rint(rel * self.slope).astype(np.int64)


def fit(host_ps: np.ndarray, device_ps: np.ndarray) -> ClockFit | None:
    """The robust fit of host vs device time (module doc), or None when there is nothing to fit or the clocks do
    not run at the same rate."""
    h = np.asarray(host_ps, np.int64)
    d = np.asarray(device_ps, np.int64)
    n = len(h)
    if not n:
        return None
    d0, h0 = int(np.median(d)), int(np.median(h))
    x, y = (d - d0).astype(np.float64), (h - h0).astype(np.float64)
    r = np.sort(y - x)
    ends = _counts_up_to(r, r + TOL_PS)
    k = int(np.argmax(ends - np.arange(n)))
    slope, icpt = 1.0, float(np.median(r[k:ends[k]]))
    inl = np.abs(y - x - icpt) <= TOL_PS
    for _ in range(3):
        xi, yi = x[inl], y[inl]
        if len(xi) >= 2 and np.ptp(xi) > 0:
            xm, ym = xi.mean(), yi.mean()
            slope = float(((xi - xm) * (yi - ym)).sum() / ((xi - xm) ** 2).sum())
            icpt = float(ym - slope * xm)
        elif len(xi):
            slope, icpt = 1.0, float(np.median(yi - xi))
        new = np.abs(y - (slope * x + icpt)) <= TOL_PS
        if not new.any() or np.array_equal(new, inl):
            break
        inl = new
    if not np.isfinite(slope) or abs(slope - 1.0) > MAX_RATE_ERROR:
        return None
    return ClockFit(d0=d0, h0=h0 + int(round(icpt)), slope=slope, inliers=int(inl.sum()), events=n)


def _counts_up_to(r: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``np.searchsorted(r, q, "right")`` for sorted ``r`` and sorted ``q`` of the same length, as one stable
    merge of the two runs (linear, where the search is n log n): each ``q[i]`` lands after every ``r`` value at or
    below it and after ``q[:i]``, so its place in the merge less ``i`` is the count."""
    merged = np.argsort(np.concatenate([r, q]), kind="stable")
    return np.flatnonzero(merged >= len(r)) - np.arange(len(q))


def respan(start: np.ndarray, dur: np.ndarray, host_start: np.ndarray, host_end: np.ndarray,
           new_start: np.ndarray, new_end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """New (start, duration) of host-clock containers (module executions, steps: ``start``/``dur``) whose ops
    moved from [host_start, host_end) to [new_start, new_end): each op belongs to the latest container that starts
    at or before its host start and has not ended before it (ties at a boundary go to the later container)."""
    start = np.asarray(start, np.int64)
    end = start + np.asarray(dur, np.int64)
    if not len(start) or not len(host_start):
        return start.copy(), end - start
    order = np.argsort(start, kind="stable")
    s_sorted = start[order]
    pos = last_at_or_before(s_sorted, host_start)  # (linear when the op starts are in order, as they are)
    ok = pos >= 0
    cont = np.where(ok, order[np.maximum(pos, 0)], 0)
    ok &= host_start <= end[cont]
    c = cont[ok]
    m = len(start)
    big = np.iinfo(np.int64).max
    first_h, first_n = np.full(m, big), np.full(m, big)
    last_h, last_n = np.full(m, -big), np.full(m, -big)
    np.minimum.at(first_h, c, host_start[ok])
    np.minimum.at(first_n, c, new_start[ok])
    np.maximum.at(last_h, c, host_end[ok])
    np.maximum.at(last_n, c, new_end[ok])
    has = first_n != big
    lead = np.maximum(first_h - start, 0)
    tail = np.maximum(end - last_h, 0)
    out_s = np.where(has, first_n - lead, start)
    out_e = np.where(has, np.maximum(last_n + tail, first_n - lead), end)
    return out_s, out_e - out_s


def settle(stage: dict, clock: list) -> ClockFit | None:
    """Put one TPU plane's staged rows (``stage``: line kind -> :class:`tracekit.ingest.events.Acc`) on the device
    clock where its ops carry it. ``clock``: per op chunk, (the chunk, its rows with both device stats, their device
    start, their host end). Op starts become the fitted device starts, module executions and steps are re-spanned
    around their ops, and the plane's own ``Async XLA Ops`` windows (host clock) are left out: the windows are then
    paired from the device-clocked ``-start``/``-done`` ops. Returns the fit (None: the plane keeps its host times)."""
    if not clock:
        return None
    f = fit(np.concatenate([ch["start_ps"][m] for ch, m, _, _ in clock]),
            np.concatenate([ds[m] for _, m, ds, _ in clock]))
    if f is None:
        return None
    hs, he, ns, ne = [], [], [], []
    for ch, m, ds, hend in clock:
        s = ch["start_ps"].copy()
        s[m] = f.map(ds[m])
        hs.append(ch["start_ps"][m])
        he.append(hend[m])
        ns.append(s[m])
        ne.append(s[m] + ch["duration_ps"][m])
        ch["start_ps"] = s
    moved = [np.concatenate(v) for v in (hs, he, ns, ne)]
    for key in ("modules", "steps"):
        for ch in stage[key].chunks:
            ch["start_ps"], ch["duration_ps"] = respan(ch["start_ps"], ch["duration_ps"], *moved)
    stage["async"].chunks = []
    return f
