"""Rule expressions: the allow-list refuses every known escape at load, the interpreter agrees with plain pandas on
the allowed grammar (property test), and no rule runs through pandas query/eval."""
from __future__ import annotations

import ast
import random
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.analysis import rule_expr
from tracekit.analysis.rule_expr import ExprError, compile_expr
from tracekit.analysis.rule_model import load_rules, parse_rule
from tracekit.analysis.rules import run_rules
from tracekit.errors import TraceError
from conftest import cpu_fixture


def _doc(**over) -> dict:
    doc = {"version": 2, "id": "XX001", "name": "slow-op", "severity": "info", "groups": ["test"],
           "frame": "op_stats", "summary": "s", "params": {"min_share": {"default": 0.1, "kind": "fraction", "doc": "d"}},
           "where": "share >= @min_share", "savings": "total_ps", "message": "{count} ops", "fix": "f", "why": "w",
           "references": [], "cases": {"pass": [], "fail": []}}
    doc.update(over)
    return doc


# ------------------------------------------------------------------------------------------------- the escapes
ESCAPES = [
    ("@pd.io.common.os.system('touch /tmp/x') == 0 or share >= 0", "attribute access"),
    ("@pd.eval('1') > 0", "@pd is not a parameter"),
    ("pd.eval('__import__(\"os\")') > 0", "not a column"),
    ("__import__('os').system('id') == 0", "names starting with `_`"),
    ("share.__class__.__mro__", "names starting with `_`"),
    ("opcode.__len__() > 0", "names starting with `_`"),
    ("opcode.apply(lambda x: x) == 1", "not an allowed method"),
    ("opcode.map(len) > 1", "not an allowed method"),
    ("opcode.str.cat() == 'x'", "not an allowed method"),
    ("opcode.str.__class__", "names starting with `_`"),
    ("total_ps.values.tolist() == 1", "attribute access"),
    ("total_ps.values[0] > 1", "indexing"),
    ("abs(share)[0] > 0", "indexing"),
    ("opcode.str.contains('a').__class__", "names starting with `_`"),
    ("getattr(share, 'real') > 0", "not an allowed function"),
    ("eval('1') == 1", "not an allowed function"),
    ("open('/etc/passwd') == 1", "not an allowed function"),
    ("f'{share}' == 'x'", "an f-string"),
    ("[x for x in share] == 1", "a comprehension"),
    ("{x for x in share} == 1", "a comprehension"),
    ("(y := share) > 0", "assignment expression"),
    ("max(*share) > 0", "unpacking"),
    ("(lambda: 1)() == 1", "only the listed functions"),
    ("lambda: share", "a lambda"),
    ("share if share > 0 else 0", "conditional expression"),
    ("share is None", "`is` is not allowed"),
    ("{'a': 1} == share", "a dict"),
    ("b'x' == opcode", "bytes"),
    ("None == share", "NoneType"),
    ("'a' * 1000000000 == opcode", "arithmetic on text"),
    ("opcode.isin([share])", "only hold constants"),
    ("opcode.str.contains(opcode)", "must be a constant"),
    ("opcode.str.contains('x', flags=2)", "no keyword"),
    ("share >= @nope", "not a parameter"),
    ("share >= min_share", "parameters are written @name"),
    ("shar >= 0.1", "did you mean share"),
    ("total_ps @ total_ps > 0", "`@` must be followed"),
    ("share >", "not a valid expression"),
    ("abs > 0", "is a function"),
    ("@min_share() > 0", "only the listed functions"),
    ("-" * 3000 + "share > 0", "nested deeper"),
    ("(" * 250 + "share" + ")" * 250 + " > 0", "not a valid expression"),
    ("share" + " + share" * 400 + " > 0", "nested deeper"),
]


@pytest.mark.parametrize("expr,why", ESCAPES, ids=[e[:60] for e, _ in ESCAPES])
def test_escape_refused_at_load(expr, why):
    with pytest.raises(TraceError) as e:
        parse_rule(_doc(where=expr), "rules/XX001-slow-op.yaml")
    msg = str(e.value)
    assert msg.startswith("rules/XX001-slow-op.yaml: rule XX001 (slow-op): `where` expression")
    assert " ".join(expr.split()) in msg and why in msg, msg
    assert "\n" not in msg


