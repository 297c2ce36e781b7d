"""tracekit against xprof on large traces, in one command.

    python benchmarks/run.py                 # the v6e trace as it is, 1.5 M and 15 M device events (minutes)
    python benchmarks/run.py --sizes 0,1.5e6 # the v6e trace as it is (0) and 1.5 M events
    python benchmarks/run.py --quick         # small sizes, a smoke test
    python benchmarks/run.py --out DIR       # keep the tiled traces, results.json and table.txt in DIR

What it does:

1. byte-compiles tracekit's modules (as ``pip install`` does; this machine may set PYTHONDONTWRITEBYTECODE, and a
   tracekit that compiles itself at every start is not what users run), then tiles
   ``../shared/traces/tpu/v6e-4_jax_inference.xplane.pb`` (``benchmarks/tile.py``) to each size, in a child
   process, into a temporary folder (or ``--out``), after checking free disk and memory; size 0 is the source
   trace as it is (26.7 k device events: the small trace most users open);
2. measures, on each file, ``tracekit analyze FILE -o report.json`` (every rule) and ``tracekit info FILE``
   (``python -m tracekit.cli`` in a fresh child, in a fresh empty folder) and ``xprof get_hlo_stats FILE`` and
   ``xprof analyze_async_overlap FILE`` (``tracekit.run.xprof.measure``: a fresh run folder and TMPDIR per call,
   so xprof starts cold: no saved op_stats, empty CLI cache); for each, wall time, CPU time (user + system) and
   peak RSS of the child from ``os.wait4``; on the source trace (size 0) also the post-run hook's analysis child
   (``tracekit.run.hook.analysis_command`` in ``child_env(1)``, on a fresh run folder, writing JSON and HTML) and
   the floor every analysis pays, ``python -c "import numpy, pandas"``; best of N (3 below 5 M events, 1 above;
   ``--repeat``), the tools taking turns round by round so that a burst of load on this shared machine hits them
   alike;
3. prints the machine, the table (events, tool, wall s, CPU s, peak RSS MB, ratios: tracekit analyze's CPU time
   and RSS over each xprof tool's, and info's CPU time over analyze's), the CPU-time range over the runs, a
   linearity line (per-event CPU time and memory from the smallest to the largest size), and where tracekit's
   time goes (stage timings measured in a child around the pipeline's own stage functions; ``--profile`` adds
   cProfile's top entries).

Memory: every measured process runs under a budget (``--mem-budget-gb``; default 85 % of the memory available at
start): one that goes over it is killed and its row says so. An xprof measurement predicted (linearly from the
previous size) to need more than 1.25x the budget is skipped without running (``--force`` runs it anyway).
Children get ``oom_score_adj`` 1000, so under memory pressure the kernel stops them, not other work.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: ../shared/traces beside the clone, or TRACEKIT_SHARED_TRACES (as the tests read it: a git worktree elsewhere)
SRC = Path(os.environ.get("TRACEKIT_SHARED_TRACES", ROOT.parent / "shared" / "traces")) / "tpu" / \
    "v6e-4_jax_inference.xplane.pb"
SIZES = (0, 1_500_000, 15_000_000)  # 0: the source trace as it is
QUICK_SIZES = (20_000, 100_000)
XPROF_TOOLS = ("get_hlo_stats", "analyze_async_overlap")
TRACEKIT = "tracekit analyze"
INFO = "tracekit info"
HOOK = "tracekit hook child"
FLOOR = "import numpy, pandas"
MB = 1e6
#: tiling holds the whole tiled XSpace in upb objects: about this many bytes of RAM per device event (measured)
TILE_BYTES_PER_EVENT = 400


# ------------------------------------------------------------------------------------------------- machine
def _meminfo() -> dict:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            k, v = line.split(":", 1)
            out[k] = int(v.split()[0]) * 1024
    except OSError:
        pass
    return out


def mem_available() -> int:
    m = _meminfo()
    return m.get("MemAvailable", m.get("MemTotal", 8 << 30))


def machine() -> dict:
    """CPU model, cores, RAM, OS, Python and the versions that matter."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib import metadata
    versions = {}
    for dist in ("tracekit", "xprof", "protobuf", "pandas", "numpy"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "absent"
    try:
        from tracekit.ingest import wire
        versions["wire decoder"] = "C" if getattr(wire, "wirec", None) is not None else "python"
    except Exception:  # noqa: BLE001
        versions["wire decoder"] = "?"
    m = _meminfo()
    try:  # which code was measured (read-only git queries)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        versions["code"] = f"{head}{' + local changes' if dirty else ''}" if head else "?"
    except (OSError, subprocess.SubprocessError):
        versions["code"] = "?"
    return {"cpu": cpu, "cores": os.cpu_count(), "ram_gb": round(m.get("MemTotal", 0) / 2**30, 1),
            "ram_available_gb": round(m.get("MemAvailable", 0) / 2**30, 1),
            "load_avg": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "versions": versions}


def machine_text(m: dict) -> str:
    v = ", ".join(f"{k} {x}" for k, x in m["versions"].items())
    return (f"machine: {m['cpu']}, {m['cores']} cores, {m['ram_gb']} GB RAM ({m['ram_available_gb']} GB available), "
            f"{m['os']}, Python {m['python']}\n  {v}\n  load average at start: {m['load_avg']}")


# ---------------------------------------------------------------------------------------------- measuring
def load1() -> float | None:
    """The one-minute load average now (None where the OS has none): sampled after each measured run."""
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _child_setup():
    try:
        Path("/proc/self/oom_score_adj").write_text("1000")
    except OSError:
        pass


class MemGuard(threading.Thread):
    """Kills any descendant of this process whose RSS goes over ``budget`` bytes (polls /proc); ``kills`` counts."""

    def __init__(self, budget: int):
        super().__init__(daemon=True)
        self.budget, self.kills, self._stop_ev = budget, 0, threading.Event()

    def _descendants(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(ppid, []).append(int(d))
        out, todo = [], [os.getpid()]
        while todo:
            for c in children.get(todo.pop(), []):
                out.append(c)
                todo.append(c)
        return out

    def run(self):
        if not Path("/proc/self/status").exists():
            return
        while not self._stop_ev.wait(0.25):
            for pid in self._descendants():
                if _rss_of(pid) > self.budget:
                    try:
                        os.kill(pid, 9)
                        self.kills += 1
                    except OSError:
                        pass

    def stop(self):
        self._stop_ev.set()


GUARD: MemGuard | None = None


def run_measured(cmd: list[str], *, cwd: str | None = None, env: dict | None = None) -> dict:
    """Run ``cmd`` in a child; ``{wall_s, cpu_s, peak_rss_bytes, returncode, killed, stderr_tail}``. CPU time
    (user + system) and peak RSS are the child's own, from ``os.wait4``."""
    kills = GUARD.kills if GUARD else 0
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, env=env,
                                preexec_fn=_child_setup if sys.platform.startswith("linux") else None)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read()[-1500:].decode("utf-8", "replace")
    rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_bytes": int(rss),
            "returncode": proc.returncode, "load1": load1(),
            "killed": bool(GUARD and GUARD.kills > kills), "stderr_tail": tail}


