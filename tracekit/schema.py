"""The frame schemas, declared once.

Every DataFrame tracekit produces is described here: column name -> (dtype, meaning). Column names are snake_case
with the unit in the suffix (``_ps`` picoseconds, ``_bytes``, ``_flops``, ``_per_s``). Times are integer
picoseconds. Repeated strings are pandas categoricals. Unknown numbers are NaN (float columns) or -1 (ids);
unknown strings are empty. The roofline's predicted times and ratios are float32 (7 significant digits, against
chip peaks known to 2-3; sums over them are taken in float64), and a few integer columns are int32 when every
value fits (:data:`NARROW_INTS`): on a 1.7 M-row ops frame that is 82 MB less.

Use :func:`empty` to build an empty frame of a schema and :func:`conform` to check and coerce a frame. The frames
rules read (their columns, kinds and units) are declared in :mod:`tracekit.analysis.rule_schema`.
"""
from __future__ import annotations

import functools
from enum import IntEnum

import numpy as np
import pandas as pd

from tracekit.columns import filled

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

#: What a TPU trace measured inside its kernels (:mod:`tracekit.ingest.kernelprof`): one row per (host, device,
#: program, op) with a ``_counters_`` sample or a Mosaic pipeline stage inside some execution.
KERNEL_PROFILE = {
    "host": (CAT, ""),
    "device": (CAT, ""),
    "program_id": ("uint64", ""),
    "op": (CAT, "HLO instruction name of the kernel"),
    "profiled_executions": ("int64", "executions with a counter sample or a pipeline stage"),
    "counted_executions": ("int64", "executions with MXU counters"),
    "staged_executions": ("int64", "executions with Mosaic pipeline stages"),
    "kernel_ps": ("int64", "time of the profiled executions (device clock)"),
    "mxu_busy": ("float64", "MXU busy: cycles (0.5 x MXU_BUSY_1 + MXU_BUSY_2, hw_counters) or ps (windows x % util, "
                            "llo_util); NaN without counters"),
    "mxu_span": ("float64", "what mxu_busy is out of: the TensorCore cycles (hw_counters) or the windows' ps"),
    "mxu_basis": (CAT, "hw_counters | llo_util (LLO static slot occupancy over measured windows) | both, comma-joined"),
    "ep_wait_in_ps": ("float64", "time in ep_wait_in (waiting for an input block's DMA); NaN without stages"),
    "ep_wait_out_ps": ("float64", "time in ep_wait_out and ep_finalize (waiting for an output block's DMA)"),
    "ep_copy_in_ps": ("float64", "time in ep_copy_in (starting input DMAs)"),
    "ep_copy_out_ps": ("float64", "time in ep_copy_out (starting output DMAs)"),
    "ep_run_kernel_ps": ("float64", "time in ep_run_kernel (the kernel body)"),
    "ep_initialize_ps": ("float64", "time in ep_initialize_N (the first fetches)"),
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

SCHEMAS = {"memory_events": MEMORY_EVENTS, "host_events": HOST_EVENTS, "ops": OPS, "hlo": HLO, "modules": MODULES, "steps": STEPS, "lines": LINES, "roofline": ROOFLINE}

_FILL = {"int64": -1, "int32": -1, "uint64": 0, "float64": np.nan, "float32": np.nan, "bool": False, "object": "",
         CAT: ""}


def columns(schema: dict) -> list[str]:
    return list(schema)


#: integer columns declared int64 and stored as int32 when every value of the frame fits (a trace's steps and run
#: ids, a loop's trip count nearly always do; a cast would wrap a larger one): 4 bytes per op row each
NARROW_INTS = ("step", "run_id", "loop_trip_count")


def _dtype_ok(name: str, dtype, d: str) -> bool:
    """Column ``name`` of dtype ``dtype`` is stored as the schema's ``d`` says (read from the dtype alone: no
    Series is built)."""
    if d == CAT:
        return isinstance(dtype, pd.CategoricalDtype) and (
            name not in CATEGORIES or list(dtype.categories[:len(CATEGORIES[name])]) == CATEGORIES[name])
    if d == "object":
        return dtype == object
    return str(dtype) == d or (d == "int64" and dtype == np.int32 and name in NARROW_INTS)


def empty(schema: dict) -> pd.DataFrame:
    """An empty frame with the schema's columns and dtypes: a copy of one built once per schema (building one
    costs ~1.5 ms, a copy ~0.2; a small trace's analysis asks for dozens, a pod's hundreds per host). A deep
    copy: a shallow one would leave a copy-on-write reference on the cached frame's blocks per copy, which pandas
    prunes only now and then (memory held across analyses, tests/test_memory_growth.py)."""
    return _empty_of(tuple((c, d) for c, (d, _) in schema.items())).copy()


@functools.lru_cache(maxsize=256)
def _empty_of(columns: tuple) -> pd.DataFrame:
    """The empty frame of ``columns`` ((name, dtype) pairs): only ever copied, never handed out."""
    return pd.DataFrame({c: pd.Categorical([]) if d == CAT else np.empty(0, object if d == "object" else d)
                         for c, d in columns}, copy=False)


def frame_of(columns: dict, schema: dict) -> pd.DataFrame:
    """The frame of ``columns`` (one list of values per column of ``schema``, in any order) with the schema's
    dtypes, each column typed as it is put in: what ``conform(pd.DataFrame(columns), schema)`` gives, without a
    frame of inferred types cast column by column afterwards (~0.1 ms a column)."""
    data = {}
    for c, (d, _) in schema.items():
        v = columns[c]
        if d == CAT and c not in CATEGORIES:
            data[c] = pd.Categorical([str(x) for x in v])  # (conform: astype(str), then category)
        elif d == "object":
            data[c] = pd.Series(v, dtype=object)  # (a frame would infer text from an object array)
        elif d in ("uint64", "int64", "bool", "float64"):
            data[c] = typed_array(v, d)
        else:
            data[c] = v
    return conform(pd.DataFrame(data), schema)


def typed_array(values: list, dtype) -> np.ndarray:
    """``values`` as an array of ``dtype``. Program ids (unsigned) go through pandas' inference and cast, as a
    frame's column does (and :func:`conform`): a negative id of a damaged module wraps around instead of raising."""
    if dtype == "uint64":
        return pd.Series(values, dtype=None if len(values) else "int64").astype(dtype).to_numpy()
    return np.asarray(values, dtype=dtype)


def conform(df: pd.DataFrame, schema: dict, *, extra: bool = True) -> pd.DataFrame:
    """Coerce ``df`` to ``schema``: missing columns are filled with the unknown value, dtypes are cast, and the
    schema's columns come first in order. Columns not in the schema are kept at the end when ``extra``."""
    if df.columns[:len(schema)].tolist() == list(schema) and (extra or len(df.columns) == len(schema)) and \
            all(_dtype_ok(c, t, schema[c][0]) for c, t in zip(schema, df.dtypes)):
        return df  # already conforming: no copy
    out = {}
    n = len(df)
    for c, (d, _) in schema.items():
        if c in df.columns:
            s = df[c]
            if d == CAT and c in CATEGORIES:
                if not _dtype_ok(c, s.dtype, d):
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
            s = pd.Categorical.from_codes(filled(n, CATEGORIES[c].index("unknown"), np.int8), categories=CATEGORIES[c])
        elif d == CAT:
            s = pd.Categorical.from_codes(filled(n, 0, np.int8), categories=[""])
        elif d == "object":
            s = np.full(n, _FILL[d], dtype=object)
        else:  # (held once where the process allows it: a placeholder the loader replaces, or a column no row uses)
            s = filled(n, _FILL[d], d)
        out[c] = s
    if extra:
        for c in df.columns.tolist():
            if c not in schema:
                out[c] = df[c]
    # one frame from the columns as they are (copy-on-write keeps ``df`` unchanged): no copy, no consolidation
    return pd.DataFrame(out, index=df.index, copy=False)
