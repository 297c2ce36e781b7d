"""Structure-aware mutations of trace-viewer JSON for the reader's fuzz tests (tests/test_jsonfuzz.py) and a
manual mutation run of the command line (``python tests/jsonfuzz.py --count 2000``; figures in
docs/reliability.md).

Seeds: the XSpace of a committed CPU fixture written as trace-viewer JSON (what jax.profiler writes beside it:
``process_name`` / ``thread_name`` metadata events, complete events with the stats as args), and a small device
trace in xprof's dialect (``XLA Modules`` / ``XLA Ops`` lines, ``long_name`` HLO text, cost args).

Mutators, one to three a file: a field of an event (``ph``, ``pid``, ``tid``, ``ts``, ``dur``, ``name``, ``args``,
an arg, a metadata event's ``args``) given a value of another JSON type; a value replaced by lists or maps nested
10..10**6 deep; numbers of 10..10**6 digits, overflowing exponents, ``NaN``; strings of 10**2..10**6 characters;
lone surrogate escapes and invalid UTF-8; the top level or ``traceEvents`` of another type; events deleted or
repeated; then, for some files, gzip and damage to the deflate stream (bit flips, truncation, inserted bytes at any
offset). Plain Python, no pytest: the manual run forks a child per file from one process.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "fixtures" / "cpu" / "{}" / "plugins" / "profile" / "run1" / "cpu.xplane.pb"
SEED_CASES = ("matvec_b1", "allreduce_exposed")
FIELDS = ("ph", "pid", "tid", "ts", "dur", "name", "args")
NUMERIC_ARGS = ("bytes_accessed", "model_flops", "flops", "device_duration_ps", "program_id", "run_id",
                "device_ordinal")
TEXT_ARGS = ("long_name", "hlo_category", "tf_op", "source", "hlo_op", "hlo_module")
POWERS = (2, 3, 4, 5, 6)  # 10**k: depths, digit counts, string lengths


# ---- seeds ----------------------------------------------------------------------------------------------------

def from_xspace(data: bytes) -> dict:
    """A trace-viewer document of an XSpace: one pid a plane, one tid a line, each event with its stats as args
    (read through the protobuf schema, not through tracekit)."""
    from tracekit.proto import xplane_pb2
    space = xplane_pb2.XSpace.FromString(data)
    evs = []
    for pid, p in enumerate(space.planes, start=1):
        if p.name == "/host:metadata":
            continue
        evs.append({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": p.name}})
        sm = {k: v.name for k, v in p.stat_metadata.items()}
        for tid, ln in enumerate(p.lines, start=1):
            evs.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": ln.name}})
            for e in ln.events:
                args = {}
                for s in list(p.event_metadata[e.metadata_id].stats) + list(e.stats):
                    kind = s.WhichOneof("value")
                    if kind is None or kind == "bytes_value":
                        continue
                    v = getattr(s, kind)
                    if kind == "ref_value":
                        v = sm.get(v, str(v))
                    elif kind == "uint64_value" and v >= 1 << 63:
                        v = str(v)  # as exporters write it: past a JSON parser's 64-bit integers
                    args[sm.get(s.metadata_id, str(s.metadata_id))] = v
                ts = (ln.timestamp_ns * 1000 + e.offset_ps) / 1e6
                evs.append({"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": e.duration_ps / 1e6,
                            "name": p.event_metadata[e.metadata_id].name, "args": args})
    return {"displayTimeUnit": "ns", "traceEvents": evs}


def device_seed() -> dict:
    """A small TPU trace in xprof's one-document dialect: modules, ops with HLO text and costs, steps."""
    evs = [{"ph": "M", "name": "process_name", "pid": 3, "args": {"name": "/device:TPU:0"}},
           {"ph": "M", "name": "thread_name", "pid": 3, "tid": 1, "args": {"name": "Steps"}},
           {"ph": "M", "name": "thread_name", "pid": 3, "tid": 2, "args": {"name": "XLA Modules"}},
           {"ph": "M", "name": "thread_name", "pid": 3, "tid": 3, "args": {"name": "XLA Ops"}},
           {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "/host:CPU"}},
           {"ph": "M", "name": "thread_name", "pid": 9, "tid": 1, "args": {"name": "python"}}]
    t = 100.0
    for step in range(3):
        evs.append({"ph": "X", "pid": 3, "tid": 1, "ts": t, "dur": 30.0, "name": str(step),
                    "args": {"step_num": str(step), "group_id": step}})
        evs.append({"ph": "X", "pid": 3, "tid": 2, "ts": t, "dur": 30.0, "name": "jit_f(7)",
                    "args": {"run_id": str(step + 1)}})
        evs.append({"ph": "X", "pid": 9, "tid": 1, "ts": t - 5, "dur": 4.0, "name": "PjitFunction(f)", "args": {}})
        for k, (op, text, cat) in enumerate([
                ("fusion.1", "%fusion.1 = f32[128,128]{1,0} fusion(f32[128,128]{1,0} %p0, f32[128,128]{1,0} %p1), "
                             "kind=kOutput, calls=%fused_computation", "convolution"),
                ("add.2", "%add.2 = f32[128,128]{1,0} add(f32[128,128]{1,0} %fusion.1, f32[128,128]{1,0} %p1)",
                 "non-fusion elementwise"),
                ("all-reduce.3", "%all-reduce.3 = f32[128,128]{1,0} all-reduce(f32[128,128]{1,0} %add.2), "
                                 "replica_groups={{0,1,2,3}}, to_apply=%sum", "all-reduce")]):
            evs.append({"ph": "X", "pid": 3, "tid": 3, "ts": t + 1 + 9 * k, "dur": 8.0, "name": op, "args": {
                "long_name": text, "hlo_category": cat, "tf_op": "jit(f)/dot_general", "source": "f.py:3",
                "model_flops": str(2 * 128 ** 3 if k == 0 else 128 * 128), "bytes_accessed": str(3 * 4 * 128 * 128),
                "device_duration_ps": str(8_000_000), "raw_bytes_accessed": "196608"}})
        t += 40
    evs.append({"ph": "i", "pid": 9, "tid": 1, "ts": 1.0, "name": "marker", "s": "t"})
    return {"traceEvents": evs}


