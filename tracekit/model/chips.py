"""Chips: the sourced peak table, detection from a trace's device plane, and dtype-aware peaks.

Terms
    peak FLOP/s   dense (no sparsity) rate of one device as the trace sees it, per dtype key: bf16, f16, f32, tf32,
                  int8 (integer ops/s), fp8, f64, f32_simt. ``f32`` is the rate of an f32 dot under JAX's default
                  precision: one bf16 pass on TPU, TF32 on NVIDIA Ampere and newer (see ``chips.yaml``).
    hbm           device memory: capacity ``hbm_bytes``, bandwidth ``hbm_bw_bytes_per_s``.
    link / egress ``link_bw_bytes_per_s`` is one-way bandwidth of one link; ``egress_bw_bytes_per_s`` is one-way
                  bytes/s one chip can send into a collective over all its links.

Every number carries its source in ``Chip.sources`` (field -> text), which starts with one of
``table:`` (the sourced YAML table), ``table (--chip):`` (the table, chosen by the user), ``trace: <stat>`` (what the
trace's device plane reports), ``calibration:`` (measured here by ``tracekit calibrate``), ``estimate:`` (a rough
default; ``Chip.estimated`` is then True) or ``unknown:``.

What this does not account for: clock throttling, MIG/partitioned GPUs, TPU megacore splits, and precision
settings other than the default (an f32 dot with ``precision=HIGHEST`` runs ~6x slower on TPU than the ``f32`` rate).
"""
from __future__ import annotations

import functools
import math
import os
import re
from dataclasses import field, replace
from pathlib import Path
from typing import Callable

import pandas as pd

from tracekit import artefacts
from tracekit.errors import TraceError
from tracekit.records import record
from tracekit.units import fmt_num

TABLE_PATH = Path(__file__).resolve().parent / "chips.yaml"
NAN = float("nan")

@record(frozen=True)
class Chip:
    """One device's peaks and interconnect, each number with its source. Treat the dicts as read-only."""

    name: str
    vendor: str
    family: str  # tpu | gpu | cpu
    peak_flops_per_s: dict = field(hash=False)
    hbm_bytes: float
    hbm_bw_bytes_per_s: float
    link_bw_bytes_per_s: float
    links: int
    topology: str  # torus2d | torus3d | nvlink | infinity-fabric | shared-memory | none | unknown
    egress_bw_bytes_per_s: float
    sources: dict = field(default_factory=dict, hash=False)
    estimated: bool = False
    aliases: tuple = ()
    wraparound_multiple: int = 0  # an axis of n chips wraps iff n % this == 0 (0: never)
    notes: str = ""
    host_link_bw_bytes_per_s: float = NAN  # one-way device<->host (PCIe) bandwidth
    devices_per_chip: int = 1  # devices a trace shows per chip (TPU v2/v3, TPU7x: 2 TensorCores, 2 devices)
    node_size: float = NAN  # GPU: devices per NVLink/xGMI domain; TPU: chips per host (NaN: unknown)
    nic_bw_bytes_per_s: float = NAN  # one-way scale-out bandwidth per device: TPU DCN per chip, GPU NIC per GPU
    node_egress_bw_bytes_per_s: float = NAN  # one-way scale-out bandwidth per node (TPU host, GPU node)
    hop_latency_s: float = NAN  # per ICI hop / NVLink or xGMI ring step
    nic_latency_s: float = NAN  # per step across the scale-out network (DCN / InfiniBand)
    exact: bool = False  # the table entry is this exact part (variant too), so its sourced numbers win
    trace_reported: dict = field(default_factory=dict, hash=False)  # field -> {stat, value, used}
    raised: dict = field(default_factory=dict, hash=False)  # field -> {estimate, value, op, module, self_ps}
    limits: dict = field(default_factory=dict, hash=False)  # field -> {value, source}: physical ceilings (CPU)
    cache_bytes: float = NAN  # last-level cache (CPU; NaN: unknown): a memory rate needs bytes well above it
    #: (CPU) the rate ops whose bytes may sit in the caches (at most twice the last-level cache, or any op when
    #: it is unknown) move them at, as the trace demonstrates it (NaN: the memory bandwidth serves them too)
    cache_bw_bytes_per_s: float = NAN
    #: the trace's devices on this chip are virtual devices of one host (XLA:CPU's, also when ``--chip`` names
    #: another part for them): they share one chip, whose peaks count once
    host_shared: bool = False

    def has_wraparound(self, axis_size: int) -> bool:
        """True when a ring of ``axis_size`` chips along one torus axis has its wraparound link."""
        return self.wraparound_multiple > 0 and axis_size > 1 and axis_size % self.wraparound_multiple == 0

    def ridge_flops_per_byte(self, dtype: str = "bf16") -> float:
        """Arithmetic intensity above which an op of ``dtype`` is compute-bound on this chip."""
        return peak_flops(self, dtype)[0] / self.hbm_bw_bytes_per_s


