"""Per-opcode cost formulas of tracekit's HLO cost model (the traversal, fusions and control flow live in
:mod:`tracekit.model.cost`).

Every formula is written from the op's semantics; where a count is a convention, it follows what XLA's own
``compiled.cost_analysis()`` reports on CPU (established by experiment, see ``tests/test_cost_oracle.py``), so
the two can be compared. Deliberate differences are listed in the docstring of :mod:`tracekit.model.cost`.
"""
from __future__ import annotations

import math
from math import prod

import numpy as np

from tracekit.ingest.hloshape import elements, leaves, nbytes
from tracekit.model.precision import dot_compute_dtype
from tracekit.proto import hlo_pb2
from tracekit.records import record

NAN = float("nan")
PT = hlo_pb2.PrimitiveType

#: zero flops and zero bytes: bookkeeping, aliasing, and the ``-done`` halves of async pairs
ZERO = frozenset("""parameter constant get-tuple-element tuple bitcast after-all partition-id replica-id
    add-dependency opt-barrier optimization-barrier domain all-reduce-done all-gather-done
    collective-permute-done async-done async-update send-done recv-done copy-done""".split())
#: one transcendental per output element, no flops (XLA's convention, also for integer ``power``)
TRANSCENDENTAL = frozenset("""exponential exponential-minus-one log log-plus-one tanh logistic sqrt rsqrt cbrt
    power sine cosine tan atan2 erf""".split())
#: one flop per output element
ELEMENTWISE = frozenset("""add subtract multiply divide remainder maximum minimum abs negate sign floor ceil
    round-nearest-afz round-nearest-even compare select clamp and or xor not shift-left shift-right-arithmetic
    shift-right-logical popcnt count-leading-zeros convert bitcast-convert is-finite real imag complex
    stochastic-convert reduce-precision""".split())
#: data movement: no flops, read every operand, write the output
MOVE = frozenset("""copy copy-start broadcast reshape dynamic-reshape concatenate pad reverse transpose topk
    get-dimension-size set-dimension-size""".split())
COLLECTIVE_OF = {"all-reduce": "all-reduce", "all-reduce-start": "all-reduce", "all-gather": "all-gather",
                 "all-gather-start": "all-gather", "reduce-scatter": "reduce-scatter", "all-to-all": "all-to-all",
                 "ragged-all-to-all": "ragged-all-to-all", "collective-permute": "collective-permute",
                 "collective-permute-start": "collective-permute"}


@record
class Cost:
    """The cost of one HLO instruction."""

    flops: float = 0.0
    transcendentals: float = 0.0
    bytes_read: float = 0.0
    bytes_written: float = 0.0
    net_bytes: float = 0.0
    group_size: int = -1
    collective: str = ""
    known: bool = True
    reason: str = ""
    note: str = ""
    #: the custom-call cost model that priced the op (``cost_source`` becomes ``model:<name>``), else empty
    model: str = ""
    #: the peak class the op computes at (the operand type of a dot/conv/GEMM/attention, see
    #: tracekit.model.precision), else empty
    compute_dtype: str = ""
    dtype_flops: float = 0.0  #: flops of the op that decided ``compute_dtype`` (the largest matmul inside)
    #: the upper end when the shapes give a range of FLOPs (attention whose causality is unknown: ``flops`` is
    #: the causal, lower end); NaN when ``flops`` is exact
    flops_hi: float = NAN
    #: the kernel author's own FLOP figure carried by the instruction (a Pallas ``cost_estimate``), NaN if none,
    #: and where it was read (:mod:`tracekit.model.stated` compares it with the shapes' figure)
    stated_flops: float = NAN
    stated_source: str = ""

    def unknown(self, reason: str, *metrics: str) -> "Cost":
        """Mark ``metrics`` (all five when none are named) NaN, with ``reason``."""
        for m in metrics or ("flops", "transcendentals", "bytes_read", "bytes_written", "net_bytes"):
            setattr(self, m, NAN)
        self.known = False
        self.reason = self.reason or reason
        return self


def is_complex(shape) -> bool:
    return any(s.element_type in (PT.C64, PT.C128) for s in leaves(shape))


def first_leaf(shape):
    """The first array of a (possibly tuple) shape; an empty f32[] stand-in for an empty tuple."""
    return next(leaves(shape), hlo_pb2.ShapeProto(element_type=PT.F32))


def io_cost(inst, oshapes, **kw) -> Cost:
    """Read every operand, write the whole output."""
    return Cost(bytes_read=float(sum(nbytes(s) for s in oshapes)), bytes_written=float(nbytes(inst.shape)), **kw)