def measure_tracekit(trace: Path, command: str = "analyze") -> dict:
    """``tracekit analyze TRACE -o report.json`` or ``tracekit info TRACE`` in a fresh child and empty folder."""
    with tempfile.TemporaryDirectory(prefix="tracekit_bench_") as tmp:
        extra = ["-o", os.path.join(tmp, "report.json")] if command == "analyze" else []
        return run_measured([sys.executable, "-m", "tracekit.cli", command, str(trace)] + extra, cwd=tmp)


def measure_hook_child(trace: Path) -> dict:
    """The post-run hook's analysis child as ``tracekit.profile`` starts it (its environment: every thread pool on
    one thread; it nices itself) on a fresh run folder holding ``trace``, writing the hook's default reports (JSON
    and HTML) into that folder."""
    from tracekit.run import hook
    with tempfile.TemporaryDirectory(prefix="tracekit_bench_") as tmp:
        run_dir = Path(tmp) / "plugins" / "profile" / "run"
        run_dir.mkdir(parents=True)
        os.symlink(trace.resolve(), run_dir / "host.xplane.pb")
        spec = {"outputs": ["json", "html"], "fail_on": "never"}
        return run_measured(hook.analysis_command(run_dir, spec), cwd=tmp, env=hook.child_env(1))


def measure_import_floor() -> dict:
    """``import numpy, pandas`` alone, with NumPy's BLAS on one thread as the command line sets it: the least any
    tracekit analysis can cost, since every analysis runs on pandas frames."""
    with tempfile.TemporaryDirectory(prefix="tracekit_bench_") as tmp:
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
        return run_measured([sys.executable, "-c", "import numpy, pandas"], cwd=tmp, env=env)


def measure_xprof(tool: str, trace: Path) -> dict:
    from tracekit.run import xprof
    _child_setup()  # xprof.measure's child inherits oom_score_adj from us
    kills = GUARD.kills if GUARD else 0
    r = xprof.measure([tool, str(trace)], check=False)
    return {**r, "load1": load1(), "killed": bool(GUARD and GUARD.kills > kills), "stderr_tail": ""}


