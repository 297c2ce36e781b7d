"""Build small synthetic XSpaces (TPU-, GPU- and CPU-shaped) for exact unit tests, fuzzing and benchmarks.

    b = SpaceBuilder(hostname="h")
    tpu = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0})
    ops = tpu.line("XLA Ops", timestamp_ns=0)
    ops.event("%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop", 1_000, 500, display="fusion.1",
              md_stats={"program_id": 7, "hlo_category": "loop fusion"})
    b.hlo_module(module_proto, label="jit_f(7)")
    data = b.serialize()
"""
from __future__ import annotations

from tracekit.proto import hlo_pb2, xplane_pb2


def _set_value(st: xplane_pb2.XStat, v, plane: "PlaneBuilder", ref: bool = False):
    if isinstance(v, bool):
        st.int64_value = int(v)
    elif isinstance(v, int):
        if v < 0 or v < 2**63:
            st.int64_value = v
        else:
            st.uint64_value = v
    elif isinstance(v, float):
        st.double_value = v
    elif isinstance(v, bytes):
        st.bytes_value = v
    elif ref:
        st.ref_value = plane.stat_id(str(v))
    else:
        st.str_value = str(v)


class LineBuilder:
    def __init__(self, plane: "PlaneBuilder", line: xplane_pb2.XLine):
        self.plane, self.line = plane, line

    def event(self, name: str, offset_ps: int, duration_ps: int, *, display: str = "", stats: dict | None = None,
              md_stats: dict | None = None, ref_stats: bool = False) -> "LineBuilder":
        """Add an event. ``stats`` go on the event, ``md_stats`` on its (shared) metadata; with ``ref_stats``
        string values are stored as ``ref_value`` ids into the plane's stat metadata, as GPU traces do."""
        mid = self.plane.metadata_id(name, display, md_stats or {})
        e = self.line.events.add(metadata_id=mid, offset_ps=offset_ps, duration_ps=duration_ps)
        for k, v in (stats or {}).items():
            _set_value(e.stats.add(metadata_id=self.plane.stat_id(k)), v, self.plane, ref_stats)
        return self


class PlaneBuilder:
    def __init__(self, plane: xplane_pb2.XPlane):
        self.p = plane
        self._stats: dict[str, int] = {}
        self._md: dict[tuple, int] = {}

    def stat_id(self, name: str) -> int:
        if name not in self._stats:
            sid = len(self._stats) + 1
            self._stats[name] = sid
            self.p.stat_metadata[sid].id = sid
            self.p.stat_metadata[sid].name = name
        return self._stats[name]

    def metadata_id(self, name: str, display: str = "", md_stats: dict | None = None) -> int:
        key = (name, display, tuple(sorted((md_stats or {}).items())))
        if key not in self._md:
            mid = len(self._md) + 1
            self._md[key] = mid
            md = self.p.event_metadata[mid]
            md.id, md.name, md.display_name = mid, name, display
            for k, v in (md_stats or {}).items():
                _set_value(md.stats.add(metadata_id=self.stat_id(k)), v, self)
        return self._md[key]

    def line(self, name: str, timestamp_ns: int = 0, line_id: int | None = None) -> LineBuilder:
        ln = self.p.lines.add(id=line_id if line_id is not None else len(self.p.lines) + 1, name=name,
                              timestamp_ns=timestamp_ns)
        return LineBuilder(self, ln)


class SpaceBuilder:
    def __init__(self, hostname: str | None = None):
        self.space = xplane_pb2.XSpace()
        if hostname:
            self.space.hostnames.append(hostname)
        self._meta: PlaneBuilder | None = None

    def plane(self, name: str, stats: dict | None = None, plane_id: int | None = None) -> PlaneBuilder:
        pb = PlaneBuilder(self.space.planes.add(id=plane_id if plane_id is not None else len(self.space.planes), name=name))
        for k, v in (stats or {}).items():
            _set_value(pb.p.stats.add(metadata_id=pb.stat_id(k)), v, pb)
        return pb

    def hlo_module(self, module: hlo_pb2.HloModuleProto, label: str | None = None) -> None:
        """Attach an HLO module to the /host:metadata plane as XLA does (an 'Hlo Proto' stat)."""
        if self._meta is None:
            self._meta = self.plane("/host:metadata")
        payload = hlo_pb2.HloProto(hlo_module=module).SerializeToString()
        name = label or f"{module.name}({module.id})"
        self._meta.metadata_id(name, "", {"Hlo Proto": payload})

    def serialize(self) -> bytes:
        return self.space.SerializeToString()

    def write(self, path) -> None:
        with open(path, "wb") as f:
            f.write(self.serialize())


# --- tiny HLO construction helpers -------------------------------------------------------------------------
def shape(dtype: str, dims=()) -> hlo_pb2.ShapeProto:
    return hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.Value(dtype.upper()), dimensions=list(dims))


def module(name: str, module_id: int, instructions: list[hlo_pb2.HloInstructionProto],
           extra_computations: list[hlo_pb2.HloComputationProto] = ()) -> hlo_pb2.HloModuleProto:
    """A module whose entry computation holds ``instructions`` (ids assigned in order when unset)."""
    for i, ins in enumerate(instructions):
        if not ins.id:
            ins.id = i + 1
    entry = hlo_pb2.HloComputationProto(name="main", id=1000, instructions=instructions,
                                        root_id=instructions[-1].id if instructions else 0)
    m = hlo_pb2.HloModuleProto(name=name, id=module_id, entry_computation_name="main", entry_computation_id=1000)
    m.computations.extend(list(extra_computations) + [entry])
    return m


def instr(name: str, opcode: str, shp: hlo_pb2.ShapeProto, operands=(), **fields) -> hlo_pb2.HloInstructionProto:
    ins = hlo_pb2.HloInstructionProto(name=name, opcode=opcode, shape=shp, **fields)
    ins.operand_ids.extend(operands)
    return ins
