"""The analysis commands: ``tracekit info``, ``ops``, ``analyze``, ``capture``, ``diff`` and ``export``. Thin: every command
calls the pure pipeline and a renderer (:mod:`tracekit.cli.app` gathers them under ``tracekit``)."""
from __future__ import annotations

import json
import sys

import click

from tracekit.cli.console import (echo_out, gate_lines, output_format, output_opt, quiet_opt, regression_lines,
                                  write_output, write_reports)
from tracekit.cli.options import (DIFF_PATH_HELP, DURATION, paths_help, color_opt, fit_lines, frame_table, guarded,
                                  limit_opts, limits, load_trace, path_arg, run_opt, term_width, terminal,
                                  topology_opt, workload_opt)
from tracekit.errors import EXIT_FINDINGS, TraceError
from tracekit.options import DEFAULTS, FAIL_ON, MODELS
from tracekit.report.termsafe import safe as safe_terminal, safe_tree


@click.command()
@path_arg
@run_opt
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@limit_opts
@guarded
def info(path, run, fmt, max_size, max_events):
    """Hosts, devices, chip and its peaks, lines with event counts, modules, time span, and whether HLO is present
    (read from the headers: no event stats decoded)."""
    from tracekit.ingest import inventory
    from tracekit.model import machine
    inv = inventory.scan(path, run=run, **limits(max_size, max_events))
    inv["machines"] = machine.for_info(inv["paths"], inv["hosts"])
    if fmt == "json":
        click.echo(json.dumps(inv, indent=1, sort_keys=True, default=str))
    else:
        from tracekit.report.render.text import fit_para
        w = term_width()  # paragraphs wrap between words to the width; the aligned line rows stay as they are
        click.echo("\n".join(fit_para(ln, width=w) if len(ln) > w and not ln.startswith("  ") else ln
                              for ln in inventory.render_text(safe_tree(inv)).split("\n")))


@click.command()
@path_arg
@run_opt
@click.option("--sort", type=click.Choice(["total", "mean", "count", "share", "headroom", "efficiency", "flops",
                                           "name"]), default="total", show_default=True)
@click.option("--limit", type=click.IntRange(min=0), default=30, show_default=True, help="Rows to show (0 = all).")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default=None,
              help="table (default), csv or json.")
@output_opt("the table")
@click.option("--chip", default=None, help="Chip name to use instead of the detected one (see `tracekit chips`).")
@click.option("--device", default=None, help="Only this device, e.g. TPU:0.")
@topology_opt
@limit_opts
@guarded
def ops(path, run, sort, limit, fmt, output, chip, device, topology, max_size, max_events):
    """One row per op: module, op, opcode, category, occurrences, total and mean time, share of device time,
    and the roofline columns when the chip and costs are known."""
    fmt = output_format(fmt, output, ("csv", "json"), "table")  # a bad -o path fails before the trace is read
    from tracekit import pipeline
    from tracekit.analysis import opstats
    tr = load_trace(path, run=run, **limits(max_size, max_events))
    o = pipeline.with_roofline(tr, chip=chip, topology=topology)
    if device:
        o = o[o["device"].astype(str) == device]
        if not len(o):
            raise TraceError(f"no ops on device {device!r}", path, "see `tracekit info` for the devices")
    table = opstats.op_table(o, sort=sort)
    if limit:
        table = table.head(limit)
    table = opstats.with_names(table, tr.hlo)
    if tr.kernel_profile is not None and len(tr.kernel_profile):  # measured in the kernels (TPU counters, stages)
        from tracekit.analysis import kernelprof
        table = kernelprof.annotate(table, tr.kernel_profile)
    table.attrs["hosts"] = len(tr.hosts)  # a trace of several hosts shows each row's hosts
    if fmt == "csv":
        text = table.to_csv(index=False)
    elif fmt == "json":
        text = table.to_json(orient="records", indent=1) + "\n"
    else:
        text = _ops_table(table, term_width()) + "\n"
    if output is not None:
        write_output(output, text, fmt)
    elif fmt == "table":
        click.echo(text, nl=False)
    else:
        echo_out(text)


