"""The frame schemas, declared once.

Every DataFrame tracekit produces is described here: column name -> (dtype, meaning). Column names are snake_case
with the unit in the suffix (``_ps`` picoseconds, ``_bytes``, ``_flops``, ``_per_s``). Times are integer
picoseconds. Repeated strings are pandas categoricals. Unknown numbers are NaN (float columns) or -1 (ids);
unknown strings are empty. The roofline's predicted times and ratios are float32 (7 significant digits, against
chip peaks known to 2-3; sums over them are taken in float64), and a few integer columns are int32 when every
value fits (:data:`NARROW_INTS`): on a 1.7 M-row ops frame that is 82 MB less.

Use :func:`empty` to build an empty frame of a schema and :func:`conform` to check and coerce a frame.
"""
from __future__ import annotations

from enum import IntEnum

import numpy as np
import pandas as pd

CAT = "category"

#: One row per device op execution.
OPS = {
    "host": (CAT, "host the trace came from (file stem when the trace does not say)"),
    "device": (CAT, "device id, e.g. TPU:0, GPU:3, CPU:5"),
    "device_kind": (CAT, "chip as the trace names it, e.g. 'TPU v6 Lite', 'AMD gfx942', 'cpu'"),
    "line": (CAT, "trace line or stream the event was on, e.g. 'XLA Ops', 'Stream #16(Kernel)'"),
    "source": (CAT, "what the row was built from: xla_ops | async_pair | async_xla_ops | gpu_kernel | gpu_memcpy | gpu_runtime (a kernel with no HLO op on an XLA trace) | cpu_thunk"),
    "module": (CAT, "HLO module name, e.g. jit_train_step"),
    "program_id": ("uint64", "XLA program (module) id; 0 when unknown"),
    "op": (CAT, "HLO instruction name, e.g. fusion.3, all-reduce-start.1"),
    "opcode": (CAT, "HLO opcode of that instruction (from the HLO when joined, else parsed from the trace)"),
    "category": (CAT, "op category: the trace's hlo_category when given, else derived from the opcode"),
    "kernel": (CAT, "GPU kernel name (empty elsewhere)"),
    "start_ps": ("int64", "start time, ps since the host's epoch (comparable across devices of a host)"),
    "duration_ps": ("int64", "duration, ps (async ops: the whole -start..-done window)"),
    "run_id": ("int64", "XLA run id of the module execution, -1 when unknown (int32 when every value fits)"),
    "step": ("int64", "step number when known, else -1 (int32 when every value fits)"),
    "is_async": ("bool", "True for an async window (-start to -done) rather than a synchronous op"),
    "in_hlo": ("bool", "True when the op joined to an instruction of the trace's HLO"),
    "trace_flops": ("float64", "FLOPs the trace itself reports for the op (TPU), NaN when absent"),
    "trace_bytes": ("float64", "bytes accessed the trace itself reports for the op (TPU), NaN when absent"),
    "trace_model_flops": ("float64", "model FLOPs the trace reports for the op (TPU ``model_flops``: without "
                                     "rematerialization), NaN when absent"),
    "self_ps": ("int64", "duration_ps minus the time of the events nested inside it on the same line (XLA:CPU "
                         "while/call/conditional events contain their bodies' op events); = duration_ps when nothing "
                         "is nested, and for async windows"),
}

