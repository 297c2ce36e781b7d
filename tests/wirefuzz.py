"""Mutations of serialized XSpace traces for the decoder fuzz tests (tests/test_fuzz.py, and the AddressSanitizer
child it runs): every field of a trace is indexed (nested ones too), one is replaced by bytes that keep or break the
wire format (over-long tags and lengths, other wire types, unknown fields and groups, deleted or repeated fields,
new values), and every enclosing length prefix is rewritten to match; or the bytes are changed directly (bit flips,
truncation, inserted and deleted bytes). Plain Python, no pytest: the child process imports it."""
from __future__ import annotations

import random

#: which fields of a message are submessages we descend into (message kind -> {field: child kind})
CHILDREN = {"space": {1: "plane"}, "plane": {3: "line", 6: "stat"}, "line": {4: "event"}, "event": {4: "stat"},
            "stat": {}}
#: CHILDREN, and down into the ``Hlo Proto`` payloads: a plane's event metadata (map entries, their value, its stats),
#: a stat's bytes value read as an HloProto (module, computations, instructions, their shapes, tuple elements and
#: layouts). A bytes value that is not a message is a leaf (:func:`index` with these children tolerates it).
DEEP = {**CHILDREN, "plane": {3: "line", 4: "md_entry", 6: "stat"}, "md_entry": {2: "md"}, "md": {5: "stat"},
        "stat": {6: "hlo"}, "hlo": {1: "module"}, "module": {3: "computation"}, "computation": {2: "instruction"},
        "instruction": {3: "shape", 57: "shape"}, "shape": {4: "shape", 5: "layout"}, "layout": {}}
#: DEEP descends at most this many messages (a mutated shape may nest 100,000 deep: deeper fields are one leaf)
DEEP_LEVELS = 40
#: the kinds of message inside an HLO payload
HLO_KINDS = frozenset(("hlo", "module", "computation", "instruction", "shape", "layout"))


def varint(n: int, width: int | None = None) -> bytes:
    """Base-128 varint of ``n`` (64-bit two's complement for negatives), padded to ``width`` bytes with
    continuation bytes (an over-long encoding) when given."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b)
        if not n:
            break
    if width is not None:
        out += b"\x00" * max(0, width - len(out))
    return bytes(b | 0x80 for b in out[:-1]) + bytes(out[-1:])


def _read(buf: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = buf[i]
        n |= (b & 0x7F) << shift
        i += 1
        if b < 0x80:
            return n & ((1 << 64) - 1), i
        shift += 7


class Node:
    """One field of a serialized message: bytes [start, end), its tag ``tag`` in [start, value_start), and the
    length-delimited fields that enclose it (outermost first) as (length start, length end, payload start, end)."""
    __slots__ = ("start", "value_start", "end", "tag", "parents", "kind")

    def __init__(self, start, value_start, end, tag, parents, kind=""):
        self.start, self.value_start, self.end, self.tag, self.parents = start, value_start, end, tag, parents
        self.kind = kind  # the kind of message the field is in ("space", "plane", ..., "shape")


def index(buf: bytes, kind: str = "space", base: int = 0, parents: tuple = (), children: dict = CHILDREN) -> list[Node]:
    """Every field of a valid serialized message, nested fields included (raises on anything else; with
    ``children=DEEP`` a length-delimited field that does not parse as the message it may be is a leaf)."""
    out, i, kids = [], 0, children.get(kind, {})
    while i < len(buf):
        start = i
        tag, i = _read(buf, i)
        value_start, wt = i, tag & 7
        if wt == 0:
            _, i = _read(buf, i)
        elif wt in (1, 5):
            i += 8 if wt == 1 else 4
        elif wt == 2:
            n, j = _read(buf, i)
            node_parents = parents + ((base + i, base + j, base + j, base + j + n),)
            out_child = []
            if tag >> 3 in kids and (children is CHILDREN or len(parents) < DEEP_LEVELS):
                if j + n > len(buf):
                    raise ValueError("runs past the end")
                try:
                    out_child = index(buf[j:j + n], kids[tag >> 3], base + j, node_parents, children)
                except (ValueError, IndexError):
                    if children is CHILDREN:
                        raise
            i = j + n
            out.append(Node(base + start, base + value_start, base + i, tag, parents, kind))
            out.extend(out_child)
            continue
        else:
            raise ValueError(f"wire type {wt}")
        out.append(Node(base + start, base + value_start, base + i, tag, parents, kind))
    if i != len(buf):
        raise ValueError("runs past the end")
    return out


def splice(data: bytes, node: Node, new: bytes) -> bytes:
    """``data`` with the node's bytes replaced by ``new`` and every enclosing length prefix rewritten."""
    out = data[:node.start] + new + data[node.end:]
    delta = len(new) - (node.end - node.start)
    for ls, le, ps, pe in reversed(node.parents):  # innermost first: its prefix lies before everything it moves
        prefix = varint(pe - ps + delta)
        out = out[:ls] + prefix + out[le:]
        delta += len(prefix) - (le - ls)
    return out


