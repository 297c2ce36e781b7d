"""Topology (from a trace's planes or --topology) and what the HLO says about collectives (replica groups in
both forms, device assignment, pairs, ragged sizes, the patterns the rules read)."""
from __future__ import annotations

import json

import pytest

import tracekit
from tracekit.errors import TraceError
from tracekit.model import chips, collective_hlo, topology
from tracekit.proto import hlo_pb2

PT = hlo_pb2.PrimitiveType


# ---------------------------------------------------------------------------------------------- --topology

def test_parse_specs():
    assert topology.parse("4x4") == topology.Spec("torus", (4, 4), 1, "4x4")
    assert topology.parse(" 2x2x4 ").shape == (2, 2, 4)
    assert topology.parse("4x4@2").slices == 2
    assert topology.parse("2x8gpu") == topology.Spec("nodes", (8,), 2, "2x8gpu")
    assert topology.parse("8GPU").slices == 1
    for bad in ("", "4by4", "0x4", "2x2x2x2", "x8gpu", "4x4@0"):
        with pytest.raises(TraceError):
            topology.parse(bad)


def test_wraparound_rules():
    v5e, v5p = chips.get("TPU v5e"), chips.get("TPU v5p")
    assert topology.wraparound(v5e, (16, 16)) == (True, True)
    assert topology.wraparound(v5e, (8, 16)) == (False, True)       # book: a v5e 8x16 wraps on the long axis
    assert topology.wraparound(v5e, (4, 4)) == (False, False)
    assert topology.wraparound(v5p, (4, 4, 4)) == (True, True, True)
    assert topology.wraparound(v5p, (4, 4, 8)) == (True, True, True)
    assert topology.wraparound(v5p, (2, 2, 4)) == (False, False, False)  # book: 2x2x4 has no wraparound at all
    assert topology.wraparound(chips.get("H100"), (8,)) == (False,)


def test_row_major_coordinates_when_the_trace_says_nothing():
    ch = chips.get("TPU v5p")
    t = topology.from_trace([("h", f"CPU:{i}") for i in range(16)], {}, ch, spec="2x2x4")
    assert t.kind == "torus" and t.shape == (2, 2, 4) and t.size == 16
    assert [t.place(i).coords for i in (0, 1, 3, 4, 8, 15)] == [(0, 0, 0), (0, 0, 1), (0, 0, 3), (0, 1, 0),
                                                                 (1, 0, 0), (1, 1, 3)]
    assert t.global_id()[("h", "CPU:9")] == 9
    t2 = topology.from_trace([], {}, ch, spec="2x2x2@2")
    assert t2.place(9) == topology.Place(1, (0, 0, 1), 9)
    with pytest.raises(TraceError, match="holds 8 chips"):
        topology.from_trace([("h", f"CPU:{i}") for i in range(16)], {}, ch, spec="2x2x2")


def test_default_shapes_and_devices_per_chip():
    v6e, v5p, tpu7x = chips.get("TPU v6e"), chips.get("TPU v5p"), chips.get("TPU7x")
    assert topology.from_trace([], {}, v6e, max_device_id=15).shape == (4, 4)
    assert topology.from_trace([], {}, v5p, max_device_id=63).shape == (4, 4, 4)
    t = topology.from_trace([], {}, v6e, max_device_id=11)
    assert t.shape == (12,) and t.source.find("not a standard slice") > 0
    # TPU7x: two devices per chip; devices 2c and 2c+1 share chip c
    t7 = topology.from_trace([], {}, tpu7x, max_device_id=15)
    assert t7.devices_per_chip == 2 and t7.shape == (2, 2, 2)
    assert t7.place(6).chip == t7.place(7).chip == 3