#: One row per HLO instruction of every module in the /host:metadata plane.
HLO = {
    "module": (CAT, "HLO module name"),
    "program_id": ("uint64", "module id from the metadata entry's name or the proto, 0 when unknown"),
    "computation": (CAT, "computation the instruction belongs to"),
    "name": ("object", "instruction name"),
    "opcode": (CAT, "HLO opcode"),
    "shape": ("object", "result shape as text, e.g. bf16[8,128] or (f32[2], s32[])"),
    "dtype": (CAT, "element type of the (first) array result, e.g. bf16; empty for tokens"),
    "result_bytes": ("int64", "bytes of the result (sum over tuple elements)"),
    "operands": ("object", "operand instruction names, comma-separated"),
    "fusion_kind": (CAT, "kLoop/kInput/kOutput/kCustom for fusions, else empty"),
    "called_computations": ("object", "names of the computations it calls, comma-separated"),
    "replica_groups": ("object", "replica groups as text, e.g. {{0,1},{2,3}} or [2,4]<=[8]"),
    "group_size": ("int64", "participants per replica group, -1 when not a collective or unknown"),
    "channel_id": ("int64", "channel id, 0 when absent"),
    "op_name": ("object", "framework op name from the metadata, e.g. jit(f)/dot_general"),
    "source_file": ("object", "Python source file from the metadata"),
    "source_line": ("int64", "Python source line, 0 when unknown"),
    "custom_call_target": ("object", "custom-call target name"),
    "is_fusion_computation": ("bool", "True when the computation is a fused computation"),
    "is_entry": ("bool", "True for instructions of the entry computation"),
    "category": (CAT, "op family: the opcode, or for fusions what they fuse (e.g. 'dot fusion', 'loop fusion')"),
    "host_memory": ("bool", "True when the result or an operand lives in host memory (layout memory space S(5))"),
    "to_host": ("bool", "True for a copy whose destination is host memory (device to host); False for one from host "
                "memory (host to device) and every other instruction"),
    "transfer_bytes": ("int64", "bytes a copy moves: the destination array (copy, copy-start, copy-done)"),
    "dot_m": ("int64", "dot (or the dot a fusion holds): product of lhs non-contracting, non-batch dims; -1 if none"),
    "dot_n": ("int64", "same for the rhs"),
    "dot_k": ("int64", "product of the contracting dims"),
}

#: One row per module execution.
MODULES = {
    "host": (CAT, ""),
    "device": (CAT, ""),
    "module": (CAT, "HLO module name"),
    "program_id": ("uint64", ""),
    "run_id": ("int64", ""),
    "start_ps": ("int64", ""),
    "duration_ps": ("int64", ""),
}

#: One row per step per device.
STEPS = {
    "host": (CAT, ""),
    "device": (CAT, ""),
    "step": ("int64", "step number"),
    "start_ps": ("int64", ""),
    "duration_ps": ("int64", ""),
    "step_source": (CAT, "steps_line | step_annotation | module_execution"),
    "open_end": ("bool", "the step does not end where the next begins (a device's last run of the step program: "
                         "its own execution); step-time statistics leave it out"),
}

#: One row per trace line (the inventory).
LINES = {
    "host": (CAT, ""),
    "plane": (CAT, "plane name, e.g. /device:TPU:0"),
    "line": (CAT, "line name"),
    "events": ("int64", "number of events on the line"),
    "start_ps": ("int64", "first event start"),
    "end_ps": ("int64", "last event end"),
}

#: Host-side events the rules read (compilation inside steps): one row per matching host trace event.
HOST_EVENTS = {
    "host": (CAT, "host the trace came from"),
    "line": (CAT, "thread / trace line name"),
    "name": ("object", "event name, e.g. XlaCompile, backend_compile"),
    "start_ps": ("int64", "start, ps since the host's epoch"),
    "duration_ps": ("int64", "duration, ps"),
}

#: The device allocator's events on host threads (xprof's memory-profile data): one row per allocation or free.
MEMORY_EVENTS = {
    "host": (CAT, "host the trace came from"),
    "allocator": (CAT, "allocator_name (e.g. GPU_0_bfc), else 'device N' from index_on_host (TPU)"),
    "kind": (CAT, "alloc | free"),
    "start_ps": ("int64", "time of the event, ps since the host's epoch"),
    "bytes_in_use": ("float64", "bytes allocated after the event (stat bytes_allocated)"),
    "peak_bytes_in_use": ("float64", "the allocator's peak so far (stat peak_bytes_in_use)"),
    "bytes_available": ("float64", "bytes the allocator still has (stat bytes_available)"),
    "requested_bytes": ("float64", "bytes this allocation asked for, NaN when absent"),
}

