"""Fuzzing the whole pipeline with mutated real traces: every input either loads and analyzes (every report format
renders) or fails with :class:`tracekit.TraceError` carrying a one-line message. Nothing else may escape, no case
may run long (each one runs under a timer) and memory stays bounded (the module runs under an address-space limit).

Mutations: truncation at every byte of a small trace and at sampled bytes of large ones, truncation of a nested
message at each of its field boundaries (valid protobuf, missing fields), bit flips, random field values written
through the protobuf schema (event offsets/durations/metadata ids, stat values and their types, line timestamps,
plane/line/stat names, deleted/duplicated planes, lines, events), unknown fields of every wire type, huge declared
lengths, deep nesting, and malformed ``Hlo Proto`` payloads (random bytes, truncated, flipped, and valid protobuf
with nonsense: dangling operand ids, fusions without computations, call cycles, negative or absurd dimensions,
unknown opcodes, broken windows and dimension numbers, garbage backend configs).

Both decoders run: the C one and the pure-Python one (``TRACEKIT_NO_C=1``: in-process through ``wire.HAVE_C``, and
in a subprocess with that variable under ``RLIMIT_AS``).

Sizes: ``TRACEKIT_FUZZ=long`` (about 25x the examples, every byte of the larger fixtures) for a long run;
``TRACEKIT_FUZZ_EXAMPLES=N`` sets every property test's example count. CI (default) runs a few thousand inputs.
"""
from __future__ import annotations

import contextlib
import faulthandler
import gzip
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import tracekit
from conftest import FIXTURES, ROOT, SHARED, shared_missing, varint
from tracekit import pipeline
from tracekit.ingest import paths as loader
from tracekit.report import render
from tracekit.analysis import rule_model
from tracekit.ingest import synth
from tracekit.ingest import wire
from tracekit.errors import TraceError
from tracekit.proto import hlo_pb2, xplane_pb2
from tracekit.ingest.synth import instr, shape

try:
    import resource
except ImportError:  # pragma: no cover - not on Linux/macOS
    resource = None

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

LONG = os.environ.get("TRACEKIT_FUZZ", "ci") == "long"
SCALE = 25 if LONG else 1
CASE_SECONDS = 60  # a hang, not a slow case: the biggest trace here analyzes in about a second
MEM_HEADROOM = 3 << 30  # address space the module may add to what the process had
MEM_GROWTH = 1 << 30  # peak RSS growth allowed over the module
FORMATS = ("json", "markdown", "html", "sarif", "text")

_common = dict(deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("tracekit-fuzz-ci", derandomize=True, database=None, **_common)
settings.register_profile("tracekit-fuzz-long", **_common)
PROFILE = settings.get_profile("tracekit-fuzz-long" if LONG else "tracekit-fuzz-ci")


def fuzz(n: int):
    """Settings of a property test: ``n`` examples in CI, ``SCALE`` times more in a long run, or
    ``TRACEKIT_FUZZ_EXAMPLES``."""
    env = os.environ.get("TRACEKIT_FUZZ_EXAMPLES")
    return settings(PROFILE, max_examples=int(env) if env else n * SCALE)


def fixture_bytes(case: str) -> bytes:
    p = FIXTURES / "cpu" / case / "plugins/profile/run1/cpu.xplane.pb"
    if not p.exists():
        pytest.skip(f"fixture {case} not captured")
    return p.read_bytes()


def shared_bytes(rel: str) -> bytes:
    p = SHARED / rel
    if not p.exists():
        shared_missing(rel)
    return p.read_bytes()


_SPACES: dict = {}


def space_of(source: str) -> xplane_pb2.XSpace:
    """A fresh copy of a real trace's XSpace (``cpu:NAME`` or a path under ../shared/traces)."""
    if source not in _SPACES:
        raw = fixture_bytes(source[4:]) if source.startswith("cpu:") else shared_bytes(source)
        _SPACES[source] = xplane_pb2.XSpace.FromString(raw)
    sp = xplane_pb2.XSpace()
    sp.CopyFrom(_SPACES[source])
    return sp


# ---- running one case -----------------------------------------------------------------------------------------

class CaseTimeout(BaseException):
    """Raised by the timer; a BaseException so that no ``except Exception`` in the code under test swallows it."""


@contextlib.contextmanager
def bounded(seconds: float = CASE_SECONDS):
    """Fail a case that runs over ``seconds``; a hang inside C code (where the timer cannot interrupt) ends the
    process with every thread's traceback after three times that."""
    def alarm(signum, frame):
        raise CaseTimeout()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    faulthandler.dump_traceback_later(seconds * 3, exit=True)
    try:
        yield
    except CaseTimeout:
        raise AssertionError(f"the case ran over {seconds} s (a hang?)") from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGALRM, old)


def refused(e: TraceError) -> str:
    msg = str(e)
    assert msg and "\n" not in msg, repr(msg)
    assert not re.match(r"rule TK\d+", msg), f"a built-in rule failed on a fuzzed trace: {msg}"
    return "refused"


_RULES: dict = {}


@pytest.fixture(autouse=True)
def _rules_once(monkeypatch):
    """The built-in rules are parsed once for the module (the YAML parse is most of a small analysis)."""
    real = rule_model.load_rules

    def cached(extra_dirs=(), select=(), ignore=()):
        key = (tuple(map(str, extra_dirs)), tuple(select), tuple(ignore))
        if key not in _RULES:
            _RULES[key] = real(extra_dirs, select, ignore)
        return _RULES[key]
    monkeypatch.setattr(rule_model, "load_rules", cached)


#: outcomes of the cases run so far (``TRACEKIT_FUZZ_REPORT=1`` prints them at the end of the module)
OUTCOMES: dict = {}


@pytest.fixture(scope="module", autouse=True)
def _report_outcomes():
    yield
    if os.environ.get("TRACEKIT_FUZZ_REPORT"):
        print(f"\nfuzz cases: {sum(OUTCOMES.values())} {OUTCOMES}", file=sys.stderr)


def run_case(data: bytes, folder: Path, *, full: bool = True, name: str = "fuzz.xplane.pb") -> str:
    """'ok' when ``data`` analyzes (``full``: every format renders) or loads, 'refused' on a TraceError."""
    out = _run_case(data, folder, full, name)
    OUTCOMES[out] = OUTCOMES.get(out, 0) + 1
    return out


