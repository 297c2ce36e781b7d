"""The bracket structure of one HLO instruction's text, found in one linear pass, and its shapes parsed without
recursion, under stated bounds.

An instruction's text comes from a trace (a trace-viewer JSON ``long_name``, the name of an XSpace op's metadata),
so it may be anything. One pass (:class:`Scan`) pairs every bracket (``()``, ``{}``, ``[]``; quoted strings, with
their backslash escapes, skipped) and files every comma under the innermost bracket around it; a piece of the
text between two of those commas is then found without scanning again, so parsing a text of n characters costs
O(n) time and memory whatever its nesting, and no parser recursion can run out of stack.

Bounds, each checked before the work it bounds (a real instruction is far inside all of them: the largest of the
third-party traces is 217 characters, tuples nest a few levels, fusions take tens of operands):

- :data:`MAX_TEXT` characters of text (checked first: a longer text is not scanned at all);
- :data:`MAX_DEPTH` brackets nested in one another (tuple depth; checked by the scan, before any shape is built).
  Protobuf (upb) refuses messages nested deeper than 100, and a shape sits 5 levels down in an ``HloProto``;
- :data:`MAX_OPERANDS` operands (checked on the scan's comma count, before any operand is parsed);
- :data:`MAX_ELEMENTS` shape elements (tuples, arrays and their dimensions and layout numbers, over the result and
  every operand shape; counted as they are parsed, so no more than that is built).

A text over a bound raises :class:`OverBound`. What a user gets for it (:func:`tracekit.ingest.hlotext.module`):
that op is left without HLO (so without a roofline prediction) and one warning counts such ops; the rest of the
trace is analysed as usual (exit code 0, or 1 from ``--fail-on``). One absurd op does not make a whole trace
unusable, so it is never an error on its own.
"""
from __future__ import annotations

import re

from tracekit.ingest import hloshape
from tracekit.proto import hlo_pb2

#: longest instruction text parsed (characters)
MAX_TEXT = 1 << 20
#: deepest nesting of brackets (tuple shapes inside tuple shapes, attribute braces)
MAX_DEPTH = 64
#: most operands of one instruction
MAX_OPERANDS = 1 << 14
#: most shape elements (tuples, arrays, dimensions, layout numbers) of one instruction's shapes
MAX_ELEMENTS = 1 << 16

#: HLO text element type name -> PrimitiveType
TYPES = {name: pt for pt, (name, _) in hloshape.DTYPES.items()}
_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")
_MEMSPACE = re.compile(r"S\((\d+)\)")
_ELEMBITS = re.compile(r"E\((\d+)\)")
_INTS = re.compile(r"-?\d+")
#: a quoted string (backslash escapes included; an unterminated one runs to the end), a bracket, or a comma
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"?|[(){}\[\],]')
_NONBLANK = re.compile(r"\S")
_CLOSE = {"(": ")", "{": "}", "[": "]"}
_TOP = -1  # the owner of the commas outside every bracket