def seeds() -> list[dict]:
    out = [device_seed()]
    for case in SEED_CASES:
        p = Path(str(FIXTURE).format(case))
        if p.exists():
            out.append(from_xspace(p.read_bytes()))
    return out


# ---- mutation -------------------------------------------------------------------------------------------------

class Doc:
    """A document being mutated: the object, and raw JSON texts that replace placeholder strings when it is
    written (nesting and numbers json.dumps cannot write)."""

    def __init__(self, obj, powers=POWERS):
        self.obj, self.raw, self.powers = obj, {}, powers

    def placeholder(self, text: str | bytes) -> str:
        key = f"@@RAW{len(self.raw)}@@"
        self.raw[key] = text
        return key

    def dumps(self) -> bytes:
        s = json.dumps(self.obj, separators=(",", ":")).encode()  # ASCII: every other character escaped
        for key, text in self.raw.items():
            s = s.replace(json.dumps(key).encode(), text if isinstance(text, bytes) else text.encode(), 1)
        return s


def nested(rng: random.Random, powers=POWERS) -> str:
    d = 10 ** rng.choice(powers)
    if rng.random() < 0.5:
        return "[" * d + "]" * d
    if rng.random() < 0.5:
        return '{"a":' * d + "1" + "}" * d
    return "[1," * d + "2" + "]" * d


def wrong_value(rng: random.Random, doc: Doc):
    """A value of some JSON type, nasty ones included."""
    k = rng.randrange(16)
    if k == 0:
        return rng.choice([[], [1, 2], [[{}]], ["X"]])
    if k == 1:
        return rng.choice([{}, {"a": 1}, {"name": [1]}, {"args": {"x": {}}}])
    if k == 2:
        return rng.choice(["", "X", "M", "abc", "12", "-3", "1e999", "NaN", "inf", "0x10", "1_000", " 5 "])
    if k == 3:
        return rng.choice([0, -1, 1.5, 2 ** 63 - 1, -(2 ** 63), 1e300, -1e300, 5e-324])
    if k == 4:
        return rng.choice([True, False])
    if k == 5:
        return None
    if k == 6:
        return doc.placeholder(nested(rng, doc.powers))
    if k == 7:  # a number too long or too large for any parser
        n = 10 ** rng.choice(doc.powers)
        return doc.placeholder(rng.choice(["9" * n, "-" + "9" * n, "1." + "0" * n + "1", "1e" + "9" * min(n, 30),
                                           "1e999", "-1e400", "NaN", "Infinity", "0." + "0" * n]))
    if k == 8:  # the same, written as a string
        n = 10 ** rng.choice(doc.powers)
        return rng.choice(["9" * n, "1e" + "9" * min(n, 30), "1." + "0" * n, "-0" * n])
    if k == 9:
        n = 10 ** rng.choice(doc.powers)
        return rng.choice(["a", "é", "%", "\x00", "😀"]) * n
    if k == 10:  # lone surrogates and escapes
        return doc.placeholder(rng.choice(['"\\ud800"', '"a\\udfff"', '"\\ud800\\ud800"', '"\\u0000"',
                                           '"\\udbff\\udfff"', '"x\\ud83d"']))
    if k == 11:  # invalid UTF-8 inside a string
        return doc.placeholder(b'"' + rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]) + b'"')
    if k == 12:
        return [rng.random() for _ in range(10 ** rng.choice((2, 3, 4)))]
    if k == 13:
        return {f"k{i}": i for i in range(10 ** rng.choice((2, 3, 4)))}
    if k == 14:
        return rng.choice([-1, 0, 2 ** 62, 1e18, -1e18, 1e-9])
    return rng.choice(["/device:TPU:0", "/host:CPU", "XLA Ops", "XLA Modules", "jit_f(7)", "jit_f(-1)", "Steps"])