def _unknown(rng: random.Random) -> bytes:
    f = rng.choice([7, 8, 12, 15, 16, 63, 64, 99, 2047, 2**28 + 3, 2**29 - 1])
    wt = rng.choice([0, 1, 2, 3, 4, 5, 6, 7])
    head = varint(f << 3 | wt)
    if wt == 0:
        return head + varint(rng.choice([0, 1, 2**63, 2**64 - 1]))
    if wt in (1, 5):
        return head + bytes(rng.randrange(256) for _ in range(8 if wt == 1 else 4))
    if wt == 2:
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(12)))
        return head + varint(len(payload)) + payload
    if wt == 3:  # a group: start, a field, end
        return head + varint(1 << 3) + varint(5) + varint(f << 3 | 4)
    return head


def mutate_tree(data: bytes, rng: random.Random, nodes: list[Node] | None = None) -> bytes:
    """One structural mutation of a valid trace (see the module docstring); ``nodes``: :func:`index` of it."""
    nodes = index(data) if nodes is None else nodes
    if not nodes:
        return data
    what = rng.randrange(13)
    if what >= 11:  # a field cut short, its enclosing lengths kept consistent; half the time one that ends the file
        last = [x for x in nodes if x.end == len(data)]
        n = rng.choice(last if what == 12 and last else nodes)
        return splice(data, n, data[n.start:rng.randrange(n.start, n.end)])
    n = rng.choice(nodes)
    old, tag, wt = data[n.start:n.end], n.tag, n.tag & 7
    value = data[n.value_start:n.end]
    if what == 0:  # an over-long tag: 2-11 bytes (6+ is more than a tag may take)
        new = varint(tag, rng.choice([2, 3, 4, 5, 6, 7, 9, 10, 11])) + value
    elif what == 1 and wt == 2:  # an over-long length prefix (valid up to 10 bytes)
        ln, j = _read(data, n.value_start)
        new = data[n.start:n.value_start] + varint(ln, rng.choice([2, 5, 10, 11])) + data[j:n.end]
    elif what == 2:  # the same field with another wire type (and a payload that fits it, or not)
        wt2 = rng.choice([0, 1, 2, 3, 4, 5, 6, 7])
        body = {0: varint(rng.choice([0, 1, 2**64 - 1])), 1: bytes(8), 5: bytes(4),
                2: varint(len(value)) + value}.get(wt2, b"")
        new = varint(tag & ~7 | wt2) + body
    elif what == 3:
        new = _unknown(rng) + old if rng.random() < 0.5 else old + _unknown(rng)
    elif what == 4:
        new = b""
    elif what == 5:
        new = old + old
    elif what == 6 and wt == 0:
        new = data[n.start:n.value_start] + varint(rng.choice([0, 1, 127, 128, 2**31, 2**32, 2**63, 2**64 - 1,
                                                               rng.getrandbits(64)]))
    elif what == 7 and wt == 2:  # a payload replaced: invalid UTF-8, doubled, emptied
        ln, j = _read(data, n.value_start)
        payload = rng.choice([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", data[j:n.end] * 2, b""])
        new = data[n.start:n.value_start] + varint(len(payload)) + payload
    elif what == 8:  # field number 0, or the largest one
        new = varint(rng.choice([0, (2**29 - 1) << 3]) | wt) + value
    elif what == 9:  # a tag wider than 32 bits
        new = varint(tag | 1 << rng.choice([32, 35, 40, 63])) + value
    else:  # the tag dropped, its value left behind
        new = value
    return splice(data, n, new)


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """One byte-level mutation: bit flips, a truncation, inserted or deleted bytes."""
    if not data:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(8)))
    b = bytearray(data)
    what = rng.randrange(4)
    if what == 0:
        for _ in range(rng.randrange(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif what == 1:
        del b[rng.randrange(len(b)):]
    elif what == 2:
        i = rng.randrange(len(b) + 1)
        b[i:i] = bytes(rng.choice([0x00, 0x80, 0xFF, 0x08, 0x22, rng.randrange(256)]) for _ in range(rng.randrange(1, 6)))
    else:
        i = rng.randrange(len(b))
        del b[i:i + rng.randrange(1, 6)]
    return bytes(b)


def mutate(data: bytes, rng: random.Random, nodes: list[Node] | None = None) -> bytes:
    """One to three mutations, structural or byte-level (``nodes``: :func:`index` of ``data``, if known)."""
    for k in range(rng.choice([1, 1, 2, 3])):
        try:
            data = mutate_tree(data, rng, nodes if k == 0 else None) if rng.random() < 0.7 else \
                mutate_bytes(data, rng)
        except (ValueError, IndexError):  # no longer parses as a tree: mutate its bytes
            data = mutate_bytes(data, rng)
    return data


class Seeds:
    """Valid traces to mutate, each indexed once."""

    def __init__(self, datas):
        self.items = [(d, index(d)) for d in datas]

    def mutated(self, rng: random.Random) -> bytes:
        data, nodes = rng.choice(self.items)
        return mutate(data, rng, nodes)


def outcome(read_space, data: bytes, **kw):
    """What a decoder's ``read_space`` makes of ``data``, comparable across the two decoders: ("ok", result with
    every column as bytes), ("corrupt", message), ("limit", kind, limit) or ("nomem",)."""
    from tracekit.ingest.pywire import LimitError
    try:
        planes, hostnames = read_space(data, kw.get("threads", 1), kw.get("max_events", -1), kw.get("budget", -1),
                                       kw.get("weights", (0, 0, 0, 0, 0)), kw.get("max_stats", -1))
    except LimitError as e:
        return ("limit", e.args[0], e.args[2])
    except ValueError as e:
        return ("corrupt", str(e))
    except MemoryError:
        return ("nomem",)
    return ("ok", [(pid, name, bytes(head), [tuple(bytes(memoryview(x)) if not isinstance(x, (int, str, list))
                                                   else x for x in line) for line in lines])
                   for pid, name, head, lines in planes], hostnames)


# ---- the XSpace mutation run (tests/xspace_mutation.py): byte-level damage, HLO payloads included ---------------

def _deep_tuple(depth: int) -> bytes:
    """A ShapeProto nested ``depth`` tuples deep around an f32[2], built without recursion (no quadratic copies)."""
    core = varint(2 << 3) + varint(11) + varint(3 << 3 | 2) + varint(1) + varint(2)  # element_type F32, dims [2]
    heads, size = [], len(core)
    for _ in range(depth):
        h = varint(2 << 3) + varint(13) + varint(4 << 3 | 2) + varint(size)  # TUPLE, tuple_shapes
        heads.append(h)
        size += len(h)
    return b"".join(reversed(heads)) + core


def mutate_length(data: bytes, rng: random.Random, nodes: list[Node]) -> bytes:
    """A length prefix made wrong: off by a little or a lot, zero, or huge; the enclosing lengths rewritten to
    match it half the time (so the damage is inside a message that is otherwise whole)."""
    delimited = [x for x in nodes if x.tag & 7 == 2]
    if not delimited:
        return mutate_bytes(data, rng)
    n = rng.choice(delimited)
    ln, j = _read(data, n.value_start)
    new_ln = rng.choice([ln + 1, ln - 1, ln + rng.randrange(2, 64), 0, ln * 2 + 1, 2**31 - 1, 2**32 + ln,
                         2**63 - 1, 2**64 - 1, rng.getrandbits(rng.choice([8, 16, 32, 64]))])
    new = data[n.start:n.value_start] + varint(max(new_ln, 0)) + data[j:n.end]
    if rng.random() < 0.5:
        return splice(data, n, new)
    return data[:n.start] + new + data[n.end:]


def mutate_hlo_nested(data: bytes, rng: random.Random, nodes: list[Node]) -> bytes:
    """Damage inside an ``Hlo Proto`` payload, every enclosing length kept consistent: a structural mutation of one
    of its fields (mutate_tree's), a shape replaced by a tuple nested 50 to 100,000 deep (past upb's depth limit of
    100 or not), or an instruction given 10^3..10^5 more operands or dimensions."""
    inside = [x for x in nodes if x.kind in HLO_KINDS]
    if not inside:
        return mutate_tree(data, rng, nodes)
    what = rng.randrange(4)
    if what == 0:
        shapes = [x for x in inside if x.kind in ("instruction", "shape") and x.tag >> 3 in (3, 4) and x.tag & 7 == 2]
        if shapes:
            n = rng.choice(shapes)
            body = _deep_tuple(rng.choice([50, 90, 95, 99, 100, 101, 200, 10**3, 10**5]))
            return splice(data, n, data[n.start:n.value_start] + varint(len(body)) + body)
    if what == 1:
        ins = [x for x in inside if x.kind == "instruction"]
        if ins:
            n = rng.choice(ins)
            count = rng.choice([10**3, 10**4, 10**5])
            field = rng.choice([36, 14])  # operand_ids, dimensions (packed int64)
            packed = varint(rng.choice([1, 2, 2**40])) * count
            extra = varint(field << 3 | 2) + varint(len(packed)) + packed
            return splice(data, n, data[n.start:n.end] + extra)
    return mutate_tree(data, rng, inside)


XSPACE_MUTATORS = ("flip", "truncate", "length", "hlo", "tree")


def mutate_xspace(data: bytes, rng: random.Random, nodes: list[Node], how: str) -> bytes:
    """One mutation of class ``how`` (XSPACE_MUTATORS) of a valid trace (``nodes``: ``index(data, children=DEEP)``):
    bit flips, a truncation, a wrong length prefix, damage nested in an HLO payload, or a structural mutation."""
    if how == "flip":
        b = bytearray(data)
        inside = [x for x in nodes if x.kind in HLO_KINDS] if rng.random() < 0.5 else []
        lo, hi = (min(x.start for x in inside), max(x.end for x in inside)) if inside else (0, len(b))
        for _ in range(rng.choice([1, 1, 2, 3, 8])):
            b[rng.randrange(lo, hi)] ^= 1 << rng.randrange(8)
        return bytes(b)
    if how == "truncate":
        return data[:rng.randrange(len(data))]
    if how == "length":
        return mutate_length(data, rng, nodes)
    if how == "hlo":
        return mutate_hlo_nested(data, rng, nodes)
    return mutate_tree(data, rng, nodes)
