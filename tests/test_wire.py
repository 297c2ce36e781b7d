"""tracekit.ingest.wire: the C decoder and the pure-Python one agree with each other and with upb, and corrupt input
raises ValueError (never a crash or a hang)."""
from __future__ import annotations

import os
import random
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED, shared_trace
from tracekit.ingest import wire
from tracekit.proto import xplane_pb2

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

ROOT = Path(__file__).resolve().parents[1]
CPU_TRACES = sorted(ROOT.glob("fixtures/cpu/*/plugins/profile/run1/cpu.xplane.pb"))
SHARED_NAMES = ["tpu/v6e-4_jax_inference.xplane.pb", "gpu/mi300x8_jax_conv3d.xplane.pb",
                "gpu/mi300x_jax_gemm.xplane.pb", "gpu/v100x8_tf_bert.xplane.pb"]
MANGLED = "bad/v6e-4_jax_inference.utf8_mangled.xplane.pb"

needs_c = pytest.mark.skipif(wire.wirec is None, reason="tracekit.ingest.wirec not built")


def shared(rel: str) -> Path:
    return shared_trace(rel)


def all_traces():
    """Every real trace available: the shared third-party ones (when present) and the CPU fixtures."""
    found = [SHARED / n for n in SHARED_NAMES if (SHARED / n).exists()]
    found += sorted(p for d in ("tpu", "gpu") for p in (SHARED / d).glob("*.xplane.pb") if p not in found)
    return found + CPU_TRACES


def small_trace() -> bytes:
    """A real trace that is always there (CPU fixture), small enough to mutate many times."""
    if not CPU_TRACES:
        pytest.skip("no CPU fixtures")
    return min(CPU_TRACES, key=lambda p: abs(p.stat().st_size - 40_000)).read_bytes()


# ---- comparing results ---------------------------------------------------------------------------------------

ARRAYS = ("metadata_id", "offset_ps", "event_duration_ps", "stat_event", "stat_id", "stat_kind", "stat_int",
          "stat_double")
DTYPES = {"metadata_id": np.int64, "offset_ps": np.int64, "event_duration_ps": np.int64, "stat_event": np.int32,
          "stat_id": np.int64, "stat_kind": np.int8, "stat_int": np.int64, "stat_double": np.float64}
SCALARS = ("id", "name", "display_name", "timestamp_ns", "duration_ps", "display_id")


def assert_same(a, b):
    pa, ha = a
    pb, hb = b
    assert ha == hb
    assert len(pa) == len(pb)
    for x, y in zip(pa, pb):
        assert (x.id, x.name) == (y.id, y.name)
        assert x.head == y.head
        assert not x.head.lines and not y.head.lines
        assert len(x.lines) == len(y.lines)
        for lx, ly in zip(x.lines, y.lines):
            for k in SCALARS:
                assert getattr(lx, k) == getattr(ly, k), k
            for k in ARRAYS:
                u, v = getattr(lx, k), getattr(ly, k)
                assert u.dtype == DTYPES[k] and v.dtype == DTYPES[k], k
                assert u.shape == v.shape, k
                if k == "stat_double":  # same bits, NaN included
                    assert np.array_equal(u.view(np.int64), v.view(np.int64)), k
                else:
                    assert np.array_equal(u, v), k
            assert lx.stat_str == ly.stat_str
            assert [type(s) for s in lx.stat_str] == [type(s) for s in ly.stat_str]


def outcome(fn, data):
    try:
        return fn(data)
    except ValueError as e:
        return e


def check_consistent(data: bytes):
    """The C decoder never accepts what upb rejects, and when both accept they agree."""
    c = outcome(wire.read_space_c, data)
    py = outcome(wire.read_space_python, data)
    if isinstance(c, ValueError):
        assert "corrupt XSpace" in str(c)
        return
    assert not isinstance(py, ValueError), f"C accepted what upb rejects: {py}"
    assert_same(c, py)


# ---- real traces -----------------------------------------------------------------------------------------------

@needs_c
@pytest.mark.parametrize("path", all_traces(), ids=lambda p: p.name if p.parent.name != "run1" else p.parents[3].name)
def test_c_matches_python(path):
    data = path.read_bytes()
    py = wire.read_space_python(data)
    assert_same(wire.read_space_c(data, threads=1), py)
    assert_same(wire.read_space_c(data, threads=3), py)
    assert_same(wire.read_space_c(memoryview(bytearray(data))), py)


