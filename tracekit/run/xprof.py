"""Run xprof's own analyses on a trace and return plain pandas frames (for tests and benchmarks).

xprof (``xprof`` / ``tensorboard-plugin-profile``) is optional: importing this module never imports it. Each call
runs xprof in a fresh child Python process that

* symlinks the trace into a private temporary run directory, because xprof's converter writes cache files
  (``ALL_HOSTS.op_stats_v2.pb``, ``*.hlo_proto.pb``) next to the trace it reads, and reuses a stale cache left there;
* silences xprof's C++ logging (``TF_CPP_MIN_LOG_LEVEL=3``, ``GLOG_minloglevel=3``) and points ``TMPDIR`` at that
  private directory, so xprof's CLI cache (``$TMPDIR/xprof_cli_cache_<user>``) is never read or written;
* calls the converter the ``xprof`` CLI calls (``xprof.convert.raw_to_tool_data.xspace_to_tool_data`` for
  ``hlo_stats`` / ``roofline_model``; ``xplane_tools.iter_timeline_events`` + ``async_overlap.analyze`` for
  ``analyze_async_overlap``), reads the exact integer per-op totals from the ``OpStats`` proto the converter saved,
  and writes one JSON document for the parent.

A crash, an abort or a parse failure inside xprof never takes the caller down: it becomes a ``RuntimeError``.

Units: ``*_ps`` are integer picoseconds, ``*_us`` the float microseconds xprof prints; rates are per second in base
units (``*_flops_per_s``, ``*_bytes_per_s``; xprof's GFLOP/s and **GiB/s** are converted); ``*_fraction``,
``*_efficiency`` and ``*_utilization`` are fractions (1.0 = 100 %).
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

#: Python that runs xprof (must have the ``xprof`` package); defaults to the running interpreter.
PYTHON = os.environ.get("TRACEKIT_XPROF_PYTHON", sys.executable)
#: Seconds one xprof child may run before it is killed.
TIMEOUT_S = 600
_GIB = 2 ** 30
_QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "GLOG_minloglevel": "3", "ABSL_MIN_LOG_LEVEL": "3",
              "PYTHONWARNINGS": "ignore"}
_OPSTATS_FIELDS = ("hlo_module_id", "name", "time_ps", "self_time_ps", "flops", "model_flops", "bytes_accessed",
                   "num_cores")
_EXACT = ("total_time_ps", "self_time_ps", "flops", "model_flops", "bytes_accessed", "num_cores")


# --- child side: runs inside the xprof-capable interpreter ------------------------------------------------------

def _datatable(obj: Any) -> dict:
    """A Google DataTable (``{"cols", "rows", "p"}``) as ``{"columns", "rows", "props"}`` of plain values."""
    cols = [c.get("id") or c.get("label") for c in obj.get("cols", [])]
    rows = [[c.get("v") if isinstance(c, dict) else c for c in r.get("c", [])] for r in obj.get("rows", [])]
    return {"columns": cols, "rows": rows, "props": obj.get("p", {})}


def _op_stats(run_dir: str) -> dict | None:
    """The device OpMetricsDb and environment of the OpStats proto xprof saved in ``run_dir``, or None."""
    from xprof.protobuf import op_stats_pb2  # noqa: PLC0415 (child only)

    files = sorted(Path(run_dir).glob("*op_stats*.pb"))
    if not files:
        return None
    stats = op_stats_pb2.OpStats()
    stats.ParseFromString(files[0].read_bytes())
    db, env = stats.device_op_metrics_db, stats.perf_env
    return {
        "metrics": [{f: getattr(m, f) for f in _OPSTATS_FIELDS} for m in db.metrics_db],
        "total_time_ps": db.total_time_ps, "total_op_time_ps": db.total_op_time_ps,
        "idle_time_ps": db.idle_time_ps, "busy_time_ps": db.busy_time_ps,
        "program_names": {str(k): v for k, v in stats.program_id_to_name_map.items()},
        "device_type": stats.run_environment.device_type,
        "device_core_count": stats.run_environment.device_core_count,
        "peak_tera_flops_per_second": env.peak_tera_flops_per_second,
        "peak_bws_giga_bytes_per_second": list(env.peak_bws_giga_bytes_per_second),
    }


def _worker(tool: str, trace: str, run_dir: str) -> dict:
    link = os.path.join(run_dir, "trace.xplane.pb")
    # a real file, not a symlink: xprof resolves links and then reads (and writes its cache) beside the target
    try:
        os.link(os.path.abspath(trace), link)
    except OSError:
        shutil.copyfile(trace, link)
    if tool == "async_overlap":
        from xprof.cli.internal import async_overlap  # noqa: PLC0415
        from xprof.cli.internal.oss import xplane_tools  # noqa: PLC0415

        events = xplane_tools.iter_timeline_events(link)
        return {"events": len(events), "result": async_overlap.analyze(events, top_k=1 << 62)}
    from xprof.convert import raw_to_tool_data  # noqa: PLC0415

    if tool in ("trace_viewer", "trace_viewer@"):  # the JSON itself, written where the parent asked
        data, _ = raw_to_tool_data.xspace_to_tool_data([link], tool, {"use_saved_result": False})
        if not data:
            raise RuntimeError(f"xprof's {tool} converter returned nothing")
        Path(sys.argv[5]).write_bytes(data if isinstance(data, bytes) else data.encode())
        return {}
    data, _ = raw_to_tool_data.xspace_to_tool_data([link], tool, {"use_saved_result": False})
    if data is None:
        raise RuntimeError(f"xprof's {tool} converter returned nothing (unreadable or unsupported trace)")
    parsed = json.loads(data)
    tables = [_datatable(t) for t in (parsed if isinstance(parsed, list) else [parsed])]
    return {"tables": tables, "op_stats": _op_stats(run_dir)}


def _worker_main() -> None:
    tool, trace, run_dir, out_path = sys.argv[1:5]
    try:
        out = {"ok": True, **_worker(tool, trace, run_dir)}
    except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    Path(out_path).write_text(json.dumps(out))


# --- parent side --------------------------------------------------------------------------------------------------

def available() -> bool:
    """True when :data:`PYTHON` can import the ``xprof`` package (checked without importing it here)."""
    if PYTHON == sys.executable:
        return importlib.util.find_spec("xprof") is not None
    return subprocess.run([PYTHON, "-c", "import xprof"], capture_output=True).returncode == 0


def _run(tool: str, path: str | os.PathLike, *extra: str) -> dict:
    if not available():
        raise RuntimeError("xprof is not installed (pip install 'tracekit[xprof]') — the xprof bridge cannot run")
    trace = Path(path).resolve()
    if not trace.is_file():
        raise RuntimeError(f"xprof bridge: trace file not found: {trace}")
    root = str(Path(__file__).resolve().parents[2])  # so the child (maybe another interpreter) imports this tracekit
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="tracekit_xprof_") as tmp:
        run_dir, out_path = os.path.join(tmp, "run"), os.path.join(tmp, "out.json")
        os.mkdir(run_dir)
        try:
            proc = subprocess.run([PYTHON, "-m", "tracekit.run.xprof", tool, str(trace), run_dir, out_path, *extra],
                                  cwd=tmp,
                                  env={**os.environ, **_QUIET_ENV, "TMPDIR": tmp, "PYTHONPATH": path},
                                  capture_output=True, text=True,
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"xprof {tool} on {trace} ran past {TIMEOUT_S} s") from None
        try:
            out = json.loads(Path(out_path).read_text())
        except (OSError, ValueError):
            tail = " | ".join(proc.stderr.strip().splitlines()[-3:]) or "no output"
            raise RuntimeError(f"xprof {tool} on {trace} crashed (exit {proc.returncode}): {tail}") from None
    if not out.get("ok"):
        raise RuntimeError(f"xprof {tool} on {trace} failed: {out.get('error')}")
    return out


def _num(df: pd.DataFrame, col: str, scale: float = 1.0) -> pd.Series:
    if col not in df:
        return pd.Series(float("nan"), index=df.index)
    return pd.to_numeric(df[col], errors="coerce").astype(float) * scale


def _str(df: pd.DataFrame, col: str) -> pd.Series:
    return df[col].fillna("").astype(str) if col in df else pd.Series("", index=df.index)


def _common(raw: pd.DataFrame, program_col: str, name_col: str, pct_scale: float) -> dict:
    """Columns that hlo_stats and roofline_model tables share (different ids, same meaning)."""
    return {
        "rank": _num(raw, "rank").fillna(0).astype("int64"),
        "program_id": raw[program_col].astype("uint64"),
        "op_name": _str(raw, name_col),
        "category": _str(raw, "category"),
        "occurrences": _num(raw, "occurrences").fillna(0).astype("int64"),
        "total_time_us": _num(raw, "total_time"),
        "self_time_us": _num(raw, "total_self_time"),
        "self_time_fraction": _num(raw, "total_self_time_percent", pct_scale),
        "model_flop_rate_flops_per_s": _num(raw, "model_flop_rate", 1e9),
        "memory_bw_bytes_per_s": _num(raw, "measured_memory_bw", _GIB),
        "hbm_bw_bytes_per_s": _num(raw, "hbm_bw", _GIB),
        "operational_intensity_flop_per_byte": _num(raw, "operational_intensity"),
        "bound_by": _str(raw, "bound_by"),
    }


def _join_op_stats(df: pd.DataFrame, op_stats: dict | None) -> pd.DataFrame:
    """Adds xprof's exact integer totals from its OpStats (keyed by program_id, op_name), else estimates them."""
    names = {} if op_stats is None else op_stats["program_names"]
    df["module"] = df["program_id"].map(lambda p: names.get(str(p), ""))
    if op_stats is not None and op_stats["metrics"]:
        m = pd.DataFrame(op_stats["metrics"]).rename(
            columns={"hlo_module_id": "program_id", "name": "op_name", "time_ps": "total_time_ps"})
        m["program_id"] = m["program_id"].astype("uint64")
        m = m.drop_duplicates(["program_id", "op_name"]).astype({c: "Int64" for c in _EXACT})
        df = df.merge(m, on=["program_id", "op_name"], how="left")
    self_us = df["self_time_us"]
    estimate = {"total_time_ps": df["total_time_us"] * 1e6, "self_time_ps": self_us * 1e6,
                "flops": df["model_flop_rate_flops_per_s"] * self_us * 1e-6,
                "bytes_accessed": df["memory_bw_bytes_per_s"] * self_us * 1e-6, "num_cores": 0.0}
    estimate["model_flops"] = estimate["flops"]
    for col in _EXACT:
        guess = pd.Series(estimate[col], index=df.index, dtype=float).fillna(0).round().astype("int64")
        df[col] = df[col].fillna(guess).astype("int64") if col in df else guess
    return df


