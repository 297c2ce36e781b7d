"""Rule files are bounded before work is spent (issue 33, defect class 5), over generated parameters:

* YAML alias bombs ("billion laughs", 10^2 .. 10^12 values, widths 10 .. 10^6) in every string field of a rule
  file, anchors alone and merge keys: refused while the file is composed;
* every format-spec alignment (``<`` ``>`` ``^`` ``=``, with and without a fill) with large widths and
  precisions, in ``message`` and ``fix``: refused when the rule loads (the caps, 200 and 20, still load and run);
* nested-quantifier regexes (``(a+)+$``, ``(a|a)*b``, ``(.*)*x`` ...) over long texts, as a constant in
  ``where``, as a parameter given by a case and through ``analyze --param``: RE2 answers at once, and right;
* a regex with a group prints nothing on stderr; a pattern RE2 cannot run is one line.

Each bad file: exit 2 (docs/commands.md "Exit codes": bad input) and one line on stderr naming the file and what to do, in
under :data:`SECONDS` per command, every command of a class run in one child process under an address-space limit
(``RLIMIT_AS``, :data:`HEADROOM` above what its imports took: a bomb that expanded would end in "out of memory",
which the assertions refuse)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import ROOT
from tracekit.analysis.rule_safety import MAX_PRECISION, MAX_WIDTH, RegexError, compile_regex, regex_contains

#: seconds one command of the child may take (each takes milliseconds; Python's re on the regexes: hours)
SECONDS = 10.0
#: address space the child may use above its imports
HEADROOM = 1 << 30
EXE = [sys.executable, "-m", "tracekit.cli"]
ENV = {**os.environ, "TRACEKIT_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}

#: runs each argv of a JSON list through the CLI in this one process, stderr captured, under RLIMIT_AS
CHILD = textwrap.dedent("""
    import contextlib, io, json, resource, sys, time
    import numpy, pandas, yaml, re2  # imported before the limit: only the rule files have to fit in it
    from tracekit.cli import main
    from tracekit import pipeline
    from tracekit.analysis import rule_cases, rule_model, rules
    vm = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[2]), resource.RLIM_INFINITY))
    out = []
    for argv in json.load(open(sys.argv[1])):
        err, t = io.StringIO(), time.perf_counter()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main.main(args=argv, prog_name="tracekit", standalone_mode=True)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out.append({"argv": argv, "code": code, "err": err.getvalue(), "s": time.perf_counter() - t})
    print(json.dumps(out))
    """)


def run_child(tmp_path, argvs: list) -> list:
    todo = tmp_path / "argv.json"
    todo.write_text(json.dumps(argvs))
    p = subprocess.run([sys.executable, "-c", CHILD, str(todo), str(HEADROOM)], capture_output=True, text=True,
                       timeout=900, env=ENV, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    results = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(results) == len(argvs)
    for r in results:
        assert r["s"] < SECONDS, (r["argv"], r["s"])
    return results


def one_line(r: dict, *needles: str) -> str:
    """The result's stderr is one ``tracekit: error:`` line holding every needle (and no out-of-memory line)."""
    err = r["err"].strip()
    assert r["code"] == 2, (r["argv"], r["code"], err[:500])
    assert "\n" not in err and err.startswith("tracekit: error:"), (r["argv"], err[:2000])
    assert "out of memory" not in err and "internal error" not in err, err[:500]
    for n in needles:
        assert n in err, (n, err[:1000])
    return err


# --------------------------------------------------------------------------------------------- rule files
BASE = {
    "version": 2, "id": "XX001", "name": "slow-transposes", "severity": "info", "groups": ["layout"],
    "frame": "op_stats", "summary": "Finds transposes and copies that take a real share of device time.",
    "params": {"min_share": {"default": 0.02, "kind": "fraction", "min": 0, "max": 1,
                             "doc": "report ops above this share"}},
    "where": "opcode.isin(['transpose', 'copy']) and share >= @min_share",
    "savings": "total_ps",
    "message": "{count} transpose/copy op(s) take {t_sum_total_ps}; the largest is {top[op]}.",
    "fix": "Keep one layout through the model.", "why": "Transposes move bytes without doing math.",
    "references": ["https://example.com/layouts"], "example": {"before": "y = x.T @ w", "after": "y = x @ w.T"},
    "cases": {"pass": [{"name": "small-transpose", "note": "below the share",
                        "rows": [{"op": "transpose.1", "opcode": "transpose", "share": 0.01, "total_ps": 100}]}],
              "fail": [{"name": "big-transpose", "note": "only the transpose above 2% counts",
                        "rows": [{"op": "transpose.1", "opcode": "transpose", "share": 0.05, "total_ps": 500},
                                 {"op": "fusion.2", "opcode": "fusion", "share": 0.50, "total_ps": 5000}],
                        "expect": {"evidence": 1, "savings_ps": 500}}]},
}


