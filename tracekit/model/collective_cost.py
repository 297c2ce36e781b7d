"""The hierarchical collective cost model: the time a collective needs on the machine's links, level by level.

V = bytes of the full array (see :mod:`tracekit.model.collective_hlo`), N = participants. Per level (book part 3
"Sharded Matrices" for TPUs, part 12 "How to Think About GPUs" for GPUs; every bandwidth from the chip table):

TPU ICI, the chips of the group inside one slice (n of them), over the torus axes the group spans; each axis
gives W_a = 2 x link (both directions: the axis is whole and has its wraparound) or 1 x link (one way), divided by
the stride when the group takes every k-th chip of the axis (k interleaved groups share the links)::

    all-gather, reduce-scatter   V (n-1)/n / sum(W_a)        latency floor: sum over axes of hops x T_hop
    all-reduce                   2 V (n-1)/n / sum(W_a)      hops: n_a/2 with wraparound, n_a - 1 without
    all-to-all                   V / (4 sum(W_a))            (book: V/(4W) on a bidirectional ring, V global)
    collective-permute           max over links of the bytes routed over it / link   (dimension-ordered routes)

TPU DCN between S slices (n chips of the group in each; W = DCN per chip), after reducing inside the slice::

    all-gather, reduce-scatter   (V/n) (S-1)/S / W           all-reduce 2x;  all-to-all V (S-1) / (S^2 n W)

GPU inside a node (k GPUs of the group): NVLink/NVSwitch W = the GPU's egress; AMD Infinity Fabric is a full
mesh, one link per peer, so W = (k-1) x link (an MI300X pair has one link)::

    all-gather, reduce-scatter   V (k-1)/k / W               all-reduce 2x
    all-to-all                   V (k-1) / (W k^2)           (book: B (N-1)/(W N^2), B global)

GPU across M nodes (W = the NIC per GPU, k NICs of the group per node)::

    all-gather, reduce-scatter   (V/k) (M-1)/M / W           all-reduce 2x;  all-to-all V (M-1) / (M^2 k W)

A collective that spans levels costs the sum of its phases (reduce-scatter inside, across, all-gather back):
each phase is max(bandwidth term, latency floor), latency = steps x the level's per-hop latency (TPU ICI ~1 us
per hop; NCCL/RCCL per-step latencies for NVLink, xGMI and the network; unknown latencies give no floor). The
book treats the GPU levels as overlapping (max instead of sum): :attr:`Prediction.overlapped_ps` is that bound.

What this does not model: contention between different collectives running at once, in-network reduction
(SHARP), NCCL's protocol choice, compression, the twisted tori of large TPU slices, stragglers (start skew is
measured apart, see :mod:`tracekit.analysis.collectives`).
"""
from __future__ import annotations

import math

from tracekit.model.topology import Topology
from tracekit.records import record
from tracekit.units import fmt_num

NAN = float("nan")
ICI, DCN, NVLINK, XGMI, NIC, MEMORY = "ici", "dcn", "nvlink", "xgmi", "ib", "memory"
SLOW_LEVELS = (DCN, NIC)
AXES = "xyz"


@record(frozen=True)
class Phase:
    """One level of a collective: ``time_ps`` = max(``bandwidth_ps``, ``latency_ps``); ``formula`` with numbers."""

    level: str
    time_ps: float
    bandwidth_ps: float
    latency_ps: float
    formula: str


@record(frozen=True)
class Prediction:
    """Predicted time of one device's collective. ``time_ps``: sum of the phases (NaN: unknown, ``reason`` says
    why); ``bound``: the level of the longest phase ('ici', 'dcn', 'nvlink', 'xgmi', 'ib', 'memory', with
    ' latency' when its latency floor decides it); ``span``: what the group crosses; ``fast_ps``: the same
    collective with the group inside one slice / node (only when it crosses DCN or the node network)."""

    time_ps: float
    bound: str
    phases: tuple
    span: str
    fast_ps: float = NAN
    reason: str = ""
    participants: int = 0

    @property
    def overlapped_ps(self) -> float:
        return max((p.time_ps for p in self.phases), default=NAN)

    @property
    def crosses_slow_level(self) -> bool:
        return any(p.level in SLOW_LEVELS for p in self.phases)

    @property
    def formula(self) -> str:
        return " + ".join(f"{p.level}: {p.formula}" for p in self.phases)