#: Who hands over this machine's CPU entry: a function of no arguments returning a :class:`Chip`.
CpuSource = Callable[[], Chip]


# ----------------------------------------------------------------------------------------------- CPU

#: Conservative CPU defaults when no calibration exists: two 256-bit FMA pipes (2 x 8 f32 lanes x 2 FLOP = 32
#: FLOP/cycle) at 2.0 GHz per core, and ~12 GB/s of DRAM copy bandwidth per core, capped at 100 GB/s per host.
CPU_F32_FLOPS_PER_CORE = 32 * 2.0e9
CPU_BW_BYTES_PER_S_PER_CORE = 1.2e10
CPU_BW_BYTES_PER_S_MAX = 1.0e11


def estimate_cpu(cores: int | None = None, where: str = "") -> Chip:
    """A rough entry for a CPU of ``cores`` cores (this host's ``os.cpu_count()`` by default): what a CPU trace uses
    unless it is handed a measured one (:func:`tracekit.model.calibrate.cpu_chip`, after ``tracekit calibrate``,
    or the recording machine's record); ``where`` says whose CPU it is in the name."""
    n = int(cores or os.cpu_count() or 1)
    f32 = n * CPU_F32_FLOPS_PER_CORE
    bw = min(n * CPU_BW_BYTES_PER_S_PER_CORE, CPU_BW_BYTES_PER_S_MAX)
    hint = "run `tracekit calibrate` to measure"
    how = f"estimate: {n} cores x {fmt_num(CPU_F32_FLOPS_PER_CORE, 'FLOP/s')} (32 f32 FLOP/cycle at 2 GHz); {hint}"
    bw_how = (f"estimate: {n} cores x {fmt_num(CPU_BW_BYTES_PER_S_PER_CORE, 'B/s')}, at most "
              f"{fmt_num(CPU_BW_BYTES_PER_S_MAX, 'B/s')}; {hint}")
    return cpu_entry(f"cpu ({where + ', ' if where else ''}{n} cores, estimate)", {"f32": f32, "bf16": f32}, bw, how,
                     bw_how, estimated=True)


def cpu_entry(name: str, flops: dict, bw: float, how: str, bw_how: str, estimated: bool) -> Chip:
    """A CPU chip: ``flops`` (dtype -> FLOP/s) and memory bandwidth ``bw`` with their sources ``how``/``bw_how``;
    virtual CPU devices share host memory, so links and the host link run at that bandwidth."""
    src = {f"peak_flops_per_s.{d}": how for d in flops}
    if "bf16" in flops and estimated:
        src["peak_flops_per_s.bf16"] = how + " (bf16 dots assumed no faster than f32 on CPU)"
    try:
        ram = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
        src["hbm_bytes"] = "estimate: physical memory (os.sysconf)"
    except (ValueError, OSError, AttributeError):
        ram = NAN
        src["hbm_bytes"] = "unknown: os.sysconf not available"
    src["hbm_bw_bytes_per_s"] = bw_how
    shared = "estimate: virtual CPU devices share host memory, so collectives are memory copies at DRAM bandwidth"
    src.update(link_bw_bytes_per_s=shared, links=shared, egress_bw_bytes_per_s=shared, wraparound_multiple="n/a",
               host_link_bw_bytes_per_s="estimate: a CPU device's 'host' is its own memory: DRAM bandwidth")
    return Chip(name=name, vendor="cpu", family="cpu", peak_flops_per_s=dict(flops), hbm_bytes=ram,
                hbm_bw_bytes_per_s=bw, link_bw_bytes_per_s=bw, links=1, topology="shared-memory",
                egress_bw_bytes_per_s=bw, sources=src, estimated=estimated, aliases=("cpu", "host"),
                host_link_bw_bytes_per_s=bw)


# ----------------------------------------------------------------------------------------------- the table

