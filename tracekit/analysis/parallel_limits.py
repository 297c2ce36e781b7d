"""Where each mesh axis stands against the book's limits ("How to Scale Your Model", part 5 "How to Parallelize a
Transformer for Training"; part 12 for GPUs), from the chip table and the topology.

With C the chip's peak FLOP/s (of the dtype the dots run in), W the axis's bandwidth per chip and M the number of
torus axes its groups span (their collectives run over all of them at once: W x M):

* **data / fsdp**: the gradient all-reduce (or the weights' all-gather and the gradients' reduce-scatter) moves the
  weights once per step whatever the batch, the matmuls grow with it: communication hides under compute when the
  per-device batch B/X (tokens) exceeds ``C / (W x M)``. TPU v5p: 4.59e14 / 1.8e11 = 2,550 tokens on one axis, 850
  over three. W is the bidirectional bandwidth of one ICI link (2 x the one-way link of the chip table); on GPUs
  the GPU's NVLink egress, across nodes its NIC.
* **tensor** (size Y): the activations' all-gather / reduce-scatter grow with the batch like the matmuls, so the
  batch cancels: comms-bound when ``Y > M x F / (C / W)`` (F = d_ff): F / 2,550 per axis on v5p.
* **DCN** (an axis whose groups cross TPU slices; GPU nodes likewise over the NIC): the data-parallel limit with
  the DCN bandwidth per chip, per slice: tokens per slice (B/X x the group's chips in one slice) above ``C / W_dcn``
  (v5p: 4.59e14 / 6.25e9 = 73,440).
* **expert, pipeline, sequence, unknown**: no such limit in the book's training chapter (an expert axis's
  all-to-all and a pipeline's permutes move activations; a pipeline's cost is its bubble): none is printed.

This is not the HBM ridge point ``C / W_hbm`` (v5e: 1.97e14 / 8.1e11 = 243 FLOP/B): that one bounds each
matmul's local batch against its own memory, this one the batch against the network. On XLA:CPU's virtual
devices (shared memory, no network) the same arithmetic runs with the host's memory bandwidth: indicative only.
"""
from __future__ import annotations

import math

from tracekit.records import record
from tracekit.units import fmt_num

BOOK = "How to Scale Your Model, part 5 (training)"


@record(frozen=True)
class Limit:
    """One axis against its limit. ``kind`` batch | tensor | dcn | none; ``threshold``: tokens per device (batch),
    per slice (dcn) or the largest Y (tensor); ``value``: what the trace has; ``bound`` compute | communication |
    unknown; ``formula`` with every number in it."""

    kind: str
    level: str = ""
    peak_flops_per_s: float = math.nan
    peak_source: str = ""
    bandwidth_bytes_per_s: float = math.nan
    bandwidth_source: str = ""
    axes_spanned: int = 1
    intensity: float = math.nan
    threshold: float = math.nan
    value: float = math.nan
    bound: str = "unknown"
    formula: str = ""
    remedy: str = ""
    note: str = ""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def link_of(groups: tuple, topology, chip) -> tuple[str, float, str, int, int]:
    """(level, bandwidth per chip W, its source, torus axes spanned M, chips per slice/node in a group) of an axis
    whose device groups are ``groups``, on ``topology`` with ``chip``'s links."""
    if topology is None or chip is None or not groups:
        return "unknown", math.nan, "unknown: no topology or chip", 1, 0
    g = groups[0]
    kind = topology.kind
    places = [topology.place(d) for d in g]
    outer = {p.group for p in places}
    per = max(sum(1 for p in places if p.group == x) for x in outer)
    src = chip.sources or {}
    if kind == "torus":
        if len(outer) > 1:
            return "dcn", chip.nic_bw_bytes_per_s, src.get("nic_bw_bytes_per_s", "chip table"), 1, per
        first = [p for p in places if p.group == min(outer)]
        m = sum(1 for a in range(len(topology.shape)) if len({p.coords[a] for p in first}) > 1)
        w = 2 * chip.link_bw_bytes_per_s
        return "ici", w, f"2 x one-way ICI link {fmt_num(chip.link_bw_bytes_per_s, 'B/s')} (bidirectional; " \
                         f"{src.get('link_bw_bytes_per_s', 'chip table')})", max(m, 1), per
    if kind in ("switch", "mesh"):
        if len(outer) > 1:
            return "ib", chip.nic_bw_bytes_per_s, src.get("nic_bw_bytes_per_s", "chip table"), 1, per
        level = "nvlink" if kind == "switch" else "xgmi"
        return level, chip.egress_bw_bytes_per_s, src.get("egress_bw_bytes_per_s", "chip table"), 1, per
    if kind == "shared":
        return "memory", chip.link_bw_bytes_per_s, ("virtual CPU devices share the host's memory: "
                                                     + src.get("link_bw_bytes_per_s", "memory bandwidth")), 1, per
    return "unknown", math.nan, f"unknown: {topology.source or 'no interconnect known'}", 1, per


