"""The pipeline, stage by stage: load -> frames -> cost -> roofline -> timeline -> rules -> report.
Each stage is a function of plain data; this module only wires them together: :func:`analyze` maps each host
through the stages (:mod:`tracekit.report.engine`) and reduces the hosts' summaries into the one Report."""
from __future__ import annotations

import pandas as pd

from tracekit import options as options_mod
from tracekit.ingest.trace import Trace, load
from tracekit.options import Options
from tracekit.report.envelope import Report


def with_roofline(tr: Trace, chip: str | None = None, topology: str | None = None,
                  cost_table: pd.DataFrame | None = None, *, release_trace_costs: bool = False) -> pd.DataFrame:
    """The ops frame with the roofline columns joined (cost model + chip table; collectives priced on
    ``topology``, ``--topology``, else the trace's own); ``cost_table``: the trace's
    :func:`tracekit.model.identity.costs` when the caller has it already. ``release_trace_costs``: the trace's
    own cost stats leave ``tr.ops`` and the result once they have served (see :func:`tracekit.model.roofline.join`;
    :func:`tracekit.model.roofline.joined` also gives the chips and the collective model)."""
    from tracekit.model import roofline
    return roofline.join(tr, chip=chip, topology=topology, cost_table=cost_table,
                         release_trace_costs=release_trace_costs)


def _memory_guard(fn):
    """A MemoryError anywhere in the analysis becomes the one-line TraceError saying how much memory the trace
    needs and what to do (--jobs, --dask, a bigger machine)."""
    import functools

    @functools.wraps(fn)
    def wrapper(source, options=None, **kw):
        opt = options_mod.make(options, **{k: v for k, v in kw.items() if k in options_mod.NAMES})
        try:
            return fn(source, opt, **{k: v for k, v in kw.items() if k not in options_mod.NAMES})
        except MemoryError:
            from tracekit.ingest import paths
            raise paths.out_of_memory_for(source, opt.run) from None
    return wrapper


@_memory_guard
def analyze(source, options: Options | None = None, *, ops=None, progress=None, left_out=(),
            mapper=None) -> Report:
    """Everything ``tracekit analyze`` does, as a function: a path (or a loaded :class:`Trace`) -> Report.

    ``options``: :class:`tracekit.options.Options` (its fields may also be given as keywords:
    ``analyze(path, chip="v6e", fail_on="warning")``). The engine (:mod:`tracekit.report.engine`): each host is
    summarized (the map), the summaries reduced into the report; here the map runs in this process, host after
    host, unless ``mapper`` (``mapper(files, options, run_hosts, progress) -> (summaries, failures)``, as
    :mod:`tracekit.run.pod` gives for ``jobs``/``dask``) runs it elsewhere. A host of a run folder that cannot be
    read is left out and named (:mod:`tracekit.ingest.badhosts`); ``left_out``: those the caller's own
    ``load(..., left_out=)`` of a :class:`Trace` ``source`` left out; ``ops``: a one-host Trace's roofline-joined
    ops, when the caller has them."""
    from tracekit.analysis import hostrules, rule_cases, rules
    from tracekit.ingest import badhosts, paths
    from tracekit.ingest.split import per_host
    from tracekit.progress import NULL
    from tracekit.report.engine import host, reduce
    progress = progress or NULL
    # rules first: a refused rule file or a failing case of a user rule stops before the trace is read
    items = hostrules.rule_items(options)
    rule_cases.check_user_rules([r for r, _ in items])
    rules.check_params([r for r, _ in items], options.params_dict)
    failures = list(left_out)
    if isinstance(source, Trace):
        parts = per_host(source)
        if ops is not None and len(parts) > 1:
            raise ValueError("ops= is for a one-host trace")
        run_hosts = tuple(t.hosts[0] for t in parts)
        files, notes = len(parts) + len(failures), ()  # (a loaded Trace's note is in its warnings)
        summaries = [host.summarize_trace(t, options, hosts=run_hosts, ops=ops, progress=progress, pod=files > 1)
                     for t in parts]
    else:
        chosen = paths.choose(source, options.run)  # (which run / sub-folder was taken: one note, every engine)
        hfs, notes = chosen.files, (chosen.note,) if chosen.note else ()
        run_hosts = tuple(f.host for f in hfs) if len(hfs) > 1 else ()
        summaries, failures = (mapper or map_here)(hfs, options, run_hosts, progress)
        if not summaries:
            raise badhosts.none_left(failures)
        files = len(hfs)
    progress.stage("report")
    return reduce.report(summaries, failures, items, options, files=files, notes=notes)


def map_here(files: list, options: Options, run_hosts: tuple, progress=None) -> tuple[list, list]:
    """(summaries in host order, failures [(host, path, reason)]): each host file summarized in this process (a
    single file as its trace names its host; each host of a run folder tried
    :data:`tracekit.ingest.badhosts.ATTEMPTS` times, then left out)."""
    from tracekit.ingest import badhosts
    from tracekit.report.engine import host
    if len(files) == 1:
        f = files[0]
        return [host.summarize_file(str(f.path), f.host, options, use_hostname=True, progress=progress)], []
    summaries, failures = [], []
    for f in files:
        s, err = badhosts.attempt(host.summarize_file, str(f.path), f.host, options, run_hosts, progress=progress)
        if err is not None:
            failures.append((f.host, str(f.path), badhosts.reason(err)))
        else:
            summaries.append(s)
    return summaries, failures


def export(source, out, *, chip: str | None = None, run: str | None = None, steps: tuple[int, int] | None = None,
           devices=(), rules_dirs=None, max_bytes=None, max_events=None):
    """``tracekit export``: the trace with its roofline, steps, gaps and findings as Chrome/Perfetto JSON
    (:mod:`tracekit.report.export`); ``steps`` (A, B) and ``devices`` restrict it to a window."""
    from tracekit.analysis import rule_cases, rule_checks, rule_model, rules
    from tracekit.ingest import hlo
    from tracekit.ingest import paths as load_mod
    from tracekit.report import export as export_mod
    rule_list = rule_cases.check_user_rules(rule_model.load_rules(extra_dirs=rules_dirs))
    tr = source if isinstance(source, Trace) else load(
        source, run=run, max_bytes=max_bytes if max_bytes is not None else load_mod.DEFAULT_MAX_BYTES,
        max_events=max_events)
    devices = tuple(devices or ())
    export_mod.check_devices(tr.ops, devices)
    window = export_mod.step_window(tr.steps, steps, devices)
    ops = with_roofline(tr, chip)
    frames = rule_checks.frames_for_rules(ops, tr.steps, tr.host_events, kernel_profile=tr.kernel_profile)
    findings = rules.run_rules(frames, rule_list)
    d2s = hlo.done_to_start(tr.hlo) if len(tr.hlo) else {}
    return export_mod.write(out, ops, frames, findings, d2s, window=window, devices=devices)
