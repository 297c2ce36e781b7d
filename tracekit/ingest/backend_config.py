"""Read an HLO instruction's ``backend_config`` (``HloInstructionProto.backend_config``, bytes) in the two formats
XLA writes it in.

* **GPU backend configs as JSON.** XLA keeps a ``xla.gpu.GpuBackendConfig`` (``xla/service/gpu/backend_configs.proto``)
  on GPU instructions and serializes it with ``BackendConfigToRawString`` (``xla/hlo/ir/backend_config.cc``), i.e.
  ``tsl::ProtoToHumanReadableJson``: proto field names as written in the ``.proto`` (``gemm_backend_config``,
  ``dot_dimension_numbers``, ...), int64 values as JSON *strings* (``"lhs_contracting_dimensions": ["1"]``),
  enums by name (``"epilogue": "DEFAULT"``, ``"mask_type": "CAUSAL"``). The TPU custom call of Pallas/Mosaic
  writes its own JSON (``jax/_src/tpu_custom_call.py``, ``CustomCallBackendConfig.to_json``).
* **Typed-FFI attributes as an MLIR dictionary attribute.** A custom call with ``api_version =
  API_VERSION_TYPED_FFI`` (JAX's ``jax.ffi.ffi_lowering``, TransformerEngine's ``te_*_ffi``, Pallas on GPU) carries
  its attributes as the printed MLIR dictionary, e.g. ``{attn_heads = 16 : i64, is_training = true,
  scaling_factor = 1.250000e-01 : f32}``: either raw as the whole backend_config (what JAX writes) or inside
  ``GpuBackendConfig.custom_call_backend_config.attributes`` (``CustomCallBackendConfig`` in backend_configs.proto);
  XLA's GPU emitter reads it from either place (``IrEmitterUnnested``, custom-call thunk for typed FFI).

Nothing here raises on bad input: an unreadable config reads as ``{}``.
"""
from __future__ import annotations

import json
import re
import struct

