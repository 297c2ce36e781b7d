"""The XSpace mutation run: mutated ``.xplane.pb`` files, each analyzed by the real command (``tracekit analyze
FILE -o report.json``) in its own process, with three criteria (docs/reliability.md, "XSpace mutation run"):

- every exit code is a documented one: 0 (analyzed), 1 (a finding reached --fail-on; not asked for here), 2 (bad
  input: then stderr is exactly one line); never 3 (internal error), a signal or anything else;
- no case runs over 30 s (a hang: the process is killed);
- peak RSS at most 4x the decoded size + 200 MB.

Mutations (tests/wirefuzz.py, ``XSPACE_MUTATORS``): bit flips (half of them inside the ``Hlo Proto`` payloads),
truncation, a wrong length prefix (enclosing lengths fixed or not), damage nested in the HLO payloads (a field
mutated with every enclosing length kept consistent, a shape nested 50..100,000 tuples deep, 10^3..10^5 more
operands or dimensions) and mutate_tree's structural ones; one to three per file. Seeds: the committed CPU
fixtures and a synthetic TPU trace whose ops carry their HLO text.

Each case is a child forked from a parent that has imported tracekit (so a case costs its analysis, not Python's
start); its peak RSS (``ru_maxrss`` from ``wait4``) counts the parent's pages it shares from the fork on (about
130 MB), inside the 200 MB allowance. Run: ``python tests/xspace_mutation.py --files 2000`` (prints the figures
as JSON); tests/test_fuzz.py runs a few hundred.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import wirefuzz  # noqa: E402

SEED_CASES = ("big_matmul", "matvec_b1", "sleepy_steps", "train_step", "conv_strided", "fft")
HANG_S = 30
DOCUMENTED = (0, 1, 2)
RSS_FLOOR = 200 << 20


def seeds(root: Path) -> list[bytes]:
    out = []
    for case in SEED_CASES:
        p = root / "fixtures" / "cpu" / case / "plugins/profile/run1/cpu.xplane.pb"
        if p.exists():
            out.append(p.read_bytes())
    out.append(_tpu_seed())
    return out


def _tpu_seed() -> bytes:
    """A TPU trace with ops in one module whose HLO proto has a tuple, operands, layouts and a fusion body."""
    from tracekit.ingest import synth
    from tracekit.ingest.synth import instr, shape
    from tracekit.proto import hlo_pb2
    tup = hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.TUPLE, tuple_shapes=[shape("f32", [8]), shape(
        "bf16", [4, 2])])
    body = hlo_pb2.HloComputationProto(name="fc", id=5, is_fusion_computation=True, root_id=51, instructions=[
        instr("q", "parameter", shape("f32", [8]), id=50), instr("e", "exponential", shape("f32", [8]), [50], id=51)])
    mod = synth.module("jit_f", 7, [instr("p", "parameter", shape("f32", [8]), id=1),
                                    instr("fusion.1", "fusion", shape("f32", [8]), [1], id=2,
                                          called_computation_ids=[5]),
                                    instr("dot.2", "dot", shape("f32", [8, 8]), [1, 1], id=3),
                                    instr("tuple.3", "tuple", tup, [2, 3], id=4)], [body])
    b = synth.SpaceBuilder(hostname="h")
    tpu = b.plane("/device:TPU:0", {"device_type_string": "TPU v6 Lite", "peak_teraflops_per_second": 918.0})
    tpu.line("XLA Modules", timestamp_ns=0).event("jit_f(7)", 0, 100_000, md_stats={"program_id": 7})
    ln = tpu.line("XLA Ops", timestamp_ns=0)
    for i, op in enumerate(["fusion.1", "dot.2", "tuple.3"]):
        ln.event(f"%{op} = f32[8]{{0}} fusion(f32[8]{{0}} %p), kind=kLoop", 1000 + 20_000 * i, 5000, display=op,
                 md_stats={"program_id": 7})
    b.hlo_module(mod, label="jit_f(7)")
    return b.serialize()


def files(n: int, seed: int, root: Path):
    """(name, mutator, bytes) of ``n`` mutated files, the mutators taken in turn."""
    rng = random.Random(seed)
    items = [(d, wirefuzz.index(d, children=wirefuzz.DEEP)) for d in seeds(root)]
    for k in range(n):
        data, nodes = rng.choice(items)
        how = wirefuzz.XSPACE_MUTATORS[k % len(wirefuzz.XSPACE_MUTATORS)]
        for m in range(rng.choice([1, 1, 1, 2, 3])):
            try:
                data = wirefuzz.mutate_xspace(data, rng, nodes if m == 0 else
                                              wirefuzz.index(data, children=wirefuzz.DEEP), how)
            except (ValueError, IndexError, RecursionError):  # no longer indexes: its bytes, then
                data = wirefuzz.mutate_bytes(data, rng)
        yield f"m{k:05d}-{how}.xplane.pb", how, data


def _child(path: str, out: str, err: str) -> None:
    """In the forked child: the command's own entry point, stdout and stderr to files; never returns."""
    code = 4
    try:
        fo, fe = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), \
            os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fo, 1)
        os.dup2(fe, 2)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        sys.argv = ["tracekit", "analyze", path, "--format", "json", "-o", path + ".report.json"]
        from tracekit.cli.app import entry
        try:
            entry()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 5)
    except BaseException:  # noqa: BLE001 - reported as exit code 4: not a documented one
        code = 4
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _start(path: str, work: Path) -> dict:
    out, err = str(work / (Path(path).name + ".stdout")), str(work / (Path(path).name + ".stderr"))
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(path, out, err)
    return {"pid": pid, "t0": t0, "err": err, "out": out}


