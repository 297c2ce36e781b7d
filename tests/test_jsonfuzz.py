"""Trace-viewer JSON that is bad in each way a class of input can be: nesting 10**2..10**6 deep, strings and numbers
10**2..10**6 long, every event field of the schema with every JSON type, gzip damaged at several offsets, and a
few hundred structure-aware mutations (tests/jsonfuzz.py, whose manual run does 2,000: docs/reliability.md).

Each class runs through the command line (``tracekit analyze FILE --format json``) in a forked child of one
helper process, under ``RLIMIT_AS`` (what ``ulimit -v`` sets: the helper's address space + 4x the decoded size +
2 GiB), and must give exit 0 (the report's warnings say what was ignored; nothing on stderr) or 2 (one line on
stderr), within TIME_S seconds and a peak RSS of 4x the decoded size + 200 MB. The streaming checks are also held
to an independent oracle: a plain character-by-character scanner of the same documents.
"""
from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import tracekit
from conftest import ROOT
from tracekit import pipeline
from tracekit.errors import TraceError
from tracekit.ingest import jsonstream

sys.path.insert(0, str(Path(__file__).parent))
import jsonfuzz  # noqa: E402

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

TIME_S = 20  # a file's bound (the slowest here takes about 3 s on a busy 2-core machine)
POWERS = (2, 3, 4, 5, 6)
TYPES = {"list": [1, [2]], "map": {"a": {"b": 1}}, "string": "abc", "number": 12.5, "bool": True, "null": None}
DOCUMENTED = (0, 2)