#: Columns the roofline stage adds to OPS.
ROOFLINE = {
    "flops": ("float64", "floating-point operations of one execution"),
    "bytes_accessed": ("float64", "bytes read plus written by one execution (HBM/DRAM)"),
    "net_bytes": ("float64", "bytes a collective moves per device over the interconnect"),
    "group_size": ("int32", "collective participants, -1 when not a collective"),
    "dtype": (CAT, "element type of the op's result (e.g. f32 for a bf16 x bf16 -> f32 dot)"),
    "compute_dtype": (CAT, "peak class the op computes at: dots/convolutions/GEMMs (and the custom-call models' "
                           "GEMM/conv/attention) from their operand types and precision config (bf16, f16, fp8, "
                           "int8, f32, f32_highest, bf16x3, ...), others from the result type; picks the peak FLOP/s"),
    "cost_source": (CAT, "where flops/bytes came from: trace | hlo | model:<name> (a custom-call cost model, "
                         "tracekit.model.custom_calls) | unknown"),
    "collective": (CAT, "collective kind (all-reduce, all-gather, ...) or empty"),
    "net_level": (CAT, "level bounding a collective's predicted time: ici | dcn | nvlink | xgmi | ib | memory "
                       "(' latency' when the latency floor decides it); none | unknown; empty for other ops"),
    "net_fast_ps": ("float32", "predicted time of the collective if its group sat inside one TPU slice / GPU node "
                               "(NaN unless it crosses DCN or the node network)"),
    "coll_pattern": (CAT, "HLO pattern of a collective: 'all-reduce then slice' | 'loop-invariant all-gather' | ''"),
    "loop_trip_count": ("int64", "known trip count of the while loop whose body runs the collective, -1 if none "
                                   "(int32 when every value fits)"),
    "unknown_reason": (CAT, "why the cost is unknown (opaque custom call, unknown trip count, ...)"),
    "intensity_flops_per_byte": ("float32", "flops / bytes_accessed"),
    "compute_ps": ("float32", "flops / peak FLOP/s of the op's compute_dtype"),
    "memory_ps": ("float32", "bytes_accessed / peak memory bandwidth"),
    "network_ps": ("float32", "collective time from the topology-aware model (sum of its levels' phases); host "
                              "transfers: bytes / host-link bandwidth, queued behind the transfers in flight before "
                              "them in the same direction on the device"),
    "roofline_ps": ("float32", "max(compute_ps, memory_ps, network_ps)"),
    "bound_by": (CAT, "compute | memory | network | host_link | unknown"),
    "is_host_transfer": ("bool", "a copy between device and host memory (host offload): timed on the host link"),
    "to_host": ("bool", "a host transfer whose destination is host memory (device to host); False: host to device, "
                "or no host transfer"),
    "efficiency": ("float32", "roofline_ps / self_ps (1.0 = at the roofline; above 1.05 a model warning)"),
    "headroom_ps": ("float32", "self_ps - roofline_ps: time a perfect op would save"),
}


class Bound(IntEnum):
    """``bound_by``: the roofline term that limits an op. The column is a categorical whose codes are these values
    and whose categories are their names in lower case (:data:`CATEGORIES`)."""
    COMPUTE = 0
    MEMORY = 1
    NETWORK = 2
    HOST_LINK = 3
    UNKNOWN = 4


class CostSource(IntEnum):
    """``cost_source``: where an op's flops and bytes came from (a categorical, as :class:`Bound`; custom calls
    priced by a cost model follow as further categories ``model:<name>``)."""
    HLO = 0  #: tracekit's HLO cost model
    TRACE = 1  #: the trace's own flops/bytes_accessed stats
    UNKNOWN = 2


def labels(enum) -> list[str]:
    """The categories of an enum-coded column, in code order: ``labels(Bound)[Bound.MEMORY] == "memory"``."""
    return [m.name.lower() for m in enum]


#: Categorical columns whose first categories are declared (codes = the enum's values), whatever frame holds them;
#: further categories may follow (``cost_source``: ``model:<name>``).
CATEGORIES = {"bound_by": labels(Bound), "cost_source": labels(CostSource)}
#: The frames rules read (a rule file's ``frame:``), built by :func:`tracekit.analysis.rule_checks.frames_for_rules`:
#: column -> (kind, meaning), kind one of text | int64 | int32 | uint64 | float64 | float32 | bool (text: categorical or
#: string);
#: :func:`unit_of` gives each column's unit. Rule expressions may only name these columns (plus the rule's own
#: ``derive`` columns and what its ``check`` adds). ``docs/rules.md`` lists them.
_TEXT = "text"


def _kinds(schema: dict) -> dict:
    return {c: (_TEXT if d in (CAT, "object") else d, m) for c, (d, m) in schema.items()}


