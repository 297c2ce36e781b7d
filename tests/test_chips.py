"""Chip table, detection from plane stats, dtype-aware peaks, and CPU calibration."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tracekit.model import calibrate as cal
from tracekit.model import chips
from tracekit.errors import TraceError

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"

TPU_V6E_STATS = {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0,
                 "peak_hbm_bw_gigabytes_per_second": 1637.99}
MI300X_STATS = {"device_vendor": "AMD", "clock_rate": 2100000, "core_count": 304, "memory_bandwidth": 2.6624e12,
                "memory_size": 206141652992, "compute_cap_major": 9, "compute_cap_minor": 4}
V100_STATS = {"clock_rate": 1530000, "core_count": 80, "memory_bandwidth": 898048000000,
              "memory_size": 16945512448, "compute_cap_major": 7, "compute_cap_minor": 0}

NUMERIC = ("hbm_bytes", "hbm_bw_bytes_per_s", "link_bw_bytes_per_s", "links", "egress_bw_bytes_per_s",
           "wraparound_multiple")


@pytest.fixture(autouse=True)
def _no_user_calibration(tmp_path, monkeypatch):
    """Never read a real calibration from the user's home."""
    monkeypatch.setenv("TRACEKIT_HOME", str(tmp_path / "home"))


# ----------------------------------------------------------------------------------------------- the table

def test_table_loads_with_every_chip():
    names = {c.name for c in chips.table()}
    want = {"TPU v2", "TPU v3", "TPU v4", "TPU v5e", "TPU v5p", "TPU v6e", "V100", "A100", "H100", "H200", "B200",
            "MI250X", "MI300X", "MI355X"}
    assert want <= names
    for c in chips.table():
        assert c.family in ("tpu", "gpu") and c.vendor and c.topology
        assert chips.peak_flops(c, "bf16")[0] > 1e13 and c.hbm_bw_bytes_per_s > 1e11 and c.hbm_bytes > 1e9
        assert c.estimated is False


def test_every_number_has_a_source():
    for c in chips.table():
        for d, v in c.peak_flops_per_s.items():
            assert v > 0 and c.sources.get(f"peak_flops_per_s.{d}", "").startswith(("table:", "estimate:")), (c.name, d)
        for f in NUMERIC:
            assert not math.isnan(float(getattr(c, f))), (c.name, f)
            assert c.sources.get(f), (c.name, f)


def test_names_and_aliases_unique():
    seen = {}
    for c in chips.table():
        for a in {chips._norm(x) for x in (c.name, *c.aliases)}:
            assert a not in seen, f"{a!r} names both {seen[a]} and {c.name}"
            seen[a] = c.name


def test_dense_ratios_are_sane():
    for c in chips.table():
        p = dict(c.peak_flops_per_s)
        bf16 = chips.peak_flops(c, "bf16")[0]  # (V100 has no bf16 rate: its f32 one)
        assert p["f32"] <= bf16
        assert p.get("int8", bf16) >= bf16 * 0.99 or c.name == "V100"
    assert chips.get("H100").peak_flops_per_s["bf16"] == pytest.approx(9.89e14)
    assert chips.get("TPU v5e").egress_bw_bytes_per_s == pytest.approx(4 * 4.5e10)


def test_get_by_alias_any_case():
    assert chips.get("tpu v5 lite").name == "TPU v5e"
    assert chips.get("TPU v5").name == "TPU v5p"
    assert chips.get("v4p").name == "TPU v4"
    assert chips.get("mi300x").name == "MI300X"
    assert chips.get("CPU").family == "cpu"


def test_unknown_name_raises_listing_valid_names():
    with pytest.raises(TraceError) as e:
        chips.get("TPU v99")
    assert "TPU v99" in str(e.value) and "H100" in str(e.value) and "TPU v6e" in str(e.value)


def test_chips_frame():
    df = chips.chips_frame()
    assert len(df) == len(chips.table()) + 1
    assert {"name", "peak_bf16_flops_per_s", "hbm_bw_bytes_per_s", "egress_bw_bytes_per_s",
            "ridge_bf16_flops_per_byte"} <= set(df.columns)
    v5e = df.set_index("name").loc["TPU v5e"]
    assert v5e.ridge_bf16_flops_per_byte == pytest.approx(1.97e14 / 8.1e11)