#: the ops table's columns, in order: (header, source column, format, kind). kind "name" gives way first (cut in
#: its middle), "num" is right-aligned and never cut; columns are left out from :data:`OPS_DROP` when the width is
#: short. Add a column here (and, for a narrow terminal, to OPS_DROP).
OPS_COLUMNS = [
    ("module", "module", str, "name"),
    ("hosts", "hosts", "hosts", "name"),  # only for a trace of several hosts: tells same-named programs apart
    ("op", "op", str, "name"),
    ("op_name", "op_name", "opname", "name"),
    ("category", "category", str, "text"),
    ("count", "occurrences", "count", "num"),
    ("total", "total_ps", "time", "num"),
    ("mean", "mean_ps", "time", "num"),
    ("share", "busy_share", "pct", "num"),
    ("flops", "flops", "num", "num"),
    ("bytes", "bytes_accessed", "bytes", "num"),
    ("bound_by", "bound_by", str, "text"),
    ("efficiency", "efficiency", "eff", "num"),  # "(!)": above its roofline, a model warning
    ("headroom", "headroom_ps", "time", "num"),
    ("mxu", "mxu_util", "pct", "num"),  # measured MXU busy (TPU _counters_), beside the roofline's efficiency
    ("dma_wait", "dma_wait_share", "pct", "num"),  # Mosaic pipeline: waiting on block DMAs
]
#: left out first to last when the table does not fit the width
OPS_DROP = ["op_name", "dma_wait", "flops", "bytes", "headroom", "mean", "bound_by", "efficiency", "category", "module",
            "hosts"]


def _format_ops(t):
    import pandas as pd
    from tracekit.units import fmt_eff, fmt_num, fmt_pct, fmt_time
    from tracekit.analysis.hloview import short_op_name
    fmts = {"time": fmt_time, "pct": fmt_pct, "eff": fmt_eff, "num": fmt_num, "bytes": lambda b: fmt_num(b, "B"),
            "count": lambda n: f"{int(n):,}", str: str, "opname": lambda n: short_op_name(n, 32),
            "hosts": str}
    out = pd.DataFrame(index=t.index)
    for header, src, fmt, _kind in OPS_COLUMNS:
        if src == "op_name" and not (src in t.columns and t[src].astype(bool).any()):
            continue  # (no name stack in this trace's HLO)
        if src in ("mxu_util", "dma_wait_share") and not (src in t.columns and t[src].notna().any()):
            continue  # (nothing measured inside the kernels)
        if src == "hosts" and t.attrs.get("hosts", 1) < 2:
            continue  # (one host)
        if src in t.columns and (src not in ("flops", "bytes_accessed", "bound_by", "efficiency", "headroom_ps")
                                 or "roofline_ps" in t.columns):
            out[header] = t[src].map(fmts[fmt])
    return out


def _ops_table(t, width: int) -> str:
    out = _format_ops(t)
    kinds = {h: k for h, _s, _f, k in OPS_COLUMNS}
    return frame_table(out, width=width, shrink=[h for h in out.columns if kinds[h] == "name"][::-1],
                       drop=OPS_DROP, right=[h for h in out.columns if kinds[h] == "num"])


def _params(values: tuple[str, ...]) -> dict:
    """--param RULE.NAME=VALUE (repeatable) -> {rule: {name: value}}."""
    out: dict = {}
    for v in values:
        key, sep, val = v.partition("=")
        rule, dot, name = key.partition(".")
        if not sep or not dot or not rule or not name:
            raise TraceError(f"bad --param {v!r}", hint="write RULE.PARAM=VALUE, e.g. device-idle-gaps.min_gap_ps=50us or TK003.min_share=5%")
        try:
            parsed = json.loads(val)
        except ValueError:
            parsed = val
        out.setdefault(rule, {})[name] = parsed
    return out


@click.command()
@path_arg
@run_opt
@click.option("-o", "--output", "outputs", multiple=True, metavar="FILE",
              help="Write the report here; the format follows the extension (.json .md .html .sarif .txt); - is "
                   "stdout. Repeatable: all are written, or none is replaced.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html", "sarif"]), default=None,
              help="Format of stdout (or of -o when its extension does not say).")
@click.option("--chip", default=None, help="Chip name to use instead of the detected one (see `tracekit chips`).")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default=DEFAULTS.fail_on,
              show_default=True, help="Exit 1 when a finding reaches this severity (for CI).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(file_okay=False, exists=True),
              help="A folder of extra rule files (*.yaml). Repeatable.")
@click.option("--select", multiple=True, help="Only these rules (id, name, id prefix or group; any case). Repeatable.")
@click.option("--ignore", multiple=True, help="Skip these rules (id, name, id prefix or group; any case). Repeatable.")
@click.option("--param", "param_values", multiple=True,
              help="RULE.PARAM=VALUE to override a rule parameter; units accepted: 10ms, 250us, 5%, 64MiB. Repeatable.")