@pytest.mark.parametrize("path", all_traces(), ids=lambda p: p.name if p.parent.name != "run1" else p.parents[3].name)
def test_matches_upb(path):
    """Spot checks of read_space (either path) against direct upb access."""
    data = path.read_bytes()
    space = xplane_pb2.XSpace.FromString(data)
    planes, hostnames = wire.read_space(data)
    assert hostnames == list(space.hostnames)
    assert [p.name for p in planes] == [p.name for p in space.planes]
    rng = random.Random(0)
    kinds = {"double_value": 2, "uint64_value": 3, "int64_value": 4, "str_value": 5, "bytes_value": 6,
             "ref_value": 7}
    seen_stats = 0
    for pd, p in zip(planes, space.planes):
        assert pd.id == p.id
        assert dict(pd.head.stat_metadata) == dict(p.stat_metadata)
        assert len(pd.head.event_metadata) == len(p.event_metadata)
        assert list(pd.head.stats) == list(p.stats)
        assert len(pd.lines) == len(p.lines)
        for ld, line in zip(pd.lines, p.lines):
            assert (ld.id, ld.name, ld.display_name, ld.timestamp_ns, ld.duration_ps) == (
                line.id, line.name, line.display_name, line.timestamp_ns, line.duration_ps)
            assert ld.n_events == len(line.events)
            if not line.events:
                continue
            for i in rng.sample(range(len(line.events)), min(25, len(line.events))):
                e = line.events[i]
                assert ld.metadata_id[i] == e.metadata_id
                assert ld.offset_ps[i] == e.offset_ps
                assert ld.event_duration_ps[i] == e.duration_ps
                rows = np.flatnonzero(ld.stat_event == i)
                assert len(rows) == len(e.stats)
                for r, s in zip(rows, e.stats):
                    seen_stats += 1
                    assert ld.stat_id[r] == s.metadata_id
                    which = s.WhichOneof("value")
                    assert ld.stat_kind[r] == (kinds[which] if which else 0)
                    if which == "double_value":
                        assert ld.stat_double[r] == s.double_value or np.isnan(s.double_value)
                    else:
                        assert np.isnan(ld.stat_double[r])
                    if which in ("int64_value",):
                        assert ld.stat_int[r] == s.int64_value
                    elif which in ("uint64_value", "ref_value"):
                        assert int(ld.stat_int[r]) & (2**64 - 1) == getattr(s, which)
                    elif which in ("str_value", "bytes_value"):
                        assert ld.stat_str[ld.stat_int[r]] == getattr(s, which)
    if sum(len(e.stats) for p in space.planes for l in p.lines for e in l.events):
        assert seen_stats


def test_mangled_file_raises_in_both_paths():
    data = shared(MANGLED).read_bytes()
    with pytest.raises(ValueError, match="corrupt XSpace"):
        wire.read_space_python(data)
    if wire.wirec is not None:
        with pytest.raises(ValueError, match=r"corrupt XSpace: .* at byte \d+"):
            wire.read_space_c(data)