def _run_case(data: bytes, folder: Path, full: bool, name: str) -> str:
    with bounded():
        if not name.endswith(".gz"):
            try:
                loader.decode(data, name)  # most broken inputs stop here: no file, no pipeline
            except TraceError as e:
                return refused(e)
        path = folder / name
        path.write_bytes(data)
        try:
            if full:
                rep = pipeline.analyze(path)
                json.loads(rep.to_json())
                for fmt in FORMATS:
                    assert isinstance(render.render(rep, fmt), str)
            else:
                tracekit.load(path)
        except TraceError as e:
            return refused(e)
    return "ok"


@pytest.fixture(params=["c", "python"])
def decoder(request, monkeypatch):
    """Run the test with the C decoder, then with the pure-Python one (what ``TRACEKIT_NO_C=1`` selects)."""
    if request.param == "c" and wire.wirec is None:
        pytest.skip("tracekit.ingest.wirec not built")
    monkeypatch.setattr(wire, "HAVE_C", request.param == "c")
    return request.param


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module", autouse=True)
def memory_bounded():
    """The module runs under an address-space limit (what the process had plus MEM_HEADROOM), so a case that
    allocates for an absurd declared size fails with MemoryError (a bug) instead of taking the machine down; and
    its peak RSS may grow by at most MEM_GROWTH."""
    if resource is None or not os.path.exists("/proc/self/statm"):
        yield
        return
    vm = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = vm + MEM_HEADROOM
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    if soft != resource.RLIM_INFINITY:
        limit = min(limit, soft)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0
    assert grown_kib * 1024 < MEM_GROWTH, f"peak RSS grew by {grown_kib / 2**20:.1f} GiB"


# ---- protobuf wire helpers --------------------------------------------------------------------------------------

def _read_varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        b = buf[i]
        n |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return n, i
        shift += 7


def fields(buf: bytes) -> list[tuple[int, int, int, int]]:
    """(start, end, field number, wire type) of every field of a serialized (valid) message, in order."""
    out, i = [], 0
    while i < len(buf):
        start = i
        tag, i = _read_varint(buf, i)
        wt = tag & 7
        if wt == 0:
            _, i = _read_varint(buf, i)
        elif wt == 1:
            i += 8
        elif wt == 2:
            n, i = _read_varint(buf, i)
            i += n
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
        out.append((start, i, tag >> 3, wt))
    return out


def key(field: int, wt: int) -> bytes:
    return varint(field << 3 | wt)


def unknown_field(rng: random.Random) -> bytes:
    """One field of a number no message of the schema declares, with any wire type (groups included)."""
    f = rng.choice([15, 16, 99, 2047, 2**29 - 1])
    wt = rng.choice([0, 1, 2, 3, 5])
    if wt == 0:
        return key(f, 0) + varint(rng.choice([0, 1, 2**63, 2**64 - 1]))
    if wt == 1:
        return key(f, 1) + bytes(rng.randrange(256) for _ in range(8))
    if wt == 2:
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(20)))
        return key(f, 2) + varint(len(payload)) + payload
    if wt == 3:
        return key(f, 3) + key(1, 0) + varint(5) + key(f, 4)
    return key(f, 5) + bytes(4)


def submessages(space: xplane_pb2.XSpace, rng: random.Random):
    """A random nested message of the space (the space itself, a plane, line, event, stat, metadata entry)."""
    kinds = ["space", "plane", "line", "event", "stat", "event_metadata", "stat_metadata", "plane_stat", "md_stat"]
    for _ in range(20):
        kind = rng.choice(kinds)
        if kind == "space" or not space.planes:
            return space
        p = rng.choice(space.planes)
        if kind == "plane":
            return p
        if kind in ("line", "event", "stat") and p.lines:
            ln = rng.choice(p.lines)
            if kind == "line":
                return ln
            if ln.events:
                e = rng.choice(ln.events)
                if kind == "event":
                    return e
                if e.stats:
                    return rng.choice(e.stats)
        if kind in ("event_metadata", "md_stat") and p.event_metadata:
            md = p.event_metadata[rng.choice(list(p.event_metadata))]
            if kind == "event_metadata":
                return md
            if md.stats:
                return rng.choice(md.stats)
        if kind == "stat_metadata" and p.stat_metadata:
            return p.stat_metadata[rng.choice(list(p.stat_metadata))]
        if kind == "plane_stat" and p.stats:
            return rng.choice(p.stats)
    return space


# ---- field-level mutation of an XSpace --------------------------------------------------------------------------

I64 = [0, 1, -1, 2**31, -(2**31), 2**53 + 1, 2**61, 2**62, 2**63 - 1, -(2**63), 10**12, -(10**12), 5 * 10**12]
STAT_NAMES = ["hlo_op", "hlo_module", "program_id", "device_ordinal", "step_num", "group_id", "run_id",
              "device_duration_ps", "flops", "bytes_accessed", "Hlo Proto", "device_type_string",
              "peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second", "hlo_category", "compute_cap_major",
              "compute_cap_minor", "core_count", "clock_rate", "memory_bandwidth", "memory_size", "device_vendor",
              "", "\x00"]
LINE_NAMES = ["XLA Ops", "Async XLA Ops", "XLA Modules", "Steps", "Stream #1(Compute)", "Stream #2(MemcpyH2D)",
              "python", "", "é€"]
PLANE_NAMES = ["/device:TPU:0", "/device:TPU:1", "/device:GPU:0", "/device:CPU:0", "/host:CPU", "/host:metadata",
               "/device:TPU:99999999999999999999", "/device:TPU_SYSTEM:0", "/device:GPU", "", "/host:"]
MD_NAMES = ["%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop", "%x = (f32[2], s32[]) tuple(", "%",
            "all-reduce-start.1", "all-reduce-done.1", "copy-start", "copy-done", "jit_f(123)", "jit_f(-5)",
            "jit_f(99999999999999999999999)", "7", "-1", "", "(((", "Memcpy", "😀", "compile"]


def set_random_value(s: xplane_pb2.XStat, rng: random.Random, plane=None) -> None:
    """Give a stat a value of a random type (or none)."""
    k = rng.randrange(8)
    if k == 0:
        s.double_value = rng.choice([0.0, -1.0, 1e308, float("nan"), float("inf"), -float("inf"), 2.5, 1e-300])
    elif k == 1:
        s.uint64_value = rng.choice([0, 1, 2**64 - 1, 2**63, 7])
    elif k == 2:
        s.int64_value = rng.choice(I64)
    elif k == 3:
        s.str_value = rng.choice(["", "abc", "12", "-3", "1e400", "nan", "TPU v6 Lite", "NVIDIA", "AMD gfx942", "é"])
    elif k == 4:
        s.bytes_value = bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
    elif k == 5:
        s.ref_value = rng.choice([0, 1, 2, 3, 2**64 - 1] + (list(plane.stat_metadata)[:5] if plane is not None else []))
    elif k == 6:
        s.ClearField("double_value"), s.ClearField("int64_value"), s.ClearField("str_value")