def test_wraparound():
    v5e, v5p, h100 = chips.get("TPU v5e"), chips.get("TPU v5p"), chips.get("H100")
    assert v5e.has_wraparound(16) and not v5e.has_wraparound(8)
    assert v5p.has_wraparound(8) and not v5p.has_wraparound(2)
    assert not h100.has_wraparound(8)


# ----------------------------------------------------------------------------------------------- detection

def test_detect_tpu_v6e_uses_trace_peaks():
    c = chips.detect("TPU v6 Lite", TPU_V6E_STATS)
    assert c.name == "TPU v6e"
    assert c.peak_flops_per_s["bf16"] == pytest.approx(918e12)
    assert c.sources["peak_flops_per_s.bf16"] == "trace: peak_teraflops_per_second"
    assert c.hbm_bw_bytes_per_s == pytest.approx(1.63799e12)
    assert c.sources["hbm_bw_bytes_per_s"] == "trace: peak_hbm_bw_gigabytes_per_second"
    # int8 keeps the table's 2x ratio to bf16 and says so
    assert c.peak_flops_per_s["int8"] == pytest.approx(2 * 918e12)
    assert c.sources["peak_flops_per_s.int8"].startswith("trace: peak_teraflops_per_second x table int8/bf16")
    assert c.link_bw_bytes_per_s == pytest.approx(9e10) and c.sources["link_bw_bytes_per_s"].startswith("table:")
    assert chips.get("TPU v6e").peak_flops_per_s["bf16"] == pytest.approx(9.2e14)  # table untouched


def test_detect_tpu_from_stats_only():
    assert chips.detect("", {"device_type_string": "TPU v5 lite"}).name == "TPU v5e"
    assert chips.detect("", {"device_type_string": "TPU v5"}).name == "TPU v5p"


def test_detect_unknown_tpu_is_estimated_from_trace():
    c = chips.detect("TPU v9 Mega", {"device_type_string": "TPU v9 Mega", "peak_teraflops_per_second": 5000.0,
                                    "peak_hbm_bw_gigabytes_per_second": 9000.0})
    assert c.estimated and c.family == "tpu"
    assert c.peak_flops_per_s["bf16"] == pytest.approx(5e15) and c.hbm_bw_bytes_per_s == pytest.approx(9e12)


def test_detect_mi300x_datasheet_wins_over_trace_bandwidth():
    """The MI300X plane's memory_bandwidth (2.6624e12) is half the exact part's datasheet 5.3e12 (DOMAIN.md): more
    than 20 % off, so the datasheet number is used and the chip records what the trace said."""
    c = chips.detect("AMD gfx942", MI300X_STATS)
    assert c.name == "MI300X" and not c.estimated and c.exact
    assert c.hbm_bw_bytes_per_s == pytest.approx(5.3e12)
    assert c.sources["hbm_bw_bytes_per_s"].startswith("table:") and "says 2.66 TB/s" in c.sources["hbm_bw_bytes_per_s"]
    assert c.trace_reported["hbm_bw_bytes_per_s"] == {"stat": "memory_bandwidth", "value": 2.6624e12, "used": False}
    assert c.hbm_bytes == 206141652992 and c.sources["hbm_bytes"] == "trace: memory_size"
    # clock x cores equal the table part's: FLOP/s stay the datasheet's
    assert c.peak_flops_per_s["bf16"] == pytest.approx(1.3074e15)
    assert c.sources["peak_flops_per_s.bf16"].startswith("table:")


def test_detect_v100_without_vendor():
    c = chips.detect("", V100_STATS)
    assert c.name == "V100" and c.vendor == "nvidia"
    assert c.hbm_bw_bytes_per_s == pytest.approx(8.98048e11) and c.hbm_bytes == 16945512448
    assert c.peak_flops_per_s["f16"] == pytest.approx(1.25e14)


