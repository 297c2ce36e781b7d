"""The hook's analysis child (``python -m tracekit.run.hookchild RUN SPEC``, started by :mod:`tracekit.run.hook`):
analyzes the run folder, writes the reports there and prints one JSON line for the parent.

It runs detached from the training job (its own session): the job may exit first, and the child still finishes
its report on its own; ``spec["timeout_s"]`` bounds it even when no parent is left to stop it (an alarm ends it).
"""
from __future__ import annotations

import json
import os
import sys

EXTENSIONS = {"json": ".json", "html": ".html", "markdown": ".md", "md": ".md", "sarif": ".sarif", "text": ".txt"}
REPORT_STEM = "tracekit-report"
NICE = 10  #: how much lower the child's CPU priority is than the job's


def report_paths(run, outputs) -> list[str]:
    """Where the reports of ``outputs`` (formats) of the run folder ``run`` go."""
    return list(dict.fromkeys(os.path.join(str(run), REPORT_STEM + EXTENSIONS[f]) for f in outputs))


def lower_priority(pid: int) -> None:
    """Nice the process ``pid`` (the child, as it starts) by :data:`NICE` more than this one, where the OS can."""
    try:
        os.setpriority(os.PRIO_PROCESS, pid, min(19, os.getpriority(os.PRIO_PROCESS, 0) + NICE))
    except (AttributeError, OSError):
        pass


def summary_lines(rep, written: list[str]) -> list[str]:
    from tracekit.report.render.sections import claim
    from tracekit.units import fmt_time
    s = rep.data["summary"]
    fs = sorted(rep.findings, key=lambda f: -(f.get("savings_ps") or 0))
    head = (f"{len(fs)} finding(s) in {s['steps']} step(s), {fmt_time(s['profiled_ps'])} profiled; "
            f"findings claim ~{fmt_time(s.get('claimed_savings_ps') or 0)} together"
            + (f", {fmt_time(s['above_roofline_floor_ps'])} above the roofline floor"
               if s.get("above_roofline_floor_ps") is not None else ""))
    lines = [head + (f"; report: {', '.join(written)}" if written else "")]
    for n, f in enumerate(fs[:3], 1):
        msg = " ".join(str(f.get("message", "")).split())
        time, share = claim(f)
        lines.append(f"{n}. [{f['severity']}] {f.get('rule_id')} {f.get('name')}: {time}"
                     + (f" ({share})" if f.get("claims_time") is not False else "") + f" — {msg}")  # whole: a log line is never cut
    from tracekit.report.termsafe import safe
    return [safe(line) for line in lines]  # the job's log is often a terminal: nothing from the trace drives it


def _deadline(timeout_s) -> None:
    """End this process after ``timeout_s`` seconds (SIGALRM's default action), whoever is waiting for it."""
    import math
    import signal
    try:
        if timeout_s is not None and float(timeout_s) > 0 and hasattr(signal, "alarm"):
            signal.alarm(max(1, math.ceil(float(timeout_s))))
    except (TypeError, ValueError, OverflowError):
        pass


def main() -> None:
    """Child side: analyze the run folder, write the reports there, print one JSON line for the parent."""
    run, spec = sys.argv[1], json.loads(sys.argv[2])
    _deadline(spec.get("timeout_s"))
    try:
        if os.nice(0) < NICE:  # the hook nices it as it starts; started otherwise, it nices itself
            os.nice(NICE)  # leave the CPU to training
    except (AttributeError, OSError):
        pass
    if os.environ.get("TRACEKIT_HOOK_FAIL", "") not in ("", "0"):
        raise RuntimeError("TRACEKIT_HOOK_FAIL is set: failing the analysis on purpose")
    from tracekit import collector
    collector.pause()  # as the tracekit command: no cyclic collection while importing; load() resumes it
    from tracekit import pipeline
    from tracekit.report import render
    from tracekit import fileio
    from tracekit import options as options_mod
    from tracekit.options import DEFAULTS, Options
    fail_on = spec.get("fail_on") or DEFAULTS.fail_on
    from tracekit.ingest.trace import load
    from tracekit.model import machine
    from tracekit.threads import mark_one_shot
    mark_one_shot()  # a one-shot child that hands no frame on: constant columns held once
    left_out: list = []  # another host's file in a shared run folder may be unreadable: left out and named
    opt = options_mod.make(Options.from_json(spec.get("options")), fail_on=fail_on)
    tr = load(run, left_out=left_out, max_bytes=opt.max_bytes, max_events=opt.max_events)
    if machine.is_cpu_trace(tr):  # this process runs on the recording machine: keep its CPU and calibration
        machine.record_run(run)
    rep = pipeline.analyze(tr, opt, left_out=left_out)
    items, skipped, json_path = [], {}, None
    for fmt in spec.get("outputs", []):
        path = os.path.join(run, REPORT_STEM + EXTENSIONS[fmt])
        try:
            items.append((path, render.render(rep, fmt)))
        except ImportError as e:  # a renderer that has not landed yet
            skipped[fmt] = f"renderer not available ({e})"
            continue
        json_path = path if fmt == "json" else json_path
    fileio.write_all(items, what="the report")  # all written, or none replaced
    written = [p for p, _ in items]
    print(json.dumps({"run": run, "written": written, "skipped": skipped, "json": json_path,
                      "worst": rep.worst_severity(), "fails": rep.fails(fail_on),
                      "findings": [{k: f.get(k) for k in ("rule_id", "name", "severity", "savings_ps", "share")}
                                   for f in rep.findings],
                      "summary_lines": summary_lines(rep, written)}), flush=True)


if __name__ == "__main__":  # the analysis child (tracekit.run.hook.analysis_command)
    main()
