"""``tracekit collectives PATH``: per collective op, measured vs predicted on the machine's topology."""
from __future__ import annotations

import json

import click

from tracekit.cli.console import output_format, output_opt, write_output
from tracekit.cli.options import (frame_table, guarded, limit_opts, limits, load_trace, path_arg, run_opt, term_width,
                                  topology_opt)

COLUMNS = ["module", "op", "kind", "group_size", "groups", "span", "global_bytes", "size_bytes", "executions",
           "devices", "time_ps", "skew_ps", "transfer_ps", "algbw_bytes_per_s", "busbw_bytes_per_s", "predicted_ps",
           "efficiency", "bound", "phases", "pattern", "note", "hosts"]


@click.command("collectives")
@path_arg
@run_opt
@click.option("--chip", default=None, help="Chip name to price the collectives as (see `tracekit chips`).")
@topology_opt
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default=None,
              help="table (default), csv or json.")
@output_opt("the table")
@click.option("--executions", is_flag=True, help="One row per execution and device instead of per op.")
@click.option("--limit", type=click.IntRange(min=0), default=30, show_default=True, help="Rows to show (0 = all).")
@limit_opts
@guarded
def collectives_cmd(path, run, chip, topology, fmt, output, executions, limit, max_size, max_events):
    """Every collective: measured time, start skew (waiting for the last participant), algorithm and bus
    bandwidth (nccl-tests convention), the time predicted on the topology's links and the level that bounds it."""
    fmt = output_format(fmt, output, ("csv", "json"), "table")  # a bad -o path fails before the trace is read
    from tracekit.analysis import interconnect
    from tracekit.model import roofline
    tr = load_trace(path, run=run, **limits(max_size, max_events))
    j = roofline.joined(tr, chip=chip, topology=topology)
    model = j.model
    summary, ex = interconnect.view(j.ops, model)
    df = ex if executions else summary[COLUMNS]
    if limit:
        df = df.head(limit)
    topo = model.topology.to_dict()
    topo.pop("devices")
    text = _text(df, fmt, topo, model, executions, term_width(), hosts=len(tr.hosts))
    if output is not None:
        write_output(output, text, fmt)
    else:
        click.echo(text, nl=False)


#: the text table's columns left out first to last when it does not fit the width
DROP = ["algbw", "skew", "span", "predicted", "bound", "bytes", "executions", "kind", "N", "hosts", "device", "host"]
NUMERIC = {"N", "executions", "bytes", "time", "skew", "algbw", "busbw", "predicted", "efficiency"}


def _text(df, fmt: str, topo: dict, model, executions: bool, width: int = 100, hosts: int = 1) -> str:
    """The table (or CSV / JSON); ``hosts``: how many hosts the trace has (more than one: a ``hosts`` column, the
    hosts each op ran on)."""
    from tracekit.report.render.text import fit_para
    if fmt == "csv":
        return df.to_csv(index=False)
    if fmt == "json":
        recs = json.loads(df.to_json(orient="records"))
        return json.dumps({"topology": topo, "chip": getattr(model.chip, "name", ""),
                           "executions" if executions else "collectives": recs}, indent=1, sort_keys=True) + "\n"
    lines = [fit_para(f"topology: {topo['description']} [{topo['source']}]"
                      + (f"; priced as {model.chip.name}" if model.chip is not None else ""), width=width)]
    lines += [fit_para(f"note: {note}", width=width) for note in topo["notes"]]
    if not len(df):
        return "\n".join(lines + ["no collectives in this trace"]) + "\n"
    out = _format(df, executions, hosts)
    lines.append(frame_table(out, width=width, shrink=["op"], drop=DROP, right=NUMERIC))
    if not executions:
        lines.append("")  # the table ends here: the phase lines are paragraphs
        lines += [fit_para(f"{r.op}: {r.phases}" + (f" ({r.note})" if r.note else ""), width=width)
                  for r in df.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def _format(df, executions: bool, hosts: int = 1):
    from tracekit.analysis.hostcheck import hosts_label
    from tracekit.units import fmt_eff, fmt_num, fmt_time
    cols = ["host", "device", "op", "kind"] if executions else ["op", "kind", "group_size", "span", "executions"]
    out = df[cols].copy()
    if not executions and hosts > 1 and "hosts" in df.columns:  # (same-named programs of different hosts)
        out.insert(1, "hosts", df["hosts"].map(lambda h: hosts_label(h, hosts)))
    if not executions:
        out["bytes"] = df["global_bytes"].map(lambda b: fmt_num(b, "B"))
    out["time"] = (df["duration_ps"] if executions else df["time_ps"]).map(fmt_time)
    out["skew"] = df["skew_ps"].map(fmt_time)
    out["algbw"] = df["algbw_bytes_per_s"].map(lambda b: fmt_num(b, "B/s"))
    out["busbw"] = df["busbw_bytes_per_s"].map(lambda b: fmt_num(b, "B/s"))
    out["predicted"] = df["predicted_ps"].map(fmt_time)
    out["efficiency"] = df["efficiency"].map(fmt_eff)
    out["bound"] = df["bound"].astype(str)
    return out.rename(columns={"group_size": "N"})