def test_detect_h100_vs_h200_by_memory_and_pcie_scaling():
    base = {"device_vendor": "Nvidia", "compute_cap_major": 9, "compute_cap_minor": 0, "core_count": 132,
            "clock_rate": 1980000}
    assert chips.detect("", {**base, "memory_size": 85e9}).name == "H100"
    assert chips.detect("", {**base, "memory_size": 150e9}).name == "H200"
    pcie = chips.detect("", {**base, "memory_size": 85e9, "core_count": 114, "clock_rate": 1755000})
    assert pcie.name == "H100 PCIe" and pcie.exact  # the PCIe part's own datasheet (756 TFLOP/s dense bf16)
    assert pcie.peak_flops_per_s["bf16"] == pytest.approx(7.56e14)
    # a part whose SM count matches no table entry keeps the clock x cores scaling of the nearest one, inexactly
    odd = chips.detect("", {**base, "memory_size": 85e9, "core_count": 120, "clock_rate": 1755000})
    assert not odd.exact and odd.sources["peak_flops_per_s.bf16"].startswith("trace: clock_rate x core_count")


def test_detect_other_gpus():
    assert chips.detect("", {"device_vendor": "AMD", "compute_cap_major": 9, "compute_cap_minor": 5,
                             "core_count": 256}).name == "MI355X"
    assert chips.detect("", {"device_vendor": "Nvidia", "compute_cap_major": 8, "compute_cap_minor": 0,
                             "core_count": 108}).name == "A100"
    assert chips.detect("", {"device_vendor": "Nvidia", "compute_cap_major": 10, "compute_cap_minor": 0}).name == "B200"
    assert chips.detect("NVIDIA H100 80GB HBM3", {}).name == "H100"


def test_detect_unknown_gpu_is_generic():
    c = chips.detect("", {"device_vendor": "Nvidia", "compute_cap_major": 12, "compute_cap_minor": 0,
                          "core_count": 170, "memory_bandwidth": 1.8e12, "memory_size": 32e9})
    assert c.estimated and c.family == "gpu"
    assert c.hbm_bw_bytes_per_s == pytest.approx(1.8e12)
    value, source = chips.peak_flops(c, "bf16")
    assert math.isnan(value) and source.startswith("unknown:")


def test_override_uses_table_as_is():
    c = chips.detect("TPU v6 Lite", TPU_V6E_STATS, override="v5e")
    assert c.name == "TPU v5e"
    assert c.peak_flops_per_s["bf16"] == pytest.approx(1.97e14)
    assert c.sources["peak_flops_per_s.bf16"].startswith("table (--chip):")
    with pytest.raises(TraceError):
        chips.detect("TPU v6 Lite", TPU_V6E_STATS, override="nonsense")


# ----------------------------------------------------------------------------------------------- dtype peaks

@pytest.mark.parametrize("chip,dtype,want,prefix", [
    ("H100", "bf16", 9.89e14, "table:"),
    ("H100", "f16", 9.89e14, "table:"),
    ("H100", "f32", 4.95e14, "table:"),
    ("H100", "s8", 1.979e15, "table:"),
    ("H100", "f8e4m3fn", 1.979e15, "table:"),
    ("H100", "f64", 6.7e13, "table:"),
    ("TPU v5e", "f16", 1.97e14, "estimate: no f16 peak"),
    ("TPU v5e", "u8", 3.94e14, "table:"),
    ("TPU v5e", "f8e5m2", 1.97e14, "estimate: no fp8 peak"),
    ("TPU v5e", "f64", 1.97e14 / 2, "estimate: no f64 peak"),
    ("TPU v5e", "s32", 1.97e14, "estimate: dtype 's32' has no peak class"),
    ("A100", "fp8", 3.12e14, "estimate: no fp8 peak"),
])
def test_peak_flops_by_dtype(chip, dtype, want, prefix):
    value, source = chips.peak_flops(chips.get(chip), dtype)
    assert value == pytest.approx(want)
    assert source.startswith(prefix)


# ----------------------------------------------------------------------------------------------- CPU

def test_cpu_without_calibration_is_an_estimate():
    c = chips.detect("cpu", {})
    assert c.family == "cpu" and c.estimated
    assert c.peak_flops_per_s["f32"] > 0 and c.hbm_bw_bytes_per_s > 0
    assert "tracekit calibrate" in c.sources["peak_flops_per_s.f32"]