def dump(doc: dict) -> str:
    """YAML text of ``doc``; copied first, so that PyYAML writes no anchor for an object used twice."""
    return yaml.safe_dump(json.loads(json.dumps(doc)), sort_keys=False, width=1 << 30, allow_unicode=True)


def write_rule(folder, text: str):
    folder.mkdir(parents=True, exist_ok=True)
    f = folder / "XX001-rule.yaml"
    f.write_text(text)
    return folder


def string_leaves(node, path=()):
    """Paths to every string value of a parsed rule (mapping values and list items, at any depth)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from string_leaves(v, path + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from string_leaves(v, path + (i,))
    elif isinstance(node, str):
        yield path


def with_leaf(doc, path, value):
    doc = json.loads(json.dumps(doc))
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


def bomb(width: int, depth: int) -> str:
    """A flow sequence whose last alias stands for width**depth scalars."""
    parts = ["&a0 [" + ", ".join(["lol"] * width) + "]"]
    parts += [f"&a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, depth)]
    return "[" + ", ".join(parts) + f", *a{depth - 1}]"


#: (width, depth): 10^2 .. 10^6 values, then 10^9 and 10^12 (a real bomb: terabytes once expanded)
BOMBS = [(10, 2), (100, 1), (10, 4), (100, 2), (10, 6), (1000, 2), (100, 3), (10, 9), (10, 12)]
LEAVES = list(string_leaves(BASE))


def test_the_base_rule_loads_and_its_cases_pass(tmp_path):
    """The control: the rule every bomb is put into is fine as it is (so the refusals below are the bombs')."""
    (r,) = run_child(tmp_path, [["rules", "test", str(write_rule(tmp_path / "ok", dump(BASE)))]])
    assert r["code"] == 0 and r["err"] == "", r
    assert len(LEAVES) >= 25  # every string field: top level, lists, params, example, cases, rows


def test_alias_bombs_in_every_string_field(tmp_path):
    argvs, expect = [], []
    for i, path in enumerate(LEAVES):
        for width, depth in BOMBS:
            text = dump(with_leaf(BASE, path, "BOMB_HERE")).replace("BOMB_HERE", bomb(width, depth))
            assert yaml.compose(text) is not None  # valid YAML: what is refused is the alias, not the syntax
            line = 1 + next(n for n, s in enumerate(text.splitlines()) if "&a0" in s)
            argvs.append(["rules", "test", str(write_rule(tmp_path / f"b{i}-{width}-{depth}", text))])
            expect.append(line)
    # a flat million aliases of one anchor (a 4 MB file), an anchor alone, and a merge key
    flat = "[&a lol" + ", *a" * 10**6 + "]"
    texts = [dump(with_leaf(BASE, ("summary",), "BOMB_HERE")).replace("BOMB_HERE", flat),
             dump(with_leaf(BASE, ("why",), "BOMB_HERE")).replace("BOMB_HERE", "&w Transposes move bytes."),
             dump(BASE).replace("  min_share:\n", "  min_share: &p\n", 1)
             .replace("where:", "  other: {<<: *p, doc: again}\nwhere:", 1)]
    for j, text in enumerate(texts):
        argvs.append(["rules", "test", str(write_rule(tmp_path / f"x{j}", text))])
        expect.append(1 + next(n for n, s in enumerate(text.splitlines()) if re.search(r"&[apw]\b", s)))
    for r, line in zip(run_child(tmp_path, argvs), expect):
        one_line(r, "XX001-rule.yaml", f"line {line}:", "anchors and aliases", "write each value out in full")


# ------------------------------------------------------------------------------------------- format specs
ALIGNS = ["<", ">", "^", "="]
WIDTHS = [MAX_WIDTH + 1, 10**3, 10**6, 10**9, 10**18, 10**100]
PRECISIONS = [MAX_PRECISION + 1, 10**3, 10**6, 10**8, 10**18, 10**100]
TYPES = ["", "f", "e", "%"]


def _spec_cases():
    out = []
    for a in ALIGNS:
        for fill in ("", "*"):
            for t in TYPES:
                out += [(f"{fill}{a}{w}{t}", "width") for w in WIDTHS]
                out += [(f"{fill}{a}.{p}{t}", "precision") for p in PRECISIONS]
                out += [(f"{fill}{a}+{w},.2{t}", "width") for w in WIDTHS[:2]]
    out += [(f"0{w}", "width") for w in WIDTHS] + [(f"0{MAX_WIDTH}.{p}f", "precision") for p in PRECISIONS]
    return out


def test_large_widths_and_precisions_refused_at_load(tmp_path):
    cases = _spec_cases()
    argvs = []
    for i, (spec, _) in enumerate(cases):
        label = ("message", "fix")[i % 2]
        doc = {**BASE, label: f"{{share:{spec}}} of the time; {{count}} op(s)"}
        argvs.append(["rules", "test", str(write_rule(tmp_path / f"s{i}", dump(doc)))])
    for i, (r, (spec, what)) in enumerate(zip(run_child(tmp_path, argvs), cases)):
        cap = MAX_WIDTH if what == "width" else MAX_PRECISION
        one_line(r, "XX001-rule.yaml", ("`message`", "`fix`")[i % 2], f"asks for {what}", f"at most {cap}")


@pytest.mark.parametrize("spec", [f"{a}{MAX_WIDTH}.{MAX_PRECISION}f" for a in ALIGNS]
                         + [f"*^{MAX_WIDTH}", f"0{MAX_WIDTH}.{MAX_PRECISION}%"])
def test_specs_at_the_caps_load_and_format(tmp_path, spec):
    """At the caps the rule loads, its fail case formats the message (the oracle: Python's own format)."""
    from tracekit.analysis.rule_cases import run_cases
    from tracekit.analysis.rule_model import load_rules
    doc = {**BASE, "message": f"[{{share:{spec}}}] {{count}}"}
    (rule,) = [r for r in load_rules([write_rule(tmp_path / "caps", dump(doc))]) if not r.builtin]
    assert all(res.error is None for res in run_cases([rule]))
    from tracekit.analysis.rules import run_rules
    from tracekit.analysis.rule_cases import case_frames
    case = rule.cases["fail"][0]
    (f,) = run_rules(case_frames(rule, case), [rule], {rule.id: {}})
    assert f.message == f"[{format(f.share, spec)}] 1" and len(f.message) <= MAX_WIDTH + 10


@pytest.mark.parametrize("spec", ["zz", ">5>", "5.", ".f5", "<5x9"])
def test_specs_python_cannot_read_refused_at_load(tmp_path, spec):
    from tracekit.analysis.rule_model import load_rules
    from tracekit.errors import TraceError
    with pytest.raises(TraceError) as e:
        load_rules([write_rule(tmp_path / "bad", dump({**BASE, "message": f"{{count:{spec}}}"}))])
    with pytest.raises(ValueError):
        format(1, spec)  # the oracle: Python refuses the spec too
    assert "is not one Python reads" in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------------------------- regexes
#: nested quantifiers (exponential under a backtracking engine) -> (a text that matches, one that does not)
NESTED = {
    "(a+)+$": (lambda n: "b" + "a" * n, lambda n: "a" * n + "b"),
    "(a|a)*b": (lambda n: "a" * n + "b", lambda n: "a" * n),
    "(.*)*x": (lambda n: "a" * n + "x", lambda n: "a" * n),
    "(a*)*b": (lambda n: "a" * n + "b", lambda n: "a" * n),
    "^(a|aa)+$": (lambda n: "a" * n, lambda n: "a" * n + "b"),
    "(x+x+)+y": (lambda n: "x" * n + "y", lambda n: "x" * n),
    r"^(\w+\s?)+$": (lambda n: "ab " * (n // 3), lambda n: "ab " * (n // 3) + "!"),
    "((a+)+)+c$": (lambda n: "a" * n + "c", lambda n: "a" * n + "cc!"),
}
LENGTHS = [10**2, 10**4, 10**5]


@pytest.mark.parametrize("pattern", list(NESTED))
def test_the_generated_texts_are_right(pattern):
    """The oracle of the regex tests: on short texts Python's (backtracking) re agrees with the labels."""
    yes, no = NESTED[pattern]
    for n in (3, 6, 12):
        assert re.search(pattern, yes(n)) and not re.search(pattern, no(n))


def _regex_rule(where: str, pass_text: str, fail_text: str, params: dict | None = None,
                case_params: dict | None = None) -> dict:
    def rows(text):
        return [{"op": text, "opcode": "custom-call", "share": 0.5, "total_ps": 100},
                {"op": "fusion.1", "opcode": "fusion", "share": 0.5, "total_ps": 100}]
    extra = {"params": {"pat": {"default": "zzz", "kind": "regex", "doc": "the pattern"}}} if params else {}
    cp = {"params": case_params} if case_params else {}
    return {**BASE, **extra, "where": where, "message": "{count} op(s) match",
            "cases": {"pass": [{"name": "no-match", "rows": rows(pass_text), **cp}],
                      "fail": [{"name": "match", "rows": rows(fail_text), "expect": {"evidence": 1}, **cp}]}}


def test_nested_quantifiers_in_where_and_through_params(tmp_path):
    """`rules test` runs each rule's cases: a long text that matches (one evidence row) and one that does not,
    with the pattern a constant of `where` and, in a second rule, a regex parameter the cases set."""
    argvs = []
    for i, (pattern, (yes, no)) in enumerate(NESTED.items()):
        for n in LENGTHS:
            lit = repr(pattern)  # a string literal of the expression language (as in Python)
            docs = [_regex_rule(f"op.str.contains({lit})", no(n), yes(n)),
                    _regex_rule("op.str.contains(@pat) and share > 0", no(n), yes(n), params=True,
                                case_params={"pat": pattern})]
            for j, doc in enumerate(docs):
                argvs.append(["rules", "test", str(write_rule(tmp_path / f"r{i}-{n}-{j}", dump(doc)))])
    for r in run_child(tmp_path, argvs):
        assert r["code"] == 0 and r["err"] == "", (r["argv"], r["code"], r["err"][:2000])


def _long_trace(path, n: int) -> int:
    """A trace-viewer JSON trace of 10 ops named 'a'*n (even) or 'a'*n+'b' (odd); returns the count of the first."""
    ev = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}}]
    names = ["a" * n + ("b" if i % 2 else "") for i in range(10)]
    ev += [{"ph": "X", "pid": 1, "tid": 2, "ts": i, "dur": 0.5, "name": name, "args": {
        "hlo_op": name, "hlo_module": "jit_f", "device_ordinal": "0", "run_id": "1"}} for i, name in enumerate(names)]
    path.write_text(json.dumps({"traceEvents": ev}))
    return sum(not s.endswith("b") for s in names)


