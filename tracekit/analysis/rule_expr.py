"""Rule expressions: a small, safe, vectorized language for the ``where``, ``savings``, ``derive`` and
``report_if`` fields of rule files (format version 2).

An expression is parsed once, when the rule file is loaded, with Python's :mod:`ast`, and checked against the
allow-list below; anything else is refused with a message naming what is not allowed. It is then evaluated by a
tree of small closures over the frame's columns (pandas Series / numpy operations, one per node and per frame,
never per row). Nothing reaches modules, builtins, attributes or pandas ``query``/``eval``: a name can only be a
declared column (or aggregate, for ``report_if``) or one of the functions listed here, and ``@name`` only one of
the rule's own parameters.

Grammar (the allow-list)
------------------------
* **values**: column names of the frame the rule reads (as declared in :data:`tracekit.analysis.rule_schema.RULE_FRAMES`, plus
  the rule's ``derive`` columns, plus what its ``check`` adds); in ``report_if`` the finding's aggregates instead
  (``count``, ``share``, ``sum_<column>``, ...). ``@name``: a parameter of the rule. Numbers, strings in quotes,
  ``True``/``False``. Integer columns are read as 64-bit integers (no silent 32-bit overflow).
* **arithmetic**: ``+ - * / // % **`` and unary ``-``/``+``, on numbers only (not on text).
* **comparisons**: ``== != < <= > >=``, chained (``0 < share <= 1`` means ``0 < share and share <= 1``);
  ``x in [..]`` / ``x not in [..]`` (also ``x == [..]`` / ``x != [..]``) with a list of constants or ``@params``.
* **boolean**: ``and``/``or``/``not`` and ``&``/``|``/``~``, element-wise; as in pandas, ``&`` and ``|`` have the
  precedence of ``and`` and ``or`` (``a > 1 & b < 2`` is ``(a > 1) and (b < 2)``).
* **functions** (:data:`FUNCTIONS`): ``abs(x)``, ``min(a, b, ...)``, ``max(a, b, ...)`` (element-wise; NaN
  propagates), ``sqrt``, ``exp``, ``log``, ``log2``, ``log10``, ``floor``, ``ceil``, ``where(cond, a, b)``,
  ``isna(x)``, ``notna(x)``.
* **column methods** (:data:`METHODS`), only directly on an expression that reads a column: ``.isin([..])``,
  ``.between(lo, hi)`` (inclusive), ``.abs()``, ``.isna()``/``.isnull()``, ``.notna()``/``.notnull()``,
  ``.fillna(value)``; text methods ``.str.contains(pat, case=True, regex=True, na=None)``,
  ``.str.startswith(s)``, ``.str.endswith(s)``,
  ``.str.lower()``, ``.str.upper()``, ``.str.len()``. Text arguments are constants or ``@params``; keyword
  arguments are constants.

The functions and methods, with their implementations, are in :mod:`tracekit.analysis.rule_functions`.

Refused, among others: any other attribute (``x.__class__``, ``x.apply``, ``pd.eval``), indexing (``x[0]``,
``f(x)[0]``), names starting with ``_``, lambdas, comprehensions, f-strings, ``:=``, ``*``/``**`` unpacking,
conditional expressions (use ``where(c, a, b)``), ``is``, dicts and sets, and any name that is not a declared
column, parameter or function. Expressions are at most :data:`MAX_LENGTH` characters and
:data:`MAX_DEPTH` levels deep.
"""
from __future__ import annotations

import ast
import io
import keyword
import math
import operator
import re
import tokenize
from dataclasses import field
from typing import Any, Callable, Collection, Mapping

import numpy as np
import pandas as pd

from tracekit.analysis.rule_functions import FUNCTIONS, METHODS, STR_METHODS
from tracekit.analysis.rule_safety import RegexError, compile_regex
from tracekit.analysis.rule_values import PLAIN, Columns, comparison, is_bools, logical, negate
from tracekit.records import record

MAX_LENGTH = 4000
MAX_DEPTH = 60
_PARAM = "PARAM__"  # ``@name`` is rewritten to ``PARAM__name`` before parsing (user names cannot start so)


