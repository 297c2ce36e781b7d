"""What a CPU cannot exceed: FLOP/s ceilings from its core count, vector ISA and clock.

A CPU chip's peaks are estimates or calibrations, and :func:`tracekit.model.peaks.raise_estimates` raises them to
what the trace's own ops demonstrate. But an XLA:CPU op event can end before its work does (a dot hands its work
to a thread pool), so a "demonstrated" rate can exceed what the silicon can do. The ceiling here is the physical
limit no rate may pass: ``cores x FLOP/cycle/core x clock``, where FLOP/cycle/core comes from the widest vector
(or matrix) unit the CPU's flags name, e.g. AVX-512 with two FMA pipes: 2 pipes x 16 f32 lanes x 2 FLOP = 64.

The recording machine's flags and clock are kept in its record (:func:`tracekit.model.machine.describe`:
``cpu_flags``, ``clock``). What is not recorded is assumed at its most generous (the widest unit any CPU of that
architecture has, a :data:`MAX_CLOCK_HZ` clock), so a ceiling is never below what the machine could do. A clock
read from ``/proc/cpuinfo`` (a virtual machine's nominal clock) gets :data:`BOOST_ALLOWANCE` on top for boost;
``cpuinfo_max_freq`` (the true maximum) gets none.
"""
from __future__ import annotations

import math
import platform