def _ok(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def limit(role: str, size: int, groups: tuple, topology, chip, peak: tuple, tokens: float, d_ff: float) -> Limit:
    """The :class:`Limit` of one axis (``peak``: (C, its source); ``tokens``: per-device batch; ``d_ff``: F)."""
    if role not in ("data", "fsdp", "tensor"):
        why = {"pipeline": "a pipeline's permutes move one stage's activations; its cost is the bubble",
               "expert": "an expert axis's all-to-all moves activations, not weights"}.get(role, "")
        article = "an" if role[:1] in ("a", "e", "i", "o", "u") else "a"
        return Limit("none", note=f"no limit in the book's training chapter for {article} {role} axis"
                     + (f" ({why})" if why else ""))
    level, w, wsrc, m, per = link_of(groups, topology, chip)
    c, csrc = peak
    if not (_ok(c) and _ok(w)):
        return Limit("batch" if role != "tensor" else "tensor", level, c, csrc, w, wsrc, m,
                     note="unknown: " + ("no peak FLOP/s" if not _ok(c) else "no bandwidth for this link")
                     + " (pass --chip and --topology)")
    alpha = c / w
    cw = f"C / W = {fmt_num(c, 'FLOP/s')} / {fmt_num(w, 'B/s')} = {alpha:,.0f}"
    if level in ("dcn", "ib"):
        per_slice = tokens * per if _ok(tokens) else math.nan
        bound = "unknown" if not _ok(per_slice) else "compute" if per_slice > alpha else "communication"
        formula = (f"tokens per {'slice' if level == 'dcn' else 'node'} B/X x {per} = {_n(per_slice)} vs "
                   f"{cw} (book: batch per ICI domain > C / W_dcn)")
        remedy = (f"a per-slice batch of more than {alpha:,.0f} tokens ({alpha / max(per, 1):,.0f} per device), "
                  "fewer slices on this axis, or this axis inside a slice (ICI) and another across DCN")
        return Limit("dcn", level, c, csrc, w, wsrc, 1, alpha, alpha, per_slice, bound, formula,
                     remedy if bound == "communication" else "")
    if role in ("data", "fsdp"):
        thr = alpha / m
        bound = "unknown" if not _ok(tokens) else "compute" if tokens > thr else "communication"
        formula = (f"per-device batch B/X = {_n(tokens)} tokens vs C / (W x M) = {fmt_num(c, 'FLOP/s')} / "
                   f"({fmt_num(w, 'B/s')} x {m}) = {thr:,.0f} ({BOOK}: compute-bound when B/X > C / W_ici"
                   f"{', / M axes' if m > 1 else ''})")
        remedy = ""
        if bound == "communication" and _ok(tokens):
            glob = tokens * size  # the tokens this axis's groups hold together
            most = math.floor(glob / thr)
            fewer = (f"{most} device(s) on this axis instead of {size} for the same {glob:,.0f} tokens"
                     if most >= 1 else f"no device count on this axis gets there with its {glob:,.0f} tokens "
                     f"(< {thr:,.0f})")
            remedy = (f"{thr / tokens:.1f}x the per-device batch (above {thr:,.0f} tokens), or {fewer}"
                      + (", or spread the axis over more torus axes (M)" if level == "ici" and m < 3 else "")
                      + ("; with FSDP, mixing in tensor parallelism lowers the batch needed to "
                         "alpha^2 / (2 F) tokens per device (book: 2,550^2 / 2F)"
                         if role == "fsdp" and _ok(d_ff) else "")
                      + "; or overlap the collectives with compute")
        return Limit("batch", level, c, csrc, w, wsrc, m, alpha, thr, tokens, bound, formula, remedy)
    ymax = m * d_ff / alpha if _ok(d_ff) else math.nan
    bound = "unknown" if not _ok(ymax) else "communication" if size > ymax else "compute"
    formula = (f"Y = {size} vs M x F / (C / W) = {m} x {_n(d_ff)} / {alpha:,.0f} = {_n(ymax)} ({BOOK}: "
               "comms-bound when Y > M_Y x F / (C / W_ici))")
    remedy = ""
    if bound == "communication":
        most = math.floor(ymax)
        keep = (f"at most {most}-way tensor parallelism on {m} torus axis(es) for d_ff = {_n(d_ff)}" if most >= 2
                else f"d_ff = {_n(d_ff)} carries no tensor parallelism on this link (Y <= {_n(ymax)})")
        remedy = (f"{keep}; a d_ff of at least {size * alpha / m:,.0f} would carry Y = {size}; move the rest of this "
                  "axis to data/FSDP, or spread it over more torus axes")
    return Limit("tensor", level, c, csrc, w, wsrc, m, alpha, ymax, float(size), bound, formula, remedy)


def _n(x) -> str:
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        return "unknown"
    return f"{x:,.0f}" if abs(x) >= 10 else f"{x:.3g}"