def _attrs(df: pd.DataFrame, op_stats: dict | None, **extra: Any) -> pd.DataFrame:
    if op_stats is not None:
        df.attrs.update({k: op_stats[k] for k in ("total_time_ps", "total_op_time_ps", "idle_time_ps",
                                                   "busy_time_ps", "device_type", "device_core_count")})
    df.attrs.update(extra)
    return df


HLO_STATS_COLUMNS = [
    "rank", "program_id", "module", "op_name", "category", "hlo_expression", "tf_op_name", "occurrences",
    "num_cores", "total_time_ps", "self_time_ps", "total_time_us", "self_time_us", "self_time_fraction", "flops",
    "model_flops", "bytes_accessed", "model_flop_rate_flops_per_s", "normalized_flop_rate_flops_per_s",
    "memory_bw_bytes_per_s", "hbm_bw_bytes_per_s", "operational_intensity_flop_per_byte", "bound_by",
    "core_type", "parent_op_name", "source",
]


def trace_viewer_json(path: str | os.PathLike, dest: str | os.PathLike, *, streaming: bool = True) -> Path:
    """Write xprof's trace-viewer JSON of the trace to ``dest``: the streaming viewer's (``trace_viewer@``: every
    event, no cost args) or, with ``streaming=False``, the one-document export TensorBoard's profile plugin
    serves (``trace_viewer``: cost args on device ops; it leaves out ops that start with another on a line)."""
    dest = Path(dest).resolve()
    _run("trace_viewer@" if streaming else "trace_viewer", path, str(dest))
    return dest


