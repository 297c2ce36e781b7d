"""Text from a trace, made safe to print on a terminal.

Op, module, kernel, line and host names come from the trace, and a trace is input: a name may hold colour codes,
title-setting OSC sequences, BEL, clear-screen, a right-to-left override or a newline that splits a table row.
Everything that reaches a terminal (the text report, ``info``, ``ops``, ``diff``, error messages, the hook's log
lines) goes through :func:`safe` (or :func:`safe_tree` / :func:`safe_block`): control characters (C0, DEL, C1),
format characters (Unicode category Cf: bidi overrides and isolates, zero-width characters, ...), line and
paragraph separators and lone surrogates are written as escapes (``\\x1b``, ``\\u202e``; ``\\n``, ``\\r``, ``\\t``),
so an ANSI/OSC sequence shows as text and does nothing. Printable text, including non-ASCII, is kept as it is.

HTML, Markdown, SARIF and JSON keep their own escaping; :func:`safe_block` is for when one of them is printed to a
terminal anyway (its structure, the newlines, is kept).
"""
from __future__ import annotations

import unicodedata

#: Unicode categories written as escapes: control, format, line separator, paragraph separator, surrogate.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    if unicodedata.category(c) not in UNSAFE_CATEGORIES:
        return c
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def safe(s) -> str:
    """``s`` (any object, as ``str``) with every unsafe character escaped; newlines become ``\\n``."""
    s = s if isinstance(s, str) else str(s)
    if s.isprintable():  # the usual case: nothing to escape
        return s
    return "".join(map(_escape, s))


def safe_block(text: str) -> str:
    """Already-rendered multi-line text with every unsafe character escaped except its newlines."""
    if not text or text.replace("\n", "").isprintable():
        return text
    return "\n".join(safe(line) for line in text.split("\n"))


def safe_tree(obj):
    """A copy of a JSON-like value (dicts, lists, tuples) with :func:`safe` applied to every string in it, keys
    included; other values are kept as they are."""
    if isinstance(obj, str):
        return safe(obj)
    if isinstance(obj, dict):
        return {safe_tree(k): safe_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [safe_tree(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(safe_tree(v) for v in obj)
    return obj