def run_files(paths: list[Path]) -> dict[str, dict]:
    """jsonfuzz's per-file result (code, secs, rss, bound, stderr, warnings) of each file, by path."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(ROOT / "tests" / "jsonfuzz.py"), "--timeout", str(TIME_S * 2),
                        "--files", *map(str, paths)], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=60 + len(paths) * TIME_S * 2)
    assert p.returncode == 0, p.stderr[-3000:]
    out = {}
    for line in p.stdout.splitlines():
        r = json.loads(line)
        out[r["path"]] = r
    assert len(out) == len(paths)
    return out


def check(r: dict, codes=DOCUMENTED) -> dict:
    """One line and a documented exit code, in time and memory."""
    where = f"{Path(r['path']).name}: {r['stderr'][:300]!r}"
    assert r["code"] in codes, where
    lines = [x for x in r["stderr"].splitlines() if x.strip()]
    assert len(lines) == (1 if r["code"] else 0), where
    assert "Traceback" not in r["stderr"] and "out of memory" not in r["stderr"], where
    if r["code"] == 2:
        assert lines[0].startswith("tracekit: error: ") and r["path"] in lines[0], where
    assert r["secs"] < TIME_S, (where, r["secs"])
    assert r["rss"] <= r["bound"], (where, r["rss"] / 2**20)
    return r


def ignored(r: dict) -> str:
    """The one warning that says what the reader ignored (there must be one)."""
    hits = [w for w in r["warnings"] or [] if "were ignored" in w]
    assert len(hits) == 1, (Path(r["path"]).name, r["warnings"])
    return hits[0]


def base() -> dict:
    return jsonfuzz.device_seed()


def op_events(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("tid") == 3]


def write(folder: Path, name: str, doc, raw: dict | None = None, gz: bool = False) -> Path:
    """``doc`` as JSON, each placeholder string in ``raw`` replaced by its raw JSON text."""
    d = jsonfuzz.Doc(doc)
    d.raw.update(raw or {})
    data = d.dumps()
    assert all(k.encode() not in data for k in d.raw), "a placeholder left in the file"
    p = folder / (name + (".trace.json.gz" if gz else ".trace.json"))
    p.write_bytes(gzip.compress(data, 1) if gz else data)
    return p


def nest(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "list" else '{"a":' * depth + "0" + "}" * depth


# ---- nesting, 10**2..10**6 levels --------------------------------------------------------------------------------

def test_nesting_depths(tmp_path):
    """A value nested 10**2..10**6 deep is skipped unread wherever it is: in an arg (the event is read, the arg
    ignored: nested args are never read), as an event's pid (that event is not read), as an item of the event
    list, as a top-level key; the ops are all there, the run takes no memory for the nesting."""
    files = {}
    for k in POWERS:
        for kind in ("list", "map"):
            doc = base()
            op_events(doc)[0]["args"]["deep"] = "@@D@@"
            files[("arg", k, kind)] = write(tmp_path, f"arg{k}{kind}", doc, {'@@D@@': nest(10 ** k, kind)})
        doc = base()
        op_events(doc)[1]["pid"] = "@@D@@"
        files[("pid", k, "list")] = write(tmp_path, f"pid{k}", doc, {'@@D@@': nest(10 ** k, "list")})
    doc = base()
    doc["traceEvents"].insert(3, "@@D@@")
    doc["metadata"] = "@@E@@"
    files[("item", 6, "list")] = write(tmp_path, "item6", doc, {'@@D@@': nest(10 ** 6, "list"),
                                                              '@@E@@': nest(10 ** 6, "map")})
    res = run_files(list(files.values()))
    for (where, k, kind), p in files.items():
        r = check(res[str(p)], codes=(0,))
        assert nest(10 ** k, kind).encode() in p.read_bytes()  # the nesting is in the file
        if where == "arg":
            assert not any("were ignored" in w for w in r["warnings"]), r["warnings"]
        elif where == "pid":
            assert "pid (event not read) x1" in ignored(r)
        else:
            assert "not maps (not read) x1" in ignored(r)


# ---- strings and numbers, 10**2..10**6 long --------------------------------------------------------------------

def test_string_and_number_lengths(tmp_path):
    """Strings of 10**2..10**6 characters (name, HLO text, a plain arg, a process name) are read; a string past
    MAX_STRING characters is ignored with the warning; one past MAX_TOKEN bytes refuses the file (exit 2).
    Integers of 10**2..10**6 digits refuse the file (past 64 bits: the parser's limit); a float written with
    10**2..10**6 digits is read; a cost arg written as such a string is ignored with the warning."""
    files = {}
    for k in POWERS:
        n = 10 ** k
        for field in ("name", "long_name", "x", "process"):
            doc = base()
            ev = op_events(doc)[0]
            if field == "name":
                ev["name"] = "n" * n
            elif field == "process":
                doc["traceEvents"][4]["args"]["name"] = "/host:CPU" + "h" * n
            else:
                ev["args"][field] = ev["args"]["long_name"] + " " * n if field == "long_name" else \
                    "é" * (n // 10) + "x" * (n - n // 10)  # (é is written \u00e9: 1.5 bytes a character)
            files[("str", field, k)] = write(tmp_path, f"s{field}{k}", doc)
        doc = base()
        op_events(doc)[0]["args"]["big"] = "@@N@@"
        files[("int", "x", k)] = write(tmp_path, f"i{k}", doc, {'@@N@@': "9" * n})
        doc = base()
        op_events(doc)[0]["args"]["big"] = "@@N@@"
        files[("float", "x", k)] = write(tmp_path, f"f{k}", doc, {'@@N@@': "1." + "0" * n + "1"})
        doc = base()
        op_events(doc)[0]["args"]["bytes_accessed"] = "9" * n
        files[("numstr", "bytes_accessed", k)] = write(tmp_path, f"b{k}", doc)
    doc = base()
    op_events(doc)[0]["args"]["tf_op"] = "t" * (jsonstream.MAX_STRING + 1)
    files[("over", "tf_op", 0)] = write(tmp_path, "over", doc)
    doc = base()
    op_events(doc)[0]["args"]["x"] = "z" * (jsonstream.MAX_TOKEN + 1)
    files[("token", "x", 0)] = write(tmp_path, "token", doc, gz=True)
    doc = base()
    op_events(doc)[0]["args"]["x"] = "@@N@@"
    files[("numtoken", "x", 0)] = write(tmp_path, "numtoken", doc, {'@@N@@': "1." + "0" * jsonstream.MAX_TOKEN})
    res = run_files(list(files.values()))
    for (kind, field, k), p in files.items():
        r = res[str(p)]
        if kind in ("str", "float"):
            check(r, codes=(0,))
            assert not any("were ignored" in w for w in r["warnings"]), (kind, field, k, r["warnings"])
        elif kind == "int":
            check(r, codes=(2,))
            assert "integer overflow" in r["stderr"]
        elif kind == "numstr":
            check(r, codes=(0,))
            assert "args.bytes_accessed (not a usable number) x1" in ignored(r)
        elif kind == "over":
            check(r, codes=(0,))
            assert "args.tf_op x1" in ignored(r)
        else:
            check(r, codes=(2,))
            assert f"a {'string' if kind == 'token' else 'number'} of more than 4.0 MiB" in r["stderr"]


# ---- every field of the schema, every JSON type ----------------------------------------------------------------

#: per field: the types that are right for it (nothing said) — every other type is ignored with the warning
RIGHT = {"ph": {"string", "null"}, "pid": {"number", "string", "null"}, "tid": {"number", "string", "null"},
         "ts": {"number", "null"}, "dur": {"number", "null"}, "name": {"string", "number", "null"},
         "args": {"map", "null"}, "args.long_name": {"string", "number", "null"},
         "args.bytes_accessed": {"number", "bool", "null"}, "args.device_duration_ps": {"number", "bool", "null"},
         "M.args": {"map"}, "M.args.name": {"string"}}


def _set(doc: dict, field: str, value) -> None:
    if field.startswith("M."):
        ev = doc["traceEvents"][3]  # thread_name of XLA Ops
        if field == "M.args":
            ev["args"] = value
        else:
            ev["args"]["name"] = value
        return
    ev = op_events(doc)[0]
    if field.startswith("args."):
        ev["args"][field[5:]] = value
    else:
        ev[field] = value


def test_every_field_every_type(tmp_path):
    """Each field of the event schema with each JSON type: right types are read as before; a wrong one is
    ignored, and one warning names the field and counts the events; the analysis runs (exit 0). The pid of a
    float number is wrong (pids are integers or strings): checked with a float."""
    files = {}
    for field in RIGHT:
        for tname, value in TYPES.items():
            if field in ("pid", "tid") and tname == "number":
                value = 3.5
            doc = base()
            _set(doc, field, value)
            files[(field, tname)] = write(tmp_path, f"{field}-{tname}", doc)
    doc = base()
    for ev in op_events(doc):
        ev["args"] = [1]  # the same field wrong in many events: counted
    files[("args", "many")] = write(tmp_path, "args-many", doc)
    doc = base()
    for ev in op_events(doc):  # ids that are no numbers stay strings, as before: nothing said
        ev["args"].update(run_id="abc", program_id="p", group_id="g", step_num="s", correlation_id="c")
    files[("ids", "string")] = write(tmp_path, "ids", doc)
    res = run_files(list(files.values()))
    for (field, tname), p in files.items():
        r = check(res[str(p)], codes=(0,))
        warned = [w for w in r["warnings"] if "were ignored" in w]
        if field == "ids":
            assert not warned, warned
        elif tname == "many":
            assert "args (not a map) x9" in ignored(r)
        elif tname in RIGHT[field] and not (field in ("pid", "tid") and tname == "number"):
            assert not warned, (field, tname, warned)
        else:
            assert len(warned) == 1, (field, tname, r["warnings"])
            word = field.split(".")[-1] if not field.startswith("M.") else "M thread_name args"
            assert word in warned[0] and " x1" in warned[0], (field, tname, warned)


def test_top_level_not_a_trace(tmp_path):
    """The document itself of each other type, or traceEvents of each other type: refused in one line."""
    files = []
    for tname, value in TYPES.items():
        if tname != "map":
            files.append(write(tmp_path, f"top-{tname}", value if tname != "list" else [1, "x"]))
        if tname != "list":
            files.append(write(tmp_path, f"events-{tname}", {"traceEvents": value}))
    for r in run_files(files).values():
        check(r, codes=(2,))
        assert "not a trace" in r["stderr"] or "no events" in r["stderr"] or "no traceEvents" in r["stderr"], r


# ---- gzip damage -------------------------------------------------------------------------------------------

def test_gzip_damage_at_offsets(tmp_path):
    """The deflate stream cut, flipped or patched at offsets through the file: one line and exit 2 (or, where
    the damage leaves a valid stream, exit 0)."""
    data = jsonfuzz.Doc(base()).dumps()
    gz = gzip.compress(data, 6)
    files = []
    for frac in (0.0, 0.05, 0.3, 0.6, 0.9, 0.99):
        at = min(int(len(gz) * frac), len(gz) - 1)
        for what in ("cut", "flip", "zero"):
            b = bytearray(gz)
            if what == "cut":
                del b[max(at, 1):]
            elif what == "flip":
                b[at] ^= 0x5A
            else:
                b[at:at + 8] = bytes(8)
            p = tmp_path / f"gz-{what}-{frac}.trace.json.gz"
            p.write_bytes(bytes(b))
            files.append(p)
    res = run_files(files)
    codes = [check(r)["code"] for r in res.values()]
    assert codes.count(2) >= len(files) // 2, codes
    assert any("cannot decompress" in r["stderr"] for r in res.values())


# ---- the stream's token scan against a plain scanner -------------------------------------------------------

def _reference_longest(data: bytes) -> tuple[int, int]:
    """(longest string, quote to quote; longest run of number bytes) by a character-by-character walk."""
    in_str = esc = False
    start = longest = run = longest_num = 0
    for i, c in enumerate(data):
        run = run + 1 if c in b"0123456789+-.eE" else 0
        longest_num = max(longest_num, run)
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
                longest = max(longest, i - start)
        elif c == 0x22:
            in_str, start = True, i
    if in_str:
        longest = max(longest, len(data) - start)
    return longest, longest_num


_piece = st.one_of(st.just(b'"'), st.just(b"\\\\"), st.just(b'\\"'), st.just(b"a"), st.just(b"1"),
                   st.just(b"e"), st.just(b","), st.just(b"["), st.binary(max_size=3).filter(lambda b: b"\\" not in b))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(parts=st.lists(st.tuples(_piece, st.integers(1, 30)), max_size=40), cuts=st.lists(st.integers(1, 40)),
       limit=st.integers(1, 60))
def test_token_scan_matches_a_plain_scanner(parts, cuts, limit):
    """Backslashes only inside strings (as in JSON): the scan refuses exactly when the plain scanner finds a
    string or a run of number bytes longer than the limit, however the bytes are cut into reads."""
    body, in_str = b"", False
    for piece, times in parts:
        chunk = piece * times
        if not in_str:
            chunk = chunk.replace(b"\\", b"")
        body += chunk
        # where the body now stands (for where backslashes may go)
        in_str = _reference_in_string(body)
    saved, jsonstream.MAX_TOKEN = jsonstream.MAX_TOKEN, limit
    scan = jsonstream.TokenScan("x")
    i = 0
    refused = False
    try:
        for c in cuts + [len(body)]:
            scan.scan(body[i:i + c], i)
            i += c
            if i >= len(body):
                break
    except TraceError:
        refused = True
    finally:
        jsonstream.MAX_TOKEN = saved
    s, n = _reference_longest(body)
    assert refused == (s > limit or n > limit), (body, s, n, limit)


def _reference_in_string(data: bytes) -> bool:
    in_str = esc = False
    for c in data:
        if in_str:
            if esc:
                esc = False
            elif c == 0x5C:
                esc = True
            elif c == 0x22:
                in_str = False
        elif c == 0x22:
            in_str = True
    return in_str and not esc


# ---- the mutation sample -----------------------------------------------------------------------------------

SAMPLE = int(os.environ.get("TRACEKIT_JSONFUZZ", "300"))
#: sizes of the sample's mutations: 10**2..10**4 (the classes above take each size to 10**6)
SMALL = (2, 3, 4)


@pytest.fixture(autouse=True)
def _rules_once(monkeypatch):
    """The built-in rules parsed once for the module (the YAML parse is most of a small analysis)."""
    from tracekit.analysis import rule_model
    real, cache = rule_model.load_rules, _RULES

    def cached(extra_dirs=(), select=(), ignore=()):
        key = (tuple(map(str, extra_dirs)), tuple(select), tuple(ignore))
        if key not in cache:
            cache[key] = real(extra_dirs, select, ignore)
        return cache[key]
    monkeypatch.setattr(rule_model, "load_rules", cached)


_RULES: dict = {}


def test_mutated_documents_in_process(tmp_path):
    """SAMPLE mutated documents (tests/jsonfuzz.py) read in-process: each loads or raises TraceError with one
    line; one in fifteen is analyzed and rendered whole."""
    from tracekit.report import render
    rng = random.Random(7)
    bases = jsonfuzz.seeds()
    seen = {"ok": 0, "refused": 0}
    for k in range(SAMPLE):
        data, name = jsonfuzz.mutated(rng.choice(bases), rng, SMALL)
        p = tmp_path / f"{k}-{name}"
        p.write_bytes(data)
        try:
            if k % 15 == 0:
                rep = pipeline.analyze(p)
                for fmt in ("json", "text", "markdown"):
                    assert isinstance(render.render(rep, fmt), str)
            else:
                tracekit.load(p)
            seen["ok"] += 1
        except TraceError as e:
            assert str(e) and "\n" not in str(e), (k, str(e))
            seen["refused"] += 1
        p.unlink()
    assert seen["ok"] > SAMPLE // 5 and seen["refused"] > SAMPLE // 10, seen


def test_mutated_documents_through_the_cli(tmp_path):
    """Twenty-five, sizes to 10**6, through the command line under the memory cap: documented codes, one line,
    in time and memory."""
    rng = random.Random(11)
    bases = jsonfuzz.seeds()
    files = []
    for k in range(25):
        data, name = jsonfuzz.mutated(rng.choice(bases), rng)
        p = tmp_path / f"{k}-{name}"
        p.write_bytes(data)
        files.append(p)
    for r in run_files(files).values():
        check(r)