def unknown(reason: str, span: str = "") -> Prediction:
    return Prediction(NAN, "unknown", (), span, NAN, reason)


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _phase(level: str, nbytes: float, bw: float, steps: float, hop_s: float, formula: str) -> Phase:
    bw_ps = nbytes / bw * 1e12 if nbytes > 0 else 0.0
    lat_ps = steps * hop_s * 1e12 if _finite(hop_s) and steps > 0 else 0.0
    return Phase(level, max(bw_ps, lat_ps), bw_ps, lat_ps, formula)


def _total(phases: list, span: str, fast: float = NAN, n: int = 0) -> Prediction:
    if not phases:
        return Prediction(0.0, "none", (), span or "one device: nothing to send", NAN, "", n)
    if any(not math.isfinite(p.time_ps) for p in phases):
        bad = next(p for p in phases if not math.isfinite(p.time_ps))
        return Prediction(NAN, "unknown", tuple(phases), span, NAN, f"no {bad.level} bandwidth: {bad.formula}", n)
    top = max(phases, key=lambda p: p.time_ps)
    bound = top.level + (" latency" if top.latency_ps > top.bandwidth_ps else "")
    return Prediction(sum(p.time_ps for p in phases), bound, tuple(phases), span, fast, "", n)


def _b(x: float) -> str:
    return fmt_num(x, "B")


def _bw(x: float) -> str:
    return fmt_num(x, "B/s") if _finite(x) else "unknown B/s"


# ----------------------------------------------------------------------------------------------------- torus

@record(frozen=True)
class _Axis:
    """One axis of a device mesh a collective group spans."""

    axis: int
    count: int
    wrap: bool
    stride: int
    hops: int