def dot_flops(lhs, rhs, lhs_contract, lhs_batch, rhs_contract, rhs_batch, complex_: bool) -> float:
    """2 * batch * M * N * K (x4 for complex: one complex multiply-add is four real ones)."""
    k = prod(lhs.dimensions[d] for d in lhs_contract)
    b = prod(lhs.dimensions[d] for d in lhs_batch)
    m = prod(d for i, d in enumerate(lhs.dimensions) if i not in set(lhs_contract) | set(lhs_batch))
    n = prod(d for i, d in enumerate(rhs.dimensions) if i not in set(rhs_contract) | set(rhs_batch))
    return 2.0 * b * m * n * k * (4 if complex_ else 1)


def ragged_dot_flops(lhs, rhs, rhs_contract, rhs_batch, rhs_group, complex_: bool) -> float:
    """2 * prod(lhs dims) * prod(rhs dims that are neither contracting, batch nor group) (x4 complex).

    A ragged dot (MoE grouped GEMM) multiplies each lhs row by the matrix of ONE group, so the ragged dimension
    counts once (its total size), never times the number of groups: ragged non-contracting lhs [M, K] x rhs
    [G, K, N] -> 2*M*K*N; ragged contracting lhs [M, K] x rhs [K, N] -> 2*M*K*N (the G outputs split K); ragged
    batch lhs [B, M, K] x rhs [B, K, N] -> 2*B*M*K*N. lhs holds batch x M x K once, whatever the mode."""
    skip = set(rhs_contract) | set(rhs_batch) | set(rhs_group)
    n = prod(d for i, d in enumerate(rhs.dimensions) if i not in skip)
    return 2.0 * prod(lhs.dimensions) * n * (4 if complex_ else 1)


#: largest (window taps x output positions) of one spatial dimension whose valid taps are counted (~1 s)
MAX_TAP_PAIRS = 1 << 27


def _valid_taps(in_size: int, out_size: int, w) -> int:
    """Number of (output position, window tap) pairs of one spatial dimension that land on a real input
    element (not on padding, not between base-dilated elements)."""
    size, stride = w.size or 1, w.stride or 1
    wdil, bdil = w.window_dilation or 1, w.base_dilation or 1
    if size * max(out_size, 1) > MAX_TAP_PAIRS:  # counted pair by pair below: refuse rather than run for hours
        raise ValueError(f"convolution window too large to count ({size} taps x {out_size} outputs)")
    o = np.arange(out_size, dtype=np.int64) * stride - w.padding_low
    last = (in_size - 1) * bdil
    total = 0
    for k in range(size):
        p = o + k * wdil
        total += int(np.count_nonzero((p >= 0) & (p <= last) & (p % bdil == 0)))
    return total


def conv_flops(lhs, rhs, out, window, dn) -> float:
    """2 * out_batch * out_features * kernel_input_features * prod_d(valid taps of dim d).

    Each output element multiplies ``kernel_input_features`` (input features per group) by every window tap that
    falls on real input; counting taps per dimension makes padding, strides and both dilations exact. Feature and
    batch groups need no term of their own: the kernel's input-feature size is already per group."""
    taps = 1
    for i, w in enumerate(window.dimensions):
        taps *= _valid_taps(lhs.dimensions[dn.input_spatial_dimensions[i]],
                            out.dimensions[dn.output_spatial_dimensions[i]], w)
    macs = (out.dimensions[dn.output_batch_dimension] * out.dimensions[dn.output_feature_dimension]
            * rhs.dimensions[dn.kernel_input_feature_dimension] * taps)
    return 2.0 * macs * (4 if is_complex(out) else 1)


def group_size(inst, num_devices: int | None) -> int | None:
    """Participants per replica group: explicit groups, the iota device list, or all devices when empty."""
    if inst.opcode.startswith("collective-permute"):
        devs = {p.source for p in inst.source_target_pairs} | {p.target for p in inst.source_target_pairs}
        return len(devs) or num_devices
    sizes = [len(g.replica_ids) for g in inst.replica_groups]
    if not sizes and inst.HasField("collective_device_list"):
        cdl = inst.collective_device_list
        if cdl.HasField("iota_replica_group_list") and cdl.iota_replica_group_list.num_devices_per_group:
            return int(cdl.iota_replica_group_list.num_devices_per_group)
        sizes = [len(g.replica_ids) for g in cdl.replica_groups]
    return max(sizes) if sizes else num_devices