def mutate_space(space: xplane_pb2.XSpace, rng: random.Random, n: int) -> None:
    """``n`` random field-level changes of a decoded XSpace, in place."""
    for _ in range(n):
        if not space.planes:
            space.planes.add(name=rng.choice(PLANE_NAMES))
            continue
        p = rng.choice(space.planes)
        lines = list(p.lines)
        events = [(ln, e) for ln in lines for e in ln.events]
        sids = list(p.stat_metadata) or [1]
        what = rng.randrange(20)
        if what <= 5 and events:
            ln, e = rng.choice(events)
            f = rng.randrange(7)
            if f == 0:
                e.metadata_id = rng.choice(I64 + list(p.event_metadata)[:3])
            elif f == 1:
                e.offset_ps = rng.choice(I64)
            elif f == 2:
                e.duration_ps = rng.choice(I64)
            elif f == 3:
                e.num_occurrences = rng.choice(I64)
            elif f == 4 and e.stats:
                s = rng.choice(e.stats)
                if rng.random() < 0.5:
                    s.metadata_id = rng.choice(I64 + sids)
                else:
                    set_random_value(s, rng, p)
            elif f == 5:
                set_random_value(e.stats.add(metadata_id=rng.choice(sids)), rng, p)
            else:
                ln.events.add().CopyFrom(e)
        elif what == 6 and lines:
            rng.choice(lines).timestamp_ns = rng.choice(I64)
        elif what == 7 and lines:
            rng.choice(lines).name = rng.choice(LINE_NAMES)
        elif what == 8 and lines:
            ln = rng.choice(lines)
            if rng.random() < 0.5:
                p.lines.remove(ln)
            else:
                p.lines.add().CopyFrom(ln)
        elif what == 9:
            p.name = rng.choice(PLANE_NAMES)
        elif what == 10:
            if rng.random() < 0.5:
                space.planes.add().CopyFrom(p)
            else:
                space.planes.remove(p)
        elif what == 11 and p.event_metadata:
            k = rng.choice(list(p.event_metadata))
            md = p.event_metadata[k]
            g = rng.randrange(5)
            if g == 0:
                md.name = rng.choice(MD_NAMES)
            elif g == 1:
                md.display_name = rng.choice(MD_NAMES)
            elif g == 2:
                del p.event_metadata[k]
            elif g == 3 and md.stats:
                s = rng.choice(md.stats)
                if rng.random() < 0.5:
                    s.metadata_id = rng.choice(sids)
                else:
                    set_random_value(s, rng, p)
            else:
                set_random_value(md.stats.add(metadata_id=rng.choice(sids)), rng, p)
        elif what == 12 and p.stat_metadata:
            k = rng.choice(list(p.stat_metadata))
            if rng.random() < 0.8:
                p.stat_metadata[k].name = rng.choice(STAT_NAMES)
            else:
                del p.stat_metadata[k]
        elif what == 13:
            if p.stats and rng.random() < 0.7:
                set_random_value(rng.choice(p.stats), rng, p)
            else:
                set_random_value(p.stats.add(metadata_id=rng.choice(sids)), rng, p)
        elif what == 14 and lines:
            ln = rng.choice(lines)
            evs = [xplane_pb2.XEvent(metadata_id=e.metadata_id, duration_ps=e.duration_ps, offset_ps=e.offset_ps,
                                     stats=e.stats) for e in ln.events]
            rng.shuffle(evs)
            del ln.events[:]
            ln.events.extend(evs)
        elif what == 15:
            space.hostnames[:] = [rng.choice(["", "h", "a/b", "é", "x" * 300])] * rng.randrange(3)
        elif what == 16 and lines:
            rng.choice(lines).duration_ps = rng.choice(I64)
        elif what == 17 and len(p.stat_metadata) > 1:
            a, b = rng.sample(list(p.stat_metadata), 2)
            p.stat_metadata[a].name, p.stat_metadata[b].name = p.stat_metadata[b].name, p.stat_metadata[a].name
        elif what == 18 and events:
            ln, e = rng.choice(events)
            ln.events.remove(e)
        else:
            p.id = rng.choice(I64)


# ---- HLO mutation -------------------------------------------------------------------------------------------------

OPCODES = ["parameter", "constant", "add", "multiply", "exponential", "dot", "convolution", "fusion", "while",
           "conditional", "call", "async-start", "async-done", "reduce", "reduce-window", "select-and-scatter",
           "scatter", "gather", "sort", "fft", "triangular-solve", "cholesky", "map", "all-reduce",
           "all-reduce-start", "all-reduce-done", "all-gather", "all-gather-start", "reduce-scatter", "all-to-all",
           "ragged-all-to-all", "collective-permute", "collective-permute-start", "copy-start", "copy-done", "copy",
           "send", "recv", "infeed", "outfeed", "custom-call", "transpose", "slice", "dynamic-slice",
           "dynamic-update-slice", "tuple", "get-tuple-element", "iota", "rng", "ragged-dot", "bitcast",
           "frobnicate", "", "é€", "fusion.1"]
BIG = [0, 1, -1, 2**20, 2**31 - 1, -(2**31), 2**40, 2**62, 2**63 - 1, -(2**63)]


def nested_tuple(depth: int) -> hlo_pb2.ShapeProto:
    s = shape("f32", [2])
    for _ in range(depth):
        s = hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.TUPLE, tuple_shapes=[s, s] if depth < 10 else [s])
    return s


def mutate_shape(s: hlo_pb2.ShapeProto, rng: random.Random) -> None:
    k = rng.randrange(6)
    if k == 0:
        s.dimensions[:] = [rng.choice([-5, -1, 0, 3])] + list(s.dimensions)[1:]
    elif k == 1:
        s.dimensions[:] = [2**20, 2**20]  # 2^40 elements
    elif k == 2:
        s.dimensions[:] = [rng.choice(BIG) for _ in range(rng.randrange(1, 4))]
    elif k == 3:
        s.element_type = rng.choice([0, 11, 13, 46, 99, 2**30])
    elif k == 4:
        s.CopyFrom(nested_tuple(rng.choice([1, 3, 8, 40])))
    else:
        s.layout.minor_to_major[:] = [rng.choice(BIG) for _ in range(3)]
        s.layout.memory_space = rng.choice([0, 5, -1])
        s.layout.element_size_in_bits = rng.choice([0, 1, 2**40, -8])