def test_env_forces_python_path():
    code = "from tracekit.ingest import wire; print(wire.HAVE_C, wire.read_space is not None)"
    env = dict(os.environ, TRACEKIT_NO_C="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
    if wire.wirec is not None:
        env["TRACEKIT_NO_C"] = "0"
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.split() == ["True", "True"]


def test_arrays_are_writable_and_independent():
    data = small_trace()
    planes, _ = wire.read_space(data)
    line = max((l for p in planes for l in p.lines), key=lambda l: l.n_events)
    before = line.offset_ps.copy()
    line.offset_ps += 1000  # callers shift offsets in place
    assert np.array_equal(line.offset_ps, before + 1000)
    del data


# ---- corrupt input -----------------------------------------------------------------------------------------

@needs_c
def test_truncations_never_crash():
    data = small_trace()
    offsets = sorted(set(range(0, 64)) | set(range(0, len(data), max(1, len(data) // 400))) | {len(data) - 1})
    raised = 0
    for n in offsets:
        try:
            wire.read_space_c(data[:n])
        except ValueError as e:
            assert "at byte" in str(e) or "plane" in str(e)
            raised += 1
    assert raised > len(offsets) // 2


@needs_c
def test_truncations_of_real_trace_consistent():
    data = small_trace()
    rng = random.Random(1)
    for n in rng.sample(range(len(data)), 60):
        check_consistent(data[:n])


@needs_c
def test_bit_flips_consistent():
    data = bytearray(small_trace())
    rng = random.Random(2)
    for _ in range(300):
        m = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 8))):
            m[rng.randrange(len(m))] ^= 1 << rng.randrange(8)
        check_consistent(bytes(m))


@needs_c
def test_large_file_truncations_and_flips():
    data = shared("tpu/v6e-4_jax_inference.xplane.pb").read_bytes()
    rng = random.Random(3)
    for n in rng.sample(range(len(data)), 40):
        with pytest.raises(ValueError):
            wire.read_space_c(data[:n] + b"\xff")  # a dangling tag byte: never a complete message
    for _ in range(40):
        m = bytearray(data)
        m[rng.randrange(len(m))] ^= 1 << rng.randrange(8)
        outcome(wire.read_space_c, bytes(m))  # must return or raise ValueError


# ---- hand-built messages -------------------------------------------------------------------------------------

def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field: int, wt: int) -> bytes:
    return varint(field << 3 | wt)


def vi(field: int, n: int) -> bytes:
    return key(field, 0) + varint(n)


def ld(field: int, payload: bytes) -> bytes:
    return key(field, 2) + varint(len(payload)) + payload


def f64(field: int, x: float) -> bytes:
    return key(field, 1) + struct.pack("<d", x)


def space_of(*events: bytes, line_extra: bytes = b"", plane_extra: bytes = b"", space_extra: bytes = b"") -> bytes:
    line = vi(1, 7) + ld(2, b"line") + vi(3, 1000) + b"".join(ld(4, e) for e in events) + line_extra
    plane = vi(1, 3) + ld(2, b"/device:TPU:0") + ld(3, line) + plane_extra
    return ld(1, plane) + ld(4, b"host") + space_extra


def both(data: bytes):
    py = wire.read_space_python(data)
    if wire.wirec is not None:
        assert_same(wire.read_space_c(data), py)
    return py


def c_rejects(data: bytes, match: str = "corrupt XSpace"):
    if wire.wirec is None:
        pytest.skip("tracekit.ingest.wirec not built")
    with pytest.raises(ValueError, match=match):
        wire.read_space_c(data)


def test_empty_and_minimal():
    assert both(b"") == ([], [])
    planes, hosts = both(ld(1, b"") + ld(4, b"h1") + ld(4, b""))
    assert hosts == ["h1", ""] and len(planes) == 1 and planes[0].lines == []


def test_scalar_values_and_oneofs():
    neg = -5
    events = [
        vi(1, 11) + vi(2, 100) + vi(3, 50),
        vi(1, 12) + vi(5, 9) + vi(3, 1),                  # num_occurrences: offset reads 0
        vi(1, 13) + vi(2, 100) + vi(5, 9),                # oneof: last member wins -> 0
        vi(1, 14) + vi(5, 9) + vi(2, 77),                 # ... -> 77
        vi(1, 15) + vi(1, 16) + vi(2, neg) + vi(3, 2**63 + 5),  # last scalar wins; int64 two's complement
        vi(1, 17) + ld(4, vi(1, 1) + f64(2, 2.5)) + ld(4, vi(1, 2) + vi(3, 2**64 - 1))
        + ld(4, vi(1, 3) + vi(4, -7)) + ld(4, vi(1, 4) + ld(5, "héllo".encode()))
        + ld(4, vi(1, 5) + ld(6, b"\xff\x00")) + ld(4, vi(1, 6) + vi(7, 42)) + ld(4, vi(1, 7))
        + ld(4, vi(1, 8) + ld(5, b"x") + vi(4, 3))      # str replaced by int: no stat_str entry
        + ld(4, vi(1, 9) + vi(4, 3) + f64(2, float("nan")))
        + ld(4, vi(1, 10) + f64(2, 1.0) + ld(6, b"")),
        b"",
    ]
    planes, hosts = both(space_of(*events))
    line = planes[0].lines[0]
    assert hosts == ["host"]
    assert (line.id, line.name, line.timestamp_ns) == (7, "line", 1000)
    assert line.metadata_id.tolist() == [11, 12, 13, 14, 16, 17, 0]
    assert line.offset_ps.tolist() == [100, 0, 0, 77, -5, 0, 0]
    assert line.event_duration_ps.tolist() == [50, 1, 0, 0, -(2**63) + 5, 0, 0]
    assert line.stat_event.tolist() == [5] * 10
    assert line.stat_id.tolist() == list(range(1, 11))
    assert line.stat_kind.tolist() == [2, 3, 4, 5, 6, 7, 0, 4, 2, 6]
    assert line.stat_int.tolist() == [0, -1, -7, 0, 1, 42, 0, 3, 0, 2]
    assert line.stat_double[0] == 2.5 and np.isnan(line.stat_double[1:8]).all() and np.isnan(line.stat_double[8])
    assert line.stat_str == ["héllo", b"\xff\x00", b""]


def test_unknown_fields_are_skipped():
    unknown = vi(20, 5) + key(21, 1) + b"\0" * 8 + ld(22, b"\xff\xfe") + key(23, 5) + b"\0" * 4 + vi(1000, 1)
    ev = vi(1, 1) + unknown + vi(2, 10) + ld(4, vi(1, 2) + unknown + vi(4, 3))
    data = space_of(ev, line_extra=unknown, plane_extra=unknown, space_extra=unknown)
    planes, _ = both(data)
    line = planes[0].lines[0]
    assert line.metadata_id.tolist() == [1] and line.offset_ps.tolist() == [10]
    assert line.stat_int.tolist() == [3]


def test_plane_head_keeps_metadata_not_lines():
    em = xplane_pb2.XEventMetadata(id=5, name="op", display_name="Op")
    sm = xplane_pb2.XStatMetadata(id=9, name="flops")
    plane = xplane_pb2.XPlane(id=2, name="/device:GPU:0")
    plane.event_metadata[5].CopyFrom(em)
    plane.stat_metadata[9].CopyFrom(sm)
    plane.stats.add(metadata_id=9, int64_value=4)
    ln = plane.lines.add(id=1, name="s", timestamp_ns=3)
    ln.events.add(metadata_id=5, offset_ps=1, duration_ps=2)
    plane.lines.add(id=2, name="t")
    data = xplane_pb2.XSpace(planes=[plane]).SerializeToString()
    planes, _ = both(data)
    head = planes[0].head
    assert head.event_metadata[5].name == "op" and head.stat_metadata[9].name == "flops"
    assert head.stats[0].int64_value == 4 and len(head.lines) == 0
    assert [l.name for l in planes[0].lines] == ["s", "t"]


def test_long_varints():
    ten = b"\xff" * 9 + b"\x01"  # 10 bytes: -1 as int64
    planes, _ = both(space_of(key(1, 0) + ten + key(2, 0) + b"\x80" * 9 + b"\x7f"))  # bits past 64 dropped
    line = planes[0].lines[0]
    assert line.metadata_id.tolist() == [-1]
    assert line.offset_ps.tolist() == [-(2**63)]
    c_rejects(space_of(key(1, 0) + b"\xff" * 10 + b"\x01"), "varint longer than 10 bytes at byte")
    c_rejects(space_of(vi(1, 5) + key(2, 0) + b"\x80\x80"), "truncated varint at byte")


@pytest.mark.parametrize("bad", [
    pytest.param(lambda: space_of(ld(1, b"x")), id="known-field-wrong-wire-type"),
    pytest.param(lambda: space_of(key(9, 3) + key(9, 4)), id="group"),
    pytest.param(lambda: space_of(key(9, 6)), id="wire-type-6"),
    pytest.param(lambda: space_of(key(9, 7)), id="wire-type-7"),
    pytest.param(lambda: space_of(ld(4, f64(2, 1.0)[:-1])), id="truncated-double"),
    pytest.param(lambda: space_of(key(4, 2) + varint(5) + vi(1, 1)), id="stat-length-past-event"),
    pytest.param(lambda: space_of(vi(1, 1))[:-3], id="truncated-space"),
    pytest.param(lambda: space_of(vi(1, 1), line_extra=key(4, 0) + varint(1)), id="events-as-varint"),
    pytest.param(lambda: varint(2**35) + b"\0", id="tag-wider-than-32-bits"),
])
def test_c_rejects_malformed(bad):
    c_rejects(bad())


@pytest.mark.parametrize("bad", [
    pytest.param(lambda: space_of(vi(1, 1), line_extra=ld(2, b"\xc3\x28")), id="line-name"),
    pytest.param(lambda: space_of(vi(1, 1), line_extra=ld(11, b"\xed\xa0\x80")), id="display-name-surrogate"),
    pytest.param(lambda: space_of(ld(4, vi(1, 1) + ld(5, b"\xc0\xaf"))), id="stat-overlong"),
    pytest.param(lambda: space_of(ld(4, vi(1, 1) + ld(5, b"\xff") + vi(4, 1))), id="replaced-stat-str"),
    pytest.param(lambda: space_of(space_extra=ld(4, b"\xf4\x90\x80\x80")), id="hostname-past-10ffff"),
    pytest.param(lambda: space_of(space_extra=ld(2, b"\xe2\x82")), id="errors-truncated-seq"),
    pytest.param(lambda: space_of(plane_extra=ld(2, b"\x80")), id="plane-name"),
    pytest.param(lambda: space_of(plane_extra=ld(5, vi(1, 1) + ld(2, vi(1, 1) + ld(2, b"\xfe")))),
                 id="stat-metadata-name"),
    pytest.param(lambda: space_of(vi(1, 1), plane_extra=key(0, 0) + b"\x01"), id="field-zero"),
])
def test_both_reject(bad):
    data = bad()
    with pytest.raises(ValueError):
        wire.read_space_python(data)
    c_rejects(data)


@needs_c
def test_valid_utf8_edge_cases():
    for s in ["", "a" * 17, "é", "€", "\U0001F600", "\uFFFF", "\U0010FFFF", "\uD7FF", "\uE000", "mixed é€😀 text"]:
        planes, _ = both(space_of(ld(4, vi(1, 1) + ld(5, s.encode()))))
        assert planes[0].lines[0].stat_str == [s]


@needs_c
def test_threads_do_not_change_results_or_errors():
    data = small_trace()
    one = wire.read_space_c(data, threads=1)
    for t in (2, 4, 16):
        assert_same(wire.read_space_c(data, threads=t), one)
    # two corrupt lines: the error reported is the one earliest in the file, whatever the scheduling
    bad1 = ld(4, vi(1, 1) + key(2, 0) + b"\x80")
    data = ld(1, ld(3, b"".join(ld(4, vi(1, 1)) for _ in range(2000)) + bad1) + ld(3, bad1))
    msgs = set()
    for t in (1, 2, 4):
        with pytest.raises(ValueError) as e:
            wire.read_space_c(data, threads=t)
        msgs.add(str(e.value))
    assert len(msgs) == 1


# ---- property tests --------------------------------------------------------------------------------------------

if given is not None:
    stat_values = st.one_of(
        st.none(),
        st.builds(lambda x: ("double_value", x), st.floats(allow_nan=False)),
        st.builds(lambda x: ("uint64_value", x), st.integers(0, 2**64 - 1)),
        st.builds(lambda x: ("int64_value", x), st.integers(-(2**63), 2**63 - 1)),
        st.builds(lambda x: ("ref_value", x), st.integers(0, 2**64 - 1)),
        st.builds(lambda x: ("str_value", x), st.text(max_size=8)),
        st.builds(lambda x: ("bytes_value", x), st.binary(max_size=8)),
    )
    i64 = st.integers(-(2**63), 2**63 - 1)
    events = st.lists(st.tuples(i64, st.one_of(st.tuples(st.just("offset_ps"), i64),
                                                st.tuples(st.just("num_occurrences"), i64)), i64,
                                st.lists(st.tuples(i64, stat_values), max_size=4)), max_size=12)

    def build(lines_spec, names):
        space = xplane_pb2.XSpace(hostnames=names[:2])
        plane = space.planes.add(id=1, name=names[0])
        plane.stat_metadata[3].name = "s"
        for li, evs in enumerate(lines_spec):
            line = plane.lines.add(id=li, name=names[li % len(names)], timestamp_ns=li * 1000)
            for mid, (which, v), dur, stats in evs:
                e = line.events.add(metadata_id=mid, duration_ps=dur)
                setattr(e, which, v)
                for sid, val in stats:
                    s = e.stats.add(metadata_id=sid)
                    if val is not None:
                        setattr(s, val[0], val[1])
        return space.SerializeToString()

    @needs_c
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(events, max_size=4), st.lists(st.text(max_size=6), min_size=1, max_size=3))
    def test_property_random_spaces_agree(lines_spec, names):
        assert_same(wire.read_space_c(build(lines_spec, names)), wire.read_space_python(build(lines_spec, names)))

    @needs_c
    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(events, min_size=1, max_size=3), st.data())
    def test_property_mutated_spaces_consistent(lines_spec, data):
        raw = bytearray(build(lines_spec, ["p"]))
        for _ in range(data.draw(st.integers(1, 4))):
            op = data.draw(st.sampled_from(["flip", "set", "cut", "insert"]))
            if not raw:
                break
            i = data.draw(st.integers(0, len(raw) - 1))
            if op == "flip":
                raw[i] ^= 1 << data.draw(st.integers(0, 7))
            elif op == "set":
                raw[i] = data.draw(st.integers(0, 255))
            elif op == "cut":
                del raw[i:i + data.draw(st.integers(1, 8))]
            else:
                raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        check_consistent(bytes(raw))

    @needs_c
    @settings(max_examples=400, deadline=None)
    @given(st.binary(max_size=300))
    def test_property_random_bytes(raw):
        check_consistent(raw)