def mutate(doc: Doc, rng: random.Random) -> None:
    """One mutation of ``doc`` in place (see the module docstring)."""
    obj = doc.obj
    evs = obj.get("traceEvents") if isinstance(obj, dict) else None
    what = rng.randrange(12)
    if not isinstance(evs, list) or not evs or what == 11:
        choice = rng.randrange(4)
        if choice == 0:
            doc.obj = wrong_value(rng, doc)
        elif choice == 1 and isinstance(obj, dict):
            obj["traceEvents"] = wrong_value(rng, doc)
        elif choice == 2 and isinstance(evs, list):
            doc.obj = evs  # the bare list form
        elif isinstance(obj, dict):
            obj[rng.choice(["metadata", "displayTimeUnit", "x"])] = wrong_value(rng, doc)
        return
    i = rng.randrange(len(evs))
    ev = evs[i]
    if what <= 3 and isinstance(ev, dict):  # a field of the schema, another type
        ev[rng.choice(FIELDS)] = wrong_value(rng, doc)
    elif what <= 6 and isinstance(ev, dict):  # an arg
        args = ev.get("args")
        if not isinstance(args, dict):
            args = ev["args"] = {}
        if ev.get("ph") == "M":
            args["name"] = wrong_value(rng, doc)
        else:
            args[rng.choice(NUMERIC_ARGS + TEXT_ARGS + ("x",))] = wrong_value(rng, doc)
    elif what == 7:  # the same field wrong in many events
        f = rng.choice(FIELDS + ("args.bytes_accessed", "args.long_name"))
        v = wrong_value(rng, doc) if rng.random() < 0.3 else rng.choice([[1], {}, "x", True, None, 1e300])
        for e in evs[:: rng.choice([1, 2, 7])]:
            if isinstance(e, dict):
                if f.startswith("args."):
                    if isinstance(e.get("args"), dict):
                        e["args"][f[5:]] = v
                else:
                    e[f] = v
    elif what == 8:
        evs[i] = wrong_value(rng, doc)
    elif what == 9:
        del evs[i:i + rng.randrange(1, 20)]
    else:
        evs[i:i] = [json.loads(json.dumps(ev))] * rng.randrange(1, 50)


