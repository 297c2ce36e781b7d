"""Shapes and element types of XLA HLO (``tracekit.proto.hlo_pb2.ShapeProto``): names, sizes, text."""
from __future__ import annotations

from tracekit.proto import hlo_pb2

PT = hlo_pb2.PrimitiveType

#: element type -> (short name as HLO text prints it, size in bits)
DTYPES: dict[int, tuple[str, int]] = {
    PT.PRED: ("pred", 8),
    PT.S1: ("s1", 1), PT.S2: ("s2", 2), PT.S4: ("s4", 4), PT.S8: ("s8", 8), PT.S16: ("s16", 16),
    PT.S32: ("s32", 32), PT.S64: ("s64", 64),
    PT.U1: ("u1", 1), PT.U2: ("u2", 2), PT.U4: ("u4", 4), PT.U8: ("u8", 8), PT.U16: ("u16", 16),
    PT.U32: ("u32", 32), PT.U64: ("u64", 64),
    PT.F16: ("f16", 16), PT.F32: ("f32", 32), PT.BF16: ("bf16", 16), PT.F64: ("f64", 64),
    PT.F8E5M2: ("f8e5m2", 8), PT.F8E4M3: ("f8e4m3", 8), PT.F8E4M3FN: ("f8e4m3fn", 8),
    PT.F8E4M3B11FNUZ: ("f8e4m3b11fnuz", 8), PT.F8E3M4: ("f8e3m4", 8), PT.F8E5M2FNUZ: ("f8e5m2fnuz", 8),
    PT.F8E4M3FNUZ: ("f8e4m3fnuz", 8), PT.F4E2M1FN: ("f4e2m1fn", 4), PT.F8E8M0FNU: ("f8e8m0fnu", 8),
    PT.C64: ("c64", 64), PT.C128: ("c128", 128),
    PT.TOKEN: ("token", 0), PT.OPAQUE_TYPE: ("opaque", 0),
}
FLOAT_DTYPES = {"f16", "bf16", "f32", "f64", "c64", "c128"} | {n for n, _ in DTYPES.values() if n.startswith(("f8", "f4"))}


_ENUM = frozenset(PT.values())
#: as plain ints: each ``PT.X`` goes through the enum wrapper's __getattr__ (about 1 µs), too slow per shape
TUPLE, TOKEN, OPAQUE = int(PT.TUPLE), int(PT.TOKEN), int(PT.OPAQUE_TYPE)
_NOT_ARRAY = (TUPLE, TOKEN, OPAQUE)


def dtype_name(element_type: int) -> str:
    known = DTYPES.get(element_type)
    if known is not None:
        return known[0]
    return PT.Name(element_type).lower() if element_type in _ENUM else "?"


def is_tuple(shape: hlo_pb2.ShapeProto) -> bool:
    return shape.element_type == TUPLE


def leaves(shape: hlo_pb2.ShapeProto):
    """The array shapes inside ``shape`` (itself when it is an array), depth first; iterative (no recursion, however
    deep the tuples nest), linear in the number of shapes."""
    if shape.element_type != TUPLE:
        yield shape
        return
    stack = [iter(shape.tuple_shapes)]
    while stack:
        s = next(stack[-1], None)
        if s is None:
            stack.pop()
        elif s.element_type == TUPLE:
            stack.append(iter(s.tuple_shapes))
        else:
            yield s


#: element counts stop growing here: more than any machine holds, and arithmetic on it stays cheap (a product of a
#: million dimensions of 2 would otherwise be a million-bit integer, quadratic to build)
COUNT_CAP = 1 << 128


def _count(dims) -> int:
    """Product of the dimensions, at most COUNT_CAP; a negative one (corrupt HLO: no shape has one) counts as 0."""
    n = 1
    for d in dims:
        d = int(d)
        if d <= 0:
            return 0
        if n < COUNT_CAP:
            n *= d
    return min(n, COUNT_CAP)


#: XLA counts an array's elements in an int64: a shape with more cannot be a real array's
MAX_ARRAY_ELEMENTS = (1 << 63) - 1


def array_dims(shape: hlo_pb2.ShapeProto) -> tuple[int, ...]:
    """The dimensions of a shape as ints; () when they cannot be a real array's (a negative dimension, or more
    elements than :data:`MAX_ARRAY_ELEMENTS`: a damaged module), so that products of them stay physical."""
    dims = tuple(int(d) for d in shape.dimensions)
    if any(d < 0 for d in dims) or _count(dims) > MAX_ARRAY_ELEMENTS:
        return ()
    return dims


def elements(shape: hlo_pb2.ShapeProto) -> int:
    """Number of elements of an array shape (0 for tuples, tokens)."""
    if shape.element_type in _NOT_ARRAY:
        return 0
    return _count(shape.dimensions)


def nbytes(shape: hlo_pb2.ShapeProto) -> int:
    """Bytes of the shape's data: sum over tuple leaves; sub-byte types are packed (rounded up per array)."""
    total = 0
    for s in leaves(shape):
        bits = DTYPES.get(s.element_type, ("?", 0))[1]
        if s.HasField("layout") and s.layout.element_size_in_bits > 0:
            bits = s.layout.element_size_in_bits
        total += (_count(s.dimensions) * bits + 7) // 8
    return total


def first_dtype(shape: hlo_pb2.ShapeProto) -> str:
    for s in leaves(shape):
        if s.element_type not in (TOKEN, OPAQUE):
            return dtype_name(s.element_type)
    return ""


def _array_text(shape: hlo_pb2.ShapeProto) -> str:
    et = shape.element_type
    if et == TOKEN or et == OPAQUE:
        return dtype_name(et) + "[]"
    return dtype_name(et) + "[" + ",".join(map(str, shape.dimensions)) + "]"


def text(shape: hlo_pb2.ShapeProto) -> str:
    """HLO-style text without layout: ``bf16[8,128]``, ``(f32[2], s32[])``; iterative, linear in its length. A
    work list of shapes and the punctuation between them; a tuple of arrays only is joined in one go."""
    out: list[str] = []
    work: list = [shape]
    while work:
        s = work.pop()
        if isinstance(s, str):
            out.append(s)
        elif s.element_type != TUPLE:
            out.append(_array_text(s))
        else:
            kids = s.tuple_shapes
            if all(k.element_type != TUPLE for k in kids):
                out.append("(" + ", ".join(map(_array_text, kids)) + ")")
                continue
            work.append(")")
            for k in range(len(kids) - 1, -1, -1):
                work.append(kids[k])
                if k:
                    work.append(", ")
            out.append("(")
    return "".join(out)