def collective_cost(inst, oshapes, env) -> Cost:
    """Costs of a (sync or ``-start``) collective. V is the full array: net bytes per device on a ring are
    all-gather / reduce-scatter / all-to-all V(N-1)/N, all-reduce 2V(N-1)/N, collective-permute V."""
    kind = COLLECTIVE_OF[inst.opcode]
    read = float(sum(nbytes(s) for s in oshapes))
    out = inst.shape
    if inst.opcode in ("all-gather-start", "collective-permute-start") and out.element_type == PT.TUPLE:
        out = out.tuple_shapes[1]          # (operands, results[, contexts]): the results are what is written
    written = float(nbytes(out))
    c = Cost(bytes_read=read, bytes_written=written, collective=kind)
    if kind == "all-reduce":                # XLA: one reducer application per element (not per peer)
        f, t = env.applied(inst.called_computation_ids[0]) if inst.called_computation_ids else (0.0, 0.0)
        n_el = sum(elements(s) for s in oshapes)
        c.flops, c.transcendentals = n_el * f, n_el * t
    n = group_size(inst, env.num_devices)
    if n is None:
        c.unknown("empty replica_groups and num_devices not given", "net_bytes")
        return c
    c.group_size = int(n)
    v = {"all-reduce": read, "all-gather": written, "reduce-scatter": read, "all-to-all": read,
         "collective-permute": read}.get(kind)
    if kind == "ragged-all-to-all":  # the sizes operand, when a constant, says what is sent
        sizes = _ragged_sizes(inst, oshapes, env)
        if sizes is None:
            return c.unknown("ragged-all-to-all: bytes sent depend on runtime sizes", "net_bytes")
        c.net_bytes = sizes * (n - 1) / n if n > 0 else 0.0
        return c
    if kind == "collective-permute":
        c.net_bytes = v if inst.source_target_pairs else 0.0
    else:
        c.net_bytes = (2.0 if kind == "all-reduce" else 1.0) * v * (n - 1) / n if n > 0 else 0.0
    return c


def _ragged_sizes(inst, oshapes, env) -> float | None:
    """Bytes a ragged-all-to-all sends (rows named by its constant ``send_sizes`` operand x bytes per row of the
    input), None when the sizes are runtime values."""
    glob = getattr(env, "glob", {})
    if len(inst.operand_ids) < 6 or len(oshapes) < 6 or not oshapes[0].dimensions or oshapes[0].dimensions[0] <= 0:
        return None
    sz = glob.get(inst.operand_ids[3])
    if sz is None or sz.opcode != "constant" or not sz.HasField("literal"):
        return None
    vals = next((list(getattr(sz.literal, f)) for f in ("s32s", "s64s", "u32s", "u64s") if getattr(sz.literal, f)), [])
    if not vals:
        return None
    return float(sum(max(int(v), 0) for v in vals) * nbytes(oshapes[0]) / oshapes[0].dimensions[0])