@pytest.mark.parametrize("field", ["savings", "report_if", "derive"])
def test_every_expression_field_is_checked(field):
    bad = "@pd.io.common.os.system('id') == 0"
    over = {"derive": {"x": bad}} if field == "derive" else {field: bad}
    with pytest.raises(TraceError, match=f"`{field}"):
        parse_rule(_doc(**over))


@pytest.mark.parametrize("template", ["{top.__class__}", "{count.__class__.__mro__}", "{top[op].__doc__}",
                                      "{nope}", "{top[nope]}", "{count:{share}}", "{0}", "{count[0]}"])
def test_template_fields_checked(template):
    with pytest.raises(TraceError, match="`message` uses"):
        parse_rule(_doc(message=template))


def test_templates_accept_the_documented_values():
    r = parse_rule(_doc(message="{count} {savings} {share:.0%} {t_sum_total_ps} {top[op]} {top_opcode} "
                                "{max_share} {min_share} {t_savings_ps} {median_total_ps:.0f} {hosts} {devices}"))
    (f,) = run_rules({"op_stats": pd.DataFrame({"op": ["a", "b"], "opcode": ["dot", "add"], "share": [0.5, 0.2],
                                                "total_ps": [1000, 400]})}, [r])
    assert f.message.startswith("2 1.4 ns ")


def test_user_rule_folder_cannot_run_a_command(tmp_path):
    """The reported exploit, end to end: `tracekit analyze --rules DIR` refuses the file (exit 2, one line) and
    the command never runs."""
    marker = tmp_path / "pwned"
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "XX001-evil.yaml").write_text(textwrap.dedent(f"""\
        id: XX001
        name: evil
        severity: info
        groups: [test]
        frame: op_stats
        summary: s
        where: "@pd.io.common.os.system('touch {marker}') == 0 or share >= 0"
        savings: total_ps
        message: "{{count}}"
        fix: f
        why: w
        references: []
        cases: {{pass: [], fail: []}}
        """))
    p = subprocess.run([sys.executable, "-m", "tracekit.cli", "analyze", str(cpu_fixture("big_matmul")), "--rules",
                        str(rules)], capture_output=True, text=True)
    assert p.returncode == 2 and not marker.exists()
    (line,) = p.stderr.strip().splitlines()
    assert "XX001-evil.yaml" in line and "@pd.io.common.os.system" in line and "not allowed" in line
    assert "version: 2" in line  # a format-1 file (no version) is told how to update


def test_no_pandas_query_or_eval(monkeypatch):
    """Every built-in rule runs on a real fixture without DataFrame.query/eval or pandas.eval."""
    import tracekit
    from tracekit import pipeline

    def boom(*a, **k):
        raise AssertionError("pandas query/eval called")
    tr = tracekit.load(cpu_fixture("allreduce_exposed"))
    monkeypatch.setattr(pd.DataFrame, "query", boom)
    monkeypatch.setattr(pd.DataFrame, "eval", boom)
    monkeypatch.setattr(pd, "eval", boom)
    loose = {r.id: {k: 0 for k, p in r.params.items() if k.startswith("min_") and p.kind in ("fraction", "duration")}
             for r in load_rules()}
    rep = pipeline.analyze(tr, params=loose)
    assert len(rep.findings) >= 4


# ----------------------------------------------------------------------------------- the interpreter's values
FRAME = pd.DataFrame({"a": [1, -2, 3, 0, 5], "b": [0.5, np.nan, -1.5, 2.0, 0.0],
                      "t": pd.Categorical(["TPU v4", "cpu", "NVIDIA H100", "tpu v5e", ""]),
                      "f": [True, False, True, False, True]})


def _ev(text, frame=FRAME, params=None):
    params = params or {}
    return compile_expr(text, frame.columns, params).evaluate(frame, params)