def damage(data: bytes, rng: random.Random) -> bytes:
    """``data`` gzipped, the deflate stream damaged at a random offset (or the whole file cut short)."""
    gz = bytearray(gzip.compress(data, 6))
    what = rng.randrange(5)
    at = rng.randrange(len(gz))
    if what == 0:
        for _ in range(rng.randrange(1, 4)):
            gz[rng.randrange(len(gz))] ^= 1 << rng.randrange(8)
    elif what == 1:
        del gz[at:]
    elif what == 2:
        gz[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
    elif what == 3:
        del gz[at:at + rng.randrange(1, 8)]
    else:
        gz += rng.choice([b"\x00", b"junk", b"\x1f\x8b\x08\x00", gzip.compress(b"]")])
    return bytes(gz)


def mutated(seed: dict, rng: random.Random, powers=POWERS) -> tuple[bytes, str]:
    """(file bytes, file name) of one mutated document (sizes 10**k, k in ``powers``)."""
    doc = Doc(json.loads(json.dumps(seed)), powers)
    for _ in range(rng.choice([1, 1, 2, 3])):
        mutate(doc, rng)
    data = doc.dumps()
    r = rng.random()
    if r < 0.2:
        return damage(data, rng), "fuzz.trace.json.gz"
    if r < 0.35:
        return gzip.compress(data, 1), "fuzz.trace.json.gz"
    if r < 0.42:  # cut short, or a few bytes flipped, in the text
        b = bytearray(data)
        if rng.random() < 0.5:
            del b[rng.randrange(len(b)):]
        else:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        return bytes(b), "fuzz.trace.json"
    return data, "fuzz.trace.json"


def decoded_size(data: bytes) -> int:
    """How many bytes the file decompresses to (as far as it does)."""
    if data[:2] != b"\x1f\x8b":
        return len(data)
    import zlib
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    total, rest = 0, data
    try:  # counted 1 MiB at a time: the decoded file is never held (up to 2 GiB would stay in this parent's heap)
        while total < 1 << 31:
            out = d.decompress(rest, 1 << 20)
            total += len(out)
            if d.eof or (not out and d.unconsumed_tail == rest):  # the end, or no progress (damaged or cut short)
                break
            rest = d.unconsumed_tail
    except zlib.error:
        return len(data)
    return total


# ---- the manual run: the command line, one forked child a file ------------------------------------------------

DOCUMENTED = {0, 1, 2}


def run_one(path: Path, out: Path, timeout: float, mem_cap: int) -> tuple[int | None, float, int, str]:
    """(exit code or None on a hang, seconds, peak RSS bytes, stderr) of ``tracekit analyze PATH --format json``
    run in a forked child (the modules already imported) under ``RLIMIT_AS`` = ``mem_cap``."""
    from tracekit.cli import main
    err = out.with_suffix(".err")
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 70
        try:
            resource.setrlimit(resource.RLIMIT_AS, (mem_cap, mem_cap))
            fo, fe = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), os.open(err, os.O_WRONLY | os.O_CREAT |
                                                                                 os.O_TRUNC)
            os.dup2(fo, 1)
            os.dup2(fe, 2)
            main(["analyze", str(path), "--format", "json"], prog_name="tracekit")
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 70
        except BaseException:  # noqa: BLE001 - reported as exit 70, outside the documented codes
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    while True:
        wpid, status, usage = os.wait4(pid, os.WNOHANG)
        if wpid:
            break
        if time.monotonic() - t0 > timeout:
            os.kill(pid, 9)
            _, status, usage = os.wait4(pid, 0)
            return None, time.monotonic() - t0, usage.ru_maxrss * 1024, err.read_text(errors="replace")
        time.sleep(0.005)
    code = os.waitstatus_to_exitcode(status)
    return code, time.monotonic() - t0, usage.ru_maxrss * 1024, err.read_text(errors="replace")