def best(runs: list[dict]) -> dict:
    """The best of ``runs`` (the least wall time, CPU time and peak RSS, each on its own: all three are noise
    upwards) with every run's wall and CPU time; the first failed run instead, when one failed."""
    bad = [r for r in runs if r["returncode"] != 0]
    if bad:
        return {**bad[0], "runs": len(runs), "all_wall_s": [round(x["wall_s"], 3) for x in runs]}
    return {"wall_s": min(r["wall_s"] for r in runs), "cpu_s": min(r["cpu_s"] for r in runs),
            "peak_rss_bytes": min(r["peak_rss_bytes"] for r in runs), "returncode": 0, "killed": False,
            "runs": len(runs), "all_wall_s": [round(r["wall_s"], 3) for r in runs],
            "all_cpu_s": [round(r["cpu_s"], 3) for r in runs],
            "all_load1": [r["load1"] for r in runs if r.get("load1") is not None]}


def best_of(fn, n: int) -> dict:
    """Best of ``n`` runs of ``fn`` (see :func:`best`); stops at the first failed run."""
    runs = []
    for _ in range(max(1, n)):
        runs.append(fn())
        if runs[-1]["returncode"] != 0:
            break
    return best(runs)


def take_turns(tools: list, n: int) -> dict:
    """``n`` rounds, each tool once per round (``tools``: [(name, fn)]); {name: best of its runs}. A tool that
    fails is not run again."""
    runs: dict = {name: [] for name, _ in tools}
    for _ in range(max(1, n)):
        for name, fn in tools:
            if not runs[name] or runs[name][-1]["returncode"] == 0:
                runs[name].append(fn())
    return {name: best(r) for name, r in runs.items()}


# ------------------------------------------------------------------------------------------------- tiling
def _tile_child(src: str, out: str, events: int) -> None:
    """(child) Tile ``src`` to about ``events`` device events into ``out``; print {bytes, events} as JSON."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from tile import tile  # benchmarks/tile.py
    from tracekit.proto import xplane_pb2
    from tracekit.ingest.xspace import device_of
    data = tile(Path(src).read_bytes(), events)
    Path(out).write_bytes(data)
    space = xplane_pb2.XSpace.FromString(data)
    n = sum(len(line.events) for p in space.planes if device_of(p.name) for line in p.lines)
    print(json.dumps({"bytes": len(data), "events": n}))


def build_trace(src: Path, folder: Path, events: int) -> dict:
    """The tiled trace for ``events`` (reused when ``folder`` already has it from the same source); ``events`` 0:
    the source itself."""
    if events == 0:
        return {"path": str(src), "bytes": src.stat().st_size, "events": source_events(src), "reused": True}
    out = folder / f"v6e_tiled_{events}.xplane.pb"
    meta = out.with_suffix(".json")
    key = {"src": str(src), "src_bytes": src.stat().st_size, "src_mtime": src.stat().st_mtime, "target": events}
    if out.exists() and meta.exists():
        m = json.loads(meta.read_text())
        if m.get("key") == key and out.stat().st_size == m.get("bytes"):
            return {**m, "path": str(out), "reused": True}
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, __file__, "--_tile", str(src), str(out), str(events)], capture_output=True,
                       text=True, preexec_fn=_child_setup if sys.platform.startswith("linux") else None)
    if r.returncode != 0:
        raise SystemExit(f"tiling to {events:,} events failed: {r.stderr.strip().splitlines()[-1:]}")
    m = {**json.loads(r.stdout.strip().splitlines()[-1]), "key": key, "tile_s": time.perf_counter() - t0}
    meta.write_text(json.dumps(m))
    return {**m, "path": str(out), "reused": False}


def check_resources(src: Path, folder: Path, sizes: list[int], src_events: int) -> None:
    """Refuse to start when the tiled files cannot fit on disk or tiling cannot fit in memory."""
    per_event = src.stat().st_size / max(src_events, 1)
    need = sum(int(per_event * n * 1.1) for n in sizes)
    free = shutil.disk_usage(folder).free
    if need > free * 0.9:
        raise SystemExit(f"not enough disk in {folder}: the tiled traces need ~{need / 2**30:.1f} GiB, "
                         f"{free / 2**30:.1f} GiB free (use --out on a larger disk, or --sizes)")
    tile_mem = max(sizes, default=0) * TILE_BYTES_PER_EVENT
    if tile_mem > mem_available() * 0.9:
        raise SystemExit(f"tiling {max(sizes):,} events needs ~{tile_mem / 2**30:.1f} GiB of RAM, "
                         f"{mem_available() / 2**30:.1f} GiB available (use --sizes)")


def source_events(src: Path) -> int:
    from tracekit.proto import xplane_pb2
    from tracekit.ingest.xspace import device_of
    space = xplane_pb2.XSpace.FromString(src.read_bytes())
    return sum(len(line.events) for p in space.planes if device_of(p.name) for line in p.lines)


def compile_tracekit() -> None:
    """Byte-compile tracekit's modules (what ``pip install`` does), so no measured run compiles them."""
    import compileall
    compileall.compile_dir(str(ROOT / "tracekit"), quiet=1)


