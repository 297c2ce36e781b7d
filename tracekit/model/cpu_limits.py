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

import numpy as np

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

# FLOP per cycle per core by dtype class, widest unit first: (flag needed, FLOP/cycle, what it is). Sources:
# Intel 64 and IA-32 Architectures Optimization Reference Manual (Skylake-SP and later server cores: two 512-bit
# FMA units on the ports 0+1 fused / port 5; Haswell and later: two 256-bit FMA units), Intel's AMX chapter
# (a TMUL tile multiply: 16x32 bf16 x 32x16 per 16 cycles = 1024 multiply-adds per cycle); Arm Neoverse V1/N2
# software optimization guides (two 256-bit SVE or four 128-bit NEON FMA pipes). These are upper bounds per core:
# parts with fewer units (one 512-bit FMA on some Xeon Silver/Bronze and client cores) are below them.
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
#: AMD Zen 4 (family 19h with AVX-512) runs every 512-bit instruction as two 256-bit halves on its 256-bit FMA
#: pipes (AMD Software Optimization Guide for AMD Family 19h Processors, pub. 56665, "AVX-512" section), so its
#: AVX-512 units do half the table's 512-bit rate: 32 f32 FLOP/cycle, like AVX2. Zen 5 (family 1Ah) has full
#: 512-bit datapaths (Software Optimization Guide for the AMD Zen5 Microarchitecture, pub. 58455) and adds
#: AVX-VNNI, which Zen 4 lacks: a record without a family tells them apart by that flag.
ZEN4_FAMILY = 0x19
#: DRAM bandwidth no core exceeds: Little's law with at most 64 lines of 64 B in flight per core (L2 miss
#: queues: 48 on Golden Cove, 64 on Zen 4, per the vendors' optimization guides) and a 60 ns memory latency
#: (the fastest loaded DRAM latency of current servers) = 68 GB/s per core
MAX_DRAM_BYTES_PER_S_PER_CORE = 64 * 64 / 60e-9
#: nor a machine: two sockets of 12 DDR5-6400 channels (12 x 51.2 GB/s each), the widest current servers
MAX_DRAM_BYTES_PER_S = 2 * 12 * 51.2e9
#: no core moves more than this many bytes per cycle through its caches: two 64 B loads and one 64 B store per
#: cycle (the widest L1 ports of current x86 and Arm server cores, per the vendors' optimization guides)
MAX_CACHE_BYTES_PER_CYCLE = 192
#: a memory rate counts only from ops whose bytes exceed this many times the last-level cache (else the bytes
#: may come from the cache: that is a cache rate, not a memory one)
LLC_MULTIPLE = 2


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


def read_identity() -> dict:
    """What the FLOP/s and memory ceilings of this machine need beyond its flags and clock (each None when
    unknown): ``vendor`` (/proc/cpuinfo ``vendor_id``), ``family`` and ``model`` (ints), ``physical_cores``
    (distinct (package, core) pairs: SMT siblings share one core's units) and ``llc_bytes`` (the last-level
    cache, summed over its distinct instances)."""
    out = {"vendor": None, "family": None, "model": None, "physical_cores": None, "llc_bytes": None}
    cores = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            pkg = None
            for ln in f:
                key, _, val = ln.partition(":")
                key, val = key.strip().lower(), val.strip()
                if key == "vendor_id" and out["vendor"] is None:
                    out["vendor"] = val or None
                elif key in ("cpu family", "model") and out[key.replace("cpu ", "")] is None:
                    try:
                        out[key.replace("cpu ", "")] = int(val)
                    except ValueError:
                        pass
                elif key == "physical id":
                    pkg = val
                elif key == "core id":
                    cores.add((pkg, val))
    except OSError:
        pass
    out["physical_cores"] = len(cores) or None
    out["llc_bytes"] = _llc_bytes()
    return out


def _llc_bytes() -> int | None:
    """The last-level cache of this machine (sysfs), each distinct instance counted once; None when unknown."""
    import glob
    best: dict = {}
    for d in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*"):
        try:
            with open(f"{d}/level", encoding="ascii") as f:
                level = int(f.read())
            with open(f"{d}/size", encoding="ascii") as f:
                size = f.read().strip().upper()
            with open(f"{d}/shared_cpu_list", encoding="ascii") as f:
                shared = f.read().strip()
        except (OSError, ValueError):
            continue
        mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(size[-1:], 1)
        try:
            n = int(size.rstrip("KMG")) * mult
        except ValueError:
            continue
        best.setdefault(level, {})[shared] = n
    if not best:
        return None
    return int(sum(best[max(best)].values()))


def fingerprint() -> str | None:
    """This boot of this machine, as a hash of ``/etc/machine-id`` and the kernel's boot id (both random per
    install and per boot: a hostname such as ``vm`` is not): equal only for a record written on this very
    machine since it last booted. None when neither can be read."""
    import hashlib
    parts = []
    for path in ("/etc/machine-id", "/proc/sys/kernel/random/boot_id"):
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                parts.append(f.read().strip())
        except OSError:
            parts.append("")
    if not any(parts):
        return None
    return hashlib.sha256(("tracekit:" + ":".join(parts)).encode()).hexdigest()[:32]