def mutate_module(m: hlo_pb2.HloModuleProto, rng: random.Random, n: int) -> None:
    """``n`` random changes that keep ``m`` valid protobuf but make it nonsense HLO."""
    for _ in range(n):
        comps = list(m.computations)
        every = [(c, i) for c in comps for i in c.instructions]
        if not every:
            return
        c, i = rng.choice(every)
        ids, cids = [x.id for _, x in every], [x.id for x in comps]
        what = rng.randrange(22)
        if what == 0:
            i.operand_ids.append(rng.choice([999999, 0, -1, 2**62, rng.choice(ids)]))
        elif what == 1 and i.operand_ids:
            i.operand_ids[rng.randrange(len(i.operand_ids))] = rng.choice([424242, -7, rng.choice(ids)])
        elif what == 2:
            del i.called_computation_ids[:]  # a fusion / while / call without its computations
        elif what == 3:  # dangling, self (cycles), the entry
            i.called_computation_ids[:] = [rng.choice([c.id, 777777, rng.choice(cids), m.entry_computation_id])
                                           for _ in range(rng.randrange(1, 3))]
        elif what == 4:
            mutate_shape(i.shape, rng)
        elif what == 5:
            i.opcode = rng.choice(OPCODES)
        elif what == 6:
            m.computations.remove(c)
        elif what == 7:
            del c.instructions[:]
        elif what == 8:
            c.id = rng.choice(cids + [0, -3])
        elif what == 9:
            c.root_id = rng.choice([0, 31337, -1] + ids)
        elif what == 10:
            c.is_fusion_computation = not c.is_fusion_computation
        elif what == 11:
            m.entry_computation_id = rng.choice([0, 5555, -1] + cids)
            if rng.random() < 0.5:
                m.entry_computation_name = rng.choice(["", "nope", c.name])
        elif what == 12:
            for _ in range(rng.randrange(1, 3)):
                w = i.window.dimensions.add()
                w.size, w.stride = rng.choice(BIG), rng.choice(BIG)
                w.padding_low, w.padding_high = rng.choice(BIG), rng.choice(BIG)
                w.window_dilation, w.base_dilation = rng.choice(BIG), rng.choice(BIG)
        elif what == 13:
            dd = i.dot_dimension_numbers
            dd.lhs_contracting_dimensions.append(rng.choice([0, 1, 7, 100, -1, -100]))
            dd.rhs_batch_dimensions.append(rng.choice([0, 5, -2]))
        elif what == 14:
            i.backend_config = rng.choice([
                b"\xff\xfe garbage", b"{", b"[]", b"null",
                json.dumps({"known_trip_count": {"n": rng.choice(["10", "-3", "x", "1e400", 10**30, None])}}).encode(),
                json.dumps({"gemm_backend_config": {"dot_dimension_numbers":
                                                    {"lhs_contracting_dimensions": ["9", "x"]}}}).encode()])
        elif what == 15:
            g = i.replica_groups.add()
            g.replica_ids.extend([rng.choice(BIG) for _ in range(rng.randrange(0, 4))])
            if rng.random() < 0.5:
                io = i.collective_device_list.iota_replica_group_list
                io.num_devices_per_group, io.num_replica_groups = rng.choice(BIG), rng.choice(BIG)
                io.iota_reshape_dims.append(rng.choice(BIG))
                io.iota_transpose_perm.append(rng.choice([0, 1, 9]))
        elif what == 16:
            i.metadata.stack_frame_id = rng.choice([-1, -1000, 1, 2**31 - 1, 3])
            i.metadata.source_line = rng.choice([-1, 0, 2**31 - 1])
            if rng.random() < 0.5:
                sfi = m.stack_frame_index
                sfi.stack_frames.add().file_location_id = rng.choice([-3, 0, 1, 99])
                loc = sfi.file_locations.add()
                loc.file_name_id, loc.line = rng.choice([-2, 0, 1, 50]), -4
        elif what == 17:
            i.fft_length.append(rng.choice(BIG))
            i.parameter_number = rng.choice([-1, 0, 99, 2**31 - 1])
        elif what == 18:
            i.dimensions.append(rng.choice([0, 1, 5, -1, 2**40]))
        elif what == 19:
            i.opcode = "custom-call"
            i.custom_call_target = rng.choice(["__cublas$gemm", "__cudnn$convForward", "__cudnn$convBackwardInput"])
        elif what == 20:
            i.id = rng.choice(ids + [0, -1])  # duplicate ids
        else:
            m.computations.add().CopyFrom(c)  # a duplicated computation


def hlo_payloads(space: xplane_pb2.XSpace) -> list[xplane_pb2.XStat]:
    """The 'Hlo Proto' stats of the metadata planes."""
    out = []
    for p in space.planes:
        hid = [k for k, v in p.stat_metadata.items() if v.name == "Hlo Proto"]
        for md in p.event_metadata.values():
            out += [s for s in md.stats if s.metadata_id in hid and s.WhichOneof("value") == "bytes_value"]
    return out


def mutate_hlo(space: xplane_pb2.XSpace, rng: random.Random, mode: str) -> None:
    stats = hlo_payloads(space)
    for s in rng.sample(stats, rng.randrange(1, len(stats) + 1)) if stats else []:
        raw = s.bytes_value
        if mode == "bytes":
            s.bytes_value = bytes(rng.randrange(256) for _ in range(rng.randrange(64)))
        elif mode == "truncate":
            s.bytes_value = raw[:rng.randrange(len(raw) + 1)]
        elif mode == "flip":
            b = bytearray(raw)
            for _ in range(rng.choice((1, 2, 8))):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            s.bytes_value = bytes(b)
        elif mode == "huge-length":  # a length prefix near 2^63 inside the payload
            f = [x for x in fields(raw) if x[3] == 2]
            if f:
                start, end, num, _ = rng.choice(f)
                s.bytes_value = raw[:start] + key(num, 2) + varint(rng.choice([2**63 - 1, 2**62, 2**32])) + raw[end:]
        else:
            hp = hlo_pb2.HloProto.FromString(raw)
            mutate_module(hp.hlo_module, rng, rng.choice((1, 1, 2, 4)))
            s.bytes_value = hp.SerializeToString()


# =================================================================================================================
# byte-level mutations

def test_truncation_at_every_byte(decoder, folder):
    data = fixture_bytes("big_matmul")
    outcomes = [run_case(data[:n], folder) for n in range(len(data) + 1)]
    assert outcomes[-1] == "ok" and outcomes[0] == "refused"
    assert outcomes.count("ok") < len(data) // 10  # most cuts are refused, a few (between planes) load