@pytest.mark.parametrize("text,want", [
    ("min(a, 2)", [1, -2, 2, 0, 2]),
    ("max(a, b, 0)", [1, np.nan, 3, 2, 5]),
    ("abs(a)", [1, 2, 3, 0, 5]),
    ("where(f, a, -a)", [1, 2, 3, 0, 5]),
    ("isna(b)", [False, True, False, False, False]),
    ("b.fillna(7)", [0.5, 7, -1.5, 2.0, 0.0]),
    ("a.between(0, 3)", [True, False, True, True, False]),
    ("t.str.contains('tpu', case=False)", [True, False, False, True, False]),
    ("t.str.startswith('TPU')", [True, False, False, False, False]),
    ("t.str.len()", [6, 3, 11, 7, 0]),
    ("t.str.lower() == 'cpu'", [False, True, False, False, False]),
    ("t in ['cpu', '']", [False, True, False, False, True]),
    ("a not in [1, 3]", [False, True, False, True, True]),
    ("a == [1, 3]", [True, False, True, False, False]),
    ("0 <= a < 5", [True, False, True, True, False]),
    ("a > 0 & b > 0 | f", [True, False, True, False, True]),  # & and | with the precedence of and/or
    ("not f and a > 0", [False, False, False, False, False]),
    ("~f | (a == 0)", [False, True, False, True, False]),
    ("a // 2 + a % 2 * 10 - 2 ** 2", [6, -5, 7, -4, 8]),
])
def test_functions_and_operators(text, want):
    got = _ev(text)
    np.testing.assert_array_equal(np.asarray(got, dtype=float), np.asarray(want, dtype=float))


def test_narrow_integers_do_not_wrap():
    """dot dims arrive as int32: M*N*K of a 2048^3 matmul is 2^33, past int32."""
    dims = pd.DataFrame({"m": np.array([2048], np.int32), "n": np.array([2048], np.int32),
                         "k": np.array([2048], np.int32)})
    assert int(_ev("m * n * k", dims).iloc[0]) == 2048 * 2048 * 2048


def test_runtime_errors_are_expr_errors():
    with pytest.raises(ExprError, match="arithmetic needs numbers"):
        _ev("t + 1")
    with pytest.raises(ExprError, match="must follow an expression that reads a column"):
        _ev("@p.isin([1])", params={"p": 1})
    huge = _ev("10 ** 400")  # no unbounded integer power: a float (inf)
    assert huge == float("inf")


# ------------------------------------------------------------------------- property: agrees with plain pandas
NUM_COLS, BOOL_COLS = ("x", "y", "z"), ("p", "q")
PARAMS = {"lo": 0.25, "k": 3}


def _num(depth):
    leaf = st.one_of(st.sampled_from(NUM_COLS), st.sampled_from(["@lo", "@k"]),
                     st.integers(-5, 9).map(str), st.sampled_from(["0.5", "2.25", "1e3"]))
    if depth == 0:
        return leaf
    sub = _num(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["+", "-", "*", "/"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        sub.map(lambda a: f"(-{a})"), sub.map(lambda a: f"abs({a})"), sub.map(lambda a: f"({a}) ** 2"),
        sub.map(lambda a: f"sqrt(abs({a}))"))


def _bool(depth):
    cmp = st.tuples(_num(1), st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), _num(1)).map(" ".join)
    chain = st.tuples(_num(0), _num(0), _num(0)).map(lambda t: f"{t[0]} < {t[1]} <= {t[2]}")
    leaf = st.one_of(st.sampled_from(BOOL_COLS), cmp, chain, st.just("s == 'b'"), st.just("s != 'a'"),
                     st.just("s in ['a', 'c']"), st.just("s not in ['c']"), st.just("s.str.contains('a|c')"),
                     st.just("x.isin([0, 1, 2])"), st.just("s.str.startswith('b')"))
    if depth == 0:
        return leaf
    sub = _bool(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["and", "or", "&", "|"]), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(cmp, st.sampled_from(["&", "|"]), cmp).map(" ".join),  # pandas' precedence for & |
        sub.map(lambda a: f"not ({a})"), sub.map(lambda a: f"~({a})"))


_frames = st.integers(1, 6).flatmap(lambda n: st.fixed_dictionaries({
    "x": st.lists(st.integers(-4, 4), min_size=n, max_size=n),
    "y": st.lists(st.floats(-8, 8, allow_nan=False) | st.just(float("nan")), min_size=n, max_size=n),
    "z": st.lists(st.integers(0, 3), min_size=n, max_size=n),
    "p": st.lists(st.booleans(), min_size=n, max_size=n),
    "q": st.lists(st.booleans(), min_size=n, max_size=n),
    "s": st.lists(st.sampled_from(["a", "b", "c"]), min_size=n, max_size=n)}))


def _pandas(df, text):
    return df.eval(text, engine="python", local_dict=dict(PARAMS))