class ExprError(ValueError):
    """An expression outside the allow-list (at load) or one that cannot be evaluated on the data (at run)."""


# --------------------------------------------------------------------------------------------- the allow-list
_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge}
_WHAT = {ast.Attribute: "attribute access", ast.Subscript: "indexing ([...])", ast.Lambda: "a lambda",
         ast.ListComp: "a comprehension", ast.SetComp: "a comprehension", ast.DictComp: "a comprehension",
         ast.GeneratorExp: "a generator expression", ast.NamedExpr: "an assignment expression (:=)",
         ast.Starred: "unpacking (*)", ast.JoinedStr: "an f-string", ast.FormattedValue: "an f-string",
         ast.IfExp: "a conditional expression (use where(cond, a, b))", ast.Dict: "a dict", ast.Set: "a set",
         ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield", ast.Slice: "a slice",
         ast.List: "a list (only as the argument of isin or after `in`)",
         ast.Tuple: "a tuple (only as the argument of isin or after `in`)"}


def grammar_summary() -> str:
    """One line listing what an expression may use (for error messages)."""
    return ("allowed: columns, @parameters, numbers, 'strings', + - * / // % **, == != < <= > >= (chained), "
            "in [..], and or not & | ~, functions " + " ".join(FUNCTIONS) + ", methods "
            + " ".join(f".{m}()" for m in METHODS) + " " + " ".join(f".str.{m}()" for m in STR_METHODS)
            + " (docs/rules.md#expressions)")


# ------------------------------------------------------------------------------------------------ compiled form
@record(frozen=True)
class Expr:
    """A checked expression: its text, the names and parameters it reads, and the evaluator."""
    text: str
    names: frozenset
    params: frozenset
    fn: Callable = field(repr=False, compare=False)

    def evaluate(self, values: Any, params: Mapping) -> Any:
        """The value over ``values`` (a DataFrame, or a mapping name -> scalar for ``report_if``): a Series on the
        frame's index where it varies by row, else a single value."""
        try:
            cols = Columns(values)
            return cols.series(self.fn(cols, params))
        except ExprError:
            raise
        except (TypeError, ValueError, ArithmeticError, KeyError) as e:
            raise ExprError(f"`{self.text}` failed: {type(e).__name__}: {e}") from None


def _show(node: ast.AST) -> str:
    return ast.unparse(node).replace(_PARAM, "@")


#: text :func:`_prepare_plain` rewrites without tokenizing: ASCII names, numbers and operators (no string, comment,
#: backslash or non-ASCII name), no ``_`` that starts a name
_PLAIN = re.compile(r"[A-Za-z0-9_ \t.,:()\[\]<>=!+\-*/%~^@&|]*")
_NAME_UNDERSCORE = re.compile(r"(?:^|[^A-Za-z0-9_])_")
_AT = re.compile(r"@([A-Za-z][A-Za-z0-9_]*)?")
_SWAP = {"@": _PARAM, "&": " and ", "|": " or "}
_SWAPPED = re.compile(r"[@&|]")


def _prepare_plain(line: str) -> str | None:
    """:func:`_prepare_tokens` of ``line`` where it is plain text (:data:`_PLAIN`) that tokenizes without a
    refusal, without :mod:`tokenize` (a tenth of its time: a command compiles ~80 expressions); None for any
    other text. Outside strings and comments each ``@``, ``&`` and ``|`` is an operator token of its own, so
    rewriting the characters gives tokenize's text (``@=``, ``&=`` and ``|=``, one token each, never parse as an
    expression either way). Text that does not parse is prepared again by tokenize (:func:`compile_expr`), whose
    refusal is the one shown."""
    if not _PLAIN.fullmatch(line) or _NAME_UNDERSCORE.search(line) or _PARAM in line:
        return None
    for m in _AT.finditer(line):
        if m.group(1) is None or keyword.iskeyword(m.group(1)):
            return None
    return _SWAPPED.sub(lambda m: _SWAP[m.group()], line)