@click.option("--top", type=click.IntRange(1, 1000), default=12, show_default=True, help="Top ops to show.")
@color_opt
@click.option("--model-flops-per-step", "model_flops", type=click.FloatRange(min=0, min_open=True), default=None,
              help="The model's FLOPs of one step, all devices together (for MFU; default: the trace's model_flops "
                   "stats, else the HLO's executed FLOPs, reported as hardware FLOPs utilization).")
@click.option("--model", "model", type=click.Choice(MODELS), default=None,
              help="What the model is, for MFU when neither --model-flops-per-step nor the trace gives model FLOPs: "
                   "transformer = 6 x N x tokens from the shapes the parallelism section recovers.")
@topology_opt
@workload_opt
@limit_opts
@click.option("--jobs", "-j", type=click.IntRange(min=0), default=DEFAULTS.jobs, show_default=True,
              help="Analyze the hosts of a run folder in this many processes, each host summarized by its worker (0 = one per core).")
@click.option("--dask", "dask_address", default=None, metavar="ADDR",
              help="Analyze the hosts on this Dask cluster, e.g. tcp://HOST:8786, or `local` for a local cluster (needs tracekit[dask]).")
@click.option("--replay/--no-replay", default=DEFAULTS.replay, show_default=True,
              help="Replay the steps along their critical path for the findings' savings (--no-replay: their "
                   "claimed savings only; the replay adds about a second per host on a million-event trace).")
@quiet_opt
@guarded
def analyze(path, run, outputs, fmt, chip, fail_on, rules_dirs, select, ignore, param_values, top, color,
            model_flops, model, topology, workload, max_size, max_events, jobs, dask_address, replay, quiet):
    """Analyze a trace: roofline per op, timelines, and the rules' findings ranked by the time they would win back.

    Exit status: 0 when no finding reaches --fail-on, 1 when one does, 2 for bad input or usage."""
    from tracekit.options import Options
    from tracekit.run import pod
    from tracekit.report import render
    from tracekit.progress import Progress
    out_fmts = [_out_format(render, out, fmt, len(outputs) == 1) for out in outputs]  # bad names fail first
    opt = Options(chip=chip, topology=topology, run=run, rules_dirs=rules_dirs, select=select, ignore=ignore,
                  params=_params(param_values), fail_on=fail_on, max_bytes=max_size * 2**20 if max_size else None,
                  max_events=max_events, model_flops_per_step=model_flops, model=model, jobs=jobs, dask=dask_address,
                  replay=replay, workload=workload)
    progress = Progress(enabled=False if quiet else None)  # a status line on a terminal only
    try:
        rep = pod.analyze(path, opt, progress=progress)
    finally:
        progress.done()
    for line in rep.left_out:  # a host left out: one line each on every path (in-process, --jobs, --dask), also -q
        click.echo(f"tracekit: warning: {safe_terminal(line)}", err=True)
    texts = [render.render(rep, f) for f in out_fmts]  # every report rendered before any file is replaced
    write_reports(list(zip(outputs, texts)), out_fmts)
    if not quiet and (not outputs or fmt) and not _to_stdout(outputs):
        _print_report(render, rep, render.format_for(None, fmt) if fmt else "text", top, color)
    if rep.fails(fail_on):
        for line in [] if quiet else gate_lines(rep.findings, fail_on):
            click.echo(line, err=True)
        sys.exit(EXIT_FINDINGS)


def _out_format(render, out: str, fmt: str | None, single: bool) -> str:
    """The format of ``-o out``: its extension's, else ``--format`` (for a single output); for stdout or a device,
    ``--format`` or text. A path that cannot take a report (a folder, a block device) is refused here, first."""
    from tracekit import fileio
    kind = fileio.target(out, what="the report").kind
    if kind in ("stdout", "stderr"):
        return render.format_for(None, fmt)
    if kind == "device" and not (single and fmt) and not any(out.lower().endswith(e) for e in render.EXTENSIONS):
        return render.format_for(None, fmt)  # /dev/null, a pipe without an extension: --format, or text
    if any(out.lower().endswith(e) for e in render.EXTENSIONS):
        return render.format_for(out, None)  # the extension says: --format is for stdout (and extensionless -o)
    return render.format_for(out, fmt if single and fmt else None)


def _to_stdout(outputs) -> bool:
    from tracekit import fileio
    return any(o in fileio.STDOUT_PATHS for o in outputs)


def _print_report(render, rep, stdout_fmt: str, top: int, color: str) -> None:
    if stdout_fmt == "text":  # already safe for a terminal, in colour when asked
        term = terminal(color)
        click.echo(render.render(rep, stdout_fmt, top=top, **term), nl=False, color=term["color"])
    else:
        echo_out(render.render(rep, stdout_fmt, top=top))


