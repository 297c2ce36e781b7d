"""The frames rules read, declared once: a rule file's ``frame:`` and the columns its expressions may name.

Each frame is built by :func:`tracekit.analysis.rule_checks.frames_for_rules` (the memory and utilization frames by
:mod:`tracekit.analysis.memory`): column -> (kind, meaning), kind one of text | int64 | int32 | uint64 | float64 |
float32 | bool (text: categorical or string). The ops frame's columns are the loader's and the roofline's
(:data:`tracekit.schema.OPS`, :data:`tracekit.schema.ROOFLINE`) with the timeline's flags; :func:`unit_of` gives
each column's unit. ``docs/rules.md`` lists them (:mod:`tracekit.report.rulesdoc`).
"""
from __future__ import annotations

from tracekit.schema import CAT, HOST_EVENTS, OPS, ROOFLINE

_TEXT = "text"


def _kinds(schema: dict) -> dict:
    return {c: (_TEXT if d in (CAT, "object") else d, m) for c, (d, m) in schema.items()}


_DOT = {"dot_m": ("int64", "matmul M: product of the lhs non-contracting, non-batch dims; -1 when not a dot"),
        "dot_n": ("int64", "matmul N: the same for the rhs; -1 when not a dot"),
        "dot_k": ("int64", "matmul K: product of the contracting dims; -1 when not a dot")}
_FLAGS = {"is_collective": ("bool", "a collective (opcode or category, or an NCCL/RCCL kernel)"),
          "is_matmul": ("bool", "dot/convolution, a fusion the trace calls convolution/dot/matmul, or a GEMM kernel"),
          "is_data_shuffle": ("bool", "copy/transpose/gather/pad/... or the trace's 'data formatting' category")}