def test_truncation_at_every_byte_of_a_larger_trace(folder):
    """Every byte of a 40 kB trace (C decoder; the loads are cheap, the few that decode are analyzed)."""
    if wire.wirec is None:
        pytest.skip("tracekit.ingest.wirec not built")
    data = fixture_bytes("train_step")
    step = 1 if LONG else 7
    for n in range(0, len(data) + 1, step):
        run_case(data[:n], folder)


@pytest.mark.parametrize("rel", ["tpu/v6e-4_jax_inference.xplane.pb", "gpu/mi300x8_jax_conv3d.xplane.pb",
                                 "gpu/v100x8_tf_bert.xplane.pb"])
def test_truncation_sampled_large(rel, decoder, folder):
    data = shared_bytes(rel)
    rng = random.Random(rel)
    cuts = rng.sample(range(len(data)), 2000 if LONG else 40)
    tops = [end for _, end, _, _ in fields(data)]  # between top-level fields: a valid, shorter trace
    tops = rng.sample(tops, min(len(tops), 30 if LONG else 2 if decoder == "c" else 0))
    for n in cuts + tops:
        run_case(data[:n], folder, full=n in tops)


@pytest.mark.parametrize("source", ["cpu:train_step", "gpu/mi300x_jax_gemm.xplane.pb"])
@fuzz(30)
@given(data=st.data())
def test_truncated_nested_message(source, folder, data):
    """A plane, line, event, stat or metadata entry cut at one of its field boundaries: valid protobuf with
    fields missing (an event without duration, a stat without value, metadata without name, ...)."""
    rng = data.draw(st.randoms(use_true_random=False))
    sp = space_of(source)
    for _ in range(rng.choice((1, 1, 3))):
        m = submessages(sp, rng)
        raw = m.SerializeToString()
        cuts = [start for start, _, _, _ in fields(raw)] + [len(raw)]
        cut = rng.choice(cuts)
        m.Clear()
        m.MergeFromString(raw[:cut])
    run_case(sp.SerializeToString(), folder)


@pytest.mark.parametrize("case", ["big_matmul", "matvec_b1", "train_step"])
@fuzz(20)
@given(data=st.data())
def test_bit_flips(case, decoder, folder, data):
    raw = bytearray(fixture_bytes(case))
    for _ in range(data.draw(st.sampled_from([1, 1, 2, 4, 16]))):
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    run_case(bytes(raw), folder)


@fuzz(60)
@given(raw=st.binary(max_size=400))
def test_random_bytes(decoder, folder, raw):
    run_case(raw, folder)


# =================================================================================================================
# field-level mutations through the schema

@pytest.mark.parametrize("source,n", [("cpu:train_step", 30), ("cpu:sharded8", 8),
                                      ("gpu/mi300x_jax_gemm.xplane.pb", 15),
                                      ("tpu/v6e-4_jax_inference.xplane.pb", 5)])
def test_random_field_values(source, n, folder):
    @fuzz(n)
    @given(data=st.data())
    def check(data):
        rng = data.draw(st.randoms(use_true_random=False))
        sp = space_of(source)
        mutate_space(sp, rng, rng.choice((1, 1, 2, 3, 8)))
        run_case(sp.SerializeToString(), folder)
    check()


@pytest.mark.parametrize("source", ["cpu:big_matmul", "gpu/mi300x_jax_gemm.xplane.pb"])
@fuzz(12)
@given(data=st.data())
def test_unknown_fields(source, decoder, folder, data):
    """Fields no message declares, of every wire type (a group too: the C decoder refuses it, upb keeps it), in
    random nested messages."""
    rng = data.draw(st.randoms(use_true_random=False))
    sp = space_of(source)
    for _ in range(rng.choice((1, 3, 10))):
        m = submessages(sp, rng)
        m.MergeFromString(unknown_field(rng))
    run_case(sp.SerializeToString(), folder)


def append_in(buf: bytes, path: list[int], extra: bytes) -> bytes:
    """``buf`` with ``extra`` appended to the nested message at ``path`` (field numbers: the first such field at
    each level), every enclosing length prefix re-encoded to match."""
    if not path:
        return buf + extra
    for start, end, num, wt in fields(buf):
        if num == path[0] and wt == 2:
            _, i = _read_varint(buf, start)
            _, j = _read_varint(buf, i)
            new = append_in(buf[j:end], path[1:], extra)
            return buf[:start] + key(num, 2) + varint(len(new)) + new + buf[end:]
    return buf + extra


#: XSpace.planes / XPlane.lines / XLine.events / XEvent.stats, and XPlane.event_metadata
PATHS = {"space": [], "plane": [1], "line": [1, 3], "event": [1, 3, 4], "stat": [1, 3, 4, 4], "metadata": [1, 4]}


@pytest.mark.parametrize("length", [2**63 - 1, 2**63, 2**62 + 7, 2**32, 2**31 - 1, 2**64 - 1])
def test_huge_declared_lengths(length, decoder, folder):
    """A length prefix near 2^63 (or just past the end) in the space, a plane, a line, an event, a stat and
    metadata, every enclosing length consistent: refused, without trying to allocate it."""
    data = fixture_bytes("big_matmul")
    for where, path in PATHS.items():
        for field in (1, 2, 4, 5, 6):
            bad = append_in(data, path, key(field, 2) + varint(length) + b"\x08\x01")
            assert run_case(bad, folder) == "refused", (where, field)
    start, end, num, _ = next(f for f in fields(data) if f[3] == 2)  # a real length made huge
    assert run_case(data[:start] + key(num, 2) + varint(length) + data[end:], folder) == "refused"
    assert run_case(key(1, 2) + varint(length), folder) == "refused"


@pytest.mark.parametrize("depth", [100, 10_000, 200_000])
def test_deep_nesting(depth, decoder, folder):
    """Unknown length-delimited fields nested ``depth`` deep, and unknown groups nested as deep, inside an event, a
    stat and at the top: bounded time, no crash."""
    data = fixture_bytes("big_matmul")
    inner = b""
    for _ in range(min(depth, 20_000)):
        inner = key(77, 2) + varint(len(inner)) + inner
    groups = key(78, 3) * depth + key(78, 4) * depth
    for extra in (inner, groups):
        for path in (PATHS["space"], PATHS["event"], PATHS["stat"]):
            run_case(append_in(data, path, extra), folder)


def test_empty_and_tiny_inputs(decoder, folder):
    for raw in (b"", b"\x00", b"\x0a\x00", b"\x0a\x02\x12\x00", key(1, 2) + varint(0) + key(4, 2) + varint(0)):
        run_case(raw, folder)


# =================================================================================================================
# Hlo Proto payloads