def hlo_stats(path: str | os.PathLike) -> pd.DataFrame:
    """xprof's HLO op statistics: one row per (program, HLO instruction), summed over **all** devices.

    xprof reports no per-device split; ``num_cores`` says on how many cores (TPU chips / GPUs) the op ran. Times
    are the device-clock ``device_duration_ps`` of ``XLA Ops`` events (TPU) or of kernels (GPU). Idle time is no
    row but is in the denominator of ``self_time_fraction``; ``attrs`` has xprof's ``total_time_ps`` (that
    denominator), ``total_op_time_ps``, ``idle_time_ps``, ``busy_time_ps``, ``device_type``, ``device_core_count``.
    """
    out = _run("hlo_stats", path)
    table = out["tables"][0]
    raw = pd.DataFrame(table["rows"], columns=table["columns"])
    if raw.empty:
        return _attrs(pd.DataFrame(columns=HLO_STATS_COLUMNS), out["op_stats"])
    df = pd.DataFrame({
        **_common(raw, "program_id", "hlo_op_name", 0.01),  # this table prints percent
        "hlo_expression": _str(raw, "hlo_op_expression"),
        "tf_op_name": _str(raw, "tf_op_name"),
        "normalized_flop_rate_flops_per_s": _num(raw, "normalized_flop_rate", 1e9),
        "core_type": _str(raw, "core_type"),
        "parent_op_name": _str(raw, "parent_op_name"),
        "source": _str(raw, "source_info").map(lambda html: re.sub(r"<[^>]+>", "", html).strip()),
    })
    df = _join_op_stats(df, out["op_stats"])
    return _attrs(df[HLO_STATS_COLUMNS], out["op_stats"])