#: The frames rules read (a rule file's ``frame:``), built by :func:`tracekit.analysis.rule_checks.frames_for_rules`:
#: column -> (kind, meaning), kind one of text | int64 | int32 | uint64 | float64 | float32 | bool (text: categorical or
#: string);
#: :func:`unit_of` gives each column's unit. Rule expressions may only name these columns (plus the rule's own
#: ``derive`` columns and what its ``check`` adds). ``docs/rules.md`` lists them.
RULE_FRAMES = {
    "ops": {**_kinds(OPS), **_kinds(ROOFLINE), **_DOT, **_FLAGS,
            "in_step": ("bool", "the op starts inside a step of its own device"),
            "is_host_offload": ("bool", "a device<->host copy XLA scheduled itself (host offload, memory space "
                                        "S(5)): deliberate, not an input pipeline")},
    "op_stats": {
        "module": (_TEXT, "HLO module name"),
        "program_id": ("uint64", "XLA program id; 0 when unknown"),
        "op": (_TEXT, "HLO instruction name (the kernel name for ops without one)"),
        "opcode": (_TEXT, "HLO opcode"),
        "category": (_TEXT, "op category"),
        "kernel": (_TEXT, "GPU kernel name (empty elsewhere)"),
        "device_kind": (_TEXT, "chip, e.g. 'TPU v6 Lite'"),
        "dtype": (_TEXT, "element type of the op's result"),
        "compute_dtype": (_TEXT, "peak class the op computes at (from its operands and precision: bf16 x bf16 -> "
                                 "f32 dots count as bf16)"),
        "cost_source": (_TEXT, "where flops/bytes came from: trace | hlo | unknown"),
        "unknown_reason": (_TEXT, "why the cost is unknown"),
        **_DOT, **_FLAGS,
        "is_host_transfer": ("bool", "some execution is a device<->host transfer"),
        "occurrences": ("int64", "executions of the op (sync rows) over every device"),
        "devices": ("int64", "devices the op ran on"),
        "hosts": (_TEXT, "the hosts the op ran on, sorted, comma-separated"),
        "total_ps": ("int64", "time of all executions, summed over devices"),
        "flops": ("float64", "FLOPs summed over executions (NaN when unknown)"),
        "bytes_accessed": ("float64", "bytes read plus written, summed over executions"),
        "net_bytes": ("float64", "bytes a collective moves per device, summed over executions"),
        "compute_ps": ("float64", "compute roofline time, summed over executions"),
        "memory_ps": ("float64", "memory roofline time, summed over executions"),
        "network_ps": ("float64", "network roofline time, summed over executions"),
        "roofline_ps": ("float64", "roofline time (max of the three), summed over executions"),
        "headroom_ps": ("float64", "sum of max(0, measured - roofline) over executions"),
        "mean_ps": ("float64", "total_ps / occurrences"),
        "share": ("float64", "total_ps / profiled time (the sum of device spans)"),
        "busy_share": ("float64", "total_ps / time of all sync ops"),
        "efficiency": ("float64", "roofline_ps / total_ps (1.0 = at the roofline)"),
        "intensity_flops_per_byte": ("float64", "flops / bytes_accessed"),
        "bound_by": (_TEXT, "compute | memory | network | host_link | unknown (largest summed roofline term)"),
        "chip_f32_slower": ("bool", "the chip runs bf16 matmuls faster than f32 (TPUs, tensor-core GPUs)"),
        "mxu_util": ("float64", "measured MXU utilization inside the kernel (TPU _counters_ line; NaN without): "
                                "(0.5 x MXU_BUSY_1 + MXU_BUSY_2) / cycles, or LLO slot occupancy (mxu_util_source)"),
        "mxu_util_source": (_TEXT, "what mxu_util was read from, over how many executions; empty without"),
        "dma_wait_share": ("float64", "Mosaic pipeline stages (XLA TraceMe): time waiting for block DMAs "
                                      "(ep_wait_in + ep_wait_out + ep_finalize) / (that + ep_run_kernel); NaN without"),
        "dma_wait_ps": ("float64", "time waiting for block DMAs in the profiled executions, summed"),
        "dma_wait_source": (_TEXT, "what dma_wait_share was read from, over how many executions; empty without"),
    },
    "collectives": {
        "host": (_TEXT, "host"), "device": (_TEXT, "device id"), "device_kind": (_TEXT, "chip"),
        "module": (_TEXT, "HLO module name"), "op": (_TEXT, "HLO instruction name"), "opcode": (_TEXT, "HLO opcode"),
        "category": (_TEXT, "op category"), "kernel": (_TEXT, "GPU kernel name (empty elsewhere)"),
        "step": ("int64", "step number, -1 when unknown"),
        "is_async": ("bool", "an async window (-start to -done) rather than a sync op"),
        "start_ps": ("int64", "start, ps since the host's epoch"),
        "span_ps": ("int64", "length of the collective (sync op or async window)"),
        "covered_ps": ("int64", "part of the span with compute running on the same device"),
        "exposed_ps": ("int64", "span_ps - covered_ps: collective time with no compute underneath"),
        "overlap_ratio": ("float64", "covered_ps / span_ps (1.0 for an empty span)"),
        "overlap_class": (_TEXT, "hidden | partial | exposed (by overlap_ratio)"),
        "network_ps": ("float64", "predicted network time of the collective (NaN when unknown)"),
        "net_bytes": ("float64", "bytes the collective moves per device (NaN when unknown)"),
        "group_size": ("int64", "participants per replica group, -1 when unknown"),
        "overlap_advice": (_TEXT, "how to let XLA overlap a collective on the row's platform (TPU, GPU, CPU)"),
        "net_level": (_TEXT, "level bounding the predicted time: ici | dcn | nvlink | xgmi | ib | ... ('ici latency' "
                             "when the hop latency bounds it; 'not priced' when the model could not price it)"),
        "net_fast_ps": ("float64", "predicted time if the group sat inside one TPU slice / GPU node (NaN: unknown)"),
        "coll_pattern": (_TEXT, "HLO pattern: 'all-reduce then slice' | 'loop-invariant all-gather' | ''"),
        "loop_trip_count": ("int64", "trip count of the while loop whose body runs the collective, -1 if none"),
    },
    "steps": {
        "host": (_TEXT, "host"), "device": (_TEXT, "device id"), "step": ("int64", "step number"),
        "start_ps": ("int64", "step start"),
        "step_ps": ("int64", "step duration"),
        "compute_ps": ("int64", "union of compute (sync, non-collective) ops within the step"),
        "collective_ps": ("int64", "union of collectives (sync and async windows) within the step"),
        "collective_exposed_ps": ("int64", "collective time with no compute running"),
        "collective_hidden_ps": ("int64", "collective time under compute (part of compute_ps)"),
        "wait_ps": ("int64", "stalled on async copies/transfers (*-done markers), neither compute nor idle"),
        "idle_ps": ("int64", "step_ps - compute - exposed collectives - wait"),
        # the refined split (tracekit.analysis.timeline.REFINED): these and collective_exposed_ps sum to step_ps
        "compute_bound_ps": ("int64", "compute by ops whose roofline says compute-bound"),
        "memory_bound_ps": ("int64", "compute by memory-bound ops (and not compute-bound ones)"),
        "compute_other_ps": ("int64", "the rest of compute (roofline unknown, host-link or network bound)"),
        "offload_wait_ps": ("int64", "no compute or collective while a host transfer is in flight or waited for"),
        "async_wait_ps": ("int64", "the same for other async ops"),
        "host_idle_ps": ("int64", "idle between steps: no program running (waiting for the host: input, Python, "
                                  "dispatch)"),
        "launch_idle_ps": ("int64", "idle inside a program on devices whose ops the host launches one by one"),
        "other_idle_ps": ("int64", "idle inside a program elsewhere, or when program runs are unknown"),
        "collective_level": (_TEXT, "interconnect level with the most exposed collective time in the step "
                                    "(ici, dcn, nvlink, ib, ...; 'none' without exposed collectives)"),
        "open_end": ("bool", "the device's last run of the step program: no next start, so step_ps is its own "
                             "execution, left out of step-time statistics"),
    },
    "devices": {
        "host": (_TEXT, "host"), "device": (_TEXT, "device id"), "device_kind": (_TEXT, "chip"),
        "window_start_ps": ("int64", "start of the device's window"),
        "span_ps": ("int64", "length of the device's window: its profiled time"),
        "busy_ps": ("int64", "union of sync ops"),
        "idle_ps": ("int64", "span_ps - busy_ps"),
        "idle_before_first_op_ps": ("int64", "window start to the first sync op"),
        "op_count": ("int64", "sync ops"),
        "async_count": ("int64", "async windows"),
        "utilization": ("float64", "busy_ps / span_ps"),
        "busy_ps_z": ("float64", "modified z-score of busy_ps among devices of the same device_kind"),
    },
    "gaps": {
        "host": (_TEXT, "host"), "device": (_TEXT, "device id"),
        "start_ps": ("int64", "gap start"),
        "duration_ps": ("int64", "gap length"),
        "kind": (_TEXT, "before_first_op | inside_step | between_steps | before_first_step | after_last_step | between_ops"),
        "step": ("int64", "step containing the gap, -1 outside steps"),
    },
    "host_events": _kinds(HOST_EVENTS),
    # the memory and utilization frames (tracekit.analysis.memory.rule_frames, tracekit.analysis.overview)
    "memory_devices": {
        "host": (_TEXT, "host"), "device": (_TEXT, "device id"),
        "peak_bytes": ("int64", "largest sum of device-space footprints of the programs running at once (a lower bound)"),
        "programs_at_peak": (_TEXT, "the programs running at the peak, comma-separated"),
        "upper_bytes": ("int64", "peak_bytes + the arguments of the other programs that ran on the device"),
        "capacity_bytes": ("float64", "the chip's HBM capacity (NaN when unknown)"),
        "share": ("float64", "peak_bytes / capacity_bytes"),
        "programs": (_TEXT, "every program that ran on the device, comma-separated"),
        "span_ps": ("int64", "the device's profiled time (from the devices frame)"),
    },
    "memory_programs": {
        "module": (_TEXT, "HLO module name"), "program_id": ("uint64", "XLA program id"),
        "memory_space": (_TEXT, "device (this frame holds the device-space rows)"),
        "argument_bytes": ("int64", "allocations of entry parameters"),
        "output_bytes": ("int64", "allocations that may be live out"),
        "alias_bytes": ("int64", "allocations that are both (outputs written into donated inputs)"),
        "temp_bytes": ("int64", "every other allocation except thread-local and constant ones"),
        "constant_bytes": ("int64", "constant allocations"),
        "thread_local_bytes": ("int64", "thread-local allocations"),
        "footprint_bytes": ("int64", "argument + output - alias + temp + constant: held while the program runs"),
        "live_peak_bytes": ("int64", "argument + output - alias + constant + the peak of live temporaries"),
        "live_peak_source": (_TEXT, "heap simulator | allocations"),
        "largest_buffer_bytes": ("int64", "the largest buffer"),
        "largest_temp_bytes": ("int64", "the largest temporary buffer"),
        "largest_temp_instruction": (_TEXT, "the instruction that defines it"),
        "largest_temp_opcode": (_TEXT, "its opcode"),
        "largest_temp_source": (_TEXT, "its Python source location"),
        "undonated_bytes": ("int64", "bytes of parameters an output of the same shape and dtype could have reused but "
                                     "did not (not donated)"),
        "undonated_parameters": (_TEXT, "those parameters' numbers, comma-separated, in number order"),
        "executions": ("int64", "the program's runs in the trace's window (0: compiled but never ran there)"),
        "hosts": (_TEXT, "the hosts the program ran on, sorted, comma-separated (empty: it never ran)"),
        "capacity_bytes": ("float64", "the smallest HBM capacity among the trace's devices"),
        "live_peak_share": ("float64", "live_peak_bytes / capacity_bytes"),
        "time_ps": ("int64", "0: memory findings claim no time"),
    },
    "offload": {
        "module": (_TEXT, "HLO module name"), "program_id": ("uint64", "XLA program id"),
        "host_bytes": ("int64", "bytes the program keeps in host memory (memory space 5)"),
        "device_peak_bytes": ("int64", "the program's device live peak today"),
        "staging_bytes": ("int64", "device copies of host arrays"),
        "need_bytes": ("int64", "device live peak without the staging copies + the host arrays: HBM needed to keep them"),
        "capacity_bytes": ("float64", "HBM capacity"),
        "share": ("float64", "need_bytes / capacity_bytes"),
        "fits": ("bool", "need_bytes <= capacity_bytes"),
        "wait_per_step_ps": ("float64", "per step, the wait on host-offload copies (mean over devices; this program's part)"),
        "host_link_per_step_ps": ("float64", "per step, the host-link roofline of those copies (this program's part)"),
        "wait_ps": ("float64", "the wait over every step and device (this program's part)"),
        "steps": ("int64", "steps"),
    },
    "overview": {
        "host": (_TEXT, "host"), "device": (_TEXT, "device id"),
        "steps": ("int64", "steps of the device"),
        "step_mean_ps": ("float64", "mean step time"),
        "step_total_ps": ("int64", "time of all steps"),
        "flops_per_step": ("float64", "FLOPs per step (cost model or the trace's model_flops); NaN when no compute "
                           "op has a FLOP count (no HLO)"),
        "model_flops_per_step": ("float64", "the model's FLOPs per step when given (NaN otherwise)"),
        "peak_flops_per_s": ("float64", "peak FLOP/s of the dtype that carries most FLOPs (of a chip several devices "
                             "share, XLA:CPU's virtual devices of a host: the device's share)"),
        "mfu": ("float64", "flops_per_step / (peak_flops_per_s x step time); of a chip several devices share: the "
                "chip's, all its devices' FLOPs over its whole peak"),
        "mfu_at_possible": ("float64", "the same at possible_step_ps instead of the step time (at most 1 when the "
                            "roofline holds)"),
        "possible_step_ps": ("float64", "the step time the roofline says is possible (a lower bound; devices that "
                             "share a chip add their work up); NaN when no compute op has a roofline"),
        "bound_by": (_TEXT, "the resource that sets possible_step_ps (empty when it is unknown)"),
        "roofline_known_share": ("float64", "share of the compute ops' measured time whose roofline is known (the "
                                 "rest counts at its measured time in possible_step_ps)"),
        "host_link_per_step_ps": ("float64", "host-link roofline time per step"),
        "offload_wait_per_step_ps": ("float64", "wait on host-offload copies per step"),
    },
    # the mesh axes against the book's limits (tracekit.analysis.parallelism.rule_frame): one row per data, fsdp or
    # tensor axis
    "parallel_axes": {
        "axis": ("int64", "the axis's index in mesh order (the HLO has no axis names)"),
        "size": ("int64", "devices per group of the axis"),
        "role": (_TEXT, "data | fsdp | tensor"),
        "limit_kind": (_TEXT, "batch (data/fsdp: per-device batch vs C / (W x M)) | tensor (Y vs M x F / (C / W)) | "
                              "dcn (tokens per slice vs C / W_dcn)"),
        "level": (_TEXT, "ici | dcn | nvlink | xgmi | ib | memory (XLA:CPU's shared memory) | unknown"),
        "bound": (_TEXT, "compute (the axis's communication can hide under compute) | communication | unknown"),
        "value": ("float64", "what the trace has: tokens per device (batch), per slice (dcn), or Y (tensor)"),
        "threshold": ("float64", "the book's limit on value: tokens above it, or the largest Y"),
        "intensity": ("float64", "C / W: peak FLOP/s over the axis's bandwidth per chip (FLOP per byte)"),
        "axes_spanned": ("int64", "torus axes the axis's groups span (M)"),
        "peak_flops_per_s": ("float64", "C: the chip's peak FLOP/s of the dots' dtype"),
        "bandwidth_bytes_per_s": ("float64", "W: the axis's bandwidth per chip"),
        "per_device_batch_tokens": ("float64", "tokens per device per step (NaN: unknown)"),
        "d_ff": ("float64", "d_ff recovered from the weights (NaN: unknown)"),
        "formula": (_TEXT, "the limit with its numbers"),
        "remedy": (_TEXT, "the book's remedies, quantified (empty when compute-bound)"),
        "time_ps": ("int64", "0: the finding claims no time (the collectives' exposed time is TK001/TK005's)"),
    },
    # the serving view (tracekit.analysis.inference, inference_report.rule_frame): one row per serving program
    # per device
    "serving": {
        "host": (_TEXT, "host"), "device": (_TEXT, "device id"), "module": (_TEXT, "HLO module name"),
        "program_id": ("uint64", "XLA program id"),
        "kind": (_TEXT, "prefill | decode | unknown (a program serving, its kind not told by the trace)"),
        "first_run_ps": ("int64", "start of the program's first run on the device (the frame has no start_ps: its "
                         "findings' savings are not laid on the timeline, so the union of the findings' claims does "
                         "not count the idle between decode steps twice beside device-idle-gaps)"),
        "span_ps": ("int64", "first run start to last run end"),
        "steps": ("int64", "runs of the program on the device"),
        "step_total_ps": ("int64", "time of its steps (run start to the device's next serving start), summed"),
        "run_total_ps": ("int64", "time of its runs (start to end), summed"),
        "step_p50_ps": ("float64", "median step time of the program over every device"),
        "decode_bound_ps": ("float64", "decode step lower bound: (param_bytes + kv_bytes_read) / HBM bandwidth "
                            "(NaN unless a decode step with known bytes and bandwidth)"),
        "bound_share": ("float64", "decode_bound_ps / step_p50_ps: the share of its memory roofline a decode step "
                        "reaches"),
        "bound_total_ps": ("float64", "decode_bound_ps x steps on the device"),
        "tokens_per_step": ("float64", "tokens a step processes (batch x new tokens per sequence; NaN unknown)"),
        "sequences": ("float64", "sequences per step (the batch; NaN unknown)"),
        "critical_batch": ("float64", "tokens per step past which the weight matmuls turn compute-bound on this "
                           "chip: peak x weight bytes / (2 x HBM bandwidth)"),
        "more_sequences": ("float64", "sequences whose KV cache would still fit beside the largest live peak of "
                           "the serving programs (NaN unknown)"),
        "free_bytes": ("float64", "device memory left beside that live peak"),
        "kv_cache_bytes": ("float64", "bytes of the KV cache (buffer assignment)"),
        "capacity_bytes": ("float64", "the device's memory (HBM)"),
        "capacity_estimated": ("bool", "the capacity is an estimate (a CPU's RAM): how many more sequences fit is "
                               "not a device fact"),
        "host_gap_ps": ("int64", "idle between the end of a decode run and the next decode start, summed"),
        "host_gaps": ("int64", "such gaps"),
        "interruptions": ("int64", "prefill runs between two decode runs on the device"),
        "interrupted_ps": ("int64", "time from each such prefill's start to the next serving start, summed"),
        "slow_ops": (_TEXT, "the ops furthest from their roofline (largest time above it), with their share of it"),
        "chip": (_TEXT, "chip name"),
    },
}