def _same(mine, theirs):
    a = np.broadcast_to(np.asarray(mine, dtype=float), (len(np.atleast_1d(theirs)),))
    b = np.asarray(theirs, dtype=float).ravel()
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=0, equal_nan=True)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(frame=_frames, text=st.one_of(_num(3), _bool(2)))
def test_agrees_with_pandas(frame, text):
    df = pd.DataFrame(frame)
    df["s"] = df["s"].astype("category")
    with np.errstate(all="ignore"):
        try:
            theirs = _pandas(df, text)
        except (ZeroDivisionError, TypeError, ValueError, OverflowError):
            return  # pandas could not evaluate it either (e.g. 1 / 0 between constants)
        mine = compile_expr(text, df.columns, PARAMS).evaluate(df, PARAMS)
    if np.ndim(theirs) == 0 and not isinstance(theirs, (bool, np.bool_)) and isinstance(mine, (bool, np.bool_)):
        return  # pandas inverts a single boolean bitwise (~False == -1); see test_not_of_a_single_value
    _same(mine, theirs)


def test_not_of_a_single_value():
    assert _ev("not (@lo < @lo)", params={"lo": 1}) is True and _ev("~(1 > 2)") is True


# ---- the NumPy path against pandas' own semantics ---------------------------------------------------------------
def _mixed_frame():
    """Every kind of column a rule frame holds, with zeros, NaN, inf, a value past int64 and missing values, on
    an index that is not 0..n-1 (a frame after a row selection)."""
    return pd.DataFrame({
        "i": np.array([0, 1, -2, 3, 0, 5, 7], np.int64), "j": np.array([0, 2, 2, 0, 1, -1, 3], np.int32),
        "u": np.array([0, 1, 2, 3, 4, 5, 2**63], np.uint64),
        "f": np.array([0.0, np.nan, 1.5, -2.0, np.inf, 3.0, 0.5]),
        "g": np.array([1, 0, 2, np.nan, 0.5, 0, 4], np.float32),
        "b": np.array([True, False, True, False, True, True, False]),
        "s": pd.array(["a", "b", None, "TPU v5", "dot", "a", "x"], dtype="str"),
        "k": pd.Categorical(["x", "y", "x", None, "z", "y", "x"]),
        "n": pd.array([1, None, 3, 0, 2, None, 5], dtype="Int64"),
        "nb": pd.array([True, None, False, True, None, False, True], dtype="boolean")},
        index=pd.Index([10, 3, 5, 99, 7, 8, 1]))


def _outcome(e, values):
    try:
        x = compile_expr(e, set(_mixed_frame().columns), {"p"}).evaluate(values, {"p": 2})
    except Exception as ex:  # noqa: BLE001 — the same refusal either way (pandas' NotImplementedError included)
        return ("error", type(ex).__name__, str(ex))
    if isinstance(x, pd.Series):
        return ("series", str(x.dtype), list(x.index), [repr(v) for v in x.tolist()])
    return ("value", type(x).__name__, repr(x))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (sqrt/log of negatives and zeros, on both paths)
def test_numpy_columns_give_what_pandas_series_give():
    """Numeric and boolean columns are read as NumPy arrays (fast on small frames); every operator, comparison,
    logical operator, function and method then gives exactly what pandas gives on the same columns as Series (a
    mapping of Series takes the Series path): values, dtype, index, and the same error where pandas refuses."""
    df = _mixed_frame()
    as_series = {c: df[c] for c in df.columns}
    terms = ["i", "j", "u", "f", "g", "b", "n", "nb", "0", "2", "0.5", "@p", "True"]
    exprs = [f"{a} {op} {b}" for a in terms for b in terms
             for op in ("+", "-", "*", "/", "//", "%", "**", "<", "==", "!=", ">=", "&", "|", "and", "or")]
    exprs += [f"{u}{c}" for u in ("-", "+", "not ", "~") for c in terms[:8]]
    exprs += [f"{c} in [0, 1, 2.0]" for c in terms[:8]] + [f"{c} {op} {t}" for c in terms[:8] + ["s", "k"] for op in ("!=", "==")
                                                         for t in ("'x'", "'q'", "''")] + ["'x' == k", "'y' != k & b"]
    exprs += [f"{fn}({c})" for fn in ("abs", "sqrt", "log", "floor", "isna") for c in terms[:8]]
    exprs += [f"{fn}({a}, {b})" for fn in ("min", "max") for a in terms[:8] for b in ("f", "1")]
    exprs += [f"where({a}, {b}, 0)" for a in ("b", "i > 0", "nb", "f") for b in terms[:8]]
    exprs += [f"{c}.{m}" for c in terms[:8] for m in ("abs()", "isna()", "fillna(0)", "between(0, 2)", "isin([1])")]
    exprs += ["s.str.contains('T', case=False) and f > 0", "k.str.startswith('x') | b", "s.str.len() * i",
              "0 < f <= 3 < i", "1 - (i * j * 3) / ((i + 7) // 8 * 8)", "f * 1e308 * 10", "u - i", "b / 2"]
    assert len(exprs) > 2500
    differ = [e for e in exprs if _outcome(e, df) != _outcome(e, as_series)]
    assert not differ, [(e, _outcome(e, df), _outcome(e, as_series)) for e in differ[:3]]


