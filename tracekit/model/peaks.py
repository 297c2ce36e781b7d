"""Peak-source policy and the roofline's self-check.

Which number is the peak (see also :func:`tracekit.model.chips.detect`):

* a chip the table identifies exactly (its variant too: H100 SXM and PCIe differ by a quarter) uses the trace's
  own stat when it agrees with the sourced datasheet number within 20 %, else the datasheet number; the chip's
  ``trace_reported`` says what the trace said and whether it was used;
* a chip that is not an exact table part (a CPU: estimated or calibrated; a chip the table does not know; a GPU
  whose variant is ambiguous) has estimated peaks. Once every executed instruction's cost is counted once, an
  estimate below what the trace itself demonstrates is raised (:func:`raise_estimates`), per chip and term
  (FLOP/s per compute dtype, memory bandwidth, a CPU's cache rate, interconnect and host link), to the best
  MEDIAN rate of an op over its timed executions (:func:`tracekit.model.demonstrated.demonstrated`: at least two,
  never one; never from in-place ops, whose bytes are an upper bound; for memory only from executions moving
  more than twice the last-level cache, the others demonstrate a cache rate), and never past the chip's
  physical ceiling (``Chip.limits``: the recording machine's cores x FLOP/cycle x clock,
  :mod:`tracekit.model.cpu_limits`). A chip without a ceiling (its recording machine unknown) is not raised. An
  op with an execution above the ceiling is a timing artefact: it raises nothing, and the model warnings name
  it. The chip keeps the estimate and the op that demonstrated the rate in ``Chip.raised``.

Self-check: an op measured more than 5 % faster than its roofline contradicts the model (a peak too low, a cost
overcounted, a time too short). :func:`model_warnings` names each such op with its measured rate and the peak it
beat; every report shows them. An efficiency above 100 % is never shown without one.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy
from tracekit.grouping import unique_rows
from tracekit.model import cpu_limits, precision, predictions
from tracekit.model.demonstrated import demonstrated
from tracekit.units import fmt_num, fmt_time

#: an op whose efficiency exceeds this contradicts the model
OVER = 1.05
_TERMS = (("memory", "bytes_accessed", "hbm_bw_bytes_per_s"), ("network", "net_bytes", "egress_bw_bytes_per_s"))


def raise_estimates(base: dict, ops: pd.DataFrame) -> dict:
    """``base`` ((host, device) -> Chip) with every chip that is not an exact table part raised to the best rates
    ``ops`` (a roofline join against ``base``) demonstrate, per term, never past the chip's physical ceiling
    (``limits``): a chip without one (a CPU trace whose recording machine is unknown, a chip the table does not
    know) is not raised at all. Exact parts are returned as they are. All devices of a host that share one chip
    (XLA:CPU's virtual devices share the host's cores and memory) are raised together; on a CPU the links and
    the host link are its memory, so a raised memory peak raises them too (collectives are priced at the same
    bandwidth)."""
    groups: dict = {}
    for (h, d), ch in base.items():
        if not ch.exact and ch.limits:
            groups.setdefault((h, ch.name), []).append((h, d))
    if not groups:
        return base
    capped = {h: base[m[0]] for (h, _n), m in groups.items()}
    dem = demonstrated(ops, (lambda h, term: _cap(capped[h], term) if h in capped else 0.0),
                        (lambda h: capped[h].cache_bytes if h in capped else math.nan))
    dem = dem[(dem["term"] != "cache") | dem["host"].map(lambda h: capped[h].family == "cpu")]
    if not len(dem):
        return base
    out = dict(base)
    for (h, _name), members in groups.items():
        ch = base[members[0]]
        mine = dem[dem["host"] == h]
        if not len(mine):
            continue
        flops, src, raised = dict(ch.peak_flops_per_s), dict(ch.sources), dict(ch.raised)
        changes: dict = {}
        by_term = dict(tuple(mine.groupby("term", sort=True)))
        for term in sorted(by_term, key=lambda t: (t == "cache", t)):  # (the cache after memory: it is above it)
            g = by_term[term]
            over = g[g["over_cap"] > 0]
            g = g[g["rate"].notna()]
            if not len(g):
                continue
            top = g.sort_values("rate", ascending=False, kind="stable").iloc[0]
            if term.startswith("compute:"):
                cdt = term.split(":", 1)[1]
                est, _ = precision.peak(ch, cdt)
                key = _flops_key(cdt)
                if key is None:
                    continue
                scale = _pass_factor(ch, cdt)  # a bf16xN / f32_highest rate is a fraction of the stored key
                want = top["rate"] * scale
                cur = flops.get(key, math.nan)
                if math.isfinite(est) and top["rate"] <= est:
                    continue
                field = f"peak_flops_per_s.{key}"
                flops[key] = want
            else:
                attr = {"memory": "hbm_bw_bytes_per_s", "network": "egress_bw_bytes_per_s",
                        "host_link": "host_link_bw_bytes_per_s", "cache": "cache_bw_bytes_per_s"}[term]
                cur = getattr(ch, attr)
                if term == "cache":  # (no cache rate yet: ops in the cache run at the memory bandwidth)
                    cur = max(changes.get("hbm_bw_bytes_per_s", ch.hbm_bw_bytes_per_s), 0.0)
                    src.setdefault("cache_bw_bytes_per_s", src.get("hbm_bw_bytes_per_s", "estimate"))
                if math.isfinite(cur) and top["rate"] <= cur:
                    continue
                field, want = attr, top["rate"]
                changes[attr] = want
                if ch.family == "cpu" and term in ("memory", "network"):  # (one memory: links run at its rate)
                    for a in ("hbm_bw_bytes_per_s", "link_bw_bytes_per_s", "egress_bw_bytes_per_s",
                              "host_link_bw_bytes_per_s"):
                        if not math.isfinite(changes.get(a, math.nan)) or changes[a] < want:
                            changes[a] = want
            raised[field] = {"estimate": cur if math.isfinite(cur) else None, "value": float(want),
                             "estimate_source": str(src.get(field, "estimate")).split(":", 1)[0],
                             "op": top["op"], "module": top["module"], "self_ps": int(top["self_ps"]),
                             "executions": int(top["executions"])}
            ceiling = _cap(ch, term) * (_pass_factor(ch, term.split(":", 1)[1]) if term.startswith("compute:") else 1)
            raised[field]["ceiling"] = ceiling if math.isfinite(ceiling) else None
            unit = "FLOP/s" if field.startswith("peak_flops") else "B/s"
            src[field] = (f"raised: the trace demonstrates {fmt_num(want, unit)} (the median of {top['op']} in "
                          f"{top['module']} over {int(top['executions'])} executions of {fmt_time(top['self_ps'])}), "
                          f"above the {fmt_num(cur, unit)} of '{src.get(field, 'estimate')}'; within "
                          f"{_ceiling_text(ch, field, short=True) or 'its ceiling'}")
            if len(over):
                o = over.iloc[0]
                raised[field]["left_out"] = int(o["over_cap"])
                src[field] += (f"; ops with executions above {_ceiling_text(ch, field)} left out "
                               f"({int(o['over_cap'])} execution(s), the fastest {o['over_op']} at "
                               f"{fmt_num(o['over_rate'], unit)}): their events are shorter than their work")
        if raised != ch.raised:
            new = replace(ch, peak_flops_per_s=flops, sources=src, raised=raised,
                          trace_reported=dict(ch.trace_reported), **changes)
            for m in members:
                out[m] = new
    return out


def _ceiling_text(ch, field: str, short: bool = False) -> str:
    """'the physical ceiling 333 GFLOP/s (ceiling: 2 cores x ...)' for ``field`` of ``ch`` (``short``: without
    its source); '' without one."""
    from tracekit.model.cpu_limits import entry
    key = field if field.startswith(("peak_flops", "cache")) or ch is None or ch.family != "cpu" \
        else "hbm_bw_bytes_per_s"
    got = entry(ch.limits, key) if ch is not None else None
    if got is None:
        return ""
    unit = "FLOP/s" if key.startswith("peak_flops") else "B/s"
    return f"the physical ceiling {fmt_num(got['value'], unit)}" + ("" if short else f" ({got['source']})")


def _cap(ch, term: str) -> float:
    """The raw rate of ``term`` (as :func:`tracekit.model.demonstrated.demonstrated` measures it) no execution can
    pass on ``ch`` (inf: no ceiling for that term)."""
    from tracekit.model.cpu_limits import limit
    if not term.startswith("compute:"):
        if term == "cache":
            return limit(ch.limits, "cache_bw_bytes_per_s")
        if term == "memory" or ch.family == "cpu":  # (a CPU's links and host link are its memory)
            return limit(ch.limits, "hbm_bw_bytes_per_s")
        return math.inf
    cdt = term.split(":", 1)[1]
    key = _flops_key(cdt)
    if key is None:
        return math.inf
    return limit(ch.limits, f"peak_flops_per_s.{key}") / _pass_factor(ch, cdt)


def _flops_key(cdt: str) -> str | None:
    if cdt.startswith("bf16x"):
        return "bf16"
    if cdt == "tf32x3":
        return "tf32"
    if cdt in ("f32_highest", "f32_full", "f32_high"):
        return "f32"
    from tracekit.model.chips import canonical_dtype
    return canonical_dtype(cdt) or None


def _pass_factor(ch, cdt: str) -> float:
    if cdt.startswith("bf16x"):
        return float(int(cdt[5:]))
    if cdt == "tf32x3":
        return 3.0
    if cdt in ("f32_highest", "f32_full", "f32_high") and ch.family == "tpu":
        return 3.0 if cdt == "f32_high" else 6.0
    return 1.0


def model_warnings(ops: pd.DataFrame, dchips: dict, limit: int | None = 20) -> list[dict]:
    """Ops measured more than 5 % faster than their roofline, one entry per (module, op, bound), largest time
    first: op, module, executions, time_ps (their self time), share_of_op_time, efficiency_max, bound_by, the
    measured rate and the peak it beat (unit, value, source), and a one-line message."""
    if not len(ops) or "efficiency" not in ops:
        return []
    t = (ops["self_ps"] if "self_ps" in ops else ops["duration_ps"]).to_numpy(np.int64)
    total = int(t.sum(where=~column_numpy(ops, "is_async", bool)))  # (in place, exact: no row-sized copy)
    return finish_warnings(warning_groups(ops, dchips), float(total), limit)


def warning_groups(ops: pd.DataFrame, dchips: dict) -> list[dict]:
    """The entries of :func:`model_warnings` before the share and the message, every group: entries of disjoint
    devices merge in :func:`finish_warnings` (executions and time summed, the fastest execution kept)."""
    if not len(ops) or "efficiency" not in ops:
        return []
    eff = column_numpy(ops, "efficiency")  # (float32: a view, no copy)
    over = eff > OVER  # (NaN compares False: no NaN-free copy of the column)
    if not over.any():
        return []
    rows = np.flatnonzero(over)
    del over
    t = (ops["self_ps"] if "self_ps" in ops else ops["duration_ps"]).to_numpy()[rows].astype(np.float64)
    # grouped by codes on the over rows only: no copy of the frame's rows, no string per row (a tiled 15 M-event
    # trace has millions of such rows, and their copy was the report stage's memory peak)
    keys = pd.DataFrame({c: ops[c].take(rows).array for c in ("module", "op", "bound_by")}, copy=False)
    inv, tuples = unique_rows(keys, ["module", "op", "bound_by"])
    e, tt = eff[rows], t
    n = len(tuples)
    best_e = np.full(n, -np.inf)
    np.maximum.at(best_e, inv, e)
    best = np.full(n, len(rows))
    at_max = np.flatnonzero(e == best_e[inv])
    np.minimum.at(best, inv[at_max], at_max)  # the first execution at the group's largest efficiency
    count, time = np.bincount(inv, minlength=n), np.bincount(inv, weights=tt, minlength=n)
    out = []
    for g, (mod, op, bound) in enumerate(tuples):
        if mod is None or op is None or bound is None:
            continue  # (a missing key: no group, as a groupby drops it)
        r = predictions.materialized(ops.iloc[[int(rows[best[g]])]]).iloc[0].to_dict()
        r["_t"] = tt[best[g]]
        mod, op, bound = str(mod), str(op), str(bound)
        ch = dchips.get((r["host"], r["device"]))
        rate, peak, unit, src = _rate_and_peak(r, bound, ch)
        beyond = ""
        if ch is not None and ch.limits and r["_t"] > 0:  # (either term past its ceiling: the time is too short)
            cdt = str(r.get("compute_dtype", "")) or str(r.get("dtype", ""))
            key = _flops_key(cdt)
            sec = float(r["_t"]) / 1e12
            fl, nb = float(r["flops"]) / sec, float(r["bytes_accessed"]) / sec
            mem = "cache" if cpu_limits.in_cache(ch, float(r["bytes_accessed"])) else "memory"
            if key is not None and fl > _cap(ch, f"compute:{cdt}"):
                beyond = f"{_ceiling_text(ch, f'peak_flops_per_s.{key}', short=True)} ({fmt_num(fl, 'FLOP/s')})"
            elif nb > _cap(ch, mem):
                field = "cache_bw_bytes_per_s" if mem == "cache" else "hbm_bw_bytes_per_s"
                beyond = f"{_ceiling_text(ch, field, short=True)} ({fmt_num(nb, 'B/s')})"
        out.append({"module": mod, "op": op, "bound_by": bound, "executions": int(count[g]),
                    "time_ps": float(time[g]), "efficiency_max": float(e[best[g]]), "measured_rate": rate,
                    "peak": peak, "unit": unit, "peak_source": src, "beyond": beyond})
    return out


def finish_warnings(groups: list, total: float, limit: int | None = 20) -> list[dict]:
    """:func:`model_warnings` from the :func:`warning_groups` of one or more sets of devices (in device order)
    and the total sync self time ``total``."""
    merged: dict = {}
    for g in groups:
        key = (g["module"], g["op"], g["bound_by"])
        m = merged.get(key)
        if m is None:
            merged[key] = dict(g)
            continue
        keep = g if g["efficiency_max"] > m["efficiency_max"] else m
        merged[key] = {**keep, "executions": m["executions"] + g["executions"], "time_ps": m["time_ps"] + g["time_ps"]}
    total = total or 1.0
    out = []
    for w in merged.values():
        msg = (f"model: {w['op']} ({w['module']}) ran {w['efficiency_max']:.0%} of its roofline ({w['executions']} "
               f"execution(s) above it, {fmt_time(w['time_ps'])}): measured {fmt_num(w['measured_rate'], w['unit'])} "
               f"against a peak of {fmt_num(w['peak'], w['unit'])} ({w['peak_source']}); its efficiency is shown "
               "above 100 %: the peak, its cost or its time is wrong")
        if w.get("beyond"):
            msg += (f"; its rate is above {w['beyond']}: no core can do that, so its events end before its work "
                    "does (a timing artefact, never a peak): read its time as a lower bound")
        out.append({"module": w["module"], "op": w["op"], "bound_by": w["bound_by"], "executions": w["executions"],
                    "time_ps": int(w["time_ps"]), "share_of_op_time": float(w["time_ps"] / total),
                    "efficiency_max": w["efficiency_max"], "measured_rate": w["measured_rate"], "peak": w["peak"],
                    "unit": w["unit"], "peak_source": w["peak_source"], "message": msg})
    out.sort(key=lambda w: (-w["time_ps"], w["module"], w["op"]))
    return out if limit is None else out[:limit]


def _rate_and_peak(r, bound: str, ch) -> tuple[float, float, str, str]:
    sec = float(r["_t"]) / 1e12 if r["_t"] > 0 else math.nan
    if bound == "compute":
        cdt = str(r.get("compute_dtype", "")) or str(r.get("dtype", ""))
        peak, src = precision.peak(ch, cdt) if ch is not None else (math.nan, "unknown")
        return float(r["flops"]) / sec, peak, "FLOP/s", f"{cdt}: {src}"
    if bound == "memory":
        attr = "cache_bw_bytes_per_s" if ch is not None and cpu_limits.in_cache(ch, float(r["bytes_accessed"])) else \
            "hbm_bw_bytes_per_s"
        return float(r["bytes_accessed"]) / sec, getattr(ch, attr, math.nan), "B/s", \
            (ch.sources.get(attr, "") if ch is not None else "unknown")
    if bound == "host_link":
        return float(r["net_bytes"]) / sec, getattr(ch, "host_link_bw_bytes_per_s", math.nan), "B/s", \
            (ch.sources.get("host_link_bw_bytes_per_s", "") if ch is not None else "unknown")
    # network: the predicted time is the collective model's; report the bytes rate against that time's rate
    roof = float(r["roofline_ps"]) / 1e12
    net = float(r["net_bytes"])
    return net / sec, (net / roof if roof > 0 else math.nan), "B/s", "the collective model's bandwidth for this op"


def peak_notes(c) -> list[str]:
    """One line per peak whose source a reader must know about: what the trace said and whether it was used, and
    every estimate raised to a rate the trace demonstrates (both numbers)."""
    from tracekit.units import fmt_num
    out = []
    for key, t in sorted(c.trace_reported.items()):
        unit = "FLOP/s" if key.startswith("peak_flops") else ("" if "x" in key and "core" in key else "B/s")
        used = c.peak_flops_per_s.get(key.split(".", 1)[1]) if key.startswith("peak_flops_per_s.") else \
            getattr(c, key, None)
        if t["used"]:
            out.append(f"{key}: {fmt_num(used, unit)} from the trace ({t['stat']})")
        elif unit:
            out.append(f"{key}: {fmt_num(used, unit)} from the table ({c.name} datasheet); the trace said "
                       f"{fmt_num(t['value'], unit)} ({t['stat']}), more than 20 % off: not used")
        else:
            out.append(f"{key}: the trace's {t['stat']} is {t['value']:.3g}x the table part's, more than 20 % off: "
                       "not used")
    for key, r in sorted(c.raised.items()):
        unit = "FLOP/s" if key.startswith("peak_flops") else "B/s"
        out.append(f"{key}: {fmt_num(r['value'], unit)}, raised from {fmt_num(r['estimate'], unit)} "
                   f"({r.get('estimate_source', 'estimate')}) to the rate {r['op']} ({r['module']}) demonstrates in "
                   "this trace" + (f"; ops with {r['left_out']} execution(s) above the physical ceiling "
                                   f"{fmt_num(c.limits[key]['value'], unit)} left out" if r.get("left_out")
                                   and key in c.limits else ""))
    return out
