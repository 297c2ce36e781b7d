"""The report's JSON text: ``json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False)``, byte for byte, in
less time. With ``indent`` set the standard library encodes in Python, a generator step per value; without it, in
C. Here a container whose values are all scalars (a report's rows, most of its bulk) is encoded by the C encoder
with the indented layout's separators (``","`` + newline + indentation), and only the nesting above those
containers is joined in Python. Types the envelope does not hold fall back to :func:`json.dumps` (its errors)."""
from __future__ import annotations

import json

#: C encoders by indentation (depth + 1 characters: a newline and one space per level)
_ENCODERS: dict[str, json.JSONEncoder] = {}
_CONTAINERS = (dict, list, tuple)


def _encoder(inner: str) -> json.JSONEncoder:
    enc = _ENCODERS.get(inner)
    if enc is None:
        enc = _ENCODERS[inner] = json.JSONEncoder(separators=("," + inner, ": "), sort_keys=True, ensure_ascii=False,
                                                  check_circular=False)
    return enc


def _leaf(values) -> bool:
    """True when no value is a container."""
    for v in values:
        t = type(v)
        if t is str or t is int or t is float or v is None or t is bool:
            continue
        if isinstance(v, _CONTAINERS):
            return False
    return True


def _key(k) -> str:
    """A dict key as JSON writes it: a string (numbers, booleans and None converted as :mod:`json` converts them)."""
    if not isinstance(k, str):
        if k is True or k is False or k is None:
            k = {True: "true", False: "false", None: "null"}[k]
        elif isinstance(k, float):
            k = _encoder("").encode(k)  # repr, or NaN / Infinity / -Infinity
        elif isinstance(k, int):
            k = int.__repr__(k)
        else:
            raise TypeError(f"keys must be str, int, float, bool or None, not {type(k).__name__}")
    return _encoder("").encode(k)


def _value(o, ind: str) -> str:
    """``o`` encoded, as ``json.dumps(indent=1, sort_keys=True, ensure_ascii=False)`` writes it on a line indented
    ``ind`` (a newline and the indentation)."""
    if isinstance(o, dict):
        if not o:
            return "{}"
        inner = ind + " "
        if _leaf(o.values()):
            return "{" + inner + _encoder(inner).encode(o)[1:-1] + ind + "}"
        return "{" + inner + ("," + inner).join([_key(k) + ": " + _value(v, inner)
                                                 for k, v in sorted(o.items())]) + ind + "}"
    if isinstance(o, (list, tuple)):
        if not o:
            return "[]"
        inner = ind + " "
        if _leaf(o):
            return "[" + inner + _encoder(inner).encode(o)[1:-1] + ind + "]"
        return "[" + inner + ("," + inner).join([_value(v, inner) for v in o]) + ind + "]"
    return _encoder(ind).encode(o)


def dumps(obj) -> str:
    """``json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)``, the same text."""
    try:
        return _value(obj, "\n")
    except (TypeError, ValueError, RecursionError):
        return json.dumps(obj, indent=1, sort_keys=True, ensure_ascii=False)