ASYNC_COLUMNS = ["device", "op_name", "op", "start_ps", "end_ps", "span_ps", "covered_ps", "exposed_ps",
                 "overlap_ratio", "class", "window_source", "host"]


def async_overlap(path: str | os.PathLike) -> pd.DataFrame:
    """xprof's ``analyze_async_overlap``: one row per async-op window (all of them, not only its top 20).

    ``covered_ps`` is the part of the window covered by the union of the same device's other ops (``XLA Ops`` /
    ``Sparse Core Ops`` events that are not ``*-start`` / ``*-done`` / ``send`` / ``recv``); ``overlap_ratio =
    covered / span``; ``class`` is hidden (>= 0.9), exposed (<= 0.1) or partial. ``attrs`` holds xprof's
    ``summary``, ``by_op``, ``by_plane``, ``concurrency``, ``thresholds`` and the number of ``events`` read.
    """
    out = _run("async_overlap", path)
    res = out["result"]
    df = pd.DataFrame(res["top_exposed"], columns=["plane", "name", "op", "start_ps", "span_ps", "exposed_ps",
                                                   "overlap_ratio", "class", "host"])
    df = df.rename(columns={"plane": "device", "name": "op_name"})
    df["host"] = [h if isinstance(h, str) else "" for h in df["host"]]
    df = df.astype({"start_ps": "int64", "span_ps": "int64", "exposed_ps": "int64", "overlap_ratio": float})
    df["end_ps"] = df["start_ps"] + df["span_ps"]
    df["covered_ps"] = df["span_ps"] - df["exposed_ps"]
    by_plane = res.get("by_plane", {})
    df["window_source"] = df["device"].map(lambda d: by_plane.get(d, {}).get("window_source", ""))
    df = df.sort_values(["host", "device", "start_ps"], kind="stable")[ASYNC_COLUMNS].reset_index(drop=True)
    df.attrs.update({k: res.get(k) for k in ("summary", "by_op", "by_plane", "concurrency", "thresholds")})
    df.attrs["events"] = out["events"]
    return df