@pytest.mark.parametrize("source", ["cpu:train_step", "cpu:big_matmul", "gpu/mi300x_jax_gemm.xplane.pb"])
@fuzz(20)
@given(data=st.data())
def test_nonsense_hlo(source, folder, data):
    """Valid protobuf, nonsense HLO (see :func:`mutate_module`)."""
    rng = data.draw(st.randoms(use_true_random=False))
    sp = space_of(source)
    mutate_hlo(sp, rng, "proto")
    assert run_case(sp.SerializeToString(), folder) == "ok"  # bad HLO is never a reason to refuse the trace


@pytest.mark.parametrize("mode", ["bytes", "truncate", "flip", "huge-length"])
@fuzz(8)
@given(data=st.data())
def test_malformed_hlo_payloads(mode, folder, data):
    rng = data.draw(st.randoms(use_true_random=False))
    sp = space_of("cpu:train_step")
    mutate_hlo(sp, rng, mode)
    assert run_case(sp.SerializeToString(), folder) == "ok"


def _tpu_trace_with(module: hlo_pb2.HloModuleProto | None, payload: bytes | None = None) -> bytes:
    b = synth.SpaceBuilder(hostname="h")
    tpu = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0})
    ln = tpu.line("XLA Ops", timestamp_ns=0)
    for i, op in enumerate(["fusion.1", "main.1", "huh"]):
        ln.event(f"%{op} = f32[8]{{0}} fusion(f32[8]{{0}} %p), kind=kLoop", 1000 * i, 500, display=op,
                 md_stats={"program_id": 7})
    if module is not None:
        b.hlo_module(module, label="jit_f(7)")
    if payload is not None:
        meta = b.plane("/host:metadata")
        meta.metadata_id("jit_g(8)", "", {"Hlo Proto": payload})
    return b.serialize()


def _tpu_module_proto():
    return synth.module("jit_g", 8, [instr("p", "parameter", shape("f32", [8])),
                                     instr("fusion.1", "fusion", shape("f32", [8]), [1])])


def _comp(name, cid, instrs, fused=False):
    return hlo_pb2.HloComputationProto(name=name, id=cid, instructions=instrs, root_id=instrs[-1].id if instrs else 0,
                                       is_fusion_computation=fused)


def _entry(*ins, extra=()):
    return synth.module("m", 7, [instr("p0", "parameter", shape("f32", [8]), id=1), *ins], list(extra))


def _self_fusion(branches: int):
    ins = [instr("p", "parameter", shape("f32", [8]), id=50)]
    ins += [instr(f"f{k}", "fusion", shape("f32", [8]), [50], id=51 + k, called_computation_ids=[5])
            for k in range(branches)]
    return _entry(instr("fusion.1", "fusion", shape("f32", [8]), [1], id=2, called_computation_ids=[5]),
                  extra=[_comp("fc", 5, ins, fused=True)])


def _chain(opcode: str, depth: int):
    """Computation k calls computation k+1 (``depth`` deep) with ``opcode`` (two calls each: a DAG, not a tree)."""
    comps = [_comp(f"c{depth}", 100 + depth, [instr("p", "parameter", shape("f32", [8]), id=10 * depth + 1)])]
    for k in range(depth - 1, -1, -1):
        base = 10 * k + 1
        ins = [instr("p", "parameter", shape("f32", [8]), id=base)]
        ins += [instr(f"x{j}", opcode, shape("f32", [8]), [base], id=base + 1 + j,
                      called_computation_ids=[100 + k + 1] * (2 if opcode == "while" else 1)) for j in range(2)]
        comps.append(_comp(f"c{k}", 100 + k, ins, fused=opcode == "fusion"))
    return _entry(instr("fusion.1", opcode, shape("f32", [8]), [1], id=2,
                        called_computation_ids=[100] * (2 if opcode == "while" else 1)), extra=comps[::-1])


def _conv(out_dims, win):
    c = instr("fusion.1", "convolution", shape("f32", out_dims), [1, 2], id=3)
    dn = c.convolution_dimension_numbers
    dn.input_batch_dimension, dn.input_feature_dimension = 0, 2
    dn.input_spatial_dimensions.append(1)
    dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension = 2, 0
    dn.kernel_spatial_dimensions.append(1)
    dn.output_batch_dimension, dn.output_feature_dimension = 0, 2
    dn.output_spatial_dimensions.append(1)
    c.window.dimensions.add(size=win, stride=1)
    return synth.module("m", 7, [instr("l", "parameter", shape("f32", [1, 8, 1]), id=1),
                                 instr("r", "parameter", shape("f32", [1, 1, 1]), id=2), c])


def _while(n):
    body = _comp("body", 5, [instr("b", "parameter", shape("f32", [8]), id=50),
                             instr("e", "exponential", shape("f32", [8]), [50], id=51)])
    cond = _comp("cond", 6, [instr("c", "parameter", shape("f32", [8]), id=60)])
    w = instr("fusion.1", "while", shape("f32", [8]), [1], id=2, called_computation_ids=[5, 6],
              backend_config=json.dumps({"known_trip_count": {"n": n}}).encode())
    return _entry(w, extra=[body, cond])


NASTY_HLO = {
    "fusion-fuses-itself": lambda: _self_fusion(2),
    "fusion-fuses-itself-3x": lambda: _self_fusion(3),
    "fusion-without-computation": lambda: _entry(instr("fusion.1", "fusion", shape("f32", [8]), [1], id=2)),
    "fusion-of-missing-computation": lambda: _entry(
        instr("fusion.1", "fusion", shape("f32", [8]), [1], id=2, called_computation_ids=[4242])),
    "call-cycle": lambda: _entry(instr("fusion.1", "call", shape("f32", [8]), [1], id=2,
                                       called_computation_ids=[1000])),
    "reducer-applies-itself": lambda: _entry(
        instr("fusion.1", "reduce", shape("f32", []), [1, 1], id=2, called_computation_ids=[1000])),
    "dangling-operands": lambda: _entry(instr("fusion.1", "add", shape("f32", [8]), [1, 99999, -4], id=2)),
    "deep-fusion-dag": lambda: _chain("fusion", 60),
    "deep-call-dag": lambda: _chain("call", 60),
    "deep-while-dag": lambda: _chain("while", 60),
    "very-deep-call-chain": lambda: _chain("call", 3000),
    "conv-huge-window": lambda: _conv([1, 8, 1], 2**40),
    "conv-huge-output": lambda: _conv([1, 2**40, 1], 1),
    "shape-2^40": lambda: _entry(instr("fusion.1", "add", shape("f32", [2**20, 2**20]), [1, 1], id=2)),
    "shape-2^124": lambda: _entry(instr("fusion.1", "add", shape("f32", [2**62, 2**62]), [1, 1], id=2)),
    "negative-dims": lambda: _entry(instr("fusion.1", "dot", shape("f32", [-5, 3]), [1, 1], id=2)),
    "unknown-opcodes": lambda: _entry(instr("fusion.1", "frobnicate", shape("f32", [8]), [1], id=2),
                                      instr("main.1", "", shape("f32", [8]), [1], id=3)),
    "unknown-element-type": lambda: _entry(instr("fusion.1", "add", hlo_pb2.ShapeProto(element_type=99,
                                                                                       dimensions=[8]), [1], id=2)),
    "nested-tuple-40": lambda: _entry(instr("fusion.1", "tuple", nested_tuple(40), [1], id=2)),
    "while-trip-10^30": lambda: _while(10**30),
    "while-trip-negative": lambda: _while(-3),
    "no-computations": lambda: hlo_pb2.HloModuleProto(name="m", id=7, entry_computation_id=1000),
    "empty-computations": lambda: _entry(extra=[_comp("empty", 5, [])]),
    "bad-stack-frames": lambda: _bad_stack(),
}


