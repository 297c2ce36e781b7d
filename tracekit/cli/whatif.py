"""``tracekit whatif PATH``: the measured steps replayed on another chip, at another batch, or with a finding fixed
(:mod:`tracekit.analysis.replay`)."""
from __future__ import annotations

import json

import click

from tracekit.cli.console import output_format, output_opt, write_output
from tracekit.cli.options import frame_table, guarded, limit_opts, limits, path_arg, run_opt, term_width, topology_opt

#: critical-path rows the text shows (JSON has them all, up to the replay's own limit)
TEXT_PATH_ROWS = 25


@click.command("whatif")
@path_arg
@run_opt
@click.option("--chip", default=None, metavar="B",
              help="Re-price every op on chip B (see `tracekit chips`), or on the CPU a machine record "
                   "(a *.machine.json written by `tracekit capture`) describes.")
@topology_opt
@click.option("--keep-efficiency", is_flag=True,
              help="With --chip: each op keeps its measured efficiency (time x its roofline on B / its roofline "
                   "here) instead of running at its roofline on B.")
@click.option("--batch-scale", type=click.FloatRange(min=0, min_open=True), default=None, metavar="K",
              help="Scale the batch by K: ops whose shapes hold the batch dimension do K times the work.")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, metavar="N",
              help="The batch dimension's size in the shapes (default: the leading dimension of the step program's "
                   "last parameter).")
@click.option("--fix", "fix", multiple=True, metavar="FINDING|OP",
              help="Replay with a finding fixed (rule id or name: its ops at their roofline, its collectives "
                   "overlapped, its gaps removed) or an op at its roofline (op or module/op). Repeatable.")
@click.option("--speedup", "speedup", multiple=True, metavar="OP=K",
              help="Replay with op OP (op or module/op) K times faster. Repeatable.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default=None, help="text (default) or json.")
@output_opt("the answer")
@limit_opts
@guarded
def whatif_cmd(path, run, chip, topology, keep_efficiency, batch_scale, batch_size, fix, speedup, fmt, output,
               max_size, max_events):
    """What the step would take on another chip, at another batch or with a finding fixed: the measured steps
    replayed along their dependencies (stream order, operands, async windows, host-link queues, collectives
    waiting for their last participant), measured gaps kept. Prints the measured and predicted step, the new
    critical path, the ops whose roofline bound changes and every assumption. With no change it replays the trace
    as measured."""
    fmt = output_format(fmt, output, ("json",), "text")
    if keep_efficiency and not (chip or topology):
        raise click.UsageError("--keep-efficiency needs --chip or --topology")
    from tracekit.analysis.replay import whatif as wi
    from tracekit.ingest.trace import load
    tr = load(path, run=run, **limits(max_size, max_events))
    req = wi.Request(chip=chip, topology=topology, keep_efficiency=keep_efficiency, batch_scale=batch_scale,
                     batch_size=batch_size, fix=tuple(fix), speedup=tuple(_speedup(s) for s in speedup))
    out = wi.whatif(tr, req)
    text = json.dumps({"whatif": out}, indent=1, sort_keys=True) + "\n" if fmt == "json" else \
        render_text(out, term_width()) + "\n"
    if output is not None:
        write_output(output, text, fmt)
    else:
        click.echo(text, nl=False)


def _speedup(text: str) -> tuple:
    name, sep, k = text.rpartition("=")
    try:
        factor = float(k)
    except ValueError:
        factor = float("nan")
    if not sep or not name or not factor > 0 or factor == float("inf"):
        raise click.BadParameter(f"{text!r}: give OP=K with K a positive number, e.g. fusion.3=10",
                                 param_hint="--speedup")
    return name, factor


def render_text(w: dict, width: int = 100) -> str:
    """The ``whatif`` object as text within ``width`` columns."""
    import pandas as pd

    from tracekit.report.render.text import fit_para
    from tracekit.units import fmt_time
    m, p = w["measured_step_ps"], w["predicted_step_ps"]
    asked = w["changes"]
    parts = [f"{k.replace('_', '-')} {', '.join(map(str, v)) if isinstance(v, list) else _num(v)}"
             for k, v in asked.items() if k != "efficiency"]
    if "efficiency" in asked and parts:
        parts[0] += f" (efficiency: {asked['efficiency']})"
    what = "; ".join(parts) or "no change (replayed as measured)"
    lines = [fit_para(f"what if: {what}", width=width),
             fit_para(f"step (median of the slowest device over {w['steps_replayed']} replayed step(s), "
                      f"{w['devices']} device(s)): measured {fmt_time(m)}, predicted {fmt_time(p)} "
                      f"({_change(m, p)}); replayed as measured: {fmt_time(w['replayed_step_ps'])}", width=width)]
    cp, s = w["critical_path"], w["critical_path_summary"]
    lines.append("")
    lines.append(fit_para(f"critical path of step {w['critical_path_step']} on {w['slowest_device']['predicted']}: "
                          f"{s['ops']} op(s), {fmt_time(s['time_ps'])} running, {fmt_time(s['gaps_ps'])} in gaps, "
                          f"{fmt_time(s['tail_ps'])} to the next run" +
                          (f"; crosses {', '.join(s['devices'])}" if len(s["devices"]) > 1 else ""), width=width))
    if cp:
        top = sorted(range(len(cp)), key=lambda i: -(cp[i]["time_ps"] + cp[i]["gap_ps"]))[:TEXT_PATH_ROWS]
        df = pd.DataFrame([cp[i] for i in sorted(top)])
        df = pd.DataFrame({"at": df["start_ps"].map(fmt_time), "op": df["op"], "kind": df["kind"],
                           "device": df["device"], "time": df["time_ps"].map(fmt_time),
                           "gap before": df["gap_ps"].map(fmt_time)})
        lines.append(frame_table(df, width=width, shrink=["op"], drop=["device", "kind"],
                                 right={"at", "time", "gap before"}))
        if len(cp) > TEXT_PATH_ROWS:
            lines.append(fit_para(f"({len(cp) - TEXT_PATH_ROWS} shorter entries not shown; --format json has "
                                  "them)", width=width))
    if w["bound_changes"]:
        lines.append("")
        lines.append("ops whose bound changes:")
        df = pd.DataFrame(w["bound_changes"])
        df = pd.DataFrame({"op": df["op"], "from": df["from"], "to": df["to"], "executions": df["executions"],
                           "measured": df["measured_ps"].map(fmt_time), "predicted": df["predicted_ps"].map(fmt_time)})
        lines.append(frame_table(df, width=width, shrink=["op"], drop=["executions"],
                                 right={"executions", "measured", "predicted"}))
    lines.append("")
    lines.append("assumptions:")
    lines += [fit_para(f"- {a}", width=width, hang=2) for a in w["assumptions"]]
    return "\n".join(lines)


def _num(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _change(m: float, p: float) -> str:
    if not m:
        return "n/a"
    d = (p - m) / m
    if abs(d) < 0.0005:
        return "no change"
    return f"{abs(d):.1%} {'faster' if d < 0 else 'slower'}, x{m / p:.2f} speed" if p else "n/a"