def test_two_devices_per_chip_read_from_core_details():
    def cd(chip, core):  # CoreDetails: global_chip_id = 5, global_core_id = 6 (varints)
        return bytes([0x28, chip, 0x30, core])
    stats = {("h", f"TPU:{i}"): {"core_details": cd(i // 2, i)} for i in range(4)}
    t = topology.from_trace(list(stats), stats, chips.get("TPU v5e"))
    assert t.devices_per_chip == 2 and t.place(3).chip == 1


def test_gpu_nodes_from_hosts_and_chip_domain():
    h100 = chips.get("H100")
    devs = [(h, f"GPU:{i}") for h in ("a", "b") for i in range(8)]
    t = topology.from_trace(devs, {}, h100, hosts=["a", "b"])
    assert (t.kind, t.shape, t.groups) == ("switch", (8,), 2) and t.global_id()[("b", "GPU:3")] == 11
    gb = topology.from_trace([(h, f"GPU:{i}") for h in "abcd" for i in range(4)], {}, chips.get("GB200"),
                             hosts=list("abcd"))
    assert gb.shape == (72,) and gb.groups == 1                 # the NVL72 domain spans hosts
    assert topology.from_trace([], {}, chips.get("MI300X"), spec="8gpu").kind == "mesh"


def test_v6e_topology_matches_its_planes(v6e):
    """The trace's own chip ids: each TPU plane's core_details (decoded here with xprof's own CoreDetails message
    as the oracle), and the HLO's single-device modules (their device assignment names the device they ran on)."""
    op_stats_pb2 = pytest.importorskip("xprof.protobuf.op_stats_pb2")
    tr = tracekit.load(v6e)
    ch = chips.get("TPU v6e")
    t = topology.from_trace(list(zip(tr.devices["host"], tr.devices["device"])), tr.device_stats, ch,
                            max_device_id=7)
    for (host, dev), stats in tr.device_stats.items():
        want = op_stats_pb2.CoreDetails.FromString(stats["core_details"])
        assert t.global_id()[(host, dev)] == want.global_core_id
        assert t.place(want.global_core_id).chip == want.global_chip_id
    assert sorted(t.global_id().values()) == [4, 5, 6, 7]
    # jit_broadcast_in_dim ran on one device only; its device assignment says which global device that was
    mod = next(m for m in tr.hlo_modules if m.name == "jit_broadcast_in_dim")
    ran_on = set(tr.ops.loc[tr.ops["module"].astype(str) == "jit_broadcast_in_dim", "device"].astype(str))
    assigned = mod.proto.device_assignment.computation_devices[0].replica_device_ids[0]
    assert ran_on == {"TPU:0"} and t.global_id()[(tr.hosts[0], "TPU:0")] == assigned == 4
    # 8 devices in the HLO's groups -> the standard 8-chip v6e slice, 2x4, no wraparound
    assert t.shape == (2, 4) and t.wrap == (False, False) and "core_details" in t.source
    # the psum's iota groups [4,2]<=[2,4]T(1,0): {0,4},{1,5},{2,6},{3,7}, neighbours along the axis of 2
    ops = collective_hlo.collectives(tr.hlo_modules)
    (ar,) = [o for o in ops.values() if o.kind == "all-reduce"]
    assert ar.groups == ((0, 4), (1, 5), (2, 6), (3, 7))
    assert [t.place(g).coords for g in ar.group_of(4)] == [(0, 0), (1, 0)]


# ---------------------------------------------------------------------------------------------- HLO

def S(dt, *dims):
    return hlo_pb2.ShapeProto(element_type=PT.Value(dt.upper()), dimensions=dims)


class M:
    def __init__(self):
        self.m = hlo_pb2.HloModuleProto(name="m", id=1)
        self.n = 0

    def comp(self, name):
        self.c = self.m.computations.add(name=name, id=len(self.m.computations) + 1)
        return self.c

    def op(self, name, opcode, shape, operands=(), calls=(), **kw):
        self.n += 1
        i = self.c.instructions.add(name=name, opcode=opcode, shape=shape, id=self.n,
                                    operand_ids=[o.id for o in operands], called_computation_ids=[c.id for c in calls])
        for k, v in kw.items():
            if isinstance(v, (list, tuple)):
                getattr(i, k).extend(v)
            elif hasattr(v, "DESCRIPTOR"):
                getattr(i, k).CopyFrom(v)
            else:
                setattr(i, k, v)
        self.c.root_id = i.id
        return i

    def assign(self, devices):
        da = self.m.device_assignment
        da.replica_count, da.computation_count = 1, len(devices)
        for d in devices:
            da.computation_devices.add(replica_device_ids=[d])


def test_iota_groups_and_device_assignment():
    m = M()
    m.comp("e")
    x = m.op("x", "parameter", S("f32", 1024))
    cdl = hlo_pb2.CollectiveDeviceListProto(iota_replica_group_list=hlo_pb2.IotaReplicaGroupListProto(
        num_replica_groups=2, num_devices_per_group=4, iota_reshape_dims=[4, 2], iota_transpose_perm=[1, 0]))
    ag = m.op("ag", "all-gather", S("f32", 4096), [x], collective_device_list=cdl, use_global_device_ids=True,
              channel_id=1)
    assert collective_hlo.raw_groups(ag) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    m.assign([7, 6, 5, 4, 3, 2, 1, 0])  # logical id i runs on device 7 - i
    assert collective_hlo.device_groups(ag, m.m) == ((7, 5, 3, 1), (6, 4, 2, 0))
    explicit = m.op("rs", "reduce-scatter", S("f32", 256), [x], replica_groups=[
        hlo_pb2.ReplicaGroup(replica_ids=[0, 1]), hlo_pb2.ReplicaGroup(replica_ids=[2, 3])], channel_id=2)
    assert collective_hlo.device_groups(explicit, m.m)[:2] == ((7, 6), (5, 4))
    ops = collective_hlo.module_collectives(9, m.m)
    assert ops["ag"].global_bytes == 4096 * 4 and ops["ag"].group_size == 4
    assert ops["rs"].global_bytes == 1024 * 4


def test_all_to_all_bytes_are_global_and_ragged_sizes():
    m = M()
    m.comp("e")
    x = m.op("x", "parameter", S("bf16", 64, 128))
    groups = [hlo_pb2.ReplicaGroup(replica_ids=list(range(8)))]
    m.op("a2a", "all-to-all", S("bf16", 64, 128), [x], replica_groups=groups)
    out = m.op("o", "parameter", S("bf16", 64, 128))
    offs = m.op("offs", "constant", S("s32", 8), literal=hlo_pb2.LiteralProto(s32s=[0] * 8))
    sizes = m.op("sizes", "constant", S("s32", 8), literal=hlo_pb2.LiteralProto(s32s=[2, 2, 2, 2, 2, 2, 2, 2]))
    m.op("r", "ragged-all-to-all", S("bf16", 64, 128), [x, out, offs, sizes, offs, sizes], replica_groups=groups)
    rt = m.op("rsz", "parameter", S("s32", 8))
    m.op("r2", "ragged-all-to-all", S("bf16", 64, 128), [x, out, offs, rt, offs, rt], replica_groups=groups)
    ops = collective_hlo.module_collectives(1, m.m)
    assert ops["a2a"].size_bytes == 64 * 128 * 2 and ops["a2a"].global_bytes == 8 * 64 * 128 * 2
    assert ops["r"].size_bytes == 16 * 128 * 2 and ops["r"].global_bytes == 8 * 16 * 128 * 2
    assert ops["r2"].global_bytes != ops["r2"].global_bytes and "runtime" in ops["r2"].reason


def test_permute_and_send_pairs():
    m = M()
    m.comp("e")
    x = m.op("x", "parameter", S("f32", 100))
    m.op("cp", "collective-permute", S("f32", 100), [x], channel_id=1,
         source_target_pairs=[hlo_pb2.SourceTarget(source=0, target=1), hlo_pb2.SourceTarget(source=1, target=0)])
    tok = m.op("t", "after-all", hlo_pb2.ShapeProto(element_type=PT.TOKEN))
    fa = hlo_pb2.FrontendAttributes()
    fa.map["_xla_send_recv_source_target_pairs"] = "{{0,1},{1,2}}"
    m.op("s", "send", S("f32", 100), [x, tok], channel_id=3, frontend_attributes=fa)
    m.assign([10, 11, 12])
    ops = collective_hlo.module_collectives(1, m.m)
    assert ops["cp"].pairs == ((10, 11), (11, 10)) and ops["cp"].global_bytes == 400
    assert ops["s"].pairs == ((10, 11), (11, 12))


def test_all_reduce_then_slice_and_loop_invariant_gather():
    m = M()
    body = m.comp("body")
    p = m.op("p", "parameter", hlo_pb2.ShapeProto(element_type=PT.TUPLE, tuple_shapes=[S("s32"), S("f32", 128)]))
    i = m.op("i", "get-tuple-element", S("s32"), [p], tuple_index=0)
    w = m.op("w", "get-tuple-element", S("f32", 128), [p], tuple_index=1)
    m.op("ag", "all-gather", S("f32", 1024), [w], replica_groups=[hlo_pb2.ReplicaGroup(replica_ids=range(8))])
    m.op("root", "tuple", p.shape, [i, w])
    m.comp("cond")
    m.op("cp", "parameter", p.shape)
    m.op("lt", "constant", S("pred"))
    m.comp("entry")
    init = m.op("init", "parameter", p.shape)
    loop = m.op("loop", "while", p.shape, [init], calls=[body, m.m.computations[1]],
                backend_config=json.dumps({"known_trip_count": {"n": "6"}}).encode())
    x = m.op("x", "parameter", S("f32", 1024))
    ar = m.op("ar", "all-reduce", S("f32", 1024), [x], replica_groups=[hlo_pb2.ReplicaGroup(replica_ids=range(8))])
    m.op("ds", "dynamic-slice", S("f32", 128), [ar, i], dynamic_slice_sizes=[128])
    ar2 = m.op("ar2", "all-reduce", S("f32", 1024), [x], replica_groups=[hlo_pb2.ReplicaGroup(replica_ids=range(8))])
    m.op("neg", "negate", S("f32", 1024), [ar2])
    m.op("out", "tuple", hlo_pb2.ShapeProto(element_type=PT.TUPLE), [loop])
    ops = collective_hlo.module_collectives(1, m.m)
    assert ops["ag"].pattern == collective_hlo.LOOP_INVARIANT_GATHER and ops["ag"].trip_count == 6
    assert ops["ar"].pattern == collective_hlo.ALL_REDUCE_THEN_SLICE
    assert ops["ar2"].pattern == ""
    # the body's gathered value changes when the loop writes a new value back at its index
    m.c = m.m.computations[0]
    new_w = m.op("w2", "negate", S("f32", 128), [w])
    root = next(x for x in m.m.computations[0].instructions if x.name == "root")
    root.operand_ids[1] = new_w.id
    m.m.computations[0].root_id = root.id
    assert collective_hlo.module_collectives(1, m.m)["ag"].pattern == ""