def _bad_stack():
    m = _entry(instr("fusion.1", "add", shape("f32", [8]), [1, 1], id=2))
    m.computations[-1].instructions[1].metadata.stack_frame_id = -1000
    return m


@pytest.mark.parametrize("name", sorted(NASTY_HLO))
def test_nasty_hlo(name, folder):
    assert run_case(_tpu_trace_with(NASTY_HLO[name]()), folder) == "ok"


def _deep_shape_payload(depth: int) -> bytes:
    """An HloProto whose one instruction has a shape nested ``depth`` deep (deeper than parsers recurse)."""
    raw = shape("f32", [2]).SerializeToString()
    for _ in range(depth):
        raw = key(4, 2) + varint(len(raw)) + raw  # ShapeProto.tuple_shapes
    for num in (3, 2, 3, 1):  # instruction.shape, computation.instructions, module.computations, HloProto.hlo_module
        raw = key(num, 2) + varint(len(raw)) + raw
    return raw


@pytest.mark.parametrize("payload", [
    pytest.param(b"", id="empty"), pytest.param(b"\xff" * 40, id="garbage"),
    pytest.param(b"\x0a" + varint(2**63 - 1) + b"\x00", id="huge-length"),
    pytest.param(hlo_pb2.HloProto(hlo_module=_tpu_module_proto()).SerializeToString()[:25], id="truncated"),
    pytest.param(_deep_shape_payload(90), id="deep-shape-90"),
    pytest.param(_deep_shape_payload(5000), id="deep-shape-5000")])
def test_undecodable_hlo_payload(payload, folder):
    """A payload that is not an HloProto (or not a useful one): the trace still analyzes, without that HLO."""
    path = folder / "h.xplane.pb"
    path.write_bytes(_tpu_trace_with(None, payload))
    with bounded():
        rep = pipeline.analyze(path)
    assert rep.data["summary"]["op_executions"] == 3


# =================================================================================================================
# the pure-Python decoder, through the environment variable, under an address-space limit

CHILD = textwrap.dedent("""
    import json, resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_AS)[1]))
    from tracekit import pipeline
    from tracekit.ingest import wire
    from tracekit.errors import TraceError
    assert wire.HAVE_C == (sys.argv[3] == "c")
    out = {}
    for path in json.loads(open(sys.argv[1]).read()):
        try:
            pipeline.analyze(path)
            out[path] = "ok"
        except TraceError as e:
            out[path] = "refused" if "\\n" not in str(e) else "multi-line: " + str(e)
        except BaseException as e:
            out[path] = f"BUG {type(e).__name__}: {e}"
    print(json.dumps(out))
""")