ROOFLINE_COLUMNS = [
    "rank", "program_id", "module", "op_name", "category", "occurrences", "total_time_ps", "self_time_ps",
    "self_time_fraction", "flops", "bytes_accessed", "measured_flop_rate_flops_per_s",
    "model_flop_rate_flops_per_s", "memory_bw_bytes_per_s", "hbm_bw_bytes_per_s",
    "operational_intensity_flop_per_byte", "hbm_operational_intensity_flop_per_byte",
    "bottleneck_operational_intensity_flop_per_byte", "bound_by", "roofline_efficiency", "compute_efficiency",
    "max_mem_bw_utilization", "optimal_flop_rate_flops_per_s", "peak_flop_rate_flops_per_s",
    "peak_hbm_bw_bytes_per_s", "hbm_ridge_point_flop_per_byte", "device_type",
]


def _device_info(props: dict, op_stats: dict | None) -> dict:
    """xprof's device peaks (what ``get_device_information`` prints), in base units; ``raw`` = xprof's strings."""
    def f(key: str, scale: float = 1.0) -> float:
        try:
            return float(props[key]) * scale
        except (KeyError, TypeError, ValueError):
            return float("nan")

    info = {"device_type": props.get("device_type", ""), "peak_flop_rate_flops_per_s": f("peak_flop_rate", 1e9),
            "hbm_ridge_point_flop_per_byte": f("hbm_ridge_point"), "raw": dict(props)}
    for mem in ("hbm", "vmem_read", "vmem_write", "cmem_read", "cmem_write"):
        info[f"peak_{mem}_bw_bytes_per_s"] = f(f"peak_{mem}_bw", _GIB)
    if op_stats is not None and op_stats["peak_tera_flops_per_second"] > 0:  # exact, not 6-digit strings
        info["peak_flop_rate_flops_per_s"] = op_stats["peak_tera_flops_per_second"] * 1e12
        bws = op_stats["peak_bws_giga_bytes_per_second"]
        if bws and bws[0] > 0:
            info["peak_hbm_bw_bytes_per_s"] = bws[0] * 1e9
    return info


def roofline(path: str | os.PathLike) -> pd.DataFrame:
    """xprof's roofline model: one row per (program, HLO op) with its ``bound_by`` and the device peaks it used.

    Rows are xprof's "Total" step with infeed/outfeed included (the table's default view; the table also repeats
    every row without infeed/outfeed). The ``Program`` summary row is in ``attrs["program"]`` (raw xprof ids and
    units: GFLOP/s, GiB/s, us, fractions), the peaks also in ``attrs["device"]``.
    """
    out = _run("roofline_model", path)
    table = out["tables"][0]
    raw = pd.DataFrame(table["rows"], columns=table["columns"])
    device = _device_info(table["props"], out["op_stats"])
    if "include_infeed_outfeed" in raw:
        raw = raw[raw["include_infeed_outfeed"].fillna(False).astype(bool)]
    if "step" in raw:
        raw = raw[raw["step"].astype(str) == "Total"]
    is_program = _str(raw, "operation") == "Program"
    program = raw[is_program].to_dict("records")
    raw = raw[~is_program]
    extra = {"program": program[0] if program else {}, "device": device}
    if raw.empty:
        return _attrs(pd.DataFrame(columns=ROOFLINE_COLUMNS), out["op_stats"], **extra)
    df = pd.DataFrame({
        **_common(raw, "hlo_module_id", "operation", 1.0),  # this table prints fractions
        "measured_flop_rate_flops_per_s": _num(raw, "measured_flop_rate", 1e9),
        "hbm_operational_intensity_flop_per_byte": _num(raw, "hbm_operational_intensity"),
        "bottleneck_operational_intensity_flop_per_byte": _num(raw, "bottleneck_operational_intensity"),
        "roofline_efficiency": _num(raw, "roofline_efficiency"),
        "compute_efficiency": _num(raw, "compute_efficiency"),
        "max_mem_bw_utilization": _num(raw, "max_mem_bw_utilization"),
        "optimal_flop_rate_flops_per_s": _num(raw, "optimal_flop_rate", 1e9),
    })
    df = _join_op_stats(df, out["op_stats"])
    for key in ("peak_flop_rate_flops_per_s", "peak_hbm_bw_bytes_per_s", "hbm_ridge_point_flop_per_byte",
                "device_type"):
        df[key] = device[key]
    return _attrs(df[ROOFLINE_COLUMNS], out["op_stats"], **extra)