@click.command("capture", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Record from a job that called jax.profiler.start_server(PORT).")
@click.option("--host", default="localhost", show_default=True, help="Host of that job's profiler server.")
@click.option("--duration-ms", type=click.IntRange(min=1), default=2000, show_default=True,
              help="How long to record from the server (--port).")
@click.option("--logdir", type=click.Path(file_okay=False, path_type=str), default=None,
              help="Where the trace goes (<logdir>/plugins/profile/<run>/); default: a new temporary folder, kept.")
@click.option("-o", "--output", "outputs", multiple=True, metavar="FILE",
              help="Also write the report here; the format follows the extension (.json .md .html .sarif .txt). "
                   "Repeatable.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html", "sarif"]), default="text",
              show_default=True, help="Format of the report on stdout.")
@click.option("--chip", default=None, help="Chip name to use instead of the detected one (see `tracekit chips`).")
@click.option("--fail-on", type=click.Choice(FAIL_ON), default=DEFAULTS.fail_on,
              show_default=True, help="Exit 1 when a finding reaches this severity.")
@click.option("--top", type=click.IntRange(1, 1000), default=12, show_default=True, help="Top ops to show.")
@color_opt
@quiet_opt
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@guarded
def capture_cmd(port, host, duration_ms, logdir, outputs, fmt, chip, fail_on, top, color, quiet, command):
    """Record a trace and analyze it: from a running job (--port), or by running a script under the profiler.

    \b
      tracekit capture --port 9999 --duration-ms 3000 --logdir logs -o report.html
      tracekit capture --logdir logs -o report.json -- python train.py --steps 100

    With a command, its exit status is passed through when it is not 0 (the report is still shown when a trace
    was written)."""
    from tracekit import pipeline
    from tracekit.run import capture as cap
    from tracekit.report import render
    if port is not None and command:
        raise TraceError("give --port or a command after --, not both")
    if port is None and not command:
        raise TraceError("nothing to capture", hint="give --port PORT (a running job) or -- python script.py ARGS")
    out_fmts = [_out_format(render, out, None, False) for out in outputs]  # bad names fail before capturing
    rc, own_note = 0, None
    if port is not None:
        run_dir = cap.remote(port, duration_ms, logdir, host=host)
    else:
        rc, run_dir, d, own_note = cap.run_script(list(command), logdir)
        if own_note and not quiet:
            click.echo(f"tracekit: {safe_terminal(own_note)}", err=True)
        if run_dir is None:
            if rc:
                click.echo(f"tracekit: error: the command exited with status {rc} and wrote no trace", err=True)
                sys.exit(rc)
            raise TraceError("the command ran no JAX computation while traced: no trace was written", d,
                             "check that the script runs jitted code (and does not end with os._exit)")
    if not quiet:
        click.echo(f"tracekit: trace in {safe_terminal(run_dir)}", err=True)
    source = str(run_dir)
    if port is None:  # recorded on this machine: a CPU trace keeps this CPU and its calibration beside it
        from tracekit.ingest.trace import load
        from tracekit.model import machine
        source = load(str(run_dir))
        source.warnings += [own_note] if own_note and run_dir is not None else []  # the script's own trace
        if machine.is_cpu_trace(source):
            machine.record_run(run_dir)
    rep = pipeline.analyze(source, chip=chip, fail_on=fail_on)
    write_reports([(out, render.render(rep, f)) for out, f in zip(outputs, out_fmts)], out_fmts)
    if not quiet and not _to_stdout(outputs):
        _print_report(render, rep, render.format_for(None, fmt), top, color)
    if rc:
        sys.exit(rc)
    if rep.fails(fail_on):
        for line in [] if quiet else gate_lines(rep.findings, fail_on):
            click.echo(line, err=True)
        sys.exit(EXIT_FINDINGS)


def _diff_context(base_tr, new_tr) -> tuple:
    """Both sides' analyze reports (JSON data) for the diff's step breakdown and findings; (None, None) when
    either cannot be analyzed (the op and step comparison stands without them)."""
    from tracekit import pipeline
    try:
        return pipeline.analyze(base_tr).data, pipeline.analyze(new_tr).data
    except TraceError:
        return None, None


@click.command("diff")
@paths_help(DIFF_PATH_HELP)
@click.argument("base", type=click.Path(path_type=str))
@click.argument("new", type=click.Path(path_type=str))
@run_opt
@click.option("--threshold", type=click.FloatRange(min=0), default=0.1, show_default=True,
              help="Minimum effect: the median per-execution time (of an op, or the median step time) must grow by "
                   "this fraction (0.1: x1.10) to be a regression, or shrink by as much (/1.10) to be an "
                   "improvement.")
