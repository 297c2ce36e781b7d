"""Reference commands: ``tracekit chips``, ``tracekit calibrate``, ``tracekit rules [explain ID]``."""
from __future__ import annotations

import json
import os

import click

from tracekit.cli.options import fit_lines, frame_table, guarded, term_width
from tracekit.errors import EXIT_FINDINGS, TraceError


@click.command("chips")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
@click.option("--sources", is_flag=True, help="Show where every number comes from.")
@guarded
def chips_cmd(fmt, sources):
    """The chip table: peak FLOP/s per dtype, HBM, interconnect — every number with its source."""
    from tracekit.model import chips
    from tracekit.model import calibrate as cal
    df = chips.chips_frame(cpu=cal.cpu_chip)
    if fmt == "csv":
        click.echo(df.to_csv(index=False), nl=False)
        return
    if fmt == "json" or sources:
        recs = []
        for c in chips.table() + [cal.cpu_chip()]:
            recs.append({"name": c.name, "vendor": c.vendor, "family": c.family,
                         "peak_flops_per_s": c.peak_flops_per_s, "hbm_bytes": c.hbm_bytes,
                         "hbm_bw_bytes_per_s": c.hbm_bw_bytes_per_s, "link_bw_bytes_per_s": c.link_bw_bytes_per_s,
                         "links": c.links, "topology": c.topology, "egress_bw_bytes_per_s": c.egress_bw_bytes_per_s,
                         "devices_per_chip": c.devices_per_chip,
                         **{k: (None if getattr(c, k) != getattr(c, k) else getattr(c, k))  # unknown (NaN) -> null
                            for k in ("node_size", "nic_bw_bytes_per_s", "node_egress_bw_bytes_per_s",
                                      "hop_latency_s", "nic_latency_s")},
                         "estimated": c.estimated, "sources": c.sources})
        if fmt == "json":
            click.echo(json.dumps(recs, indent=1, default=str))
            return
        for r in recs:
            click.echo(f"{r['name']}:")
            for k, v in sorted(r["sources"].items()):
                click.echo(fit_lines(f"  {k:<28} {v}", hang=29))
        return
    from tracekit.units import fmt_num
    out = df[["name", "vendor"]].copy()
    for c in ("peak_bf16_flops_per_s", "peak_f32_flops_per_s", "peak_int8_flops_per_s"):
        if c in df:
            out[c.replace("peak_", "").replace("_flops_per_s", " FLOP/s")] = df[c].map(fmt_num)
    out["HBM"] = df["hbm_bytes"].map(lambda b: fmt_num(b, "B"))
    out["HBM B/s"] = df["hbm_bw_bytes_per_s"].map(fmt_num)
    out["link B/s (one-way)"] = df["link_bw_bytes_per_s"].map(fmt_num)
    out["topology"] = df["topology"].astype(str)
    out["DCN/NIC B/s"] = df["nic_bw_bytes_per_s"].map(fmt_num)
    out["node egress B/s"] = df["node_egress_bw_bytes_per_s"].map(fmt_num)
    out["node"] = df["node_size"].map(lambda n: "—" if n != n else f"{int(n)}")
    nums = [c for c in out.columns if c not in ("name", "vendor", "topology")]
    click.echo(frame_table(out, width=term_width(), shrink=["name", "topology"], right=nums,
                           drop=["node", "node egress B/s", "DCN/NIC B/s", "topology", "vendor", "int8 FLOP/s",
                                 "link B/s (one-way)", "HBM"]))
    click.echo(fit_lines("\nsources: `tracekit chips --sources`; trace-reported peaks override the table when a trace "
                         "has them"))


@click.command()
@click.option("--seconds", type=click.FloatRange(1, 120), default=5.0, show_default=True,
              help="Time budget for the measurements.")
@click.option("--path", type=click.Path(dir_okay=False), default=None,
              help="Where to store the result (default: $TRACEKIT_HOME or ~/.config/tracekit/cpu_chip.json).")
@guarded
def calibrate(seconds, path):
    """Measure this machine's matmul FLOP/s (f32, bf16) and memory bandwidth for CPU traces."""
    from tracekit.model import calibrate as cal
    from tracekit.units import fmt_num
    chip = cal.calibrate(seconds=seconds, path=path)
    for k, v in sorted(chip.peak_flops_per_s.items()):
        click.echo(f"{k:>5} matmul: {fmt_num(v, 'FLOP/s')}")
    click.echo(f"memory bandwidth: {fmt_num(chip.hbm_bw_bytes_per_s, 'B/s')}")
    click.echo(fit_lines(f"stored in {cal.calibration_path(path)}; CPU traces now use these peaks"))
    busy = cal.busy_share(cal.calibration_path(path))
    if busy is not None:
        click.echo(fit_lines(f"warning: its threads waited for a core {busy:.0%} of the time: other work was "
                             "running, so these rates are likely low; run `tracekit calibrate` again on an idle "
                             "machine"), err=True)