def _poll(job: dict, block: bool = False) -> dict | None:
    """The case's result once its child has ended (killed past HANG_S); None while it runs."""
    got, status, usage = os.wait4(job["pid"], 0 if block else os.WNOHANG)
    hang = False
    if not got:
        if time.monotonic() - job["t0"] <= HANG_S:
            return None
        os.kill(job["pid"], signal.SIGKILL)
        got, status, usage = os.wait4(job["pid"], 0)
        hang = True
    secs = time.monotonic() - job["t0"]
    lines = Path(job["err"]).read_text(errors="replace").splitlines()
    for f in (job["err"], job["out"]):
        Path(f).unlink(missing_ok=True)
    return {"code": os.waitstatus_to_exitcode(status), "seconds": round(secs, 3), "rss": usage.ru_maxrss * 1024,
            "hang": hang, "stderr_lines": len(lines), "stderr": lines[-1][:300] if lines else ""}


def run_one(path: str, work: Path) -> dict:
    job = _start(path, work)
    while True:
        r = _poll(job)
        if r is not None:
            return r
        time.sleep(0.005)


def _results(n: int, seed: int, root: Path, work: Path, parallel: int):
    """(name, mutator, data, result) of each case, up to ``parallel`` children at a time."""
    running: list = []
    gen = files(n, seed, root)
    done = False
    while running or not done:
        while not done and len(running) < parallel:
            item = next(gen, None)
            if item is None:
                done = True
                break
            path = work / item[0]
            path.write_bytes(item[2])
            running.append((item, _start(str(path), work)))
        still = []
        for item, job in running:
            r = _poll(job)
            if r is None:
                still.append((item, job))
            else:
                yield (*item, r)
        running = still
        time.sleep(0.005)


def run(n: int, seed: int, root: Path, log=None, parallel: int = 1) -> dict:
    """The run over ``n`` files; returns the figures and the failures (each file's name, mutator, what broke)."""
    # fork from a parent that has imported what the command imports
    import tracekit.cli.app  # noqa: F401
    from tracekit import pipeline  # noqa: F401
    codes: dict = {}
    by_mutator: dict = {}
    failures, worst_s, worst_rss_ratio, total_bytes = [], 0.0, 0.0, 0
    t_all = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="xspace-mutation-") as d:
        work = Path(d)
        for name, how, data, r in _results(n, seed, root, work, parallel):
            path = work / name
            total_bytes += len(data)
            codes[r["code"]] = codes.get(r["code"], 0) + 1
            by_mutator.setdefault(how, {}).setdefault(r["code"], 0)
            by_mutator[how][r["code"]] += 1
            worst_s = max(worst_s, r["seconds"])
            bound = 4 * len(data) + RSS_FLOOR
            worst_rss_ratio = max(worst_rss_ratio, r["rss"] / bound)
            broke = []
            if r["code"] not in DOCUMENTED:
                broke.append(f"exit {r['code']}")
            if r["code"] == 2 and r["stderr_lines"] != 1:
                broke.append(f"{r['stderr_lines']} stderr lines")
            if r["hang"]:
                broke.append(f"ran over {HANG_S} s")
            if r["rss"] > bound:
                broke.append(f"peak RSS {r['rss'] >> 20} MB over {bound >> 20} MB")
            if broke:
                keep = work.parent / ("xspace-mutation-failure-" + name)
                keep.write_bytes(data)
                failures.append({"file": str(keep), "mutator": how, "broke": broke, "stderr": r["stderr"]})
            path.unlink()
            Path(str(path) + ".report.json").unlink(missing_ok=True)
            if log is not None:
                print(json.dumps({"name": name, **r}), file=log, flush=True)
    return {"files": n, "seed": seed, "bytes": total_bytes, "exit_codes": {str(k): v for k, v in sorted(codes.items())},
            "by_mutator": {k: {str(c): v for c, v in sorted(m.items())} for k, m in sorted(by_mutator.items())},
            "max_seconds": round(worst_s, 2), "max_rss_over_bound": round(worst_rss_ratio, 3),
            "parallel": parallel, "wall_seconds": round(time.monotonic() - t_all, 1), "failures": failures}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--log", help="one JSON line per file here")
    ap.add_argument("--parallel", type=int, default=1, help="cases run at a time (each in its own child)")
    a = ap.parse_args()
    log = open(a.log, "w") if a.log else None
    figures = run(a.files, a.seed, HERE.parent, log, a.parallel)
    print(json.dumps(figures, indent=1))
    return 1 if figures["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