# ------------------------------------------------------------------------------------------ stage timings
STAGES = [  # (label, module, attribute): the pipeline's own functions, timed where they are looked up
    ("read", "tracekit.ingest.paths", "read_bytes"),
    ("map the file", "tracekit.ingest.paths", "_mapped"),
    ("decode", "tracekit.ingest.paths", "decode"),
    ("frames (per host)", "tracekit.ingest.trace", "_host"),
    ("combine hosts", "tracekit.ingest.trace", "combine"),
    ("cost model", "tracekit.model.identity", "costs"),
    ("roofline", "tracekit.model.roofline", "joined"),
    ("load rules", "tracekit.analysis.rule_model", "load_rules"),
    ("timeline (rule frames)", "tracekit.analysis.rule_checks", "frames_for_rules"),
    ("memory view", "tracekit.analysis.memory", "build"),
    ("overview (per device)", "tracekit.analysis.overview", "device_parts"),
    ("rules (on the host's frames)", "tracekit.analysis.hostrules", "evaluate"),
    ("claims (per device)", "tracekit.analysis.claims", "atoms"),
    ("model warnings", "tracekit.model.peaks", "warning_groups"),
    ("custom calls", "tracekit.analysis.customcalls", "parts"),
    ("interconnect (per host)", "tracekit.analysis.interconnect", "host_part"),
    ("step stats", "tracekit.analysis.stepstats", "step_stats"),
    ("chips", "tracekit.model.roofline", "chips_used"),
    ("sections (per host, all)", "tracekit.report.engine.host", "summarize"),
    ("report (the reduce)", "tracekit.report.engine.reduce", "report"),
]


def _stages_child(trace: str, profile: bool) -> None:
    """(child) Run ``pipeline.analyze`` + the JSON render with every stage function wrapped by a timer; print
    {stages: {label: s}, total_s, import_s, peak_rss_bytes, profile} as JSON."""
    import importlib
    import resource
    t_imp = time.perf_counter()
    from tracekit import collector
    collector.pause()  # as the tracekit process does (tracekit.cli.app.entry); load() resumes it
    from tracekit import pipeline
    from tracekit.run import alloc
    from tracekit.report import render
    from tracekit.threads import mark_one_shot
    import_s = time.perf_counter() - t_imp
    alloc.tune()  # as the CLI does
    mark_one_shot()  # as the tracekit process does (tracekit.cli.app.entry)
    times: dict = {}
    inner = [0.0]  # time of the timed stages nested in the one running (each stage's own time excludes them)

    def wrap(label, fn):
        def timed(*a, **kw):
            t, outer = time.perf_counter(), inner[0]
            inner[0] = 0.0
            try:
                return fn(*a, **kw)
            finally:
                spent = time.perf_counter() - t
                times[label] = times.get(label, 0.0) + spent - inner[0]
                inner[0] = outer + spent
        return timed

    missing = []
    for label, mod, attr in STAGES:
        m = importlib.import_module(mod)
        if hasattr(m, attr):
            setattr(m, attr, wrap(label, getattr(m, attr)))
        else:
            missing.append(f"{mod}.{attr}")
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    rep = pipeline.analyze(trace)
    t1 = time.perf_counter()
    text = render.render(rep, "json")
    t2 = time.perf_counter()
    times["render json"] = t2 - t1
    top = ""
    if prof is not None:
        import io
        import pstats
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(25)
        buf.write("\n")
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(15)
        top = buf.getvalue()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    print(json.dumps({"stages": times, "total_s": t2 - t0, "import_s": import_s, "peak_rss_bytes": rss,
                      "report_bytes": len(text), "missing": missing, "profile": top}))