def _norm(name: str) -> str:
    return re.sub(r"[\s_\-]+", " ", str(name).strip().lower())


def _num(node, where: str, cites: dict) -> tuple[float, str]:
    """A table number ``{value, source, [note], [confidence]}`` -> (value, source text)."""
    if not isinstance(node, dict) or "value" not in node or not node.get("source"):
        raise TraceError(f"chip table entry {where} needs {{value: ..., source: ...}}", str(TABLE_PATH))
    if node["value"] is None:  # a figure no source gives: NaN, and the source says why
        why = str(node["source"])
        return NAN, (why if why.startswith("unknown:") else f"unknown: {why}") + (
            f" ({node['note']})" if node.get("note") else "")
    try:
        value = float(node["value"])
    except (TypeError, ValueError):
        raise TraceError(f"chip table entry {where} has a non-numeric value {node['value']!r}", str(TABLE_PATH))
    cite = str(node["source"])
    cite = cites.get(cite, cite)
    text = cite if cite.startswith(("estimate:", "unknown:")) else f"table: {cite}"
    if node.get("note"):
        text += f" ({node['note']})"
    if node.get("confidence"):
        text += f" [confidence: {node['confidence']}]"
    return value, text


#: interconnect figures a chip entry may leave out (NaN, "unknown: not in the chip table")
_OPTIONAL_IC = ("host_link_bw_bytes_per_s", "devices_per_chip", "node_size", "nic_bw_bytes_per_s",
                "node_egress_bw_bytes_per_s", "hop_latency_s", "nic_latency_s")


def _build(entry: dict, cites: dict) -> tuple[Chip, dict]:
    name = entry["name"]
    src: dict[str, str] = {}
    flops = {}
    for dtype, node in (entry.get("peak_flops_per_s") or {}).items():
        flops[dtype], src[f"peak_flops_per_s.{dtype}"] = _num(node, f"{name}.peak_flops_per_s.{dtype}", cites)
    vals = {}
    for key in ("hbm_bytes", "hbm_bw_bytes_per_s"):
        vals[key], src[key] = _num(entry.get(key), f"{name}.{key}", cites)
    ic = entry.get("interconnect") or {}
    for key in ("link_bw_bytes_per_s", "links", "egress_bw_bytes_per_s", "wraparound_multiple"):
        vals[key], src[key] = _num(ic.get(key), f"{name}.interconnect.{key}", cites)
    for key in _OPTIONAL_IC:
        if key in ic:
            vals[key], src[key] = _num(ic[key], f"{name}.interconnect.{key}", cites)
        else:
            vals[key], src[key] = NAN, "unknown: not in the chip table"
    chip = Chip(
        name=name, vendor=entry["vendor"], family=entry["family"], peak_flops_per_s=flops,
        hbm_bytes=vals["hbm_bytes"], hbm_bw_bytes_per_s=vals["hbm_bw_bytes_per_s"],
        link_bw_bytes_per_s=vals["link_bw_bytes_per_s"], links=int(vals["links"]), topology=ic.get("topology", "unknown"),
        egress_bw_bytes_per_s=vals["egress_bw_bytes_per_s"], sources=src, estimated=False,
        aliases=tuple(entry.get("aliases") or ()), wraparound_multiple=int(vals["wraparound_multiple"]),
        notes=entry.get("notes", ""), host_link_bw_bytes_per_s=vals["host_link_bw_bytes_per_s"],
        devices_per_chip=int(vals["devices_per_chip"]) if math.isfinite(vals["devices_per_chip"]) else 1,
        **{k: vals[k] for k in _OPTIONAL_IC[2:]},
    )
    det = entry.get("detect") or {}
    keys = {}
    if det:
        keys = {
            "vendor": det.get("vendor", chip.vendor),
            "cc": tuple(int(x) for x in det["compute_capability"]),
            "cores": _num(det["cores"], f"{name}.detect.cores", cites)[0] if "cores" in det else None,
            "clock_mhz": _num(det["clock_mhz"], f"{name}.detect.clock_mhz", cites)[0] if "clock_mhz" in det else None,
            "memory": tuple(float(x) for x in det["memory_bytes"]) if "memory_bytes" in det else None,
        }
    return chip, keys


