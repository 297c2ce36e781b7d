"""Measure this machine's CPU: achievable matmul FLOP/s (f32, bf16) and memory bandwidth, stored as a chip entry.

``calibrate()`` times a jitted square matmul with JAX on the CPU (numpy for f32 when JAX is missing), sized so one
run takes ~50-200 ms and keeping the best of several runs, and a numpy copy of a large array (bytes = read + write,
the STREAM "copy" convention: write-allocate traffic is not counted). The result is written atomically as JSON to
``path``, else ``$TRACEKIT_HOME/cpu_chip.json``, else ``$XDG_CONFIG_HOME/tracekit/cpu_chip.json`` (default
``~/.config``). :func:`cpu_chip` hands it to the chip table for CPU traces (``chips.detect(..., cpu=cpu_chip)``); without one the
table uses :func:`tracekit.model.chips.estimate_cpu`, a rough entry from the core count.

The record also keeps ``cpu_wait_share``: the share of its threads' runnable time spent waiting
for a core while measuring (Linux schedstat). Above :data:`~tracekit.model.cpu_limits.BUSY_WAIT_SHARE` other work was running, and every
source text built from the record says its rates are likely low.

These are achieved rates, not theoretical peaks: a CPU trace's ops are compared against what this machine can
actually reach. They hold for the machine they were measured on only.
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from tracekit.model.chips import Chip, cpu_entry, estimate_cpu
from tracekit.errors import TraceError
from tracekit.fileio import write_atomic
from tracekit.model.cpu_limits import busy

FILE_NAME = "cpu_chip.json"
FORMAT_VERSION = 1
TARGET_S = 0.1  # aim for one matmul of ~100 ms
MIN_N, MAX_N = 128, 4096
COPY_BYTES = 256 * 2**20



def calibration_path(path=None) -> Path:
    """Where the calibration lives: ``path``, ``$TRACEKIT_HOME/cpu_chip.json`` or the user config folder."""
    if path is not None:
        return Path(path)
    home = os.environ.get("TRACEKIT_HOME")
    if home:
        return Path(home) / FILE_NAME
    config = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(config) / "tracekit" / FILE_NAME


def _best(fn, budget_s: float, min_runs: int = 2, max_runs: int = 20) -> float:
    """Best wall time of ``fn()`` over runs that fit in ``budget_s`` (at least ``min_runs``)."""
    best, spent, runs = float("inf"), 0.0, 0
    while runs < min_runs or (spent < budget_s and runs < max_runs):
        t = time.perf_counter()
        fn()
        dt = time.perf_counter() - t
        best, spent, runs = min(best, dt), spent + dt, runs + 1
    return best


def _copy_bandwidth(budget_s: float) -> tuple[float, dict]:
    n = COPY_BYTES // 8
    src = np.ones(n, dtype=np.float64)
    dst = np.zeros_like(src)  # touch every page before timing
    np.copyto(dst, src)
    t = _best(lambda: np.copyto(dst, src), budget_s, min_runs=3)
    return 2 * src.nbytes / t, {"array_bytes": int(src.nbytes), "best_s": t}


def _matmul_rate(make_run, budget_s: float) -> tuple[float, dict]:
    """Best FLOP/s of ``make_run(n)()`` (a square n x n matmul), growing n until one run takes ~TARGET_S."""
    deadline = time.perf_counter() + budget_s
    n = 256
    for _ in range(4):
        run = make_run(n)
        run()  # compile / warm up
        t = _best(run, 0.0, min_runs=1)
        want = int(n * (TARGET_S / max(t, 1e-6)) ** (1 / 3)) // 128 * 128
        want = max(MIN_N, min(MAX_N, want))
        if t >= TARGET_S / 2 or want <= n or time.perf_counter() + 4 * t * (want / n) ** 3 > deadline:
            break
        n = want
    left = max(deadline - time.perf_counter(), 0.0)
    t = min(t, _best(run, left, min_runs=1))
    return 2.0 * n**3 / t, {"n": n, "best_s": t}


def _jax_runner(dtype_name: str):
    import jax
    import jax.numpy as jnp

    cpu = jax.devices("cpu")[0]
    dtype = getattr(jnp, dtype_name)
    mm = jax.jit(lambda a, b: a @ b)

    def make(n):
        a = jax.device_put(jnp.ones((n, n), dtype) * 0.5, cpu)
        b = jax.device_put(jnp.ones((n, n), dtype) * 0.25, cpu)
        return lambda: mm(a, b).block_until_ready()

    return make


def _numpy_runner(n):
    a = np.full((n, n), 0.5, dtype=np.float32)
    b = np.full((n, n), 0.25, dtype=np.float32)
    return lambda: a @ b


def processor_name() -> str:
    """The CPU model: the model name from /proc/cpuinfo, else platform.processor(), else the machine type."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        name = ""
    return name or platform.processor() or platform.machine() or "unknown"