def test_calibrate_writes_file_and_detect_uses_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_HOME", str(tmp_path))
    chip = cal.calibrate(seconds=0.3)
    path = tmp_path / "cpu_chip.json"
    record = json.loads(path.read_text())
    assert record["peak_flops_per_s"]["f32"] > 1e8 and record["hbm_bw_bytes_per_s"] > 1e8
    assert not list(tmp_path.glob("*.tmp"))  # the temp file was renamed
    assert not chip.estimated
    c = chips.detect("cpu", {}, cpu=cal.cpu_chip)
    assert not c.estimated and c.peak_flops_per_s["f32"] == pytest.approx(record["peak_flops_per_s"]["f32"])
    assert c.sources["peak_flops_per_s.f32"].startswith("calibration: measured")
    assert c.sources["hbm_bw_bytes_per_s"].startswith("calibration: measured")
    assert chips.peak_flops(c, "bf16")[0] > 0


def test_corrupt_calibration_raises(tmp_path):
    bad = tmp_path / "cpu_chip.json"
    bad.write_text("{not json")
    with pytest.raises(TraceError, match="corrupt calibration"):
        cal.load_calibration(bad)
    assert cal.load_calibration(tmp_path / "absent.json") is None


# ----------------------------------------------------------------------------------------------- real traces

def _device_plane_stats(path: Path) -> dict[str, dict]:
    """{plane name: {stat name: value}} for the /device: planes of an .xplane.pb (a test-only reader)."""
    from tracekit.proto import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    out = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:"):
            continue
        stats = {}
        for s in plane.stats:
            kind = s.WhichOneof("value")
            v = getattr(s, kind) if kind else None
            if kind == "ref_value":
                v = plane.stat_metadata[v].name
            stats[plane.stat_metadata[s.metadata_id].name] = v
        out[plane.name] = stats
    return out


@pytest.mark.parametrize("rel,kind,want", [
    ("tpu/v6e-4_jax_inference.xplane.pb", "TPU v6 Lite", "TPU v6e"),
    ("gpu/mi300x_jax_gemm.xplane.pb", "", "MI300X"),
    ("gpu/v100x8_tf_bert.xplane.pb", "", "V100"),
])
def test_real_traces_give_expected_chips(rel, kind, want):
    path = TRACES / rel
    if not path.exists():
        pytest.skip(f"{path} not present")
    planes = _device_plane_stats(path)
    assert planes
    for stats in planes.values():
        c = chips.detect(kind, stats)
        assert c.name == want and not c.estimated
        assert any(s.startswith("trace:") for s in c.sources.values())


def test_v100_has_no_bf16_rate():
    """Volta has fp16 tensor cores (125 TFLOP/s, V100 SXM2 datasheet) and no bf16 units: the table lists no bf16
    rate, and a bf16 op is priced at the f32 CUDA-core rate (15.7 TFLOP/s), never at the fp16 tensor-core rate,
    with a source that says so."""
    v = chips.get("V100")
    assert "bf16" not in v.peak_flops_per_s
    assert v.peak_flops_per_s["f16"] == pytest.approx(1.25e14)
    value, source = chips.peak_flops(v, "bf16")
    assert value == pytest.approx(1.57e13) and "no bf16 peak for V100" in source


def test_chip_flag_on_a_virtual_cpu_capture_prices_one_chip():
    """`--chip h100` on a capture of 8 XLA:CPU virtual devices (one host): one H100's f32 (TF32 dense, 495
    TFLOP/s in the H100 SXM datasheet) is the overview's peak, not 8 x 495 = 3.96 PFLOP/s."""
    import tracekit
    from conftest import cpu_fixture
    from tracekit.analysis import overview as ov
    from tracekit.model import roofline

    tr = tracekit.load(str(cpu_fixture("allreduce_exposed")))
    dchips = roofline.device_chips(tr, "h100")
    assert len(dchips) == 8 and all(c.name == "H100" for c in dchips.values())
    shared = ov.shared_chips(dchips, list(dchips))
    assert all(len(m) == 8 for m in shared.values()) and len(shared) == 8