def op_cost(inst, oshapes, env) -> Cost:
    """Cost of one execution of a non-control-flow instruction. ``oshapes``: operand shapes; ``env`` gives
    ``applied(computation_id) -> (flops, transcendentals)`` of one application of a reducer/comparator and
    ``num_devices``."""
    op = inst.opcode
    if op in ZERO:
        return Cost()
    out_el = float(sum(elements(s) for s in leaves(inst.shape)))
    first_el = float(elements(first_leaf(inst.shape)))
    if op in ELEMENTWISE:
        return io_cost(inst, oshapes, flops=first_el)
    if op in TRANSCENDENTAL:
        return io_cost(inst, oshapes, transcendentals=first_el)
    if op == "transpose" and _layout_bitcast(inst, oshapes[0]):
        return Cost(note="transpose is a layout bitcast")
    if op in MOVE:
        return io_cost(inst, oshapes)
    if op == "iota":
        return Cost(bytes_written=float(nbytes(inst.shape)))
    if op in ("slice", "dynamic-slice", "gather"):  # read what is selected (and the indices), write it
        out_b = float(nbytes(inst.shape))
        return Cost(bytes_read=out_b + sum(nbytes(s) for s in oshapes[1:]), bytes_written=out_b)
    if op == "dynamic-update-slice":       # in place: read and write the update only
        upd = float(nbytes(oshapes[1]))
        return Cost(bytes_read=upd + sum(nbytes(s) for s in oshapes[2:]), bytes_written=upd)
    if op == "scatter":                    # in place: one reducer per update element
        n = (len(oshapes) - 1) // 2
        upd = float(sum(nbytes(s) for s in oshapes[n + 1:]))
        f, t = env.applied(inst.called_computation_ids[0])
        u_el = elements(oshapes[n + 1])
        return Cost(flops=u_el * f, transcendentals=u_el * t, bytes_read=2 * upd + nbytes(oshapes[n]),
                    bytes_written=upd)
    if op == "dot":
        dd = inst.dot_dimension_numbers
        fl = dot_flops(oshapes[0], oshapes[1], dd.lhs_contracting_dimensions, dd.lhs_batch_dimensions,
                       dd.rhs_contracting_dimensions, dd.rhs_batch_dimensions, is_complex(inst.shape))
        return io_cost(inst, oshapes, flops=fl, compute_dtype=_operands_compute_dtype(inst, oshapes))
    if op == "ragged-dot":
        rd = inst.ragged_dot_dimension_numbers
        dd = rd.dot_dimension_numbers
        fl = ragged_dot_flops(oshapes[0], oshapes[1], dd.rhs_contracting_dimensions, dd.rhs_batch_dimensions,
                              rd.rhs_group_dimensions, is_complex(inst.shape))
        return io_cost(inst, oshapes, flops=fl, compute_dtype=_operands_compute_dtype(inst, oshapes))
    if op == "convolution":
        fl = conv_flops(oshapes[0], oshapes[1], inst.shape, inst.window, inst.convolution_dimension_numbers)
        return io_cost(inst, oshapes, flops=fl, compute_dtype=_operands_compute_dtype(inst, oshapes))
    if op == "reduce":                     # (input elements - output elements) reducer applications
        f, t = env.applied(inst.called_computation_ids[0])
        n = float(elements(oshapes[0])) - first_el
        return io_cost(inst, oshapes, flops=n * f, transcendentals=n * t)
    if op == "reduce-window":              # (window - 1) reducer applications per output element
        f, t = env.applied(inst.called_computation_ids[0])
        n = first_el * (prod(w.size or 1 for w in inst.window.dimensions) - 1)
        return io_cost(inst, oshapes, flops=n * f, transcendentals=n * t)
    if op == "select-and-scatter":         # (window - 1) selects per source element, then one scatter each
        (sf, st), (cf, ct) = env.applied(inst.called_computation_ids[0]), env.applied(inst.called_computation_ids[1])
        src = float(elements(oshapes[1]))
        win = prod(w.size or 1 for w in inst.window.dimensions) - 1
        return io_cost(inst, oshapes, flops=src * (win * sf + cf), transcendentals=src * (win * st + ct))
    if op == "map":
        f, t = env.applied(inst.called_computation_ids[0])
        return io_cost(inst, oshapes, flops=first_el * f, transcendentals=first_el * t)
    if op == "sort":                       # XLA's convention: n*ceil(log2 n) over ALL elements of operand 0
        n = elements(oshapes[0])
        return io_cost(inst, oshapes, flops=float(n * math.ceil(math.log2(n))) if n > 1 else 0.0,
                       note="sort: n*ceil(log2 n) comparisons, n = all elements; comparator cost not counted")
    if op in ("rng", "rng-bit-generator"):
        return io_cost(inst, oshapes, transcendentals=out_el)
    if op == "fft":                        # XLA: 8 * input elements * prod over fft_length of floor(log2 length)
        logs = prod(max(int(n), 1).bit_length() - 1 for n in inst.fft_length) if inst.fft_length else 0
        return io_cost(inst, oshapes, flops=8.0 * elements(oshapes[0]) * logs)
    if op == "triangular-solve":           # XLA's count: 2 * batch * m^2 * n
        a, b = oshapes[0], oshapes[1]
        m = a.dimensions[-1]
        return io_cost(inst, oshapes, flops=2.0 * elements(a) * (elements(b) / max(1, prod(a.dimensions[:-2]) * m)))
    if op == "cholesky":                   # batch * n^3 / 3
        a = oshapes[0]
        n = a.dimensions[-1]
        return io_cost(inst, oshapes, flops=float(math.floor(prod(a.dimensions[:-2]) * n ** 3 / 3)))
    if op in COLLECTIVE_OF:                # reduce-scatter: no flops, as XLA
        return collective_cost(inst, oshapes, env)
    if op in ("send", "outfeed"):          # host/peer transfers: the data operand leaves the device
        data = float(nbytes(oshapes[0])) if oshapes else 0.0
        return Cost(bytes_read=data, net_bytes=data if op == "send" else 0.0)
    if op in ("recv", "infeed"):           # result is (data, context/token)
        data = float(nbytes(inst.shape.tuple_shapes[0] if inst.shape.tuple_shapes else inst.shape))
        return Cost(bytes_written=data, net_bytes=data if op == "recv" else 0.0)
    if op == "custom-call":                # priced by tracekit.model.custom_calls (the traversal calls it)
        return io_cost(inst, oshapes).unknown(f"opaque custom call {inst.custom_call_target}", "flops",
                                              "transcendentals")
    return Cost().unknown(f"no cost rule for opcode {op}")


def _operands_compute_dtype(inst, oshapes) -> str:
    pc = inst.precision_config if inst.HasField("precision_config") else None
    return dot_compute_dtype([s.element_type for s in oshapes[:2]], pc)


def _layout_bitcast(inst, operand) -> bool:
    """A transpose whose layouts make it a relabelling of the same bytes."""
    lo, li = inst.shape.layout.minor_to_major, operand.layout.minor_to_major
    return bool(lo) and len(lo) == len(li) and [inst.dimensions[d] for d in lo] == list(li)