def _prepare_tokens(line: str) -> str:
    """``@name`` -> ``PARAM__name``, ``&``/``|`` -> ``and``/``or`` (pandas' precedence) in ``line`` (the
    expression's lines joined); names starting with ``_`` refused. Tokens are read with :mod:`tokenize`, so text
    inside strings is left alone."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(line).readline))
    except (tokenize.TokenError, SyntaxError) as e:
        raise ExprError(f"not a valid expression ({e.args[0]})") from None
    out, last = [], 0
    for i, t in enumerate(toks):
        if t.type == tokenize.NAME and t.string.startswith("_"):
            raise ExprError(f"`{t.string}`: names starting with `_` are not allowed")
        if t.type == tokenize.NAME and t.string.startswith(_PARAM):
            raise ExprError(f"`{t.string}` is not a valid name")
        if t.type != tokenize.OP or t.string not in ("@", "&", "|"):
            continue
        if t.string == "@":
            nxt = toks[i + 1] if i + 1 < len(toks) else None
            if nxt is None or nxt.type != tokenize.NAME or nxt.start != t.end or keyword.iskeyword(nxt.string):
                raise ExprError("`@` must be followed directly by a parameter name, e.g. @min_share")
        out.append(line[last:t.start[1]])
        out.append({"@": _PARAM, "&": " and ", "|": " or "}[t.string])
        last = t.end[1]
    return "".join(out) + line[last:]


def compile_expr(text: str, names: Collection[str], params: Collection[str], *, names_are: str = "column",
                 ) -> Expr:
    """Parse and check ``text``; ``names`` are the names it may read (columns or aggregates), ``params`` the
    rule's parameters. Raises :class:`ExprError` saying what is not allowed."""
    text = str(text).strip()
    if not text:
        raise ExprError("empty expression")
    if len(text) > MAX_LENGTH:
        raise ExprError(f"expression longer than {MAX_LENGTH} characters")
    line = " ".join(text.splitlines())
    plain = _prepare_plain(line)
    try:
        tree = ast.parse(plain, mode="eval") if plain is not None else None
    except (SyntaxError, RecursionError, MemoryError):
        tree = None  # (tokenize's refusal, or the parser's on the same text, below)
    try:
        if tree is None:
            tree = ast.parse(_prepare_tokens(line), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"not a valid expression ({e.msg})") from None
    except (RecursionError, MemoryError):
        raise ExprError(f"nested deeper than {MAX_DEPTH} levels") from None
    depth, todo = 0, [(tree.body, 1)]
    while todo:  # the compiler and the closures recurse: bound the depth first
        node, d = todo.pop()
        depth = max(depth, d)
        todo += [(child, d + 1) for child in ast.iter_child_nodes(node)]
    if depth > MAX_DEPTH:
        raise ExprError(f"nested deeper than {MAX_DEPTH} levels")
    c = _Compiler(set(names), set(params), names_are)
    fn = c.expr(tree.body)
    return Expr(text, frozenset(c.used), frozenset(c.used_params), fn)