def _nasty_files(folder: Path) -> list[str]:
    data = fixture_bytes("big_matmul")
    top = [f for f in fields(data) if f[3] == 2]
    start, end, num, _ = top[0]
    files = {
        "huge-length.xplane.pb": data[:start] + key(num, 2) + varint(2**63 - 1) + data[end:],
        "trailing-huge-length.xplane.pb": data + key(1, 2) + varint(2**62),
        "truncated.xplane.pb": data[: len(data) // 2],
        "groups.xplane.pb": key(78, 3) * 50_000 + key(78, 4) * 50_000,
        "bomb.xplane.pb.gz": gzip.compress(b"\x00" * (200 << 20), 9),
        "corrupt.xplane.pb.gz": gzip.compress(data)[:40] + b"\x00" * 64,
        "ok.xplane.pb.gz": gzip.compress(data),
        "absurd-conv.xplane.pb": _tpu_trace_with(_conv([1, 2**40, 1], 1)),
        "absurd-shape.xplane.pb": _tpu_trace_with(NASTY_HLO["shape-2^124"]()),
    }
    out = []
    for name, raw in files.items():
        (folder / name).write_bytes(raw)
        out.append(str(folder / name))
    return out


@pytest.mark.skipif(resource is None or not sys.platform.startswith("linux"), reason="RLIMIT_AS is Linux's")
@pytest.mark.parametrize("impl", ["python", "c"])
def test_subprocess_under_rlimit_as(impl, tmp_path):
    if impl == "c" and wire.wirec is None:
        pytest.skip("tracekit.ingest.wirec not built")
    files = _nasty_files(tmp_path)
    lst = tmp_path / "files.json"
    lst.write_text(json.dumps(files))
    env = {**os.environ, "TRACEKIT_NO_C": "1" if impl == "python" else "0", "PYTHONPATH": str(ROOT)}
    limit = 3 << 30
    p = subprocess.run([sys.executable, "-c", CHILD, str(lst), str(limit), impl], capture_output=True, text=True,
                       env=env, timeout=CASE_SECONDS * 4)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    bugs = {Path(k).name: v for k, v in out.items() if v not in ("ok", "refused")}
    assert not bugs
    name = {Path(k).name: v for k, v in out.items()}
    assert name["ok.xplane.pb.gz"] == "ok" and name["absurd-conv.xplane.pb"] == "ok"
    assert name["bomb.xplane.pb.gz"] == name["corrupt.xplane.pb.gz"] == name["huge-length.xplane.pb"] == "refused"


# =================================================================================================================
# The two decoders accept exactly the same files (tests/wirefuzz.py mutates; the C and Python decoders must agree)

DIFF_SEEDS = ("big_matmul", "matvec_b1", "sleepy_steps", "train_step")


def _diff_inputs(n: int, seed: int):
    import wirefuzz
    rng = random.Random(seed)
    seeds = wirefuzz.Seeds([fixture_bytes(c) for c in DIFF_SEEDS])
    for _ in range(n):
        data = seeds.mutated(rng)
        kw = {}
        if rng.random() < 0.3:  # limits too: the same decision, from the same counts
            kw = {"max_events": rng.choice([-1, 0, 10, 100, 1000]), "budget": rng.choice([-1, 0, 10**4, 10**6]),
                  "weights": rng.choice([wire.WEIGHTS, (1, 1, 1, 1, 1)]), "max_stats": rng.choice([-1, 50, 2000])}
        yield data, kw, rng.choice([1, 2])


def test_over_long_tags_are_rejected_by_both_decoders():
    """A tag takes at most 5 bytes (upb's rule): a 10-byte over-long tag used to pass the C decoder only."""
    import wirefuzz
    from tracekit.ingest import pywire
    from tracekit.proto import xplane_pb2 as X
    for width in range(1, 11):
        data = wirefuzz.varint(4 << 3 | 2, width) + b"\x01a"  # hostnames: "a", the tag in `width` bytes
        expect = "ok" if width <= 5 else "corrupt"
        if wire.wirec is not None:
            assert wirefuzz.outcome(wire.wirec.read_space, data)[0] == expect, width
        assert wirefuzz.outcome(pywire.read_space, data)[0] == expect, width
        if width > 5:
            with pytest.raises(Exception):
                X.XSpace.FromString(data)  # upb agrees


def test_decoders_agree_on_mutated_traces():
    """Every mutated file: both decoders accept it with identical columns, or both reject it with the same message
    (same byte offset), or both stop at a limit. About 300 inputs in CI (25x with TRACEKIT_FUZZ=long)."""
    if wire.wirec is None:
        pytest.skip("tracekit.ingest.wirec not built")
    import wirefuzz
    from tracekit.ingest import pywire
    seen: dict = {}
    for data, kw, threads in _diff_inputs(300 * SCALE, seed=17):
        with bounded():
            c = wirefuzz.outcome(wire.wirec.read_space, data, threads=threads, **kw)
            p = wirefuzz.outcome(pywire.read_space, data, **kw)
        seen[c[0]] = seen.get(c[0], 0) + 1
        if c[0] == p[0] == "limit":
            continue  # which count passed first may differ once a line is corrupt too; both refuse
        assert c == p, (data.hex(), kw, c[:2], p[:2])
    assert seen.get("ok") and seen.get("corrupt") and seen.get("limit"), seen  # every outcome was exercised


ASAN_CHILD = textwrap.dedent("""
    import ctypes, importlib.util, mmap, os, random, sys, time
    so, tests, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    sys.path.insert(0, tests)
    spec = importlib.util.spec_from_file_location("tracekit.ingest.wirec", so)
    w = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(w)
    import wirefuzz
    from tracekit.ingest import pywire
    seeds = wirefuzz.Seeds([open(p, "rb").read() for p in sys.argv[4:]])
    rng = random.Random(5)
    deadline, n = time.monotonic() + seconds, 0
    weights = (1024, 256, 3072, 320, 32)
    while time.monotonic() < deadline:
        data = seeds.mutated(rng)
        buf = (ctypes.c_char * len(data)).from_buffer_copy(data)  # exactly its size: a read past it is caught
        for threads in (1, 3):
            try:
                w.read_space(buf, threads, rng.choice([-1, 10, 1000]), rng.choice([-1, 10**4, 10**7]), weights,
                             rng.choice([-1, 100, 10**5]))
            except (ValueError, MemoryError, pywire.LimitError):
                pass
        n += 1
    # a memory-mapped file that shrinks while it is decoded: InputChanged, through the SIGBUS guard
    path = os.path.join(os.path.dirname(so), "big.xplane.pb")
    with open(path, "wb") as f:
        one = seeds.items[-1][0]
        f.write(one * ((2 << 20) // len(one) + 1))
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    os.truncate(path, 4096)
    try:
        w.read_space(m, 2)
        raise SystemExit("a shrunken memory map decoded")
    except pywire.InputChanged:
        pass
    print("asan cases", n)
    """)


def _asan_runtime(cc: str) -> str | None:
    try:
        out = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    path = out.stdout.strip()
    return path if os.path.isabs(path) and os.path.exists(path) else None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sanitizer build is set up for Linux and gcc")
def test_c_decoder_under_address_sanitizer(tmp_path):
    """The C decoder built with AddressSanitizer and UndefinedBehaviorSanitizer (gcc, when present: CI has it) runs
    mutated traces for 15 s (TRACEKIT_FUZZ=long: 10 min), threads and limits included, plus the SIGBUS guard's
    jump out of a shrunken memory map: any invalid read or write, leak-free overflow, or undefined behaviour fails."""
    import shutil
    import sysconfig
    cc = shutil.which("gcc")
    runtime = _asan_runtime(cc) if cc else None
    if not runtime:
        pytest.skip("no gcc with an AddressSanitizer runtime")
    so = tmp_path / ("wirec" + sysconfig.get_config_var("EXT_SUFFIX"))
    build = subprocess.run(
        [cc, "-shared", "-fPIC", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=undefined", "-pthread", f"-I{sysconfig.get_paths()['include']}",
         str(ROOT / "tracekit/ingest/wirec.c"), "-o", str(so)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-3000:]
    seeds = [str(FIXTURES / "cpu" / c / "plugins/profile/run1/cpu.xplane.pb") for c in DIFF_SEEDS]
    seeds = [s for s in seeds if os.path.exists(s)]
    if not seeds:
        pytest.skip("no fixtures")
    env = {**os.environ, "PYTHONMALLOC": "malloc",
           "ASAN_OPTIONS": "detect_leaks=0:halt_on_error=1:exitcode=86:allow_user_segv_handler=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=87"}
    seconds = 600 if LONG else 15  # with the build, about 25 s of CI's budget
    # the sanitizer reserves terabytes of address space for its shadow memory: a shell lifts this module's RLIMIT_AS
    # (the soft limit, up to the hard one), then runs Python with the sanitizer's runtime preloaded
    unlimited = ["sh", "-c", 'ulimit -v "$(ulimit -H -v)" 2>/dev/null; export LD_PRELOAD="$1"; shift; exec "$@"',
                 "sh", runtime]
    p = subprocess.run([*unlimited, sys.executable, "-c", ASAN_CHILD, str(so), str(ROOT / "tests"), str(seconds),
                        *seeds], capture_output=True, text=True, timeout=seconds + 300, env=env, cwd=ROOT)
    report = p.stderr[-4000:]
    assert p.returncode == 0 and "asan cases" in p.stdout, report
    assert "AddressSanitizer" not in p.stderr and "runtime error" not in p.stderr, report
    OUTCOMES["asan"] = int(p.stdout.split()[-1])