def _per_cycle(flags, table, fallback) -> tuple[int, str]:
    if flags is None:
        return _WIDEST[fallback] if fallback in _WIDEST else _WIDEST["f32"]
    have = set(flags)
    for flag, n, what in table:
        if flag in have:
            return n, what
    return (0, "")


def _zen4(flags, ident) -> bool:
    """An AMD core whose AVX-512 runs as two 256-bit halves (Zen 4): family 19h, or, with no family recorded,
    AVX-512 without AVX-VNNI (Zen 5 has both)."""
    ident = ident if isinstance(ident, dict) else {}
    vendor = str(ident.get("vendor") or "") + " " + str(ident.get("processor") or "")
    if flags is None or "avx512f" not in flags or "AMD" not in vendor.upper():
        return False
    fam = ident.get("family")
    if isinstance(fam, int) and not isinstance(fam, bool):
        return fam == ZEN4_FAMILY
    return "avx_vnni" not in flags


def ceilings(cores, flags, clock, ident: dict | None = None) -> dict:
    """Chip field (``peak_flops_per_s.<dtype>``, ``hbm_bw_bytes_per_s``) -> {"value": rate, "source": text}: what
    ``cores`` cores with ISA ``flags`` (None: not recorded) at ``clock`` (:func:`read_clock`'s dict, or None)
    cannot exceed. ``ident``: :func:`read_identity`'s dict (``processor`` too), where known: its
    ``physical_cores`` replace ``cores`` (SMT siblings share a core's units) and its vendor/family pick the
    microarchitecture (Zen 4's halved AVX-512). Empty when the core count is unknown."""
    ident = ident if isinstance(ident, dict) else {}
    n = _positive(ident.get("physical_cores")) or _positive(cores)
    if not n:
        return {}
    core_how = f"{int(n)} {'physical ' if _positive(ident.get('physical_cores')) else ''}cores"
    hz, hz_how = _clock(clock)
    f32 = _per_cycle(flags, _F32, "f32")
    if not f32[0]:
        f32 = (8, "scalar/unknown vector unit: 8 f32 FLOP/cycle assumed")
    zen4 = _zen4(flags, ident)
    if zen4 and f32[0] == 64:
        f32 = (32, "Zen 4 AVX-512: two 256-bit halves on 2 FMA pipes x 8 f32 lanes x 2")
    per = {"f32": f32, "f64": (f32[0] // 2, f"half of {f32[1]}: f64 lanes are twice as wide")}
    for key, table in (("bf16", _BF16), ("int8", _INT8)):
        got = _per_cycle(flags, table, key)
        if zen4 and got[1].startswith("AVX512"):
            got = (got[0] // 2, got[1] + ", halved on Zen 4")
        per[key] = got if got[0] else (f32[0] * (4 if key == "int8" else 1), f32[1] + " (no wider unit flagged)")
    per["f16"] = per["bf16"]
    flagged = "flags not recorded" if flags is None else f"flags: {' '.join(flags) or 'none of note'}"
    out = {}
    for key, (fpc, what) in per.items():
        v = n * fpc * hz
        out[f"peak_flops_per_s.{key}"] = {
            "value": v, "source": f"ceiling: {core_how} x {fpc} {key} FLOP/cycle ({what}; {flagged}) x {hz_how}"}
    bw = min(n * MAX_DRAM_BYTES_PER_S_PER_CORE, MAX_DRAM_BYTES_PER_S)
    out["hbm_bw_bytes_per_s"] = {
        "value": bw, "source": f"ceiling: {core_how} x {MAX_DRAM_BYTES_PER_S_PER_CORE / 1e9:.0f} GB/s (64 lines of "
                               f"64 B in flight per core over a 60 ns memory latency), at most "
                               f"{MAX_DRAM_BYTES_PER_S / 1e12:.2f} TB/s (2 sockets x 12 DDR5-6400 channels)"}
    out["cache_bw_bytes_per_s"] = {
        "value": n * MAX_CACHE_BYTES_PER_CYCLE * hz,
        "source": f"ceiling: {core_how} x {MAX_CACHE_BYTES_PER_CYCLE} B/cycle (2 loads + 1 store of 64 B) x {hz_how}"}
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


def in_cache(ch, nbytes):
    """True where an op moving ``nbytes`` (a number or an array) on ``ch`` is judged at its cache rate: the chip
    has one (a CPU whose trace demonstrates it) and the bytes are at most
    :data:`~tracekit.model.cpu_limits.LLC_MULTIPLE` times its last-level cache, or its cache is unknown."""
    if not math.isfinite(ch.cache_bw_bytes_per_s):
        return np.zeros(np.shape(nbytes), bool) if np.ndim(nbytes) else False
    if not math.isfinite(ch.cache_bytes):
        return np.ones(np.shape(nbytes), bool) if np.ndim(nbytes) else True
    return np.asarray(nbytes) <= LLC_MULTIPLE * ch.cache_bytes if np.ndim(nbytes) else \
        nbytes <= LLC_MULTIPLE * ch.cache_bytes