PARAM_RULE = {**BASE, "id": "XX002", "name": "long-names", "frame": "ops",
              "params": {"pat": {"default": "zzz", "kind": "regex", "doc": "the pattern"}},
              "where": "op.str.contains(@pat)", "savings": "duration_ps", "message": "{count} op(s) match",
              "cases": {"pass": [], "fail": []}}
#: patterns given with --param -> whether an op named 'a'*n (no 'b') matches; those ending in 'b' the other way
PARAM_PATTERNS = {"(a+)+$": True, "^(a|aa)+$": True, "(a|a)*b": False, "(a*)*b$": False, "(.*)*b": False}


def test_nested_quantifiers_through_analyze_param(tmp_path):
    trace = tmp_path / "long.trace.json"
    even = _long_trace(trace, 2000)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "XX002-long-names.yaml").write_text(dump(PARAM_RULE))
    argvs, outs = [], []
    for i, pattern in enumerate(PARAM_PATTERNS):
        out = tmp_path / f"report{i}.json"
        argvs.append(["analyze", str(trace), "--rules", str(rules), "--param", f"XX002.pat={pattern}", "-o", str(out),
                      "-q"])
        outs.append(out)
    for r, out, (pattern, plain) in zip(run_child(tmp_path, argvs), outs, PARAM_PATTERNS.items()):
        assert r["code"] == 0, (pattern, r["err"][-2000:])
        (f,) = [f for f in json.loads(out.read_text())["findings"] if f["rule_id"] == "XX002"]
        assert f["evidence_count"] == (even if plain else 10 - even), pattern