# ------------------------------------------------ the plain-text path of compile_expr against tokenize's (the oracle)
def _compiled(text: str, plain: bool, monkeypatch) -> tuple:
    """What compile_expr makes of ``text``: the expression's names and parsed tree, or the refusal's text."""
    if not plain:
        monkeypatch.setattr(rule_expr, "_prepare_plain", lambda line: None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            e = rule_expr.compile_expr(text, ["a", "b", "duration_ps", "x1", "c_d"], ["p", "min_share"])
        return "ok", sorted(e.used), sorted(e.used_params), e.fn(pd.DataFrame({"a": [1.0, 2.0], "b": [0.5, 3.0],
                                                                              "duration_ps": [1, 2], "x1": [0, 1],
                                                                              "c_d": [1, 1]}),
                                                                 {"p": 1.5, "min_share": 0.1}).__repr__()
    except rule_expr.ExprError as e:
        return "refused", str(e)
    except Exception as e:  # (an expression that compiles but fails on the sample frame: the same failure)
        return "failed", type(e).__name__
    finally:
        monkeypatch.undo()


def _fuzz_texts() -> list[str]:
    rnd = random.Random(7)
    tokens = ["a", "b", "@p", "@min_share", "&", "|", "(", ")", " ", "duration_ps", "1_000", "1e5", "_x", "x1", "c_d",
              "@", "@if", "==", ">", "0x_1", "1_x", ".5", "not", "and", "or", "@=", "&=", "|=", "~", "'s'", '"t"', "#",
              "a.b", "a._b", "1j", "PARAM__p", "@_p", "[", "]", ":", "@ p", "@1", "-", "*", "\t", "\\", "é", "abs(",
              ",", "x1__", "@p_q", "b@p", "1@p"]
    chars = "ab_ 1e5.()@&|<>=!+-*/%~^,:[]x'\"#\\pmin_share\t"
    out = []
    for i in range(3000):
        if i % 2:
            out.append("".join(rnd.choice(chars) for _ in range(rnd.randint(1, 14))))
        else:
            out.append("".join(rnd.choice(tokens) for _ in range(rnd.randint(1, 7))))
    return out


def test_plain_path_compiles_as_tokenize_does(monkeypatch):
    """compile_expr with its plain-text path and with tokenize alone: the same result (names, value on a frame) or
    the same refusal, on every built-in rule's expressions and on 3,000 generated texts (about a third of them on
    the plain path)."""
    texts = [str(v) for r in load_rules() for v in (r.where, r.savings, *r.derive.values()) if v] + _fuzz_texts() + [
        "a == 'x|y'", "a == '@p'", 'b == "q&r" | a > 1', "a > 1 # & b", "a > @p | b", "(a > 1)&(b < 2)", "a>@p&b<@p"]
    plain = 0
    for t in texts:
        line = " ".join(t.strip().splitlines())
        fast = rule_expr._prepare_plain(line)
        if fast is not None:
            plain += 1
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", SyntaxWarning)
                    ast.parse(fast, mode="eval")
            except SyntaxError:
                pass  # (prepared again by tokenize: compared below)
            else:
                assert fast == rule_expr._prepare_tokens(line), t
        assert _compiled(t, True, monkeypatch) == _compiled(t, False, monkeypatch), t
    assert plain > 900  # (the path is taken: a test of it, not of tokenize twice)