def param_text(name: str, value) -> str:
    """A rule parameter as the list shows it, with its unit: ``min_gap_ps=10000000`` as ``min_gap=10 ms``,
    ``*_bytes`` in B; anything else as it is."""
    from tracekit.units import fmt_num, fmt_time
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if name.endswith("_ps"):
            return f"{name[:-3]}={fmt_time(value)}"
        if name.endswith("_bytes"):
            return f"{name[:-6]}={fmt_num(value, 'B')}"
    return f"{name}={value}"


@click.group("rules", invoke_without_command=True)
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False, exists=True),
              help="Also list the rules in this folder. Repeatable.")
@click.pass_context
@guarded
def rules_cmd(ctx, rules_dirs):
    """List the rules: id, name, severity, groups, what it reads, and its parameters."""
    ctx.ensure_object(dict)
    ctx.obj["rules_dirs"] = rules_dirs
    if ctx.invoked_subcommand:
        return
    from tracekit.analysis import rule_cases, rule_model
    rs = rule_cases.check_user_rules(rule_model.load_rules(extra_dirs=rules_dirs))
    import pandas as pd
    df = pd.DataFrame([{"id": r.id, "name": r.name, "severity": r.severity, "groups": ",".join(r.groups),
                        "frame": r.frame, "params": ", ".join(param_text(k, p.default) for k, p in r.params.items())}
                       for r in rs])
    width, gone = term_width(), []
    for col in ("frame", "groups"):  # left out before the parameters are cut
        if sum(max([len(c)] + [len(str(v)) for v in df[c]]) + 2 for c in df.columns) - 2 > width:
            df, gone = df.drop(columns=[col]), gone + [col]
    click.echo(frame_table(df, width=width, shrink=["params", "name"], drop=["severity"]))
    if gone:
        click.echo(f"({', '.join(gone)} left out to fit the width)")
    click.echo("\n`tracekit rules explain ID` for one rule; docs/rules.md has them all")


@rules_cmd.command("explain")
@click.argument("rule_id")
@click.pass_context
@guarded
def rules_explain(ctx, rule_id):
    """Print one rule's documentation (by id or name, any case)."""
    from tracekit.analysis import rule_model
    from tracekit.report import rulesdoc
    rule = rule_model.find_rule(rule_model.load_rules(extra_dirs=(ctx.obj or {}).get("rules_dirs", ())), rule_id)
    if rule is None:
        raise TraceError(f"no rule {rule_id!r}", hint="`tracekit rules` lists them")
    click.echo(fit_lines(rulesdoc.render_rule(rule)))


@rules_cmd.command("test")
@click.argument("dirs", nargs=-1, type=click.Path(file_okay=False, exists=True))
@click.option("-v", "--verbose", is_flag=True, help="List the cases that pass too.")
@click.pass_context
@guarded
def rules_test(ctx, dirs, verbose):
    """Run every rule's pass/fail cases: the rules in DIRS (default: the built-in rules). Exit 1 when a case
    fails (each failure named: rule, case, why), 2 when a rule file is refused."""
    from tracekit.analysis import rule_cases, rule_model
    dirs = tuple(dirs) + tuple((ctx.obj or {}).get("rules_dirs", ()))
    rs = rule_model.load_rules(extra_dirs=dirs)
    if dirs and not any(os.path.realpath(d) == os.path.realpath(rule_model.builtin_rules_dir()) for d in dirs):
        rs = [r for r in rs if not r.builtin]  # only the folders named (the built-in one when it is named)
    results = rule_cases.run_cases(rs)
    failed = [r for r in results if r.error]
    for r in results:
        if r.error:
            click.echo(fit_lines(f"FAIL {r.label}: {r.error}  ({r.path})"))
        elif verbose:
            click.echo(f"ok   {r.label}")
    click.echo(fit_lines(f"{len(rs)} rule(s), {len(results)} case(s): {len(results) - len(failed)} passed, "
                         f"{len(failed)} failed"))
    if not rs:
        click.echo("no rule files (*.yaml, *.yml) found", err=True)
    if failed:
        ctx.exit(EXIT_FINDINGS)
