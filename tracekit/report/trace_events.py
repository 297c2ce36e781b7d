"""Chrome trace-event JSON, written by hand: exact microsecond times from integer picoseconds, numbers and args
without NaN, metadata events, and a writer that emits events a chunk at a time."""
from __future__ import annotations

import json
import math

CHUNK = 50_000


def us(ps) -> str:
    """Integer picoseconds as exact decimal microseconds ('12.000345')."""
    ps = int(ps)
    sign, ps = ("-", -ps) if ps < 0 else ("", ps)
    return f"{sign}{ps // 1_000_000}.{ps % 1_000_000:06d}"


def num(v) -> str | None:
    if v is None:
        return None
    f = float(v)
    if not math.isfinite(f):
        return None
    return str(int(f)) if f == int(f) and abs(f) < 2**53 else f"{f:.6g}"


def args_json(pairs) -> str:
    parts = []
    for k, v in pairs:
        if isinstance(v, str):
            if v:
                parts.append(f'"{k}":{json.dumps(v, ensure_ascii=False)}')
        else:
            n = num(v)
            if n is not None:
                parts.append(f'"{k}":{n}')
    return "{" + ",".join(parts) + "}"


class Writer:
    """Comma-separated events into ``traceEvents``, a chunk at a time."""

    def __init__(self, f):
        self.f, self.n, self.first = f, 0, True

    def many(self, events) -> None:
        buf = []
        for e in events:
            buf.append(e)
            if len(buf) >= CHUNK:
                self._flush(buf)
                buf = []
        self._flush(buf)

    def _flush(self, buf) -> None:
        if not buf:
            return
        self.f.write(("\n" if self.first else ",\n") + ",\n".join(buf))
        self.first = False
        self.n += len(buf)


def meta(kind, pid, tid, name, sort=None) -> str:
    t = "" if tid is None else f',"tid":{tid}'
    a = f'{{"name":{json.dumps(name, ensure_ascii=False)}}}' if sort is None else f'{{"sort_index":{sort}}}'
    return f'{{"ph":"M","name":"{kind}","pid":{pid}{t},"args":{a}}}'