class _Compiler:
    """Walks the tree once: refuses what is not allowed and builds closures ``fn(values, params) -> value``."""

    def __init__(self, names: set, params: set, names_are: str):
        self.names, self.params, self.names_are = names, params, names_are
        self.used, self.used_params = set(), set()

    def refuse(self, node: ast.AST, why: str):
        raise ExprError(f"`{_show(node)}`: {why}")

    def expr(self, node: ast.AST) -> Callable:
        method = getattr(self, "on_" + type(node).__name__, None)
        if method is None:
            self.refuse(node, f"{_WHAT.get(type(node), type(node).__name__)} is not allowed")
        return method(node)

    # --- leaves
    def on_Constant(self, node: ast.Constant):
        v = node.value
        if isinstance(v, bool) or (isinstance(v, (int, float)) and not isinstance(v, complex)) or isinstance(v, str):
            return lambda values, params: v
        self.refuse(node, f"a constant of type {type(v).__name__} is not allowed (numbers, strings, True, False)")

    def on_Name(self, node: ast.Name):
        name = node.id
        if name.startswith(_PARAM):
            p = name[len(_PARAM):]
            if p not in self.params:
                self.refuse(node, f"@{p} is not a parameter of this rule (parameters: "
                                  f"{', '.join(sorted(self.params)) or 'none'})")
            self.used_params.add(p)
            return lambda values, params: params[p]
        if name in FUNCTIONS:
            self.refuse(node, f"{name} is a function: call it, e.g. {name}(x)")
        if name not in self.names:
            import difflib
            close = difflib.get_close_matches(name, sorted(self.names), n=3)
            self.refuse(node, f"`{name}` is not a {self.names_are} here"
                              + (f" (did you mean {', '.join(close)}?)" if close else "")
                              + ("; parameters are written @name" if name in self.params else "")
                              + ("; a frame's columns are declared in tracekit.analysis.rule_schema.RULE_FRAMES (docs/rules.md#frames)"
                                 if self.names_are == "column" and name not in self.params else ""))
        self.used.add(name)
        return lambda values, params: values[name]

    # --- operators
    def on_BinOp(self, node: ast.BinOp):
        op = _ARITH.get(type(node.op))
        if op is None:
            self.refuse(node, f"the operator {type(node.op).__name__} is not allowed (+ - * / // % **)")
        for side in (node.left, node.right):
            if isinstance(side, ast.Constant) and isinstance(side.value, str):
                self.refuse(node, "arithmetic on text is not allowed")
        a, b = self.expr(node.left), self.expr(node.right)
        pow_ = op is operator.pow

        plain = op in PLAIN

        def binop(values, params):
            x, y = a(values, params), b(values, params)
            _numeric(x, node)
            _numeric(y, node)
            if pow_ and not isinstance(x, (pd.Series, np.ndarray)) and not isinstance(y, (pd.Series, np.ndarray)):
                try:
                    return float(x) ** float(y)  # no unbounded Python integer powers
                except OverflowError:
                    return math.inf
            if plain and not (is_bools(x) or is_bools(y)):
                with np.errstate(all="ignore"):  # (pandas' own arithmetic on the same arrays, without its wrappers)
                    return op(x, y)
            return op(values.series(x), values.series(y))
        return binop

    def on_UnaryOp(self, node: ast.UnaryOp):
        a = self.expr(node.operand)
        if isinstance(node.op, (ast.Not, ast.Invert)):
            return lambda values, params: negate(values, a(values, params))
        if isinstance(node.op, ast.USub):
            return lambda values, params: -_numeric(values.series(a(values, params)), node)
        return lambda values, params: +_numeric(values.series(a(values, params)), node)

    def on_BoolOp(self, node: ast.BoolOp):
        parts = [self.expr(v) for v in node.values]
        op = operator.and_ if isinstance(node.op, ast.And) else operator.or_

        def boolop(values, params):
            out = parts[0](values, params)
            for p in parts[1:]:
                out = logical(op, values, out, p(values, params))
            return out
        return boolop

    def on_Compare(self, node: ast.Compare):
        terms = [node.left, *node.comparators]
        steps = []
        for i, cop in enumerate(node.ops):
            left, right = terms[i], terms[i + 1]
            if isinstance(cop, (ast.In, ast.NotIn)) or (isinstance(cop, (ast.Eq, ast.NotEq))
                                                       and isinstance(right, (ast.List, ast.Tuple))):
                if not isinstance(right, (ast.List, ast.Tuple)):
                    self.refuse(node, "`in` needs a list of constants on its right, e.g. opcode in ['dot', 'fusion']")
                lf, items = self.expr(left), self.constants(right)
                neg = isinstance(cop, (ast.NotIn, ast.NotEq))
                steps.append(lambda v, p, lf=lf, items=items, neg=neg:
                             _isin(v.series(lf(v, p)), items(v, p), neg, node))
            elif type(cop) in _CMP:
                steps.append(lambda v, p, f=_CMP[type(cop)], lf=self.expr(left), rf=self.expr(right):
                             comparison(f, v, lf(v, p), rf(v, p)))
            else:
                self.refuse(node, "`is` is not allowed: use == or !=")

        def compare(values, params):
            out = steps[0](values, params)
            for s in steps[1:]:
                out = logical(operator.and_, values, out, s(values, params))
            return out
        return compare

    def constants(self, node) -> Callable:
        """A list/tuple literal of constants and @params."""
        if not isinstance(node, (ast.List, ast.Tuple)):
            self.refuse(node, "expected a list of constants, e.g. ['dot', 'fusion']")
        items = []
        for e in node.elts:
            if not (isinstance(e, ast.Constant) or (isinstance(e, ast.Name) and e.id.startswith(_PARAM))):
                self.refuse(e, "a list may only hold constants and @parameters")
            items.append(self.expr(e))
        return lambda values, params: [f(values, params) for f in items]

    # --- calls
    def on_Call(self, node: ast.Call):
        f = node.func
        if isinstance(f, ast.Name) and not f.id.startswith(_PARAM):
            if f.id not in FUNCTIONS:
                self.refuse(node, f"`{f.id}` is not an allowed function")
            lo, hi, impl = FUNCTIONS[f.id][:3]
            if node.keywords:
                self.refuse(node, f"{f.id}() takes no keyword arguments")
            self.count(node, f.id, lo, hi)
            args = [self.expr(a) for a in node.args]
            return lambda values, params: impl(*[a(values, params) for a in args])
        if isinstance(f, ast.Attribute):
            recv = f.value
            if isinstance(recv, ast.Attribute) and recv.attr == "str":
                table, label, recv = STR_METHODS, f".str.{f.attr}", recv.value
            else:
                table, label = METHODS, f".{f.attr}"
            before = set(self.used)
            self.used = set()
            on = self.expr(recv)  # the receiver first: `pd.x()` is refused for `pd`, not for `.x()`
            if f.attr not in table:
                self.refuse(node, f"{label}() is not an allowed method")
            if not self.used:
                self.refuse(node, f"{label}() must follow an expression that reads a {self.names_are}")
            self.used |= before
            lo, hi, kwnames, argkind, impl = table[f.attr][:5]
            self.count(node, label, lo, hi)
            if argkind == "list":
                args = [self.constants(a) for a in node.args]
            else:
                if argkind == "const":
                    for a in node.args:
                        if not (isinstance(a, ast.Constant) or (isinstance(a, ast.Name) and a.id.startswith(_PARAM))):
                            self.refuse(a, f"the argument of {label}() must be a constant or an @parameter")
                args = [self.expr(a) for a in node.args]
            kws = {}
            for k in node.keywords:
                if k.arg not in kwnames:
                    self.refuse(node, f"{label}() takes no keyword {k.arg or '**'!r}"
                                      + (f" (only {', '.join(kwnames)})" if kwnames else ""))
                if not isinstance(k.value, ast.Constant) or isinstance(k.value.value, bytes):
                    self.refuse(k.value, f"keyword {k.arg} of {label}() must be a constant")
                kws[k.arg] = k.value.value
            pat = node.args[0] if label == ".str.contains" and node.args else None
            if isinstance(pat, ast.Constant) and kws.get("regex", True):  # compiled now: refused at load
                try:
                    compile_regex(pat.value, case=bool(kws.get("case", True)))
                except RegexError as e:
                    raise ExprError(str(e)) from e  # the cause tells the loader it is the pattern, not the grammar

            def call(values, params):
                s = values.series(on(values, params))
                if not isinstance(s, pd.Series):
                    raise ExprError(f"`{_show(node)}`: {label}() needs a column, got a single value")
                return impl(s, *[a(values, params) for a in args], **kws)
            return call
        self.refuse(node, "only the listed functions and column methods can be called")

    def count(self, node: ast.Call, name: str, lo: int, hi: int | None):
        if any(isinstance(a, ast.Starred) for a in node.args):
            self.refuse(node, "unpacking (*) is not allowed")
        n = len(node.args)
        if n < lo or (hi is not None and n > hi):
            want = str(lo) if lo == hi else f"{lo} or more" if hi is None else f"{lo} to {hi}"
            self.refuse(node, f"{name}() takes {want} argument(s), got {n}")


# ------------------------------------------------------------------------------------------------ run-time ops
def _numeric(x, node):
    if isinstance(x, str) or (isinstance(x, pd.Series) and x.dtype.kind not in "biufc"):
        raise ExprError(f"`{_show(node)}`: arithmetic needs numbers, got text")
    return x


def _isin(s, items, neg, node):
    if not isinstance(s, pd.Series):
        out = s in items
        return (not out) if neg else out
    out = s.isin(items)
    return ~out if neg else out