_MAX_DEPTH = 64
_MAX_STRING = 4096  #: longer string values are kept as a placeholder, not decoded

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<str>"[^"\\]*(?:\\.[^"\\]*)*")
    | (?P<num>-?(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?))
    | (?P<id>[A-Za-z_][\w$.]*)
    | (?P<punct>[{}\[\]=,:<>])
    )""", re.VERBOSE)
_HEX_ESCAPE = re.compile(r"\\([0-9a-fA-F]{2})|\\(.)")


def json_config(inst) -> dict:
    """The instruction's backend_config parsed as JSON (a GpuBackendConfig, a TPU custom-call config, ...), or {}
    when it is empty or not a JSON object."""
    raw = inst.backend_config if hasattr(inst, "backend_config") else inst
    if not raw:
        return {}
    try:
        cfg = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return {}
    return cfg if isinstance(cfg, dict) else {}


def ffi_attributes(inst) -> dict:
    """Typed-FFI attributes of a custom call: the MLIR dictionary of the raw backend_config, or the one in
    ``GpuBackendConfig.custom_call_backend_config.attributes``; {} when neither reads."""
    raw = inst.backend_config or b""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    stripped = text.lstrip()
    if stripped.startswith("{") and not stripped.startswith('{"'):
        return parse_mlir_dict(text)
    cfg = json_config(raw)
    attrs = cfg.get("custom_call_backend_config", {})
    attrs = attrs.get("attributes") if isinstance(attrs, dict) else None
    return parse_mlir_dict(attrs) if isinstance(attrs, str) else {}


def ints(msg, key: str) -> list[int]:
    """A repeated int64 field of a JSON-printed proto message (values arrive as strings): ``[1, 0]``; [] when
    absent or malformed."""
    vals = msg.get(key, []) if isinstance(msg, dict) else []
    try:
        return [int(v) for v in vals] if isinstance(vals, list) else []
    except (TypeError, ValueError):
        return []


def sub(msg, *keys) -> dict:
    """``msg[k1][k2]...`` when every level is a JSON object, else {}."""
    for k in keys:
        msg = msg.get(k) if isinstance(msg, dict) else None
    return msg if isinstance(msg, dict) else {}


# --- MLIR dictionary attributes -----------------------------------------------------------------------------
class _Stop(Exception):
    pass


def parse_mlir_dict(text: str) -> dict:
    """Parse a printed MLIR dictionary attribute into Python values: integers (``16 : i64`` -> 16), floats (``1.0e+00
    : f32``, also ``0x3F800000 : f32``), booleans, strings (escapes decoded; bytes that are not UTF-8 are kept as
    latin-1), ``array<i64: 1, 2>`` and ``[..]`` as lists, nested dictionaries, unit attributes (a key without a
    value) as True; strings longer than 4096 characters (serialized kernel IR) as a placeholder. A value of another kind (``dense<...>``, a type, an affine map) is kept as its source text.
    Malformed text gives {} (or what was read before the error, never an exception)."""
    if not isinstance(text, str) or not text.strip().startswith("{"):
        return {}
    toks = _tokens(text)
    out: dict = {}
    try:
        pos, out = _dict(toks, 0, 0)
    except (_Stop, IndexError, ValueError, struct.error):
        pass
    return out


def _string_end(text: str, start: int) -> int:
    """Index just past the string literal opening at ``start`` (a quote not preceded by an odd run of
    backslashes closes it), or -1. Jumps from quote to quote: long escaped strings cost little."""
    pos = start + 1
    while True:
        q = text.find('"', pos)
        if q < 0:
            return -1
        back = q - 1
        while back > start and text[back] == "\\":
            back -= 1
        if (q - 1 - back) % 2 == 0:
            return q + 1
        pos = q + 1


def _tokens(text: str) -> list[tuple[str, str]]:
    toks, pos, n = [], 0, len(text)
    while pos < n:
        while pos < n and text[pos].isspace():
            pos += 1
        if pos < n and text[pos] == '"':
            end = _string_end(text, pos)
            if end < 0:
                break
            toks.append(("str", text[pos:end]))
            pos = end
            continue
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            toks.append(("other", text[pos]))
            pos += 1
            continue
        kind = m.lastgroup
        toks.append((kind, m.group(kind)))
        pos = m.end()
    return toks


def _expect(toks, pos, value) -> int:
    if toks[pos][1] != value:
        raise _Stop()
    return pos + 1


def _dict(toks, pos, depth) -> tuple[int, dict]:
    if depth > _MAX_DEPTH:
        raise _Stop()
    pos = _expect(toks, pos, "{")
    out: dict = {}
    if toks[pos][1] == "}":
        return pos + 1, out
    while True:
        kind, key = toks[pos]
        if kind == "str":
            key = _unquote(key)
        elif kind != "id":
            raise _Stop()
        pos += 1
        if toks[pos][1] == "=":
            pos, out[key] = _value(toks, pos + 1, depth + 1)
        else:
            out[key] = True  # unit attribute
        if toks[pos][1] == ",":
            pos += 1
            continue
        return _expect(toks, pos, "}"), out


def _value(toks, pos, depth):
    if depth > _MAX_DEPTH:
        raise _Stop()
    kind, tok = toks[pos]
    if tok == "{":
        return _dict(toks, pos, depth)
    if tok == "[":
        pos += 1
        items = []
        while toks[pos][1] != "]":
            pos, v = _value(toks, pos, depth + 1)
            items.append(v)
            if toks[pos][1] == ",":
                pos += 1
        return pos + 1, items
    if kind == "str":  # a long string (a kernel's serialized IR) is never read: not decoded
        return _typed(toks, pos + 1, _unquote(tok) if len(tok) <= _MAX_STRING else f"<{len(tok)}-character string>")
    if kind == "num":
        return _number(toks, pos)
    if tok in ("true", "false"):
        return pos + 1, tok == "true"
    if tok == "unit":
        return pos + 1, True
    if tok == "array" and toks[pos + 1][1] == "<":
        return _array(toks, pos + 2)
    return _skip(toks, pos)


def _typed(toks, pos, v):
    """Skip a ``: type`` suffix."""
    if pos < len(toks) and toks[pos][1] == ":":
        pos, _ = _skip(toks, pos + 1)
    return pos, v


def _number(toks, pos):
    tok = toks[pos][1]
    ty = toks[pos + 2][1] if pos + 2 < len(toks) and toks[pos + 1][1] == ":" else ""
    if tok.lower().startswith(("0x", "-0x")) and ty.startswith("f"):  # a float printed as its bit pattern
        bits = int(tok, 16)
        v = struct.unpack(">d", bits.to_bytes(8, "big"))[0] if ty == "f64" else \
            struct.unpack(">f", (bits & 0xFFFFFFFF).to_bytes(4, "big"))[0]
    elif re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", tok) and not ty.startswith(("f", "bf")):
        v = int(tok, 0) if tok.lstrip("-").startswith("0x") else int(tok)
    else:
        v = float(tok) if not tok.lower().startswith(("0x", "-0x")) else float(int(tok, 16))
    return (pos + 3 if ty else pos + 1), v


def _array(toks, pos):
    """``array<i64: 1, 2>`` (after ``array<``) -> [1, 2]; ``array<i64>`` -> []."""
    pos += 1  # element type
    items = []
    if toks[pos][1] == ":":
        pos += 1
        while toks[pos][1] != ">":
            kind, tok = toks[pos]
            if kind == "num":
                items.append(int(tok, 0) if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", tok) else float(tok))
            elif tok in ("true", "false"):
                items.append(tok == "true")
            pos += 1
    return pos + 1, items


def _skip(toks, pos):
    """A value of a kind not modelled: its text up to the next ``,`` or ``}`` at this nesting level."""
    level, start = 0, pos
    while True:
        tok = toks[pos][1]
        if tok in "{[<" and toks[pos][0] == "punct":
            level += 1
        elif tok in "}]>" and toks[pos][0] == "punct":
            if level == 0:
                break
            level -= 1
        elif tok == "," and level == 0:
            break
        pos += 1
    return pos, " ".join(t for _, t in toks[start:pos])


def _unquote(tok: str) -> str:
    body = tok[1:-1]
    if "\\" not in body:
        return body
    raw = bytearray()
    last = 0
    for m in _HEX_ESCAPE.finditer(body):
        raw += body[last:m.start()].encode("utf-8")
        if m.group(1) is not None:
            raw.append(int(m.group(1), 16))
        else:
            raw += {"n": b"\n", "t": b"\t", '"': b'"', "\\": b"\\"}.get(m.group(2), m.group(2).encode("utf-8"))
        last = m.end()
    raw += body[last:].encode("utf-8")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
