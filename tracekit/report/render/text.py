"""Terminal report: chip and devices, step-time breakdown, top ops with roofline columns, findings by savings.
Rich formatting on a TTY (``color=True``), plain text otherwise (what pipes, files and tests see)."""
from __future__ import annotations

from tracekit.report.render import sections
from tracekit.units import fmt_num, fmt_pct, fmt_time

EXTENSIONS = (".txt",)


def _table(headers: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    w = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    def line(vals):
        return "  ".join(v.rjust(w[i]) if i in right else v.ljust(w[i]) for i, v in enumerate(vals)).rstrip()
    return [line(headers), line(["-" * x for x in w])] + [line(r) for r in rows]


def render(report, *, top: int = 12, color: bool = False, **_) -> str:
    d = report.data
    s = d["summary"]
    out = [f"tracekit {d['tool']['version']} — {', '.join(i['path'] for i in d['inputs'])}"]
    head = sections.text(d)
    out += head + ([""] if head else [])
    for c in d["chips"]:
        peaks = ", ".join(f"{k} {fmt_num(v, 'FLOP/s')}" for k, v in c["peak_flops_per_s"].items() if k in ("bf16", "f32"))
        src = c["sources"].get("peak_flops_per_s.bf16") or c["sources"].get("peak_flops_per_s.f32", "")
        est = " (ESTIMATED — run `tracekit calibrate`)" if c["estimated"] else ""
        out.append(f"chip: {c['name']}{est} × {len(c['devices'])} device(s); {peaks}; "
                   f"memory {fmt_num(c['hbm_bw_bytes_per_s'], 'B/s')}  [peaks from {src.split(':')[0]}]")
    out.append(f"profiled: {fmt_time(s['profiled_ps'])} device time over {s['devices']} device(s); busy "
               f"{fmt_time(s['busy_ps'])} ({fmt_pct(s['busy_ps'] / s['profiled_ps'] if s['profiled_ps'] else None)}), "
               f"idle {fmt_time(s['idle_ps'])}; {s['steps']} step(s) from {', '.join(s['step_source']) or 'none'}")
    if s["time_by_bound_ps"]:
        tot = sum(s["time_by_bound_ps"].values()) or 1
        out.append("op time by bound: " + ", ".join(f"{k} {fmt_pct(v / tot)}" for k, v in
                                                    sorted(s["time_by_bound_ps"].items(), key=lambda kv: -kv[1]))
                   + f"; roofline known for {fmt_pct(s['roofline_coverage'])} of op time")
    if not s["hlo_present"]:
        out.append("HLO: not in this trace — ops are listed by kernel name and have no roofline")
    st = d.get("step_stats") or []
    if st:
        out += ["", "Step time per device"]
        out += _table(["device", "steps", "mean", "median", "p90", "max"],
                      [[r["device"], str(r["steps"]), fmt_time(r["mean_ps"]), fmt_time(r["median_ps"]),
                        fmt_time(r["p90_ps"]), fmt_time(r["max_ps"])] for r in st[:16]], right={1, 2, 3, 4, 5})
        steps = d.get("device_steps") or []
        if steps:
            tot = {k: sum(r.get(k) or 0 for r in steps) for k in ("step_ps_sum", "compute_ps", "collective_exposed_ps",
                                                                  "collective_hidden_ps", "wait_ps", "idle_ps")}
            tot["step_ps"] = tot.pop("step_ps_sum")
            if tot["step_ps"]:
                out.append("step breakdown (all devices): " + ", ".join(
                    f"{name} {fmt_pct(tot[k] / tot['step_ps'])}" for name, k in
                    (("compute", "compute_ps"), ("exposed collectives", "collective_exposed_ps"),
                     ("waiting on async copies", "wait_ps"), ("idle", "idle_ps"))
                    if k != "wait_ps" or tot[k]) + f" (collectives hidden under compute: {fmt_time(tot['collective_hidden_ps'])})")
    ops = d.get("top_ops") or []
    if ops:
        out += ["", f"Top ops by time (of {s['op_executions']:,} executions)"]
        rows = []
        for r in ops[:top]:
            rows.append([r["op"][:40], r["category"][:16], str(r["occurrences"]), fmt_time(r["total_ps"]),
                         fmt_pct(r["busy_share"]), fmt_num(r.get("flops")), fmt_num(r.get("bytes_accessed"), "B"),
                         r.get("bound_by") or "—", fmt_pct(r.get("efficiency")), fmt_time(r.get("headroom_ps")),
                         r.get("cost_source") or ""])
        out += _table(["op", "category", "n", "time", "share", "flops", "bytes", "bound", "eff", "headroom", "src"],
                      rows, right={2, 3, 4, 5, 6, 8, 9})
    out += custom_calls_lines(d.get("custom_calls") or {})
    mem = sections.memory_text(d)
    out += [""] + mem if mem else []
    f = d.get("findings") or []
    out += ["", f"Findings ({len(f)}), by time they would win back" if f else "Findings: none"]
    for i, x in enumerate(f, 1):
        share = f" ({fmt_pct(x['share'])} of profiled time)" if x.get("share") is not None else ""
        out.append(f"{i}. [{x['severity']}] {x['rule_id']} {x['name']}: ~{fmt_time(x['savings_ps'])}{share}")
        out.append(f"   {x['message']}")
        out.append(f"   fix: {x['fix']}")
    for w in d.get("warnings") or []:
        out.append(f"warning: {w}")
    g = d["gate"]
    if g["fail_on"] != "never":
        out.append(f"gate: --fail-on {g['fail_on']}: {'FAILED' if g['failed'] else 'passed'}")
    text = "\n".join(out) + "\n"
    if color:
        text = _colorize(text)
    return text


def custom_calls_lines(cc: dict, top: int = 8) -> list[str]:
    """Custom calls by share of op time, the cost model of each (or why none priced it), the models' assumptions."""
    targets = cc.get("targets") or []
    if not targets:
        return []
    op_time = cc.get("op_time_ps") or 0
    head = (f"Custom calls: {fmt_pct(cc['custom_call_ps'] / op_time if op_time else None)} of op time; "
            f"no cost model for {fmt_pct(cc['unknown_ps'] / op_time if op_time else None)}")
    rows = [[t["target"][:40], str(t["executions"]), fmt_time(t["total_ps"]), fmt_pct(t["share"]),
             t["cost_source"], (t["unknown_reasons"] or t["notes"] or [""])[0][:120]] for t in targets[:top]]
    out = ["", head] + _table(["target", "n", "time", "share", "cost from", "note"], rows, right={1, 2, 3})
    for name, why in (cc.get("models") or {}).items():
        out.append(f"  model:{name}: {why}")
    return out


def _colorize(text: str) -> str:
    for word, code in (("[error]", "31"), ("[warning]", "33"), ("[info]", "36")):
        text = text.replace(word, f"\033[1;{code}m{word}\033[0m")
    return text