@functools.lru_cache(maxsize=1)
def _load() -> tuple[tuple[Chip, ...], dict]:
    try:
        doc = artefacts.yaml_docs([TABLE_PATH], "chips")[0]  # tracekit's cached artefact of chips.yaml
    except (OSError, artefacts.YamlError) as e:
        raise TraceError(f"cannot read the chip table: {e}", str(TABLE_PATH))
    cites = doc.get("sources") or {}
    built = [_build(e, cites) for e in doc["chips"]]
    return tuple(c for c, _ in built), {c.name: k for c, k in built if k}


def _copy(chip: Chip, **changes) -> Chip:
    changes.setdefault("peak_flops_per_s", dict(chip.peak_flops_per_s))
    changes.setdefault("sources", dict(chip.sources))
    changes.setdefault("trace_reported", dict(chip.trace_reported))
    changes.setdefault("raised", dict(chip.raised))
    changes.setdefault("limits", dict(chip.limits))
    return replace(chip, **changes)


def table() -> list[Chip]:
    """Every chip of the sourced table (TPUs, NVIDIA and AMD GPUs; the CPU entry is handed in: ``cpu``)."""
    return [_copy(c) for c in _load()[0]]


def _match_name(text: str, family: str | None = None) -> Chip | None:
    """A table chip whose name or alias equals ``text``, else the longest alias found in it as a whole word."""
    key = _norm(text or "")
    if not key:
        return None
    chips = [c for c in _load()[0] if family is None or c.family == family]
    for c in chips:
        if key == _norm(c.name) or key in {_norm(a) for a in c.aliases}:
            return c
    names = sorted(((_norm(a), c) for c in chips for a in (c.name, *c.aliases)), key=lambda t: -len(t[0]))
    for alias, c in names:
        if re.search(rf"(?<![a-z0-9]){re.escape(alias)}(?![a-z0-9])", key):
            return c
    return None


def get(name: str, *, cpu: CpuSource = estimate_cpu) -> Chip:
    """The chip called ``name`` (its name or an alias, any case); ``cpu``/``host`` is this machine's CPU: what
    ``cpu()`` hands over (:func:`tracekit.model.calibrate.cpu_chip` gives the calibration; default the estimate)."""
    if _norm(name) in ("cpu", "host"):
        return cpu()
    chip = _match_name(name) if _norm(name) in _all_names() else None
    if chip is None:
        valid = ", ".join([c.name for c in _load()[0]] + ["cpu"])
        raise TraceError(f"unknown chip {name!r}", hint=f"valid names: {valid} (aliases: `tracekit chips`)")
    return _copy(chip)


def _all_names() -> set[str]:
    return {_norm(a) for c in _load()[0] for a in (c.name, *c.aliases)}


def chips_frame(include_cpu: bool = True, *, cpu: CpuSource = estimate_cpu) -> pd.DataFrame:
    """One row per chip with the main numbers, units in the column names (for ``tracekit chips``)."""
    chips = table() + ([cpu()] if include_cpu else [])
    rows = []
    for c in chips:
        row = {"name": c.name, "vendor": c.vendor, "family": c.family, "aliases": ", ".join(c.aliases)}
        for d in ("bf16", "f16", "f32", "int8", "fp8"):
            row[f"peak_{d}_flops_per_s"] = c.peak_flops_per_s.get(d, NAN)
        row.update(
            hbm_bytes=c.hbm_bytes, hbm_bw_bytes_per_s=c.hbm_bw_bytes_per_s,
            ridge_bf16_flops_per_byte=peak_flops(c, "bf16")[0] / c.hbm_bw_bytes_per_s,
            link_bw_bytes_per_s=c.link_bw_bytes_per_s, links=c.links, topology=c.topology,
            egress_bw_bytes_per_s=c.egress_bw_bytes_per_s, wraparound_multiple=c.wraparound_multiple,
            devices_per_chip=c.devices_per_chip, node_size=c.node_size, nic_bw_bytes_per_s=c.nic_bw_bytes_per_s,
            node_egress_bw_bytes_per_s=c.node_egress_bw_bytes_per_s, hop_latency_s=c.hop_latency_s,
            nic_latency_s=c.nic_latency_s, estimated=c.estimated,
            low_confidence=", ".join(k for k, s in c.sources.items() if "confidence: low" in s),
        )
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------- detection

def _stat(stats: dict, name: str, allow_zero: bool = False) -> float | None:
    """A positive (or, with ``allow_zero``, non-negative) finite number from the plane stats, else None: a
    value of another type (a name, bytes) is ignored."""
    v = stats.get(name)
    try:
        v = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    return v if (v > 0 or (allow_zero and v == 0)) and math.isfinite(v) and v < 2**53 else None