@click.option("--min-time", "min_time_ps", type=DURATION, default="100us", show_default=True,
              help="...and the change must cost at least this much total time in NEW (10ms, 50us; a bare number "
                   "is ps).")
@click.option("--alpha", type=click.FloatRange(min=0, max=1, min_open=True), default=0.01, show_default=True,
              help="Significance level of the two-sided Mann-Whitney U test of the two sides' per-execution times "
                   "(step times for the step time), Holm-corrected over the ops compared.")
@click.option("-o", "--output", "outputs", multiple=True, metavar="FILE",
              help="Write the comparison here; the format follows the extension (.json .md .txt); - is stdout. "
                   "Repeatable.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default=None,
              help="Format of stdout (or of -o when its extension does not say).")
@click.option("--top", type=click.IntRange(1, 10000), default=20, show_default=True, help="Rows per table.")
@limit_opts
@quiet_opt
@guarded
def diff_cmd(base, new, run, threshold, min_time_ps, alpha, outputs, fmt, top, max_size, max_events, quiet):
    """Compare two traces of the same program: ops matched by (module, op), else by (opcode, shape); regressions,
    improvements, and ops only on one side.

    A change counts only when it exceeds the run-to-run spread the two traces show: the two sides' per-execution
    times of an op (the slowest device's step times for the step time) differ by a two-sided Mann-Whitney U test
    (normal approximation, tie-corrected) at --alpha, Holm-corrected over the ops compared, AND by the minimum
    effect (--threshold on the median, --min-time of total time). Ops with fewer than 5 executions on either side
    are never called changed (too few executions).

    Exit status: 0 when nothing regressed, 1 when an op or the step time did (a CI gate), 2 for bad input."""
    from tracekit.analysis import diff as diff_mod
    from tracekit.report import diff as diff_report
    from tracekit.report import render
    formats = [diff_report.check_format(_out_format(render, out, fmt, len(outputs) == 1)) for out in outputs]
    base_tr, new_tr = (load_trace(p, run=run, **limits(max_size, max_events)) for p in (base, new))
    c = diff_mod.compare(base_tr, new_tr, threshold=threshold, min_time_ps=min_time_ps, alpha=alpha, run=run)
    d = diff_report.build(c, *_diff_context(base_tr, new_tr))
    write_reports([(out, diff_report.render(d, f, top=top)) for out, f in zip(outputs, formats)], formats)
    if not quiet and (not outputs or fmt) and not _to_stdout(outputs):
        echo_out(diff_report.render(d, render.format_for(None, fmt), top=top, width=term_width()))
    if d.failed:
        for line in [] if quiet else regression_lines(d.data):
            click.echo(line, err=True)
        sys.exit(EXIT_FINDINGS)


@click.command("export")
@path_arg
@run_opt
@click.option("-o", "--output", "output", required=True, metavar="FILE",
              help="Chrome/Perfetto trace JSON to write (.json or .json.gz; - is stdout); replaced only when complete.")
@click.option("--steps", default=None, help="Only the time of steps A-B (e.g. 3-7), or of one step.")
@click.option("--device", "devices", multiple=True, help="Only this device (repeatable), e.g. TPU:0.")
@click.option("--chip", default=None, help="Chip name to use instead of the detected one (see `tracekit chips`).")
@click.option("--rules", "rules_dirs", multiple=True, type=click.Path(exists=True, file_okay=False),
              help="Extra rules folder (repeatable).")
@limit_opts
@guarded
def export_cmd(path, run, output, steps, devices, chip, rules_dirs, max_size, max_events):
    """Write the trace with tracekit's analysis as Chrome/Perfetto trace-event JSON (ui.perfetto.dev,
    chrome://tracing): every op with its roofline, steps, findings, exposed collectives, idle gaps, async
    start->done arrows."""
    from tracekit import fileio, pipeline
    from tracekit.report import export
    fileio.target(output, what="the export")  # a folder, a block device, a symlink loop: one line, before any work
    lim = limits(max_size, max_events)
    out = pipeline.export(path, output, chip=chip, run=run, steps=export.parse_steps(steps), devices=devices,
                          rules_dirs=rules_dirs, max_bytes=lim["max_bytes"], max_events=lim["max_events"])
    click.echo(fit_lines(f"wrote {safe_terminal(out.path)}: {out.ops:,} ops, {out.async_windows:,} async windows, "
                         f"{out.steps:,} step rows, {out.finding_windows:,} windows of {out.findings} finding(s), "
                         f"{out.gaps:,} idle gaps, {out.exposed_windows:,} exposed-collective windows"), err=True)