def _trim() -> None:
    """Hand this process's free heap back to the system (glibc's ``malloc_trim``; the warm-up's command tuned the
    allocator to keep it): a forked child's peak RSS counts every page it starts with."""
    try:
        import ctypes
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def warm_up() -> None:
    """Run the children's command once in this process, on :func:`device_seed` (a valid trace; the report goes to
    a file, this process's stdout is the JSON-lines channel), so that what the analysis imports or builds lazily
    on first use (report sections, the roofline, the JSON renderer) is in memory before the forks: each child then
    pays for its own file's analysis only, not for ~40 imports (issue 40: the test suite's time). Every child still
    runs the whole command on its file."""
    from tracekit.cli import main
    folder = Path(tempfile.mkdtemp(prefix="jsonfuzz-warm-"))
    try:
        src = folder / "seed.trace.json"
        src.write_bytes(Doc(device_seed()).dumps())
        try:
            main(["analyze", str(src), "-o", str(folder / "seed.json")], prog_name="tracekit")
        except SystemExit as e:
            if e.code not in (0, None):
                raise RuntimeError(f"the warm-up analysis of the seed trace exited {e.code}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def manual_run(count: int, seed: int, timeout: float, keep: Path | None, verbose: bool = False) -> int:
    warm_up()  # before the forks: each child starts warm
    rng = random.Random(seed)
    bases = seeds()
    folder = Path(tempfile.mkdtemp(prefix="jsonfuzz-"))
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    base_vm = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    codes: dict = {}
    peak = 0
    slow: list = []  # files over a quarter of the time limit
    reasons: dict = {}  # first stderr line, numbers and path masked -> count
    bad, hangs, over_mem, worst_t, worst_ratio, multi = [], 0, 0, 0.0, 0.0, 0
    t_all = time.monotonic()
    decoded_total = 0
    for k in range(count):
        data, name = mutated(rng.choice(bases), rng)
        path = folder / f"{k}-{name}"
        path.write_bytes(data)
        dec = decoded_size(data)
        decoded_total += dec
        bound = 4 * dec + (200 << 20)
        _trim()  # the next child starts with this process's pages: free memory of earlier files is handed back
        code, secs, rss, err = run_one(path, folder / f"{k}.out", timeout, base_vm + 4 * dec + (2 << 30))
        codes[code] = codes.get(code, 0) + 1
        lines = [x for x in err.splitlines() if x.strip()]
        worst_t = max(worst_t, secs)
        ok = code in DOCUMENTED and len(lines) <= (1 if code else 0) and "Traceback" not in err and \
            "out of memory" not in err
        if code is None:
            hangs += 1
        if rss > bound:
            over_mem += 1
            ok = False
        worst_ratio = max(worst_ratio, rss / bound)
        peak = max(peak, rss)
        multi += len(lines) > 1
        if lines:
            why = re.sub(r"[0-9][0-9,.]*", "N", lines[0].replace(str(path), "PATH"))[:90]
            reasons[why] = reasons.get(why, 0) + 1
        if secs > timeout / 4:
            slow.append((k, code, round(secs, 1), dec, len(data), name))
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"slow-{path.name}").write_bytes(data)
        if not ok:
            bad.append((k, code, secs, rss, dec, err.strip()[:300]))
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / path.name).write_bytes(data)
        path.unlink()
        for f in (folder / f"{k}.out", folder / f"{k}.err"):
            f.unlink(missing_ok=True)
    wall = time.monotonic() - t_all
    shutil.rmtree(folder, ignore_errors=True)
    print(f"files: {count} (seed {seed}), decoded {decoded_total / 2**20:.1f} MiB in all; wall {wall:.0f} s")
    print(f"exit codes: {dict(sorted(codes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))}")
    print(f"outside the documented codes: {sum(v for c, v in codes.items() if c not in DOCUMENTED)}; hangs over "
          f"{timeout:.0f} s: {hangs}; slowest file {worst_t:.1f} s")
    print(f"over the RSS bound (4x decoded + 200 MB): {over_mem}; largest peak RSS {peak / 2**20:.0f} MiB, "
          f"largest share of its bound {worst_ratio:.2f}; parent RSS before the forks {base_rss / 2**20:.0f} MiB "
          f"(in every child's peak); more than one stderr line: {multi}")
    if verbose:
        for why, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
            print(f"  {n:5d}  {why}")
    for x in slow:
        print("  slow:", x)
    for b in bad[:20]:
        print("  bad:", b)
    return 1 if bad else 0


def run_files(files: list[Path], timeout: float) -> int:
    """Each file through ``run_one`` (the cap and bound of the manual run); one JSON line a file on stdout:
    path, exit code (null on a hang), seconds, peak RSS, decoded size, RSS bound, stderr."""
    warm_up()  # before the forks
    base_vm = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    folder = Path(tempfile.mkdtemp(prefix="jsonfuzz-"))
    for k, f in enumerate(files):
        dec = decoded_size(f.read_bytes())
        code, secs, rss, err = run_one(f, folder / f"{k}.out", timeout, base_vm + 4 * dec + (2 << 30))
        try:
            warnings = json.loads((folder / f"{k}.out").read_text())["warnings"]
        except (OSError, ValueError, KeyError, TypeError):
            warnings = None
        print(json.dumps({"path": str(f), "code": code, "secs": secs, "rss": rss, "decoded": dec,
                          "bound": 4 * dec + (200 << 20), "stderr": err, "warnings": warnings}), flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds a file may take (a hang past it)")
    ap.add_argument("--keep", type=Path, default=None, help="folder to keep the files that failed in")
    ap.add_argument("--files", type=Path, nargs="+", help="run these files instead, one JSON line each")
    ap.add_argument("-v", "--verbose", action="store_true", help="list the stderr lines seen, how often")
    a = ap.parse_args(argv)
    if a.files:
        return run_files(a.files, a.timeout)
    return manual_run(a.count, a.seed, a.timeout, a.keep, a.verbose)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