def measure(seconds: float = 5.0) -> dict:
    """Run the measurements (about ``seconds`` plus JAX's import and compile time) and return the record."""
    seconds = max(float(seconds), 0.1)
    queued = _runqueue()
    bw, bw_detail = _copy_bandwidth(0.15 * seconds)
    flops, details, engines = {}, {"copy": bw_detail}, {}
    try:
        import jax  # noqa: F401

        for d in ("float32", "bfloat16"):
            key = "f32" if d == "float32" else "bf16"
            flops[key], details[key] = _matmul_rate(_jax_runner(d), 0.4 * seconds)
            engines[key] = f"jax {jax.__version__} jit matmul"
    except ImportError:
        flops["f32"], details["f32"] = _matmul_rate(_numpy_runner, 0.8 * seconds)
        engines["f32"] = f"numpy {np.__version__} matmul"
    return {
        "version": FORMAT_VERSION,
        "measured_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "processor": processor_name(),
        "cpu_count": os.cpu_count() or 1,
        "platform": platform.platform(),
        "cpu_wait_share": _wait_share(queued, _runqueue()),
        "peak_flops_per_s": flops,
        "hbm_bw_bytes_per_s": bw,
        "engines": engines,
        "details": details,
    }


def write_json_atomic(path: Path, record: dict, what: str = "the file") -> None:
    """Write ``record`` as JSON to ``path`` (its folder made first) with :func:`tracekit.fileio.write_atomic`:
    never a partial file. A failure is a :class:`TraceError` naming ``what``."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise TraceError(f"cannot write {what}: {e.strerror or e}", str(path)) from None
    write_atomic(path, json.dumps(record, indent=2, sort_keys=True) + "\n", what=what)


def calibrate(seconds: float = 5.0, path=None) -> Chip:
    """Measure this machine, store the result (atomically) and return it as a :class:`~tracekit.model.chips.Chip`."""
    record = measure(seconds)
    target = calibration_path(path)
    write_json_atomic(target, record, what="the calibration")
    return _to_chip(record, target)


def load_calibration(path=None) -> Chip | None:
    """The stored calibration as a Chip, or None when there is none. A corrupt file raises TraceError."""
    target = calibration_path(path)
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise TraceError(f"cannot read the calibration: {e.strerror or e}", str(target))
    try:
        record = json.loads(text)
        return _to_chip(record, target)
    except (ValueError, KeyError, TypeError) as e:
        raise TraceError(f"corrupt calibration file ({e})", str(target), "delete it or run `tracekit calibrate` again")


def chip_from_record(record: dict, origin: str, label: str = "calibration (recording machine)") -> Chip:
    """The CPU chip a calibration record (as :func:`measure` returns it) describes; ``origin`` names where the
    record came from (a file), ``label`` starts every source text. Raises ValueError for a record that is not
    one."""
    return _to_chip(record, origin, label)


def _to_chip(record: dict, path, label: str = "calibration") -> Chip:
    if record.get("version") != FORMAT_VERSION:
        raise ValueError(f"format version {record.get('version')!r}, expected {FORMAT_VERSION}")
    flops = {k: float(v) for k, v in record["peak_flops_per_s"].items()}
    if not flops or not all(v > 0 for v in flops.values()):
        raise ValueError("no positive FLOP/s")
    bw = float(record["hbm_bw_bytes_per_s"])
    if not bw > 0:
        raise ValueError("no positive bandwidth")
    on = f"{record['processor']}/{record['cpu_count']} cpus"
    how = f"{label}: measured {record['measured_at']} on {on} ({path}){_load_note(record)}"
    name = f"cpu ({record['cpu_count']} cores, calibrated)" if label == "calibration" else \
        f"cpu ({record['processor']}, {record['cpu_count']} cores, recording machine)"
    chip = cpu_entry(name, flops, bw, how,
                how + " (numpy copy, bytes = read + write)", estimated=False)
    engines = record.get("engines", {})
    for d in flops:
        if d in engines:
            chip.sources[f"peak_flops_per_s.{d}"] = f"{how} ({engines[d]})"
    return chip


def _runqueue() -> tuple[int, int] | None:
    """(ns on a CPU, ns runnable but waiting for one), summed over this process's threads (Linux schedstat);
    None where the kernel does not say."""
    run = wait = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for t in tasks:
        try:
            with open(f"/proc/self/task/{t}/schedstat", encoding="ascii") as f:
                a, b = f.read().split()[:2]
            run, wait = run + int(a), wait + int(b)
        except (OSError, ValueError):
            continue
    return (run, wait) if run else None


def _wait_share(before, after) -> float | None:
    if not before or not after:
        return None
    run, wait = after[0] - before[0], after[1] - before[1]
    return round(wait / (run + wait), 3) if run > 0 and wait >= 0 else None


def busy_share(path) -> float | None:
    """The ``cpu_wait_share`` of the calibration stored at ``path`` when it is above :data:`~tracekit.model.cpu_limits.BUSY_WAIT_SHARE`
    (measured while other work ran), else None (never raises)."""
    try:
        share = json.loads(Path(path).read_text(encoding="utf-8")).get("cpu_wait_share")
    except (OSError, ValueError, AttributeError):
        return None
    return busy(share)


def _load_note(record: dict) -> str:
    """'' or the note that the calibration ran on a busy machine: its threads waited for a core more than
    :data:`~tracekit.model.cpu_limits.BUSY_WAIT_SHARE` of the time (``cpu_wait_share``)."""
    share = busy(record.get("cpu_wait_share"))
    if share is not None:
        return (f" [its threads waited for a core {share:.0%} of the time while measuring: other work was running, "
                "so these rates are likely low]")
    return ""


def cpu_chip(path=None) -> Chip:
    """This machine's CPU: the stored calibration when there is one, else :func:`tracekit.model.chips.estimate_cpu`.
    Handed to the chip table (``chips.detect(..., cpu=cpu_chip)``) by whoever needs a CPU entry."""
    chip = load_calibration(path)
    return chip if chip is not None else estimate_cpu()