def device_information(path: str | os.PathLike) -> dict:
    """xprof's ``get_device_information``: device type and peaks in base units (``raw``: xprof's own strings)."""
    out = _run("roofline_model", path)
    return _device_info(out["tables"][0]["props"], out["op_stats"])


# --- benchmark helper -----------------------------------------------------------------------------------------

def _xprof_command() -> list[str]:
    exe = Path(PYTHON).parent / "xprof"
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("xprof")
    if found:
        return [found]
    return [PYTHON, "-c", "import sys; from xprof.cli.xprof_cli import main; sys.argv[0] = 'xprof'; sys.exit(main())"]


def measure(cmd_args: list[str], *, check: bool = True, isolate: bool = True) -> dict:
    """Runs ``xprof <cmd_args...>`` once; returns ``{"wall_s", "cpu_s", "peak_rss_bytes", "returncode"}``
    (``cpu_s``: the child's user + system CPU time from ``os.wait4``, its waited-for descendants included).

    The child is reaped with ``os.wait4``, so ``peak_rss_bytes`` is that child's own ``ru_maxrss`` (the largest of
    it and the descendants it waited for), never this process's. With ``isolate`` (default) every argument naming
    an existing ``*.xplane.pb`` is replaced by a symlink in a fresh run directory and ``TMPDIR`` points at a fresh
    directory: xprof starts cold (no saved ``op_stats``, empty CLI cache) and writes nothing next to the trace.
    Output is discarded. ``check``: raise ``RuntimeError`` on a non-zero exit.
    """
    if not available():
        raise RuntimeError("xprof is not installed — cannot measure an xprof command")
    args = [str(a) for a in cmd_args]
    with tempfile.TemporaryDirectory(prefix="tracekit_xprof_bench_") as tmp:
        if isolate:
            run_dir = Path(tmp) / "run"
            run_dir.mkdir()
            for i, a in enumerate(args):
                if a.endswith((".xplane.pb", ".xspace.pb")) and Path(a).is_file():
                    link = run_dir / Path(a).name
                    if not link.exists():
                        link.symlink_to(Path(a).resolve())
                    args[i] = str(link)
        env = {**os.environ, **_QUIET_ENV, **({"TMPDIR": tmp} if isolate else {})}
        with open(Path(tmp) / "stderr.txt", "w+b") as err:
            start = time.perf_counter()
            proc = subprocess.Popen(_xprof_command() + args, stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=tmp)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
            err.seek(0)
            tail = err.read()[-2000:].decode("utf-8", "replace")
    if check and proc.returncode != 0:
        last = " | ".join(tail.strip().splitlines()[-3:])
        raise RuntimeError(f"xprof {' '.join(args[:1])} failed (exit {proc.returncode}): {last}")
    rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)  # Linux: KiB; macOS: bytes
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_bytes": int(rss),
            "returncode": proc.returncode}


__all__ = ["available", "hlo_stats", "async_overlap", "roofline", "device_information", "measure",
           "HLO_STATS_COLUMNS", "ASYNC_COLUMNS", "ROOFLINE_COLUMNS"]


if __name__ == "__main__":  # the child side, in the xprof-capable interpreter (see :func:`_run`)
    _worker_main()