class OverBound(Exception):
    """A text over one of the bounds above; ``what`` names the bound ('text length', 'nesting depth', ...)."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


class Scan:
    """One pass over ``s``: ``close[i]`` is the index of the bracket that closes the one at ``s[i]`` (len(s) when
    it never closes; a closing bracket of the wrong kind is ignored, as XLA's printer never writes one);
    ``commas[i]`` the commas directly inside it (``commas[-1]``: those outside every bracket)."""

    __slots__ = ("s", "close", "commas")

    def __init__(self, s: str):
        if len(s) > MAX_TEXT:
            raise OverBound("text length")
        self.s = s
        close: dict[int, int] = {}
        commas: dict[int, list[int]] = {_TOP: []}
        stack: list[tuple[int, str]] = []  # (index of the open bracket, the closer it waits for)
        for m in _TOKEN.finditer(s):
            j, c = m.start(), s[m.start()]
            if c == ",":
                commas[stack[-1][0] if stack else _TOP].append(j)
            elif c in _CLOSE:
                if len(stack) >= MAX_DEPTH:
                    raise OverBound("nesting depth")
                stack.append((j, _CLOSE[c]))
                commas[j] = []
            elif c != '"' and stack and c == stack[-1][1]:
                close[stack.pop()[0]] = j
        for j, _ in stack:
            close[j] = len(s)
        self.close, self.commas = close, commas

    def end(self, i: int) -> int:
        """Index just past the bracket that closes the one at ``s[i]`` (len(s) when it never closes)."""
        return min(self.close[i] + 1, len(self.s))

    def pieces(self, i: int, start: int | None = None) -> list[tuple[int, int]]:
        """(start, end) of the pieces of text between the commas directly inside the bracket at ``i`` (or, for
        ``i == -1``, outside every bracket from ``start`` on), blank pieces left out."""
        if i == _TOP:
            lo, hi = start or 0, len(self.s)
        else:
            lo, hi = i + 1, self.close[i]
        cuts = [j for j in self.commas.get(i, ()) if lo <= j < hi]
        out, a = [], lo
        for j in cuts + [hi]:
            if _NONBLANK.search(self.s, a, j):
                out.append((a, j))
            a = j + 1
        return out

    def count(self, i: int) -> int:
        """Number of commas directly inside the bracket at ``i``."""
        return len(self.commas.get(i, ()))


def split_top(s: str, sep: str = ",") -> list[str]:
    """``s`` split at commas outside brackets and quotes, each piece stripped, blank ones left out (one pass)."""
    if sep != ",":
        raise ValueError("split_top splits at commas")
    sc = Scan(s)
    return [s[a:b].strip() for a, b in sc.pieces(_TOP)]


class Budget:
    """The shape elements an instruction may still build (:data:`MAX_ELEMENTS` in all)."""

    __slots__ = ("left",)

    def __init__(self, n: int = MAX_ELEMENTS):
        self.left = n

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise OverBound("shape elements")


def parse_shape(s: str, i: int = 0, scan: Scan | None = None, budget: Budget | None = None,
                end: int | None = None) -> tuple[hlo_pb2.ShapeProto, int]:
    """The shape starting at ``s[i]`` (leading spaces skipped; ``end``: where its piece of text ends) and the index
    after it; ValueError if there is none, OverBound past a bound. Iterative: a work list of (shape to fill, start,
    end of its text), tuple elements pushed in reverse so that they fill in order."""
    scan = scan if scan is not None else Scan(s)
    budget = budget if budget is not None else Budget()
    end = len(s) if end is None else end
    root = hlo_pb2.ShapeProto()
    after = i
    work = [(root, i, end)]
    while work:
        shape, a, b = work.pop()
        while a < b and s[a] == " ":
            a += 1
        budget.take(1)
        if a < b and s[a] == "(":
            shape.element_type = hloshape.TUPLE
            parts = scan.pieces(a)
            budget.take(len(parts))
            kids = [shape.tuple_shapes.add() for _ in parts]
            work.extend((kid, pa, pe) for kid, (pa, pe) in zip(reversed(kids), reversed(parts)))
            if shape is root:
                after = scan.end(a)
            continue
        m = _ARRAY.match(s, a, b)
        if not m or m.group(1) not in TYPES:
            raise ValueError(f"no shape at {s[a:a + 20]!r}")
        shape.element_type = TYPES[m.group(1)]
        dims = m.group(2)
        budget.take(dims.count(","))
        for d in filter(None, (x.strip() for x in dims.split(","))):
            dynamic = d.startswith("<=")
            shape.dimensions.append(int(d[2:] if dynamic else d))
            shape.is_dynamic_dimension.append(dynamic)
        j = m.end()
        if j < b and s[j] == "{":
            k = scan.end(j)
            order, _, tail = s[j + 1:k - 1].partition(":")
            budget.take(order.count(","))
            shape.layout.minor_to_major.extend(int(x) for x in _INTS.findall(order))
            ms, eb = _MEMSPACE.search(tail), _ELEMBITS.search(tail)
            if ms:
                shape.layout.memory_space = int(ms.group(1))
            if eb:
                shape.layout.element_size_in_bits = int(eb.group(1))
            j = k
        if shape is root:
            after = j
    return root, after
