"""Pod-scale benchmark: the driver's memory and time when a local Dask cluster analyzes a tiled pod.

    python benchmarks/pod.py V6E.xplane.pb --hosts 16 --events 1500000 --workers 1 2
    python benchmarks/pod.py V6E.xplane.pb --hosts 256 --events 30000 --workers 1 2
    python benchmarks/pod.py V6E.xplane.pb --hosts 16 --events 1500000 --scheduler tcp://HOST:8786   # a cluster

The source trace's device timelines are tiled (benchmarks/tile.py) to about ``--events`` device events, and the
result is written once per host (hard links) into a run folder. For each worker count a fresh driver process
starts a LocalCluster (one thread per worker process), maps the hosts and reduces them, and prints: the driver's
peak RSS (the scheduler runs in the driver process, and is counted), wall time of the map and of the reduce, and
the driver's reduce time per host. ``--scheduler`` uses a running cluster instead (the run folder must be
readable by its workers at the same path, or give a URL)."""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build(src: Path, out: Path, hosts: int, events: int) -> Path:
    from tile import tile
    out.mkdir(parents=True, exist_ok=True)
    one = out / "host0000.xplane.pb"
    if not one.exists():
        one.write_bytes(tile(src.read_bytes(), events))
    for i in range(1, hosts):
        p = out / f"host{i:04d}.xplane.pb"
        if not p.exists():
            os.link(one, p)
    return out


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM (Linux; ``ru_maxrss`` would also hold the peak of the process
    that started this one before its exec: the parent that tiled the trace), else ``ru_maxrss``."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def drive(folder: str, workers: int, scheduler: str | None) -> dict:
    """(in a fresh process) map on the cluster, reduce here (the engine's own two steps, as
    :func:`tracekit.pipeline.analyze` runs them with the pod's mapper); the driver's numbers."""
    from dask.distributed import Client, LocalCluster

    from tracekit.analysis import hostrules
    from tracekit.ingest import paths
    from tracekit.options import Options
    from tracekit.report.engine import reduce
    from tracekit.run import pod
    cluster = None if scheduler else LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                  dashboard_address=None, host="127.0.0.1")
    client = Client(scheduler or cluster)
    files = paths.resolve(folder)
    opt = Options(dask=client)
    rules = hostrules.rule_items(opt, fresh=True)
    t0 = time.perf_counter()
    summaries, failures = pod.map_hosts(files, opt, tuple(f.host for f in files))
    t1 = time.perf_counter()
    rss_map = peak_rss_mb()
    rep = reduce.report(summaries, failures, rules, opt, files=len(files))
    t2 = time.perf_counter()
    client.close()
    if cluster is not None:
        cluster.close()
    return {"workers": workers, "hosts": len(files), "failed": len(failures),
            "events_per_host": rep.data["summary"]["op_executions"] // max(len(summaries), 1),
            "driver_peak_rss_mb": peak_rss_mb(),
            "driver_rss_after_map_mb": rss_map,
            "map_wall_s": t1 - t0, "reduce_s": t2 - t1, "reduce_ms_per_host": 1e3 * (t2 - t1) / len(files),
            "worker_s_per_host": sum(s.seconds for s in summaries) / max(len(summaries), 1),
            "findings": len(rep.findings)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--events", type=int, default=1_500_000, help="device events per host (approximate)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default="/tmp/tracekit-pod-bench")
    ap.add_argument("--scheduler", default=None, help="a running Dask scheduler's address instead of a LocalCluster")
    ap.add_argument("--_drive", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a._drive:
        print(json.dumps(drive(a._drive[0], int(a._drive[1]), a.scheduler)))
        return
    folder = build(Path(a.src), Path(a.out) / f"h{a.hosts}_e{a.events}", a.hosts, a.events)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout.strip() or "?"
    print(f"code revision {rev}; load average {os.getloadavg()[0]:.2f} (1 min) at the start", flush=True)
    for w in a.workers:
        cmd = [sys.executable, __file__, a.src, "--_drive", str(folder), str(w)] + \
            (["--scheduler", a.scheduler] if a.scheduler else [])
        res = subprocess.run(cmd, capture_output=True, text=True)
        line = res.stdout.strip().splitlines()[-1] if res.stdout.strip() else ""
        if res.returncode or not line.startswith("{"):
            print(res.stderr[-2000:], file=sys.stderr)
            sys.exit(1)
        r = json.loads(line)
        print(f"{r['hosts']} hosts x ~{r['events_per_host']:,} op executions, {w} worker(s): driver peak RSS "
              f"{r['driver_peak_rss_mb']:.0f} MB ({r['driver_rss_after_map_mb']:.0f} MB after the map), map "
              f"{r['map_wall_s']:.1f} s, reduce {r['reduce_s']:.2f} s "
              f"({r['reduce_ms_per_host']:.1f} ms/host), worker {r['worker_s_per_host']:.1f} s/host, "
              f"{r['failed']} failed, {r['findings']} findings; load average {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