#: columns a frame may carry beyond :data:`RULE_FRAMES`, by pattern: the steps' exposed collective time per
#: interconnect level (``collective_exposed_ici_ps``, ``..._dcn_ps``, ...; one per level the trace has), which rule
#: expressions cannot name (their set depends on the trace); ``collective_level`` names the largest
RULE_FRAME_EXTRA = {"steps": r"^collective_exposed_[a-z_]+_ps$"}

#: units of columns whose suffix does not say (see :func:`unit_of`)
UNITS = {"share": "fraction", "busy_share": "fraction", "utilization": "fraction", "efficiency": "fraction",
         "overlap_ratio": "fraction", "tiny_fraction": "fraction", "pad_waste": "fraction",
         "flops": "FLOP", "trace_flops": "FLOP", "trace_bytes": "bytes", "bytes_accessed": "bytes",
         "occurrences": "count", "executions": "count", "devices": "count", "op_count": "count", "async_count": "count",
         "group_size": "count", "kernels": "count", "tiny_kernels": "count", "dot_m": "elements",
         "dot_n": "elements", "dot_k": "elements", "busy_ps_median": "ps", "live_peak_share": "fraction",
         "mfu": "fraction", "mfu_at_possible": "fraction", "roofline_known_share": "fraction", "steps": "count", "flops_per_step": "FLOP", "model_flops_per_step": "FLOP",
         "peak_flops_per_s": "FLOP/s", "loop_trip_count": "count", "axis": "index", "size": "count",
         "value": "tokens or devices", "threshold": "tokens or devices", "intensity": "FLOP/byte",
         "axes_spanned": "count", "per_device_batch_tokens": "tokens", "d_ff": "elements",
         "bound_share": "fraction",
         "tokens_per_step": "tokens", "sequences": "sequences", "critical_batch": "tokens",
         "more_sequences": "sequences", "host_gaps": "count", "interruptions": "count", "mxu_util": "fraction",
         "dma_wait_share": "fraction"}


def unit_of(column: str, kind: str = "") -> str:
    """The unit of a column: from :data:`UNITS`, else its suffix (``_ps`` ps, ``_bytes`` bytes,
    ``_flops_per_byte`` FLOP/byte, ``_flops`` FLOP, ``_per_s`` 1/s, ``_z`` z-score); empty for text, flags and ids."""
    if column in UNITS:
        return UNITS[column]
    for suffix, unit in (("_ps", "ps"), ("_bytes", "bytes"), ("_flops_per_byte", "FLOP/byte"), ("_flops", "FLOP"),
                         ("_per_s", "1/s"), ("_z", "z-score")):
        if column.endswith(suffix):
            return unit
    return ""
