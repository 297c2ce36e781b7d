"""Steps are device runs: which rows of the ``steps`` frame (:data:`tracekit.schema.STEPS`) one host's trace gets.

* A ``Steps`` line of the device (TPU, TensorFlow GPU traces) is the device's own account: kept as it is
  (``steps_line``).
* Else, where the trace tells program executions apart (the ``modules`` frame: XLA:CPU run ids, the TPU
  ``XLA Modules`` line), a step is one run of the **step program** on the device (``module_execution``). The step
  program is the one with the most device time among the programs that run at least twice on a device (the one
  with the most device time when none does). A device's step starts where its run starts and lasts until that
  device's next run of the program starts (start to start: the idle between runs belongs to the step it follows).
  The last run has no next start: its step is its own execution, marked ``open_end``, so that its work is in the
  breakdown while the step-time statistics (:func:`tracekit.analysis.stepstats.closed_steps`) leave it out.
* Else the host's ``StepTraceAnnotation`` windows, on every device with ops (``step_annotation``).

Under JAX's async dispatch the host's annotation window holds the dispatch only: the run it dispatched happens
later, on the device. So the annotations only **number** the runs: the windows in time order each take the first
run not yet taken that starts at or after the window starts, and when every taken run's ``step_num`` is its
run index plus one constant, the steps are numbered by it. When the windows hold less than
:data:`ANNOTATED_SHARE` of the step program's device time, or some window holds other than one run's start,
:func:`device_steps` adds one warning saying so.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit import schema
from tracekit.grouping import distinct_rows, int_sums

#: the share of the step program's device time the annotation windows must hold to go without a warning
ANNOTATED_SHARE = 0.8
_HELD = "the step annotations hold"
_HELD_RE = re.compile(r"^(?P<host>.*?): " + _HELD + r" (?P<share>\d+)% of the device time of the step program "
                      r"(?P<prog>\S+) and (?P<odd>\d+) of (?P<n>\d+) annotation window\(s\)(?P<rest>.*)$")


def device_steps(dev_steps: pd.DataFrame, host_steps: pd.DataFrame, mx: pd.DataFrame,
                 devices: list[str], host: str, warnings: list[str]) -> pd.DataFrame:
    """The steps frame of one host (module docstring); ``devices``: the devices with ops, in device order."""
    if len(dev_steps):
        return dev_steps
    main = main_program(mx)
    if main is not None:
        steps = program_runs(mx, main)
        if len(host_steps):
            steps = _label(steps, host_steps, main[0], host, warnings)
        return schema.conform(steps, schema.STEPS, extra=False)
    if len(host_steps) and devices:
        rep = pd.concat([host_steps.assign(device=d) for d in devices], ignore_index=True)
        return schema.conform(rep.sort_values(["device", "start_ps"]), schema.STEPS)
    return schema.empty(schema.STEPS)


def main_program(mx: pd.DataFrame) -> tuple[str, int] | None:
    """(module name, program id) of the step program: the most device time (its runs' durations over every
    device) among programs that run at least twice on some device; among all programs when none does; None
    without program runs."""
    if not len(mx):
        return None
    # (the groups of the program and of the program on each device by codes, not by a string per run: the groups
    # are few, the runs many)
    prog, _, progs = distinct_rows(mx, ["module", "program_id"])
    on_dev, first, _ = distinct_rows(mx, ["module", "program_id", "device"])
    time = int_sums(prog, column_numpy(mx, "duration_ps", np.int64), len(progs))
    runs = np.zeros(len(progs), np.int64)
    np.maximum.at(runs, prog[first], np.bincount(on_dev, minlength=len(first)))
    pool = np.flatnonzero(runs >= 2) if (runs >= 2).any() else np.arange(len(progs))
    most = time[pool].max()
    # the first of the largest in (module name, program id) order
    keys = [(_text(progs[i][0]), int(progs[i][1]), i) for i in pool if time[i] == most]
    name, pid, _ = min(keys)
    return name, pid


def _text(v) -> str:
    """A module name as text, a missing one as pandas writes it (``astype(str)``: 'nan')."""
    return "nan" if v is None else str(v)


def program_runs(mx: pd.DataFrame, main: tuple[str, int]) -> pd.DataFrame:
    """One step row per run of ``main`` on each device, start to start (module docstring), with ``run_ps`` the
    run's own execution (not a column of the steps frame: :func:`device_steps` drops it). Runs are numbered by
    their run id's order (the earliest start of each id over the devices) when the ids name the same executions
    on every device, else by their order on each device."""
    m = mx[(text_numpy(mx, "module") == main[0]) & (column_numpy(mx, "program_id", np.uint64) == main[1])]
    dev = text_numpy(m, "device")
    start = column_numpy(m, "start_ps", np.int64)
    dur = column_numpy(m, "duration_ps", np.int64)
    run = column_numpy(m, "run_id", np.int64)
    # the same run id on every device names one execution (XLA:CPU's SPMD runs): distinct on each device, and no
    # more ids than the busiest device has runs (TPU devices can count their runs apart: then by order)
    per_dev = pd.Series(dev).value_counts()
    by_id = len(m) > 0 and not pd.DataFrame({"d": dev, "r": run}).duplicated().any() and \
        len(np.unique(run)) == int(per_dev.max())
    if by_id:
        first = pd.Series(start).groupby(run).min().sort_values(kind="stable")
        rank = dict(zip(first.index.to_numpy().tolist(), range(len(first))))
    out = []
    for d in sorted(set(dev.tolist()), key=_dev_key):
        idx = np.nonzero(dev == d)[0]
        idx = idx[np.argsort(start[idx], kind="stable")]
        s, e = start[idx], start[idx] + dur[idx]
        step_ps = np.r_[np.diff(s), e[-1] - s[-1]].astype(np.int64)
        open_end = np.zeros(len(idx), bool)
        open_end[-1] = True
        number = np.array([rank[int(r)] for r in run[idx]], np.int64) if by_id else np.arange(len(idx))
        out.append(pd.DataFrame({"host": text_numpy(m, "host")[idx] if "host" in m.columns else "",
                                 "device": d, "step": number, "start_ps": s, "duration_ps": step_ps,
                                 "step_source": "module_execution", "open_end": open_end, "run_ps": e - s}))
    return pd.concat(out, ignore_index=True) if out else schema.empty(schema.STEPS)


def _label(steps: pd.DataFrame, host_steps: pd.DataFrame, name: str, host: str, warnings: list[str]) -> pd.DataFrame:
    """Number the runs by the annotations' ``step_num`` (module docstring) and warn when the windows do not hold
    the runs."""
    runs = steps.groupby("step", sort=True)["start_ps"].min()  # a run's first start over the devices
    rs, rn = runs.to_numpy(np.int64), runs.index.to_numpy(np.int64)
    order = np.argsort(rs, kind="stable")
    rs, rn = rs[order], rn[order]
    w = host_steps.sort_values("start_ps", kind="stable")
    ws = column_numpy(w, "start_ps", np.int64)
    we = ws + column_numpy(w, "duration_ps", np.int64)
    wn = column_numpy(w, "step", np.int64)
    taken, j = {}, 0
    for k in range(len(ws)):
        while j < len(rs) and rs[j] < ws[k]:
            j += 1
        if j >= len(rs):
            break
        taken[int(rn[j])] = int(wn[k])
        j += 1
    offsets = {lab - run for run, lab in taken.items()}
    if len(offsets) == 1:
        steps = steps.assign(step=column_numpy(steps, "step", np.int64) + offsets.pop())
    # how much of the program's device time the windows hold, and how many runs start in each
    ms, me = _merged(ws, we)
    a = column_numpy(steps, "start_ps", np.int64)
    run_end = a + column_numpy(steps, "run_ps", np.int64)
    total = int((run_end - a).sum())
    held = int((_covered_to(ms, me, run_end) - _covered_to(ms, me, a)).sum())
    per_window = np.searchsorted(rs, we, "left") - np.searchsorted(rs, ws, "left")
    odd = int((per_window != 1).sum())
    share = held / total if total > 0 else 1.0
    if share < ANNOTATED_SHARE or odd:
        warnings.append(
            f"{host}: {_HELD} {share * 100:.0f}% of the device time of the step program {name} and "
            f"{odd} of {len(ws)} annotation window(s) hold other than one of its runs (the host dispatches ahead "
            f"of the devices, as under async dispatch): a step here is a device run of {name}, start to start; "
            "the annotations only number the runs")
    return steps


def fold_warnings(warnings: list[str]) -> list[str]:
    """The hosts' annotation warnings (:func:`device_steps`, one per host) as one line per step program, where
    the first of them was: ``N hosts (a, b, ...)``, the range of their shares and their windows added up."""
    groups: dict = {}
    for i, w in enumerate(warnings):
        m = _HELD_RE.match(w)
        if m:
            groups.setdefault((m["prog"], m["rest"]), []).append((i, m))
    if all(len(g) == 1 for g in groups.values()):
        return list(warnings)
    out, drop = list(warnings), set()
    for (prog, rest), g in groups.items():
        if len(g) == 1:
            continue
        hosts = [m["host"] for _, m in g]
        shares = sorted(int(m["share"]) for _, m in g)
        held = f"{shares[0]}%" if shares[0] == shares[-1] else f"{shares[0]}-{shares[-1]}%"
        names = ", ".join(hosts[:3]) + (", ..." if len(hosts) > 3 else "")
        out[g[0][0]] = (f"{len(hosts)} hosts ({names}): {_HELD} {held} of the device time of the step program {prog} "
                        f"and {sum(int(m['odd']) for _, m in g)} of {sum(int(m['n']) for _, m in g)} annotation "
                        f"window(s){rest}")
        drop.update(i for i, _ in g[1:])
    return [w for i, w in enumerate(out) if i not in drop]


def _merged(s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of the intervals ``[s, e)`` as sorted disjoint (starts, ends)."""
    if not len(s):
        return s[:0], e[:0]
    o = np.argsort(s, kind="stable")
    s, e = s[o], e[o]
    reach = np.maximum.accumulate(e)
    new = np.r_[True, s[1:] > reach[:-1]]  # a start past every earlier end opens a new piece
    idx = np.nonzero(new)[0]
    return s[idx], reach[np.r_[idx[1:] - 1, len(s) - 1]]


def _covered_to(ms: np.ndarray, me: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each time of ``x``, how much of the merged union (``ms``, ``me``) lies before it."""
    if not len(ms):
        return np.zeros(len(x), np.int64)
    before = np.r_[0, np.cumsum(me - ms)]
    k = np.searchsorted(ms, x, "right") - 1
    kk = np.maximum(k, 0)
    part = np.clip(np.minimum(x, me[kk]) - ms[kk], 0, None)
    return np.where(k >= 0, before[kk] + part, 0)


def _dev_key(d: str):
    kind, _, num = d.partition(":")
    return (kind, int(num) if num.isdigit() else 0)