def stage_timings(trace: Path, profile: bool) -> dict:
    kills = GUARD.kills if GUARD else 0
    r = subprocess.run([sys.executable, __file__, "--_stages", str(trace)] + (["--profile"] if profile else []),
                       capture_output=True, text=True, cwd=tempfile.gettempdir(),
                       preexec_fn=_child_setup if sys.platform.startswith("linux") else None)
    if r.returncode != 0:
        over = GUARD and GUARD.kills > kills
        return {"error": "over the memory budget" if over else (r.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def stages_text(st: dict, events: int) -> str:
    if "error" in st:
        return f"  stage timings unavailable: {st['error']}"
    total = st["total_s"]
    lines = [f"  {'stage (own time)':<24} {'s':>8} {'share':>7} {'ns/event':>9}"]
    acc = 0.0
    for label, _, _ in STAGES + [("render json", "", "")]:
        if label in st["stages"]:
            s = st["stages"][label]
            acc += s if label != "render json" else 0
            lines.append(f"  {label:<24} {s:8.2f} {s / total:7.1%} {s / events * 1e9:9.0f}")
    other = total - acc - st["stages"].get("render json", 0)
    lines.append(f"  {'other (glue)':<24} {other:8.2f} {other / total:7.1%} {other / events * 1e9:9.0f}")
    lines.append(f"  {'total in-process':<24} {total:8.2f}  (+{st['import_s']:.2f} s imports; peak RSS "
                 f"{st['peak_rss_bytes'] / MB:,.0f} MB; report {st['report_bytes'] / MB:.1f} MB)")
    if st.get("missing"):
        lines.append(f"  (not timed, not found: {', '.join(st['missing'])})")
    return "\n".join(lines)


# ----------------------------------------------------------------------------------------------------- table
def _ratio(a: dict | None, b: dict, key: str) -> str:
    ok = a and a.get("status") == "ok" and b.get("status") == "ok" and b.get(key)
    return f"{a[key] / b[key]:.2f}x" if ok else ""


def table_text(rows: list[dict]) -> str:
    """events | tool | wall s | CPU s | CPU range | peak RSS MB | ratios | runs. On an xprof row the ratios are
    tracekit analyze's CPU time and RSS over that tool's; on the info row, info's CPU time over analyze's."""
    head = ["events", "tool", "wall s", "CPU s", "CPU s range", "peak RSS MB", "analyze/xprof CPU",
            "analyze/xprof RSS", "info/analyze CPU", "runs"]
    body = []
    by = {(r["events"], r["tool"]): r for r in rows}
    for r in rows:
        tk = by.get((r["events"], TRACEKIT))
        ok = r.get("status") == "ok"
        xprof_row = r["tool"].startswith("xprof")
        cpus = r.get("all_cpu_s") or []
        body.append([f"{r['events']:,}", r["tool"], f"{r['wall_s']:.2f}" if ok else r.get("status", "?"),
                     f"{r['cpu_s']:.2f}" if ok else "",
                     f"{min(cpus):.2f}-{max(cpus):.2f}" if ok and cpus else "",
                     f"{r['peak_rss_bytes'] / MB:,.0f}" if ok else "",
                     _ratio(tk, r, "cpu_s") if xprof_row else "", _ratio(tk, r, "peak_rss_bytes") if xprof_row else "",
                     _ratio(r, tk, "cpu_s") if r["tool"] == INFO else "", str(r.get("runs", "")) if ok else ""])
    w = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]

    def fmt(cells):
        return "  ".join(c.rjust(w[i]) if i != 1 else c.ljust(w[i]) for i, c in enumerate(cells))

    return "\n".join([fmt(head), fmt(["-" * x for x in w])] + [fmt(b) for b in body])


def linearity_text(rows: list[dict], tool: str) -> str | None:
    ok = sorted((r for r in rows if r["tool"] == tool and r.get("status") == "ok" and not r.get("untiled")),
                key=lambda r: r["events"])
    if len(ok) < 2:
        return None
    a, b = ok[0], ok[-1]
    ta, tb = a["cpu_s"] / a["events"] * 1e6, b["cpu_s"] / b["events"] * 1e6
    ma, mb = a["peak_rss_bytes"] / a["events"], b["peak_rss_bytes"] / b["events"]
    dt = (b["cpu_s"] - a["cpu_s"]) / (b["events"] - a["events"]) * 1e6
    dm = (b["peak_rss_bytes"] - a["peak_rss_bytes"]) / (b["events"] - a["events"])
    return (f"linearity {tool}: {a['events']:,} -> {b['events']:,} events ({b['events'] / a['events']:.1f}x): "
            f"CPU time {ta:.2f} -> {tb:.2f} us/event ({tb / ta:.2f}x per event; marginal {dt:.2f} us/event), "
            f"memory {ma:,.0f} -> {mb:,.0f} B/event ({mb / ma:.2f}x; marginal {dm:,.0f} B/event); 1.00x = linear")


#: the goals of this benchmark (issue 40; the rows of its table), checked by :func:`goals_rows` on the rows measured.
#: "small": (analyze - floor) over xprof get_hlo_stats' CPU time on the source trace; "hook over floor": the hook's
#: analysis child's CPU time less the floor's; "1.5M cpu"/"1.5M rss": analyze at 1 to 2 M events against xprof and in
#: bytes; "marginal B/event": analyze's peak RSS per event from the smallest tiled size to one of 10 M events or more;
#: "pytest s": the whole suite's wall time (``--pytest``), on an idle machine. "info": ``info`` over ``analyze``'s CPU
#: time at every size (issue 18, kept as a check that ``info`` stays light).
GOALS = {"small": 0.5, "hook over floor": 0.3, "1.5M cpu": 0.2, "1.5M rss": 350 * MB, "marginal B/event": 150,
         "pytest s": 600, "info": 0.5}


def _load(*rows: dict | None) -> str:
    vals = [x for r in rows if r for x in (r.get("all_load1") or ([r["load1"]] if r.get("load1") is not None else []))]
    if not vals:
        return "?"
    return f"{min(vals):.2f}" if min(vals) == max(vals) else f"{min(vals):.2f}-{max(vals):.2f}"


def goals_rows(rows: list[dict], pytest_row: dict | None = None) -> list[list[str]]:
    """[what, measured, goal, verdict, load average] for each row of issue 40's goal table (a row the run did not
    measure says how to measure it), then the ``info`` checks. Best of the runs; ratios within one run as in the
    table; the load average is the one-minute one sampled after each run the row reads."""
    ok = {(r["events"], r["tool"]): r for r in rows if r.get("status") == "ok"}
    hlo = "xprof get_hlo_stats"
    out = []

    def verdict(value, limit):
        return "met" if value <= limit else "NOT met"

    small = [r for r in rows if r["tool"] == TRACEKIT and r.get("untiled") and (r["events"], TRACEKIT) in ok]
    if small:
        ev = small[0]["events"]
        tk, x, floor, hook = (ok.get((ev, t)) for t in (TRACEKIT, hlo, FLOOR, HOOK))
        what = f"small trace ({ev:,} device events): (analyze - floor) / xprof get_hlo_stats CPU"
        if x and floor:
            v = (tk["cpu_s"] - floor["cpu_s"]) / x["cpu_s"]
            out.append([what, f"{v:.2f}x ({tk['cpu_s']:.2f} - {floor['cpu_s']:.2f} of {x['cpu_s']:.2f} CPU-s)",
                        f"<= {GOALS['small']}x", verdict(v, GOALS["small"]), _load(tk, x, floor)])
        else:
            out.append([what, "not measured (needs xprof and size 0)", f"<= {GOALS['small']}x", "", _load(tk)])
        what = f"hook analysis child ({ev:,} device events) CPU"
        if hook and floor:
            v = hook["cpu_s"] - floor["cpu_s"]
            out.append([what, f"{hook['cpu_s']:.2f} CPU-s = floor {floor['cpu_s']:.2f} + {v:.2f}",
                        f"<= floor + {GOALS['hook over floor']} CPU-s", verdict(v, GOALS["hook over floor"]),
                        _load(hook, floor)])
    else:
        out.append(["small trace: (analyze - floor) / xprof get_hlo_stats CPU", "not measured (--sizes 0,...)",
                    f"<= {GOALS['small']}x", "", ""])
        out.append(["hook analysis child CPU", "not measured (--sizes 0,...)",
                    f"<= floor + {GOALS['hook over floor']} CPU-s", "", ""])
    mid = [r for r in rows if r["tool"] == TRACEKIT and 1_000_000 <= r["events"] <= 2_000_000
           and (r["events"], TRACEKIT) in ok]
    for r in mid:
        ev, tk = r["events"], ok[(r["events"], TRACEKIT)]
        x = ok.get((ev, hlo))
        what = f"{ev:,} device events: analyze / xprof get_hlo_stats CPU"
        if x:
            v = tk["cpu_s"] / x["cpu_s"]
            out.append([what, f"{v:.2f}x ({tk['cpu_s']:.2f} / {x['cpu_s']:.2f} CPU-s)", f"<= {GOALS['1.5M cpu']}x",
                        verdict(v, GOALS["1.5M cpu"]), _load(tk, x)])
        else:
            out.append([what, f"not measured (xprof: {r.get('status', '?')})", f"<= {GOALS['1.5M cpu']}x", "",
                        _load(tk)])
        v = tk["peak_rss_bytes"] / MB
        out.append([f"{ev:,} device events: analyze peak RSS", f"{v:,.0f} MB", f"<= {GOALS['1.5M rss'] / MB:,.0f} MB",
                    verdict(v, GOALS["1.5M rss"] / MB), _load(tk)])
    if not mid:
        out.append(["1.5 M device events: analyze / xprof CPU, peak RSS", "not measured (--sizes 0,1.5e6)",
                    f"<= {GOALS['1.5M cpu']}x, <= {GOALS['1.5M rss'] / MB:,.0f} MB", "", ""])
    tiled = sorted((r for r in rows if r["tool"] == TRACEKIT and r.get("status") == "ok" and not r.get("untiled")),
                   key=lambda r: r["events"])
    what = "analyze memory per event to >= 10 M device events (marginal)"
    if len(tiled) >= 2 and tiled[-1]["events"] >= 10_000_000:
        a, b = tiled[0], tiled[-1]
        v = (b["peak_rss_bytes"] - a["peak_rss_bytes"]) / (b["events"] - a["events"])
        out.append([f"analyze memory per event, {a['events']:,} -> {b['events']:,} events (marginal)",
                    f"{v:,.0f} B/event ({b['peak_rss_bytes'] / MB:,.0f} MB at the largest)",
                    f"<= {GOALS['marginal B/event']} B/event", verdict(v, GOALS["marginal B/event"]), _load(a, b)])
    else:
        out.append([what, "not measured (--sizes 0,1.5e6,15e6)", f"<= {GOALS['marginal B/event']} B/event", "", ""])
    what = "pytest, the whole suite, wall time (goal: on an idle machine)"
    if pytest_row and pytest_row.get("status") == "ok":
        v = pytest_row["wall_s"]
        out.append([what, f"{v / 60:.1f} min ({pytest_row['cpu_s'] / 60:.1f} CPU-min)",
                    f"<= {GOALS['pytest s'] / 60:.0f} min", verdict(v, GOALS["pytest s"]), _load(pytest_row)])
    elif pytest_row:
        out.append([what, pytest_row.get("status", "failed"), f"<= {GOALS['pytest s'] / 60:.0f} min", "NOT met",
                    _load(pytest_row)])
    else:
        out.append([what, "not measured (--pytest runs it)", f"<= {GOALS['pytest s'] / 60:.0f} min", "", ""])
    for r in rows:  # issue 18's check, kept: info stays a fraction of analyze
        tk, info = ok.get((r["events"], TRACEKIT)), ok.get((r["events"], INFO))
        if r["tool"] == TRACEKIT and tk and info:
            v = info["cpu_s"] / tk["cpu_s"]
            out.append([f"{r['events']:,} device events: info / analyze CPU", f"{v:.2f}x", f"<= {GOALS['info']}x",
                        verdict(v, GOALS["info"]), _load(tk, info)])
    return out


def goals_text(rows: list[dict], code: str = "?", pytest_row: dict | None = None) -> str | None:
    """Issue 40's goal table as measured: what, measured, goal, met / NOT met, load average."""
    body = goals_rows(rows, pytest_row)
    if not body:
        return None
    head = ["what", "measured", "goal", "verdict", "load avg (1 min)"]
    w = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    fmt = lambda cells: "  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(cells)).rstrip()  # noqa: E731
    return "\n".join([f"goals (issue 40), code {code}:", fmt(head), fmt(["-" * x for x in w])] + [fmt(b) for b in body])


def measure_pytest() -> dict:
    """The whole test suite as the README runs it and CI does (``python -m pytest -n auto``, here with ``-q -p
    no:cacheprovider``) in the repository, once: wall and CPU time (its workers included), its exit status as the
    row's status."""
    r = run_measured([sys.executable, "-m", "pytest", "-n", "auto", "-q", "-p", "no:cacheprovider"], cwd=str(ROOT))
    r["status"] = "ok" if r["returncode"] == 0 else f"failed (exit {r['returncode']})"
    return r


# ------------------------------------------------------------------------------------------------------ main
def _predicted(rows: list[dict], tool: str, events: int) -> int | None:
    prev = [r for r in rows if r["tool"] == tool and r.get("status") == "ok" and r["events"] < events]
    if not prev:
        return None
    p = max(prev, key=lambda r: r["events"])
    base = 150 * 2**20  # interpreter + imports, not proportional to the trace
    return int(base + max(p["peak_rss_bytes"] - base, 0) * events / p["events"])


def run(args) -> dict:
    sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    src = Path(args.src)
    if not src.exists():
        raise SystemExit(f"source trace not found: {src} (give --src)")
    tmp = None
    if args.out:
        folder = Path(args.out)
        folder.mkdir(parents=True, exist_ok=True)
    else:
        tmp = tempfile.mkdtemp(prefix="tracekit_bench_")
        folder = Path(tmp)
    budget = int(args.mem_budget_gb * 2**30) if args.mem_budget_gb else int(mem_available() * 0.85)
    compile_tracekit()
    mach = machine()
    print(machine_text(mach))
    print(f"memory budget per measured process: {budget / 2**30:.1f} GiB; traces in {folder}", flush=True)
    use_xprof = not args.no_xprof
    if use_xprof:
        from tracekit.run import xprof
        if not xprof.available():
            print("xprof is not installed: measuring tracekit only")
            use_xprof = False
    results = {"machine": mach, "rows": [], "stages": {}, "traces": {}, "budget_bytes": budget}
    global GUARD
    GUARD = MemGuard(budget)
    GUARD.start()
    try:
        src_ev = source_events(src)
        check_resources(src, folder, list(sizes), src_ev)
        rows = results["rows"]
        for n in sizes:
            t = build_trace(src, folder, n)
            ev = t["events"]
            results["traces"][str(n)] = t
            print(f"\ntrace: {ev:,} device events, {t['bytes'] / MB:.1f} MB"
                  + (" (reused)" if t["reused"] else f" (tiled in {t['tile_s']:.1f} s)"), flush=True)
            reps = args.repeat or (3 if ev < 5_000_000 else 1)
            tools = [(TRACEKIT, lambda: measure_tracekit(Path(t["path"]))),
                     (INFO, lambda: measure_tracekit(Path(t["path"]), "info"))]
            if n == 0:  # the small trace: also the hook's child and the import floor
                tools += [(HOOK, lambda: measure_hook_child(Path(t["path"]))), (FLOOR, measure_import_floor)]
            if use_xprof:
                tools += [(f"xprof {x}", (lambda x=x: measure_xprof(x, Path(t["path"])))) for x in XPROF_TOOLS]
            skipped = {}
            for name, _ in tools:
                pred = _predicted(rows, name, ev)
                if name.startswith("xprof") and pred is not None and pred > budget * 1.25 and not args.force:
                    skipped[name] = f"skipped (~{pred / 2**30:.0f} GiB predicted)"
            done = take_turns([(n, f) for n, f in tools if n not in skipped], reps)
            for name, _ in tools:
                if name in skipped:
                    row = {"events": ev, "tool": name, "wall_s": 0.0, "cpu_s": 0.0, "peak_rss_bytes": 0,
                           "status": skipped[name]}
                else:
                    r = done[name]
                    status = "ok" if r["returncode"] == 0 else (
                        f"killed over {budget / 2**30:.1f} GiB after {r['wall_s']:.0f} s" if r.get("killed")
                        else f"failed (exit {r['returncode']})")
                    row = {"events": ev, "tool": name, **{k: v for k, v in r.items() if k != "stderr_tail"},
                           "status": status}
                    if status.startswith("failed"):
                        row["stderr_tail"] = r.get("stderr_tail", "")[-300:]
                row["untiled"] = n == 0
                rows.append(row)
                print(f"  {name:<32} {_row_text(row)}", flush=True)
            if not args.no_stages:
                st = stage_timings(Path(t["path"]), args.profile)
                results["stages"][str(ev)] = st
                print(f"  where tracekit's time goes ({ev:,} events):")
                print(stages_text(st, ev), flush=True)
                if args.profile and st.get("profile"):
                    print(st["profile"])
        if args.pytest:
            print("\npytest, the whole suite (minutes) ...", flush=True)
            results["pytest"] = measure_pytest()
        results["machine"]["load_avg_end"] = [round(x, 2) for x in os.getloadavg()] if hasattr(
            os, "getloadavg") else None
        text = report_text(results)
        print("\n" + text)
        if args.out:
            (folder / "results.json").write_text(json.dumps(results, indent=1, default=str))
            (folder / "table.txt").write_text(machine_text(mach) + "\n\n" + text + "\n")
    finally:
        GUARD.stop()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    return results


def _row_text(row: dict) -> str:
    if row["status"] == "ok":
        return (f"{row['wall_s']:8.2f} s wall {row['cpu_s']:8.2f} s CPU {row['peak_rss_bytes'] / MB:8,.0f} MB  "
                f"(runs, CPU s: {row.get('all_cpu_s')})")
    tail = (row.get("stderr_tail") or "").strip().splitlines()
    return row["status"] + (f": {tail[-1]}" if tail else "")


def report_text(results: dict) -> str:
    rows = results["rows"]
    out = ["results (best of the runs; CPU = user + system time; RSS = peak resident memory of the measured "
           "process):", table_text(rows)]
    for tool in [TRACEKIT] + [f"xprof {x}" for x in XPROF_TOOLS]:
        line = linearity_text(rows, tool)
        if line:
            out.append(line)
    goals = goals_text(rows, results["machine"]["versions"].get("code", "?"), results.get("pytest"))
    if goals:
        out.append(goals)
    la = results["machine"].get("load_avg_end")
    out.append(f"load average at start {results['machine'].get('load_avg')}, at end {la} "
               f"(other work on the machine slows every tool alike)")
    return "\n".join(out)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"small sizes {QUICK_SIZES} and one run each")
    ap.add_argument("--out", default=None, help="keep traces, results.json and table.txt here (default: a temp dir)")
    ap.add_argument("--src", default=str(SRC), help="trace to tile")
    ap.add_argument("--sizes", type=lambda s: tuple(int(float(x)) for x in s.split(",")), default=None,
                    help="comma-separated device event counts, e.g. 1.5e6,15e6")
    ap.add_argument("--repeat", type=int, default=None, help="runs per measurement (best of N)")
    ap.add_argument("--no-xprof", action="store_true", help="measure tracekit only")
    ap.add_argument("--no-stages", action="store_true", help="skip the stage timings")
    ap.add_argument("--profile", action="store_true", help="add cProfile's top entries to the stage timings")
    ap.add_argument("--mem-budget-gb", type=float, default=None, help="max RSS of one measured process")
    ap.add_argument("--force", action="store_true", help="run measurements predicted to exceed the budget")
    ap.add_argument("--pytest", action="store_true", help="also time the whole test suite (issue 40's last goal)")
    ap.add_argument("--_tile", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--_stages", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.quick and a.repeat is None:
        a.repeat = 1
    return a


def main(argv=None):
    a = parse_args(argv)
    if a._tile:
        _tile_child(a._tile[0], a._tile[1], int(a._tile[2]))
        return
    if a._stages:
        _stages_child(a._stages, a.profile)
        return
    run(a)


if __name__ == "__main__":
    main()
