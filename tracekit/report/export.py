"""``tracekit export``: the trace and tracekit's analysis of it as Chrome/Perfetto trace-event JSON (opens in
ui.perfetto.dev and chrome://tracing).

What is written (times in µs as the format wants, exact to the picosecond):

* one process per device (``<host> <device>``), one thread per trace line the ops ran on (``XLA Ops``,
  ``Stream #N(Kernel)``, a host thread): every sync op execution as a complete event (``ph: X``) whose ``args``
  hold its roofline: ``bound_by``, ``efficiency``, ``predicted_us`` (roofline time), ``headroom_us``, ``flops``,
  ``bytes``, ``cost_source``, ``module``, ``step``;
* async windows (``*-start`` .. ``*-done``) as async events (``ph: b/e``) and flow arrows (``ph: s/f``) from the
  ``-start`` op to the ``-done`` op that completes it;
* per device a ``Steps`` thread (each step with its compute / exposed collective / wait / idle split), a
  ``tracekit: exposed collectives`` thread (collective time with no compute running: K minus C of the step
  breakdown) and a ``tracekit: idle gaps`` thread;
* a ``tracekit findings`` process: each finding's evidence windows as async events named ``<rule id> <name>``
  (overlapping windows stack), with the finding's message and savings in ``args``.

``--steps A-B`` keeps what overlaps the time of steps A..B, ``--device`` the named devices. Events are written as
they are formatted, a chunk of rows at a time (no second copy of the trace in memory), through
:func:`tracekit.fileio.stream`: a temporary file that replaces the output only when complete (a device, a FIFO or
``-`` is written through, as for every other output).
"""
from __future__ import annotations

import gzip
import io
import json
import os

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit import fileio
from tracekit.errors import TraceError
from tracekit.records import record
from tracekit.report import export_tracks
from tracekit.report.trace_events import Writer, args_json, meta, num, us



@record(frozen=True)
class Exported:
    path: str
    ops: int
    async_windows: int
    steps: int
    findings: int
    finding_windows: int
    gaps: int
    exposed_windows: int


def parse_steps(text: str | None) -> tuple[int, int] | None:
    """'3-7' -> (3, 7); '5' -> (5, 5); None -> None. TraceError when malformed."""
    if not text:
        return None
    a, sep, b = text.partition("-")
    try:
        lo, hi = int(a), int(b) if sep else int(a)
    except ValueError:
        raise TraceError(f"bad --steps {text!r}", hint="write A-B (e.g. 3-7) or one step number") from None
    if hi < lo:
        raise TraceError(f"bad --steps {text!r}: the range is empty", hint="write A-B with A <= B")
    return lo, hi


def step_window(tr_steps: pd.DataFrame, steps: tuple[int, int] | None, devices: tuple):
    """(start, end) in ps from the first start to the last end of steps ``steps`` = (A, B) on ``devices``;
    None when ``steps`` is None (everything)."""
    if steps is None:
        return None
    s = tr_steps
    if devices:
        s = s[s["device"].astype(str).isin(devices)]
    s = s[(s["step"] >= steps[0]) & (s["step"] <= steps[1])]
    if not len(s):
        have = sorted(set(tr_steps["step"].tolist()))
        hint = f"the trace has steps {have[0]}..{have[-1]}" if have else "the trace has no steps"
        raise TraceError(f"no step in {steps[0]}-{steps[1]}", hint=hint)
    return int(s["start_ps"].min()), int((s["start_ps"] + s["duration_ps"]).max())


def _keep(df: pd.DataFrame, win, devices: tuple, time_col: str = "duration_ps") -> pd.DataFrame:
    """Rows on ``devices`` (all when empty) that overlap the time window ``win`` (all when None)."""
    m = np.ones(len(df), bool)
    if devices and "device" in df.columns:
        m &= df["device"].astype(str).isin(devices).to_numpy()
    if win is not None and len(df):
        a = column_numpy(df, "start_ps", np.int64)
        b = a + df[time_col].to_numpy(np.int64)
        m &= (b > win[0]) & (a < win[1]) | ((a == b) & (a >= win[0]) & (a < win[1]))
    return df[m]


def check_devices(ops: pd.DataFrame, devices: tuple) -> None:
    known = set(ops["device"].astype(str))
    missing = [d for d in devices if d not in known]
    if missing:
        raise TraceError(f"no ops on device {missing[0]!r}", hint=f"devices: {', '.join(sorted(known))}")