def _vendor(stats: dict, kind: str) -> str:
    text = f"{stats.get('device_vendor') or ''} {kind}".lower()
    if "nvidia" in text or "tesla" in text or "geforce" in text:
        return "nvidia"
    if "amd" in text or "gfx" in text or "instinct" in text or "radeon" in text:
        return "amd"
    return ""


def detect(device_kind: str, plane_stats: dict, override: str | None = None, *,
           cpu: CpuSource = estimate_cpu) -> Chip:
    """The chip of one device plane: its table entry with the trace's own peaks laid over it.

    ``device_kind`` is what the trace calls the device ('TPU v6 Lite', 'AMD gfx942', 'cpu', ...); ``plane_stats``
    the device plane's stats by name. With ``override`` (``--chip NAME``) the table entry is used as is. A CPU
    device is what ``cpu()`` hands over (the calibration, from :func:`tracekit.model.calibrate.cpu_chip`; by
    default the estimate, :func:`estimate_cpu`). A TPU's
    ``peak_teraflops_per_second`` is its bf16 peak: other dtypes are scaled by the table's ratios. A GPU's FLOP/s are
    scaled by the trace's clock_rate x core_count over the table part's. A chip not in the table gives an
    ``estimated`` entry built from the trace's stats, with FLOP/s unknown (NaN).
    """
    stats = dict(plane_stats or {})
    if override:
        chip = get(override, cpu=cpu)
        src = {k: (s.replace("table:", "table (--chip):", 1) if s.startswith("table:") else s)
               for k, s in chip.sources.items()}
        return _copy(chip, sources=src, exact=chip.family != "cpu")  # the user named the part
    kind = str(device_kind or "").strip()
    lk = kind.lower()
    if lk.startswith("cpu") or lk in ("host", "/host:cpu"):
        return cpu()
    if lk.startswith("tpu") or "device_type_string" in stats or "peak_teraflops_per_second" in stats:
        return _detect_tpu(kind, stats)
    gpu_keys = ("compute_cap_major", "core_count", "memory_bandwidth", "device_vendor", "clock_rate")
    if "gpu" in lk or _vendor(stats, kind) or any(k in stats for k in gpu_keys):
        return _detect_gpu(kind, stats)
    chip = _match_name(kind)
    if chip is not None:
        return _copy(chip)
    hint = "pass --chip NAME (see `tracekit chips`)"
    return Chip(name=kind or "unknown", vendor="", family="unknown", peak_flops_per_s={}, hbm_bytes=NAN,
                hbm_bw_bytes_per_s=NAN, link_bw_bytes_per_s=NAN, links=0, topology="unknown",
                egress_bw_bytes_per_s=NAN, estimated=True,
                sources={"peak_flops_per_s": f"unknown: device kind {kind!r} not recognised; {hint}"})


#: a trace stat that differs from the exact part's sourced table number by more than this loses to the table
TRACE_DISAGREE = 0.20


def _prefer_table(chip: Chip, key: str, trace_value: float, stat: str) -> bool:
    """The peak-source policy for one number: True when the table value stays (the chip is the exact part and the
    trace's stat disagrees with it by more than :data:`TRACE_DISAGREE`), else False (the trace value is used).
    Either way ``chip.trace_reported[key]`` records what the trace said and whether it was used; a rejected stat
    is named in the table number's source."""
    table_v = chip.peak_flops_per_s.get(key[len("peak_flops_per_s."):]) if key.startswith("peak_flops_per_s.") \
        else getattr(chip, key, NAN)
    keep = bool(chip.exact and table_v and math.isfinite(table_v) and abs(trace_value / table_v - 1) > TRACE_DISAGREE)
    chip.trace_reported[key] = {"stat": stat, "value": trace_value, "used": not keep}
    if keep:
        unit = "FLOP/s" if key.startswith("peak_flops") else "B/s" if key.endswith("_per_s") else "B"
        chip.sources[key] = (f"{chip.sources.get(key, 'table')}; the trace's {stat} says {fmt_num(trace_value, unit)}, "
                             f"{abs(trace_value / table_v - 1):.0%} off the datasheet of this exact part: not used")
    return keep


