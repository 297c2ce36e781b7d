"""The recorded CPU traces in fixtures/cpu exist, are small, and carry what tracekit's loader relies on.

Regenerate them with ``python fixtures/capture_cpu.py`` (see fixtures/README.md).
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
try:
    from tracekit.proto import hlo_pb2, xplane_pb2
except ImportError:  # running from a checkout that is not installed
    sys.path.insert(0, str(ROOT))
    from tracekit.proto import hlo_pb2, xplane_pb2

FIXTURES = ROOT / "fixtures" / "cpu"
ORIGINAL = ["train_step", "sharded8", "allreduce_exposed", "matvec_b1", "sleepy_steps", "big_matmul"]
PROGRAMS = ["scan_loop", "fori_loop", "while_dynamic", "cond_branch", "fft", "gather_scatter", "sort_topk",
            "attention", "layernorm", "conv_strided", "conv_dilated", "conv_grouped", "conv_transpose", "dot_int8",
            "dot_bf16_f32"]
#: training loops of fixtures/steps_cpu.py (how steps are found): they keep jax's trace.json.gz beside the xplane
STEP_LOOPS = ["async_dp8", "async_dp8_sleepy", "blocking_dp8", "async_1dev"]
CASES = ORIGINAL + PROGRAMS + STEP_LOOPS
MULTI_DEVICE = {"sharded8", "allreduce_exposed", "async_dp8", "async_dp8_sleepy", "blocking_dp8"}
MAX_BYTES = 1_000_000


def trace_path(case: str) -> Path:
    return FIXTURES / case / "plugins" / "profile" / "run1" / "cpu.xplane.pb"


@lru_cache(maxsize=None)
def load(case: str) -> xplane_pb2.XSpace:
    space = xplane_pb2.XSpace()
    space.ParseFromString(trace_path(case).read_bytes())
    return space


def stat_value(plane, stat):
    kind = stat.WhichOneof("value")
    value = getattr(stat, kind)
    if kind == "ref_value":
        return plane.stat_metadata[value].name
    return value


def plane_named(space, name):
    planes = [p for p in space.planes if p.name == name]
    assert planes, f"no plane {name!r}; planes: {[p.name for p in space.planes]}"
    return planes[0]


def hlo_modules(space):
    """module name -> HloModuleProto, from the `Hlo Proto` stats of /host:metadata."""
    meta = plane_named(space, "/host:metadata")
    modules = {}
    for em in meta.event_metadata.values():
        for stat in em.stats:
            if meta.stat_metadata[stat.metadata_id].name == "Hlo Proto":
                proto = hlo_pb2.HloProto()
                proto.ParseFromString(stat.bytes_value)
                modules[proto.hlo_module.name] = proto.hlo_module
    return modules


def op_events(space):
    """(event name, {stat name: value}) for every event carrying an `hlo_op` stat on /host:CPU."""
    host = plane_named(space, "/host:CPU")
    out = []
    for line in host.lines:
        for ev in line.events:
            stats = {host.stat_metadata[s.metadata_id].name: stat_value(host, s) for s in ev.stats}
            if "hlo_op" in stats:
                out.append((host.event_metadata[ev.metadata_id].name, stats))
    return out


def test_cases_json_lists_every_case():
    index = json.loads((FIXTURES / "cases.json").read_text())
    assert index["platform"] == "cpu"
    assert set(CASES) <= set(index["cases"])
    assert index["machine"]["cpu_count"] >= 1
    for case in CASES:
        info = index["cases"][case]
        assert info["devices"] == (8 if case in MULTI_DEVICE else 1)
        for name, cost in info["xla_cost"].items():
            if name != "top_k":  # XLA cannot count the TopK custom call: -1
                assert cost["flops"] > 0 and cost["bytes accessed"] > 0


@pytest.mark.parametrize("case", CASES)
def test_trace_exists_and_is_small(case):
    path = trace_path(case)
    assert path.is_file(), f"missing {path}; run fixtures/capture_cpu.py"
    assert path.stat().st_size < MAX_BYTES
    kept = ["cpu.machine.json", "cpu.trace.json.gz", "cpu.xplane.pb"] if case in STEP_LOOPS else \
        ["cpu.machine.json", "cpu.xplane.pb"]
    assert [p.name for p in sorted(path.parent.iterdir())] == kept
    if case in STEP_LOOPS:  # jax's own trace-event JSON: the oracle of tests/test_device_steps.py
        js = path.parent / "cpu.trace.json.gz"
        assert js.stat().st_size < MAX_BYTES
        with gzip.open(js, "rt") as f:
            assert any("hlo_op" in e.get("args", {}) for e in json.load(f)["traceEvents"])
    machine = json.loads((path.parent / "cpu.machine.json").read_text())
    assert machine["format"] == "tracekit.machine/1" and machine["cpu_count"] >= 1 and machine["processor"]
    assert machine["calibration"]["peak_flops_per_s"]["f32"] > 0


@pytest.mark.parametrize("case", CASES)
def test_cases_json_has_xla_numbers_and_step_times(case):
    """Every case records, for every jitted function it profiles, XLA's cost_analysis() and memory_analysis(),
    and the wall time of every profiled step as the capture script measured it."""
    info = json.loads((FIXTURES / "cases.json").read_text())["cases"][case]
    assert set(info["xla_cost"]) == set(info["jitted"]) == set(info["xla_memory"]) == set(info["hlo_ops"])
    for mem in info["xla_memory"].values():
        for key in ("argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
                    "generated_code_size_in_bytes"):
            assert isinstance(mem[key], int) and mem[key] >= 0
        assert mem["argument_size_in_bytes"] > 0 and mem["output_size_in_bytes"] > 0
    walls = info["step_wall_s"]
    assert len(walls) == info["steps"] and all(0 < w < 10 for w in walls)
    for key in ("trip_count", "xla_cost_body"):
        assert (key in info) == (case in ("scan_loop", "fori_loop", "while_dynamic"))


@pytest.mark.parametrize("case", CASES)
def test_trace_has_hlo_protos_and_op_events(case):
    space = load(case)
    modules = hlo_modules(space)
    assert modules, "no `Hlo Proto` stat in /host:metadata"
    instructions = {
        (m.name, ins.name) for m in modules.values() for comp in m.computations for ins in comp.instructions
    }
    ops = op_events(space)
    assert ops, "no op events with an hlo_op stat"
    for name, stats in ops:
        assert name == stats["hlo_op"]
        for key in ("device_ordinal", "hlo_module", "program_id", "run_id"):
            assert key in stats, (name, stats)
        # every op event resolves to an instruction of a recorded HLO module, whose id is the program_id
        assert (stats["hlo_module"], stats["hlo_op"]) in instructions
        assert modules[stats["hlo_module"]].id == stats["program_id"]


@pytest.mark.parametrize("case", CASES)
def test_trace_has_step_annotations(case):
    host = plane_named(load(case), "/host:CPU")
    index = json.loads((FIXTURES / "cases.json").read_text())
    step_nums = []
    for line in host.lines:
        for ev in line.events:
            if host.event_metadata[ev.metadata_id].name == "train":
                stats = {host.stat_metadata[s.metadata_id].name: stat_value(host, s) for s in ev.stats}
                step_nums.append(stats["step_num"])
    assert sorted(step_nums) == list(range(index["cases"][case]["steps"]))


@pytest.mark.parametrize("case", sorted(MULTI_DEVICE))
def test_all_reduce_on_all_eight_devices(case):
    space = load(case)
    modules = hlo_modules(space)
    opcode = {
        (m.name, ins.name): ins.opcode
        for m in modules.values()
        for comp in m.computations
        for ins in comp.instructions
    }
    devices_by_opcode = defaultdict(set)
    for _, stats in op_events(space):
        devices_by_opcode[opcode[(stats["hlo_module"], stats["hlo_op"])]].add(stats["device_ordinal"])
    assert devices_by_opcode["all-reduce"] == set(range(8))
    if case == "sharded8":
        assert devices_by_opcode["all-gather"] == set(range(8))