def write(out: str | os.PathLike, ops: pd.DataFrame, frames: dict, findings: list, done_to_start: dict, *,
          window: tuple[int, int] | None = None, devices=()) -> Exported:
    """Write the trace-event JSON (``.gz``: gzipped) of ``ops`` (with roofline columns), the rule ``frames``
    (steps breakdown, gaps, devices) and ``findings``; ``window`` (ps) and ``devices`` restrict what is written.
    ``done_to_start`` maps (program id, -done op) to the -start op it completes (the HLO's; else by name)."""
    from tracekit.analysis import timeline as tl
    devices = tuple(devices or ())
    out = os.fspath(out)
    with fileio.stream(out, what="the export") as raw:  # a temporary renamed when complete; devices written through
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6) if out.endswith(".gz") else None
        with io.TextIOWrapper(gz or raw, encoding="utf-8") as f:
            f.write('{"displayTimeUnit":"ns","otherData":{"producer":"tracekit export"},"traceEvents":[')
            counts = _write_all(Writer(f), ops, frames, findings, window, devices, tl, done_to_start)
            f.write("\n]}\n")
    return Exported(out, **counts)


def _write_all(w: Writer, ops, frames, findings, win, devices, tl, d2s) -> dict:
    sel = _keep(ops, win, devices)
    # processes: one per (host, device); threads: one per line the ops ran on, then tracekit's own
    keys = sorted({(str(h), str(d)) for h, d in zip(sel["host"], sel["device"])}) if len(sel) else []
    pid = {k: i + 1 for i, k in enumerate(keys)}
    multi_host = len({h for h, _ in keys}) > 1
    tids: dict = {}
    head = []
    for k in keys:
        head.append(meta("process_name", pid[k], None, f"{k[0]} {k[1]}" if multi_host or k[0] else k[1]))
        head.append(meta("process_sort_index", pid[k], None, None, sort=pid[k]))
    for h, d, ln in sorted({(str(h), str(d), str(ln)) for h, d, ln in zip(sel["host"], sel["device"], sel["line"])}):
        t = tids.setdefault((h, d, ln), len([x for x in tids if x[:2] == (h, d)]) + 1)
        head.append(meta("thread_name", pid[(h, d)], t, ln or "ops"))
    extra = {"Steps": 1000, "tracekit: exposed collectives": 1001, "tracekit: idle gaps": 1002}
    for k in keys:
        for name, t in extra.items():
            head.append(meta("thread_name", pid[k], t, name))
            head.append(meta("thread_sort_index", pid[k], t, None, sort=t))
    fpid = len(keys) + 1
    head.append(meta("process_name", fpid, None, "tracekit findings"))
    head.append(meta("process_sort_index", fpid, None, None, sort=0))
    for k, f in enumerate(findings):
        head.append(meta("thread_name", fpid, k + 1, f"{f.rule_id} {f.name}"))
    w.many(head)
    sync = ~column_numpy(sel, "is_async", bool)
    n_ops = _write_ops(w, sel[sync], pid, tids)
    n_async = _write_async(w, sel, sync, pid, tids, d2s)
    st = _keep(frames["steps"], win, devices, "step_ps")
    w.many(_step_events(st, pid))
    gaps = _keep(frames["gaps"], win, devices)
    w.many(_gap_events(gaps, pid))
    n_exp = export_tracks.write_exposed(w, sel, pid, tl)
    nf, nwin = export_tracks.write_findings(w, findings, ops, frames, win, devices, fpid)
    return {"ops": n_ops, "async_windows": n_async, "steps": len(st), "findings": nf, "finding_windows": nwin,
            "gaps": len(gaps), "exposed_windows": n_exp}


def _escaped(o: pd.DataFrame, name: str) -> tuple[np.ndarray, list, list]:
    """Codes of a categorical column (-1: absent), its categories, and each as a JSON string (escaped once per
    distinct value); the last JSON string ('""') is what code -1 picks."""
    if name not in o.columns:
        return np.full(len(o), -1), [], ['""']
    c = o[name] if isinstance(o[name].dtype, pd.CategoricalDtype) else o[name].astype(str).astype("category")
    cats = [str(v) for v in c.cat.categories.tolist()]
    return c.array.codes, cats, [json.dumps(v, ensure_ascii=False) for v in cats] + ['""']


def _write_ops(w: Writer, o: pd.DataFrame, pid: dict, tids: dict) -> int:
    if not len(o):
        return 0
    (hc, hr, _), (dc, dr, _), (lc, lr, _) = (_escaped(o, c) for c in ("host", "device", "line"))
    oc, _, on = _escaped(o, "op")
    cc, _, cn = _escaped(o, "category")
    mc, _, mn = _escaped(o, "module")
    bc, _, bn = _escaped(o, "bound_by")
    sc, _, sn = _escaped(o, "cost_source")
    start, dur = column_numpy(o, "start_ps", np.int64), column_numpy(o, "duration_ps", np.int64)
    step = column_numpy(o, "step", np.int64)
    cols = {k: (o[k].to_numpy(float) if k in o else np.full(len(o), np.nan))
            for k in ("efficiency", "roofline_ps", "headroom_ps", "flops", "bytes_accessed")}

    def events():
        where: dict = {}  # (host, device, line) codes -> '"pid":P,"tid":T'
        for i in range(len(o)):
            key = (hc[i], dc[i], lc[i])
            loc = where.get(key)
            if loc is None:
                h, d = hr[hc[i]], dr[dc[i]]
                loc = where[key] = f'"pid":{pid[(h, d)]},"tid":{tids[(h, d, lr[lc[i]])]}'
            args = [f'"module":{mn[mc[i]]}', f'"bound_by":{bn[bc[i]]}', f'"cost_source":{sn[sc[i]]}']
            for k, name in (("efficiency", "efficiency"), ("flops", "flops"), ("bytes_accessed", "bytes")):
                n = num(cols[k][i])
                if n is not None:
                    args.append(f'"{name}":{n}')
            for k, name in (("roofline_ps", "predicted_us"), ("headroom_ps", "headroom_us")):
                v = cols[k][i]
                if v == v:
                    args.append(f'"{name}":{us(round(v))}')
            if step[i] >= 0:
                args.append(f'"step":{step[i]}')
            yield (f'{{"ph":"X",{loc},"ts":{us(start[i])},"dur":{us(dur[i])},"name":{on[oc[i]]},'
                   f'"cat":{cn[cc[i]]},"args":{{{",".join(args)}}}}}')
    w.many(events())
    return len(o)