def _detect_tpu(kind: str, stats: dict) -> Chip:
    dts = str(stats.get("device_type_string") or kind)
    base = _match_name(dts, "tpu") or _match_name(kind, "tpu")
    if base is None:
        chip = Chip(name=dts or "TPU (unknown)", vendor="google", family="tpu", peak_flops_per_s={}, hbm_bytes=NAN,
                    hbm_bw_bytes_per_s=NAN, link_bw_bytes_per_s=NAN, links=0, topology="unknown",
                    egress_bw_bytes_per_s=NAN, estimated=True,
                    sources={"name": f"estimate: {dts!r} is not in the chip table; numbers from the trace only"})
    else:
        chip = _copy(base, exact=True, trace_reported={})
    flops, src = chip.peak_flops_per_s, chip.sources
    tf = _stat(stats, "peak_teraflops_per_second")
    if tf and _prefer_table(chip, "peak_flops_per_s.bf16", tf * 1e12, "peak_teraflops_per_second"):
        tf = None
    if tf:
        new = tf * 1e12
        old = flops.get("bf16")
        for d in list(flops):
            if d != "bf16" and old:
                flops[d] = flops[d] * new / old
                src[f"peak_flops_per_s.{d}"] = (f"trace: peak_teraflops_per_second x table {d}/bf16 ratio "
                                                 f"({src[f'peak_flops_per_s.{d}']})")
        flops["bf16"] = new
        src["peak_flops_per_s.bf16"] = "trace: peak_teraflops_per_second"
        if "f32" not in flops:
            flops["f32"] = new
            src["peak_flops_per_s.f32"] = "trace: peak_teraflops_per_second (f32 dot = one bf16 pass)"
    bw = _stat(stats, "peak_hbm_bw_gigabytes_per_second")
    changes = {}
    if bw and _prefer_table(chip, "hbm_bw_bytes_per_s", bw * 1e9, "peak_hbm_bw_gigabytes_per_second (GB/s x 1e9)"):
        bw = None
    if bw:
        changes["hbm_bw_bytes_per_s"] = bw * 1e9
        src["hbm_bw_bytes_per_s"] = "trace: peak_hbm_bw_gigabytes_per_second"
    return replace(chip, **changes)


def _detect_gpu(kind: str, stats: dict) -> Chip:
    vendor = _vendor(stats, kind)
    major = _stat(stats, "compute_cap_major", allow_zero=True)
    minor = _stat(stats, "compute_cap_minor", allow_zero=True)
    cores, mem, clock_khz = _stat(stats, "core_count"), _stat(stats, "memory_size"), _stat(stats, "clock_rate")
    chips, keys = _load()
    base = None
    if major is not None:
        cc = (int(major), int(minor or 0))
        cands = [c for c in chips if keys.get(c.name, {}).get("cc") == cc and (not vendor or keys[c.name]["vendor"] == vendor)]
        if mem and len(cands) > 1:
            fits = [c for c in cands if keys[c.name]["memory"] and keys[c.name]["memory"][0] <= mem <= keys[c.name]["memory"][1]]
            cands = fits or cands
        if cores and len(cands) > 1:
            cands.sort(key=lambda c: abs((keys[c.name]["cores"] or 0) - cores))
        base = cands[0] if cands else None
        # the exact part: its cores match the table's (or the trace does not say and no other part fits)
        exact = base is not None and (keys[base.name]["cores"] == cores if cores and keys[base.name]["cores"]
                                      else len(cands) == 1)
    else:
        exact = False
    if base is None:
        named = _match_name(kind, "gpu")
        base = named if named is not None and (not vendor or named.vendor == vendor) else None
    if base is None:
        label = kind or f"{vendor or 'unknown'} GPU"
        if major is not None:
            label += f" (cc {int(major)}.{int(minor or 0)}, {int(cores or 0)} cores)"
        hint = "not in the chip table: FLOP/s unknown; pass --chip NAME"
        chip = Chip(name=label, vendor=vendor, family="gpu", peak_flops_per_s={}, hbm_bytes=NAN,
                    hbm_bw_bytes_per_s=NAN, link_bw_bytes_per_s=NAN, links=0, topology="unknown",
                    egress_bw_bytes_per_s=NAN, estimated=True, sources={"peak_flops_per_s": f"unknown: {hint}"})
    else:
        chip = _copy(base, exact=exact, trace_reported={})
    src, changes = chip.sources, {}
    k = keys.get(chip.name, {})
    if base is not None and cores and clock_khz and k.get("cores") and k.get("clock_mhz"):
        ratio = (clock_khz / 1e3 * cores) / (k["clock_mhz"] * k["cores"])
        if chip.exact and abs(ratio - 1) > TRACE_DISAGREE:
            chip.trace_reported["clock_rate x core_count"] = {"stat": "clock_rate x core_count", "value": ratio,
                                                              "used": False}
            ratio = 1.0
        if abs(ratio - 1) > 0.005:
            for d in list(chip.peak_flops_per_s):
                chip.peak_flops_per_s[d] *= ratio
                src[f"peak_flops_per_s.{d}"] = (f"trace: clock_rate x core_count = {ratio:.3f} x table part "
                                                 f"({src[f'peak_flops_per_s.{d}']})")
    bw = _stat(stats, "memory_bandwidth")
    if bw and _prefer_table(chip, "hbm_bw_bytes_per_s", bw, "memory_bandwidth"):
        bw = None
    if bw:
        changes["hbm_bw_bytes_per_s"] = bw
        src["hbm_bw_bytes_per_s"] = "trace: memory_bandwidth" + (
            f" (table: {fmt_num(chip.hbm_bw_bytes_per_s, 'B/s')})" if math.isfinite(chip.hbm_bw_bytes_per_s) else "")
    if mem:
        changes["hbm_bytes"] = mem
        src["hbm_bytes"] = "trace: memory_size"
    return replace(chip, **changes)