_DOT = {"dot_m": ("int64", "matmul M: product of the lhs non-contracting, non-batch dims; -1 when not a dot"),
        "dot_n": ("int64", "matmul N: the same for the rhs; -1 when not a dot"),
        "dot_k": ("int64", "matmul K: product of the contracting dims; -1 when not a dot")}
_FLAGS = {"is_collective": ("bool", "a collective (opcode or category, or an NCCL/RCCL kernel)"),
          "is_matmul": ("bool", "dot/convolution, a fusion the trace calls convolution/dot/matmul, or a GEMM kernel"),
          "is_data_shuffle": ("bool", "copy/transpose/gather/pad/... or the trace's 'data formatting' category")}
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
         "more_sequences": "sequences", "host_gaps": "count", "interruptions": "count"}


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


SCHEMAS = {"memory_events": MEMORY_EVENTS, "host_events": HOST_EVENTS, "ops": OPS, "hlo": HLO, "modules": MODULES, "steps": STEPS, "lines": LINES, "roofline": ROOFLINE}

_FILL = {"int64": -1, "int32": -1, "uint64": 0, "float64": np.nan, "float32": np.nan, "bool": False, "object": "",
         CAT: ""}


def columns(schema: dict) -> list[str]:
    return list(schema)


#: integer columns declared int64 and stored as int32 when every value of the frame fits (a trace's steps and run
#: ids, a loop's trip count nearly always do; a cast would wrap a larger one): 4 bytes per op row each
NARROW_INTS = ("step", "run_id", "loop_trip_count")


def _dtype_ok(s: pd.Series, d: str) -> bool:
    if d == CAT:
        return isinstance(s.dtype, pd.CategoricalDtype) and (
            s.name not in CATEGORIES or list(s.cat.categories[:len(CATEGORIES[s.name])]) == CATEGORIES[s.name])
    if d == "object":
        return s.dtype == object
    return str(s.dtype) == d or (d == "int64" and s.dtype == np.int32 and s.name in NARROW_INTS)


def empty(schema: dict) -> pd.DataFrame:
    """An empty frame with the schema's columns and dtypes (built from empty arrays: a Series per column costs
    about twenty times as much)."""
    return pd.DataFrame({c: pd.Categorical([]) if d == CAT else np.empty(0, object if d == "object" else d)
                         for c, (d, _) in schema.items()}, copy=False)


def conform(df: pd.DataFrame, schema: dict, *, extra: bool = True) -> pd.DataFrame:
    """Coerce ``df`` to ``schema``: missing columns are filled with the unknown value, dtypes are cast, and the
    schema's columns come first in order. Columns not in the schema are kept at the end when ``extra``."""
    if all(c in df.columns and _dtype_ok(df[c], d) for c, (d, _) in schema.items()) and \
            list(df.columns[:len(schema)]) == list(schema) and (extra or len(df.columns) == len(schema)):
        return df  # already conforming: no copy
    out = {}
    n = len(df)
    for c, (d, _) in schema.items():
        if c in df.columns:
            s = df[c]
            if d == CAT and c in CATEGORIES:
                if not _dtype_ok(s, d):
                    text = s.astype(str)
                    cats = CATEGORIES[c] + sorted(set(text.unique()) - set(CATEGORIES[c]))
                    s = pd.Series(pd.Categorical(text, categories=cats), index=df.index, name=c)
            elif d == CAT:
                s = s.astype(str).astype(CAT) if s.dtype != CAT else s
            elif d == "object":
                s = s.astype(object)
            elif str(s.dtype) != d:
                s = s.astype(d)
        # (a missing column: arrays, which the frame below takes as they are; a Series would copy them)
        elif d == CAT and c in CATEGORIES:  # a declared categorical: unknown
            s = pd.Categorical.from_codes(np.full(n, CATEGORIES[c].index("unknown"), np.int8), categories=CATEGORIES[c])
        elif d == CAT:
            s = pd.Categorical.from_codes(np.zeros(n, np.int8), categories=[""])
        else:
            s = np.full(n, _FILL[d], dtype=object if d == "object" else d)
        out[c] = s
    if extra:
        for c in df.columns:
            if c not in schema:
                out[c] = df[c]
    # one frame from the columns as they are (copy-on-write keeps ``df`` unchanged): no copy, no consolidation
    return pd.DataFrame(out, index=df.index, copy=False)