def _torus_span(group, topo: Topology):
    """(axes the group spans inside its slice, chips per slice n, slices S, irregular?)."""
    per_slice: dict = {}
    for g in group:
        p = topo.place(g)
        per_slice.setdefault(p.group, set()).add(p.coords)
    slices = sorted(per_slice)
    chips = per_slice[slices[0]]
    irregular = any(per_slice[s] != chips for s in slices)
    axes = []
    for a, size in enumerate(topo.shape):
        vals = sorted({c[a] for c in chips})
        if len(vals) < 2:
            continue
        gaps = {b - a_ for a_, b in zip(vals, vals[1:])}
        stride = gaps.pop() if len(gaps) == 1 else 1
        irregular |= bool(gaps)
        wrap = len(vals) == size and bool(topo.wrap[a]) if a < len(topo.wrap) else False
        axes.append(_Axis(a, len(vals), wrap, stride, len(vals) // 2 if wrap else vals[-1] - vals[0]))
    irregular |= math.prod(ax.count for ax in axes) != len(chips)
    return axes, len(chips), len(slices), irregular


def _axes_text(axes, irregular: bool) -> str:
    if irregular:
        return "irregular group (one ring, no wraparound)"
    return "+".join(f"{AXES[ax.axis] if ax.axis < 3 else ax.axis}({ax.count}{',wrap' if ax.wrap else ''}"
                    f"{f',stride {ax.stride}' if ax.stride > 1 else ''})" for ax in axes)


def _ici_bw(axes, irregular: bool, link: float) -> tuple[float, float]:
    """(sum of the axes' bandwidths, hops) inside a slice."""
    if irregular or not axes:
        return link, 0.0
    return sum((2.0 if ax.wrap else 1.0) * link / ax.stride for ax in axes), float(sum(ax.hops for ax in axes))


def _level_bytes(kind: str, v: float, n: int) -> tuple[float, str, float]:
    """(bytes over the level's bandwidth, formula head, latency steps multiplier) of a ring-style phase."""
    if kind == "all-reduce":
        return 2 * v * (n - 1) / n, f"2·{_b(v)}·{n - 1}/{n}", 2.0
    if kind == "all-to-all":
        return v / 4, f"{_b(v)}/4", 1.0
    return v * (n - 1) / n, f"{_b(v)}·{n - 1}/{n}", 1.0


def _torus(kind: str, v: float, group, topo: Topology, chip) -> Prediction:
    axes, n, s, irregular = _torus_span(group, topo)
    link, hop = chip.link_bw_bytes_per_s, chip.hop_latency_s
    span = f"{ICI} {_axes_text(axes, irregular)}" if n > 1 else "one chip"
    phases = []
    if n > 1:
        w, hops = _ici_bw(axes, irregular, link)
        if irregular:
            hops = n - 1
        v_in = v / s if kind == "all-to-all" else v
        nb, head, mult = _level_bytes(kind, v_in, n)
        phases.append(_phase(ICI, nb, w, hops * mult, hop, f"{head} / {_bw(w)}"))
    if s > 1:
        span += f" + {DCN} {s} slices"
        dcn = chip.nic_bw_bytes_per_s
        if kind == "all-to-all":
            nb, head = v * (s - 1) / (s * s * n), f"{_b(v)}·{s - 1}/({s}²·{n})"
            steps = 1.0
        else:
            nb, head, steps = _level_bytes(kind, v / n, s)
            steps *= s - 1
            head = head.replace(_b(v / n), f"({_b(v)}/{n})")
        phases.append(_phase(DCN, nb, dcn if _finite(dcn) else NAN, steps, chip.nic_latency_s,
                             f"{head} / {_bw(dcn)} per chip"))
    fast = NAN
    if s > 1 and len(group) <= topo.devices_per_group:
        n_all = n * s
        w, _ = _ici_bw(axes, irregular, link) if n > 1 else (link, 0.0)
        nb, _, _ = _level_bytes(kind, v, n_all)
        fast = nb / w * 1e12
    return _total(phases, span, fast, len(group))


def _route(src, dst, shape, wrap):
    """Directed links (slice-local) a dimension-ordered route from ``src`` to ``dst`` coordinates crosses."""
    cur, links = list(src), []
    for a, size in enumerate(shape):
        d = dst[a] - cur[a]
        if d == 0:
            continue
        if a < len(wrap) and wrap[a]:
            fwd = d % size
            step, count = (1, fwd) if fwd <= size - fwd else (-1, size - fwd)
        else:
            step, count = (1 if d > 0 else -1), abs(d)
        for _ in range(count):
            nxt = (cur[a] + step) % size
            links.append((tuple(cur), a, step))
            cur[a] = nxt
    return links


def _torus_permute(v: float, pairs, gid: int, topo: Topology, chip) -> Prediction:
    load: dict = {}
    routes = []
    for s_, t_ in pairs:
        ps, pt = topo.place(s_), topo.place(t_)
        if ps.chip == pt.chip:
            routes.append((s_, t_, None, 0))
            continue
        if ps.group != pt.group:
            key = ("dcn", ps.chip)
            load[key] = load.get(key, 0.0) + v
            routes.append((s_, t_, [key], 1))
            continue
        links = [("ici", ps.group, *x) for x in _route(ps.coords, pt.coords, topo.shape, topo.wrap)]
        for key in links:
            load[key] = load.get(key, 0.0) + v
        routes.append((s_, t_, links, len(links)))
    mine = [r for r in routes if gid in (r[0], r[1])]
    if not mine:
        return unknown("the device is not a source or target of this permute")
    phases, worst_hops = [], 0
    for s_, t_, links, hops in mine:
        if not links:
            continue
        if links[0][0] == "dcn":
            w = chip.nic_bw_bytes_per_s
            phases.append(_phase(DCN, load[links[0]], w if _finite(w) else NAN, 1, chip.nic_latency_s,
                                 f"{_b(load[links[0]])} / {_bw(w)} per chip ({s_}->{t_})"))
        else:
            worst = max(load[k] for k in links)
            w = chip.link_bw_bytes_per_s
            phases.append(_phase(ICI, worst, w, hops, chip.hop_latency_s,
                                 f"{_b(worst)} on the busiest link / {_bw(w)}, {hops} hop(s) ({s_}->{t_})"))
        worst_hops = max(worst_hops, hops)
    if not phases:
        return Prediction(0.0, "none", (), "same chip", NAN, "", len(mine))
    top = max(phases, key=lambda p: p.time_ps)  # the device's own send and receive run at once
    span = f"{top.level} {worst_hops} hop(s)"
    return _total([top], span, NAN, 2)


# ----------------------------------------------------------------------------------------------------- GPU

def _up_level(topo: Topology) -> str:
    return {"switch": NVLINK, "mesh": XGMI, "shared": MEMORY}.get(topo.kind, NVLINK)


def _up_bw(topo: Topology, chip, k: int) -> float:
    if topo.kind == "mesh":
        return max(k - 1, 1) * chip.link_bw_bytes_per_s
    return chip.egress_bw_bytes_per_s


def _nodes(kind: str, v: float, group, topo: Topology, chip) -> Prediction:
    per_node: dict = {}
    for g in group:
        p = topo.place(g)
        per_node[p.group] = per_node.get(p.group, 0) + 1
    m = len(per_node) if topo.kind != "shared" else 1
    k = max(per_node.values()) if topo.kind != "shared" else len(group)
    up = _up_level(topo)
    span = f"{up} {k} GPU(s)" if topo.kind != "shared" else f"{MEMORY} {k} devices"
    phases = []
    hop = chip.hop_latency_s if topo.kind != "shared" else NAN
    if k > 1:
        w = _up_bw(topo, chip, k)
        if kind == "all-to-all":
            vi = v / m
            nb, head, steps = vi * (k - 1) / (k * k), f"{_b(vi)}·{k - 1}/{k}²", 1.0
        else:
            nb, head, mult = _level_bytes(kind, v, k)
            steps = mult * (k - 1)
        what = f"{k - 1} link(s) x {_bw(chip.link_bw_bytes_per_s)}" if topo.kind == "mesh" else _bw(w)
        phases.append(_phase(up, nb, w, steps, hop, f"{head} / {what}"))
    if m > 1:
        span += f" + {NIC} {m} nodes"
        nic = chip.nic_bw_bytes_per_s
        if kind == "all-to-all":
            nb, head, steps = v * (m - 1) / (m * m * k), f"{_b(v)}·{m - 1}/({m}²·{k})", 1.0
        else:
            nb, head, mult = _level_bytes(kind, v / k, m)
            head = head.replace(_b(v / k), f"({_b(v)}/{k})")
            steps = mult * (m - 1)
        phases.append(_phase(NIC, nb, nic if _finite(nic) else NAN, steps, chip.nic_latency_s,
                             f"{head} / {_bw(nic)} per GPU"))
    fast = NAN
    if m > 1 and len(group) <= topo.devices_per_group:
        n_all = k * m
        w = _up_bw(topo, chip, n_all)
        nb = v * (n_all - 1) / (n_all * n_all) if kind == "all-to-all" else _level_bytes(kind, v, n_all)[0]
        fast = nb / w * 1e12
    return _total(phases, span, fast, len(group))


def _nodes_permute(v: float, pairs, gid: int, topo: Topology, chip) -> Prediction:
    out_load: dict = {}
    in_load: dict = {}
    link_load: dict = {}
    nic_load: dict = {}
    for s_, t_ in pairs:
        if s_ == t_:
            continue
        ps, pt = topo.place(s_), topo.place(t_)
        if ps.group != pt.group and topo.kind != "shared":
            nic_load[s_] = nic_load.get(s_, 0.0) + v
            nic_load[("in", t_)] = nic_load.get(("in", t_), 0.0) + v
        else:
            out_load[s_] = out_load.get(s_, 0.0) + v
            in_load[t_] = in_load.get(t_, 0.0) + v
            key = (min(s_, t_), max(s_, t_), s_ < t_)
            link_load[key] = link_load.get(key, 0.0) + v
    mine = [(s_, t_) for s_, t_ in pairs if gid in (s_, t_) and s_ != t_]
    if not mine:
        return Prediction(0.0, "none", (), "no transfer", NAN, "", 1)
    phases = []
    up = _up_level(topo)
    for s_, t_ in mine:
        ps, pt = topo.place(s_), topo.place(t_)
        if ps.group != pt.group and topo.kind != "shared":
            nb = max(nic_load.get(s_, 0.0), nic_load.get(("in", t_), 0.0))
            w = chip.nic_bw_bytes_per_s
            phases.append(_phase(NIC, nb, w if _finite(w) else NAN, 1, chip.nic_latency_s,
                                 f"{_b(nb)} / {_bw(w)} per GPU ({s_}->{t_})"))
        elif topo.kind == "mesh":
            nb = link_load[(min(s_, t_), max(s_, t_), s_ < t_)]
            w = chip.link_bw_bytes_per_s
            phases.append(_phase(XGMI, nb, w, 1, chip.hop_latency_s, f"{_b(nb)} / 1 link x {_bw(w)} ({s_}->{t_})"))
        else:
            nb = max(out_load.get(s_, 0.0), in_load.get(t_, 0.0))
            w = chip.egress_bw_bytes_per_s
            phases.append(_phase(up, nb, w, 1, chip.hop_latency_s if topo.kind != "shared" else NAN,
                                 f"{_b(nb)} / {_bw(w)} ({s_}->{t_})"))
    top = max(phases, key=lambda p: p.time_ps)
    return _total([top], f"{top.level} point-to-point", NAN, 2)


# ----------------------------------------------------------------------------------------------------- entry

def predict(op, gid: int, topo: Topology, chip) -> Prediction:
    """The predicted time of collective ``op`` (:class:`tracekit.model.collective_hlo.CollectiveOp`) on global
    device ``gid`` of ``topo``, with ``chip``'s links."""
    if topo.kind == "none" or chip is None:
        return unknown(f"no interconnect known ({topo.source or 'no topology'}); pass --chip and --topology")
    v = op.global_bytes
    if not (isinstance(v, float) and math.isfinite(v)):
        return unknown(op.reason or "bytes unknown")
    kind = op.kind
    if kind in ("collective-permute", "send", "recv"):
        pairs = op.pairs
        if not pairs:
            return _one_hop(v, topo, chip, "peer not in the HLO: priced as one hop")
        return (_torus_permute if topo.kind == "torus" else _nodes_permute)(v, pairs, gid, topo, chip)
    group = op.group_of(gid) if op.groups else tuple(range(topo.size))
    if not group:
        return unknown(f"device {gid} is in none of the replica groups")
    if len(group) < 2:
        return Prediction(0.0, "none", (), "group of one: nothing to send", NAN, "", 1)
    if kind == "ragged-all-to-all":
        kind = "all-to-all"
    if kind not in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all"):
        return unknown(f"no cost model for {op.kind}")
    return (_torus if topo.kind == "torus" else _nodes)(kind, v, group, topo, chip)


def _one_hop(v: float, topo: Topology, chip, note: str) -> Prediction:
    if topo.kind == "torus":
        level, w, hop = ICI, chip.link_bw_bytes_per_s, chip.hop_latency_s
    elif topo.kind == "mesh":
        level, w, hop = XGMI, chip.link_bw_bytes_per_s, chip.hop_latency_s
    else:
        level, w = _up_level(topo), chip.egress_bw_bytes_per_s
        hop = chip.hop_latency_s if topo.kind != "shared" else NAN
    return _total([_phase(level, v, w, 1, hop, f"{_b(v)} / {_bw(w)} ({note})")], f"{level} 1 hop", NAN, 2)