# ----------------------------------------------------------------------------------------------- dtype peaks

_DTYPES = {
    "bf16": "bf16", "bfloat16": "bf16", "f16": "f16", "float16": "f16", "half": "f16",
    "f32": "f32", "float32": "f32", "float": "f32", "c64": "f32", "complex64": "f32", "tf32": "tf32",
    "f64": "f64", "float64": "f64", "double": "f64", "c128": "f64", "complex128": "f64",
    "s8": "int8", "u8": "int8", "int8": "int8", "uint8": "int8", "s4": "int8", "u4": "int8", "int4": "int8",
    "uint4": "int8", "fp8": "fp8",
}
#: Where to look when a chip has no figure for a dtype, in order.
#: (bf16 falls back to f32 before f16: a chip without bf16 units, V100, runs bf16 in f32, not on fp16 tensor cores)
_FALLBACK = {"f16": ("bf16",), "bf16": ("f32", "f16"), "int8": ("bf16",), "fp8": ("bf16",), "tf32": ("f32",),
             "f32": ("bf16",), "f64": (), None: ("bf16", "f16", "f32")}


def canonical_dtype(dtype: str) -> str | None:
    """'bfloat16'/'bf16' -> 'bf16', 's8' -> 'int8', 'f8e4m3fn' -> 'fp8', ...; None when it has no peak class."""
    d = str(dtype or "").strip().lower()
    if d.startswith("f8") or d.startswith("float8") or d.startswith("fp8"):
        return "fp8"
    return _DTYPES.get(d)


def peak_flops(chip: Chip, dtype: str) -> tuple[float, str]:
    """Peak FLOP/s of ``chip`` for ops of ``dtype`` and the source of that number.

    bf16/f16 -> the 16-bit peak; f32 -> the f32 (dot) peak; s8/u8/int8 -> int8; f8* -> fp8; f64 -> f64 when known
    else f32/2 (an estimate). A dtype without a figure on this chip falls back to the nearest one, and the source
    says so. A chip without any FLOP/s gives NaN.
    """
    d = canonical_dtype(dtype)
    p = chip.peak_flops_per_s

    def have(k):
        return k in p and p[k] is not None and math.isfinite(p[k])

    if d is not None and have(d):
        return float(p[d]), chip.sources.get(f"peak_flops_per_s.{d}", "table")
    if d == "f64" and have("f32"):
        return float(p["f32"]) / 2, (f"estimate: no f64 peak for {chip.name}; f32 peak / 2 "
                                     f"({chip.sources.get('peak_flops_per_s.f32', 'table')})")
    for k in _FALLBACK.get(d, _FALLBACK[None]):
        if have(k):
            what = f"dtype {dtype!r} has no peak class" if d is None else f"no {d} peak for {chip.name}"
            return float(p[k]), f"estimate: {what}; using the {k} peak ({chip.sources.get(f'peak_flops_per_s.{k}', 'table')})"
    why = chip.sources.get("peak_flops_per_s", f"unknown: no FLOP/s known for {chip.name}; pass --chip NAME")
    return NAN, why