# ------------------------------------------------------------------------------ stderr: fd level, real CLI
def test_a_regex_with_a_group_prints_nothing_on_stderr(tmp_path):
    """pandas would print a two-line UserWarning for a pattern with a group; RE2 prints nothing."""
    doc = _regex_rule("op.str.contains('(trans)(pose)?\\\\.1')", "fusion.7", "transpose.1")
    p = subprocess.run(EXE + ["rules", "test", str(write_rule(tmp_path / "g", dump(doc)))], capture_output=True,
                       text=True, env=ENV, timeout=300)
    assert p.returncode == 0 and p.stderr == "", p.stderr
    assert "2 case(s): 2 passed" in p.stdout, p.stdout


def test_a_group_through_param_adds_nothing_to_stderr(tmp_path):
    trace = tmp_path / "long.trace.json"
    _long_trace(trace, 50)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "XX002-long-names.yaml").write_text(dump(PARAM_RULE))
    errs = []
    for pattern in ("a+b", "(a+)(b)"):
        p = subprocess.run(EXE + ["analyze", str(trace), "--rules", str(rules), "--param", f"XX002.pat={pattern}",
                                  "-o", str(tmp_path / "r.json")], capture_output=True, text=True, env=ENV,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        errs.append(p.stderr)
    assert errs[0] == errs[1] and "UserWarning" not in errs[1] and "match groups" not in errs[1], errs


BAD_PATTERNS = [r"(a)\1", "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b", "a{2,1}", "(unclosed", "(a{1000}){1000}",
                "((a{100}){100}){100}", "a" * 5000]


@pytest.mark.parametrize("pattern", BAD_PATTERNS[:-1])  # the last is longer than an expression may be
def test_a_pattern_re2_cannot_run_is_one_line_at_load(tmp_path, pattern):
    doc = _regex_rule(f"op.str.contains({pattern!r})", "x", "y")
    p = subprocess.run(EXE + ["rules", "test", str(write_rule(tmp_path / "bad", dump(doc)))], capture_output=True,
                       text=True, env=ENV, timeout=300)
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()  # RE2's own log line stays off stderr
    assert "XX001" in line and "slow-transposes" in line and "regular expression" in line, line
    assert "RE2" in line or "longer than" in line, line


def test_a_bad_pattern_through_param_is_one_line(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "XX002-long-names.yaml").write_text(dump(PARAM_RULE))
    trace = tmp_path / "long.trace.json"
    _long_trace(trace, 10)
    out = tmp_path / "r.json"
    p = subprocess.run(EXE + ["analyze", str(trace), "--rules", str(rules), "--param", r"XX002.pat=(a)\1", "-o",
                              str(out)], capture_output=True, text=True, env=ENV, timeout=300)
    assert p.returncode == 2, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "XX002.pat" in line and "RE2" in line and "backreferences" in line, line
    assert not out.exists()


def test_a_builtin_regex_param_through_param(tmp_path):
    """TK010's pattern through --param: a nested quantifier runs, a lookahead is one line."""
    from conftest import cpu_fixture
    fx = cpu_fixture("train_step")
    ok = subprocess.run(EXE + ["analyze", str(fx), "--param", "TK010.pattern=(c+o+)+mpile$", "-q"],
                        capture_output=True, text=True, env=ENV, timeout=300)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(EXE + ["analyze", str(fx), "--param", "TK010.pattern=compile(?!d)", "-q"],
                         capture_output=True, text=True, env=ENV, timeout=300)
    assert bad.returncode == 2
    (line,) = bad.stderr.strip().splitlines()
    assert "TK010.pattern" in line and "lookaround" in line, line


# --------------------------------------------------------------------------- RE2 agrees with pandas/re
def test_regex_contains_agrees_with_pandas_on_ordinary_patterns():
    """On patterns both engines read, the RE2 path gives what pandas' str.contains (Python's re) gives, for
    categorical, object and string columns, with missing values, case and na."""
    from hypothesis import given, settings, strategies as st
    patterns = ["a", "ab|ba", "^a", "b$", "a.b", "[ab]+c", "(a)(b)?", "x*", "A", r"\d", "a{2}"]

    @settings(max_examples=150, deadline=None)
    @given(st.lists(st.one_of(st.none(), st.text("abcAB1 x", max_size=6)), min_size=1, max_size=12),
           st.sampled_from(patterns), st.booleans(), st.sampled_from([None, False, True]),
           st.sampled_from(["category", "object", "string"]))
    def check(values, pattern, case, na, dtype):
        s = pd.Series(values, dtype=dtype)
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = s.str.contains(pattern, case=case, regex=True, **({} if na is None else {"na": na}))
            except AttributeError:  # pandas has no .str on a column of nothing but missing values
                got = regex_contains(s, pattern, case=case, na=na)
                assert [None if pd.isna(x) else bool(x) for x in got] == [na] * len(s) if na is not None else \
                    not got.fillna(False).any()
                return
        got = regex_contains(s, pattern, case=case, na=na)
        w = [None if pd.isna(x) else bool(x) for x in want]
        g = [None if pd.isna(x) else bool(x) for x in got]
        if dtype == "object" and na is None:  # pandas: object dtype with None; RE2 path: nullable boolean
            assert g == w
        else:
            assert g == w and got.dtype == want.dtype, (values, pattern, got.dtype, want.dtype)
    check()


def test_compile_regex_refuses_in_one_line_and_caches():
    for bad in BAD_PATTERNS:
        with pytest.raises(RegexError) as e:
            compile_regex(bad)
        assert "\n" not in str(e.value)
    assert compile_regex("a+") is compile_regex("a+")
    assert compile_regex("A", case=False).search("xa") is not None and compile_regex("A").search("xa") is None


def test_tk010_default_pattern_means_what_the_lookahead_did():
    """TK010's default was ``compil(?:e|ation)(?!d)`` (Python re): the RE2 form finds the same names."""
    from tracekit.analysis.rule_model import find_rule, load_rules
    rule = find_rule(load_rules(), "TK010")
    old = re.compile(r"compil(?:e|ation)(?!d)", re.IGNORECASE)
    rng = np.random.default_rng(0)
    words = ["compile", "Compiled", "COMPILATION", "compilationd", "XlaCompile", "d", "D", " ", "_", "r", "s", ""]
    names = ["".join(rng.choice(words, size=rng.integers(1, 5))) for _ in range(3000)]
    rx = compile_regex(rule.params["pattern"].default, case=False)
    assert [bool(rx.search(n)) for n in names] == [bool(old.search(n)) for n in names]


@pytest.mark.parametrize("libyaml", [True, False])
def test_both_loaders_refuse_anchors_and_read_the_rest_alike(monkeypatch, libyaml):
    """libyaml's loader (events read first) and the pure-Python one (each event checked as it is composed) refuse
    the same anchors on the same line and read every other document as PyYAML's SafeLoader does (the oracle)."""
    from pathlib import Path
    from tracekit import artefacts
    monkeypatch.setattr(artefacts, "_LOADER", None)
    if not libyaml:
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    text = dump(BASE)
    assert artefacts.parse_yaml(Path("x.yaml"), text) == yaml.load(text, Loader=yaml.SafeLoader)
    for width, depth in BOMBS:
        bad = dump(with_leaf(BASE, ("fix",), "BOMB_HERE")).replace("BOMB_HERE", bomb(width, depth))
        line = 1 + next(n for n, s in enumerate(bad.splitlines()) if "&a0" in s)
        with pytest.raises(artefacts.YamlError) as e:
            artefacts.parse_yaml(Path("x.yaml"), bad)
        assert e.value.message.startswith(f"line {line}: YAML anchors and aliases"), e.value.message
    assert artefacts.plain_loader().__mro__[1].__name__ == ("CSafeLoader" if libyaml else "SafeLoader")