#: flags that decide a core's FLOP/cycle (x86 /proc/cpuinfo "flags", aarch64 "Features")
ISA_FLAGS = ("sse2", "avx", "fma", "avx2", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
             "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "asimdhp", "sve", "sve2", "bf16", "i8mm")
#: no CPU core is clocked above this (the most generous assumption when a record has no clock)
MAX_CLOCK_HZ = 6.0e9
#: a nominal clock (a virtual machine's "cpu MHz") times this covers boost clocks
BOOST_ALLOWANCE = 1.5
#: a measurement (a calibration) whose threads spent more than this share of their runnable time waiting for a
#: core ran beside other work: its rates are below what the CPU can do, and are flagged so
BUSY_WAIT_SHARE = 0.2

# FLOP per cycle per core by dtype class, widest unit first: (flag needed, FLOP/cycle, what it is)
_F32 = (("avx512f", 64, "AVX-512: 2 FMA pipes x 16 f32 lanes x 2"),
        ("fma", 32, "AVX2/FMA: 2 FMA pipes x 8 f32 lanes x 2"),
        ("avx", 16, "AVX: 8-lane add + 8-lane multiply"),
        ("sve", 64, "SVE: up to 2 x 512-bit FMA pipes"),
        ("asimd", 32, "NEON: up to 4 x 128-bit FMA pipes"),
        ("sse2", 8, "SSE: 4-lane add + 4-lane multiply"))
_BF16 = (("amx_bf16", 2048, "AMX-BF16: 1024 bf16 multiply-adds"),
         ("avx512_bf16", 128, "AVX512-BF16: 2 pipes x 32 bf16 pairs x 2"),
         ("bf16", 128, "Arm BF16 (BFMMLA)"))
_INT8 = (("amx_int8", 4096, "AMX-INT8: 2048 int8 multiply-adds"),
         ("avx512_vnni", 256, "AVX512-VNNI: 2 pipes x 64 int8 x 2"),
         ("avx_vnni", 128, "AVX-VNNI: 2 pipes x 32 int8 x 2"),
         ("i8mm", 256, "Arm I8MM"))
#: the widest unit of any CPU, per class, for a record that names no flags
_WIDEST = {"f32": (64, "any CPU: at most 64 f32 FLOP/cycle (AVX-512, 2 FMA pipes)"),
           "bf16": (2048, "any CPU: at most 2048 bf16 FLOP/cycle (AMX)"),
           "int8": (4096, "any CPU: at most 4096 int8 OP/cycle (AMX)")}


def busy(share) -> float | None:
    """``share`` (a record's ``cpu_wait_share``, read from disk) when it says the measurement ran beside other work
    (above :data:`BUSY_WAIT_SHARE`), else None."""
    return float(share) if isinstance(share, (int, float)) and share > BUSY_WAIT_SHARE else None


def read_flags() -> list[str] | None:
    """This machine's ISA flags that matter for FLOP/s (:data:`ISA_FLAGS`), or None when they cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for ln in f:
                key = ln.split(":", 1)[0].strip().lower()
                if key in ("flags", "features"):
                    have = set(ln.split(":", 1)[1].split())
                    return sorted(have.intersection(ISA_FLAGS))
    except OSError:
        pass
    return None


def read_clock() -> dict:
    """This machine's clock: ``max_hz`` (cpufreq's ``cpuinfo_max_freq``, the true maximum) and ``reported_hz``
    (the highest "cpu MHz" of /proc/cpuinfo), each None when unknown; ``arch`` the machine type."""
    out = {"max_hz": None, "reported_hz": None, "arch": platform.machine() or None}
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", encoding="ascii") as f:
            out["max_hz"] = float(f.read().strip()) * 1e3  # kHz
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            mhz = [float(ln.split(":", 1)[1]) for ln in f if ln.lower().startswith("cpu mhz")]
        out["reported_hz"] = max(mhz) * 1e6 if mhz else None
    except (OSError, ValueError):
        pass
    return out


def _clock(clock: dict | None) -> tuple[float, str]:
    c = clock if isinstance(clock, dict) else {}
    mx, rep = _positive(c.get("max_hz")), _positive(c.get("reported_hz"))
    if mx:
        return mx, f"{mx / 1e9:.2f} GHz (cpuinfo_max_freq)"
    if rep:
        return rep * BOOST_ALLOWANCE, f"{rep / 1e9:.2f} GHz reported x {BOOST_ALLOWANCE:g} for boost"
    return MAX_CLOCK_HZ, f"{MAX_CLOCK_HZ / 1e9:.0f} GHz (no clock recorded: the fastest any core runs)"


def _positive(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _per_cycle(flags, table, fallback) -> tuple[int, str]:
    if flags is None:
        return _WIDEST[fallback] if fallback in _WIDEST else _WIDEST["f32"]
    have = set(flags)
    for flag, n, what in table:
        if flag in have:
            return n, what
    return (0, "")


def ceilings(cores, flags, clock) -> dict:
    """Chip field (``peak_flops_per_s.<dtype>``) -> {"value": FLOP/s, "source": text}: what ``cores`` cores with
    ISA ``flags`` (None: not recorded) at ``clock`` (:func:`read_clock`'s dict, or None) cannot exceed. Empty
    when the core count is unknown."""
    n = _positive(cores)
    if not n:
        return {}
    hz, hz_how = _clock(clock)
    f32 = _per_cycle(flags, _F32, "f32")
    if not f32[0]:
        f32 = (8, "scalar/unknown vector unit: 8 f32 FLOP/cycle assumed")
    per = {"f32": f32, "f64": (f32[0] // 2, f"half of {f32[1]}: f64 lanes are twice as wide")}
    for key, table in (("bf16", _BF16), ("int8", _INT8)):
        got = _per_cycle(flags, table, key)
        per[key] = got if got[0] else (f32[0] * (4 if key == "int8" else 1), f32[1] + " (no wider unit flagged)")
    per["f16"] = per["bf16"]
    flagged = "flags not recorded" if flags is None else f"flags: {' '.join(flags) or 'none of note'}"
    out = {}
    for key, (fpc, what) in per.items():
        v = n * fpc * hz
        out[f"peak_flops_per_s.{key}"] = {
            "value": v, "source": f"ceiling: {int(n)} cores x {fpc} {key} FLOP/cycle ({what}; {flagged}) x {hz_how}"}
    return out


def entry(limits: dict, key: str) -> dict | None:
    """The ceiling ({value, source}) of chip field ``key`` in ``limits`` (a Chip's ``limits``), None when there is
    none; a dtype without its own ceiling takes the largest one the chip has (never below the truth)."""
    got = (limits or {}).get(key)
    if got is None and key.startswith("peak_flops_per_s."):
        flops = [v for k, v in (limits or {}).items() if k.startswith("peak_flops_per_s.")]
        got = max(flops, key=lambda v: v["value"]) if flops else None
    return got


def limit(limits: dict, key: str) -> float:
    """The value of :func:`entry`, inf when there is none."""
    got = entry(limits, key)
    return float(got["value"]) if got is not None else math.inf