def _write_async(w: Writer, sel: pd.DataFrame, sync: np.ndarray, pid: dict, tids: dict, d2s: dict) -> int:
    """Async windows as b/e async events on their device, and a flow arrow from the window's -start op to the
    first -done op completing it (by the HLO's operand, else by name) that starts at or after it on the device."""
    win = sel[~sync]
    if not len(win):
        return 0
    ops = sel[sync]
    opc = ops["opcode"].astype(str)
    starts = ops[opc.str.endswith("-start").to_numpy()]
    done = ops[opc.str.endswith("-done").to_numpy()]
    sline = {(h, d, o, int(s)): ln for h, d, o, ln, s in zip(
        starts["host"].astype(str), starts["device"].astype(str), starts["op"].astype(str),
        starts["line"].astype(str), starts["start_ps"])}
    dones: dict = {}  # (host, device, start op) -> sorted [(start, line)]
    for h, d, o, p_, ln, s in zip(done["host"].astype(str), done["device"].astype(str), done["op"].astype(str),
                                  done["program_id"], done["line"].astype(str), done["start_ps"]):
        so = d2s.get((int(p_), o), o.replace("-done", "-start", 1))
        dones.setdefault((h, d, so), []).append((int(s), ln))
    for v in dones.values():
        v.sort()
    dstarts = {k: np.array([x[0] for x in v], np.int64) for k, v in dones.items()}

    def events():
        for k, (h, d, op, s, du) in enumerate(zip(win["host"].astype(str), win["device"].astype(str),
                                                  win["op"].astype(str), win["start_ps"], win["duration_ps"])):
            p, name, aid = pid[(h, d)], json.dumps(op, ensure_ascii=False), k + 1
            yield f'{{"ph":"b","pid":{p},"tid":0,"ts":{us(s)},"name":{name},"cat":"async window","id":{aid}}}'
            yield f'{{"ph":"e","pid":{p},"tid":0,"ts":{us(s + du)},"name":{name},"cat":"async window","id":{aid}}}'
            sl = sline.get((h, d, op, int(s)))
            ds = dstarts.get((h, d, op))
            if sl is None or ds is None:
                continue
            j = int(np.searchsorted(ds, s, "left"))
            if j >= len(ds):
                continue
            t, dl = dones[(h, d, op)][j]
            yield (f'{{"ph":"s","pid":{p},"tid":{tids[(h, d, sl)]},"ts":{us(s)},"name":"async","cat":"async",'
                   f'"id":{aid}}}')
            yield (f'{{"ph":"f","bp":"e","pid":{p},"tid":{tids[(h, d, dl)]},"ts":{us(t)},"name":"async",'
                   f'"cat":"async","id":{aid}}}')
    w.many(events())
    return len(win)


def _step_events(st: pd.DataFrame, pid: dict):
    for r in st.itertuples(index=False):
        p = pid.get((str(r.host), str(r.device)))
        if p is None:
            continue
        args = args_json([("compute_us", r.compute_ps / 1e6), ("exposed_collectives_us", r.collective_exposed_ps / 1e6),
                      ("wait_us", r.wait_ps / 1e6), ("idle_us", r.idle_ps / 1e6)])
        yield (f'{{"ph":"X","pid":{p},"tid":1000,"ts":{us(r.start_ps)},"dur":{us(r.step_ps)},'
               f'"name":"step {int(r.step)}","cat":"step","args":{args}}}')


def _gap_events(gaps: pd.DataFrame, pid: dict):
    for r in gaps.itertuples(index=False):
        p = pid.get((str(r.host), str(r.device)))
        if p is None:
            continue
        args = args_json([("kind", str(r.kind)), ("step", r.step if r.step >= 0 else None)])
        yield (f'{{"ph":"X","pid":{p},"tid":1002,"ts":{us(r.start_ps)},"dur":{us(r.duration_ps)},'
               f'"name":"idle","cat":"tracekit idle gap","args":{args}}}')


