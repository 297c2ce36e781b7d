"""Which programs of a trace serve a model, and whether each is a prefill or a decode step, on what evidence.

With HLO (:mod:`tracekit.analysis.serving_hlo`): a program whose entry parameter is a cache written in place (a
``dynamic-update-slice`` or ``scatter`` into a donated, aliased parameter) serves; it is a **decode** step when its
writes add one position per sequence, a **prefill** when they add more. Without such a cache a program is never a
decode step, whatever its name.

Without HLO (a trace-viewer JSON, or HLO the trace lacks): a program with an op named for a cache write
(``dynamic-update-slice``, ``scatter``: XLA names fusions after the ops they fuse) or a known attention kernel
serves. Its kind is what its name says (``prefill``, ``prompt``; ``decode``, ``generate``, ``sample``), else, where
two or more such programs ran on a device, the one with the most runs (ties: the shorter median run) is the decode
step and those whose runs take longer are prefills. That in-place writing cannot be checked there is said in the
evidence.

``workload`` overrides: ``training`` classes nothing as serving; ``serving`` keeps what the evidence says and
classes the trace's step program as serving of an unknown kind when nothing else is.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from tracekit.columns import column_numpy, text_numpy
from tracekit.analysis.serving_hlo import ATTENTION_KERNELS, ProgramShape
from tracekit.grouping import distinct_rows
from tracekit.records import record

KINDS = ("prefill", "decode", "unknown")
WORKLOADS = ("training", "serving")
_PREFILL_NAME = re.compile(r"prefill|prompt", re.IGNORECASE)
_DECODE_NAME = re.compile(r"decode|generat|sample|next_token", re.IGNORECASE)
_WRITE_OP = re.compile(r"dynamic[-_]update[-_]slice|scatter", re.IGNORECASE)


@record(frozen=True)
class ServingProgram:
    """One program classed as serving: its kind, where that came from (hlo | names | runs | given) and the
    evidence in words; ``shape``: what its HLO says (None without HLO)."""

    module: str
    program_id: int
    kind: str
    source: str
    evidence: tuple
    shape: ProgramShape | None = None


def by_hlo(shapes: dict) -> dict:
    """(module, program id) -> :class:`ServingProgram` of every program whose HLO shows a cache written in place."""
    out = {}
    for key, s in shapes.items():
        if not s.has_cache:
            continue
        ev = list(s.evidence)
        ev.append({"decode": "one position per sequence per step: a decode step",
                   "prefill": f"{s.tokens_per_sequence} positions per sequence per step: a prefill",
                   "unknown": "the writes do not tell prefill from decode"}[s.kind])
        out[key] = ServingProgram(key[0], key[1], s.kind, "hlo", tuple(ev), s)
    return out


def by_names(ops: pd.DataFrame, modules: pd.DataFrame, skip: set = frozenset()) -> dict:
    """(module, program id) -> :class:`ServingProgram` from op and program names and program runs (module
    docstring), for the programs not in ``skip`` (those the HLO describes)."""
    if ops is None or not len(ops):
        return {}
    # the distinct (module, program, op, kernel) by the project's dense grouping: pandas' drop_duplicates over the
    # 1.7 M-row frame of a 1.2 M-op trace was the analysis' peak memory (~60 MB of hashing temporaries)
    _, _, names = distinct_rows(ops, ["module", "program_id", "op"] + (["kernel"] if "kernel" in ops.columns else []))
    writers: dict = {}
    for module, program_id, op, *kernel in names:
        if module is None or program_id is None:
            continue
        key = (str(module), int(program_id))
        if key in skip or not key[0]:
            continue
        text = f"{op} {(kernel[0] if kernel else '') or ''}"
        hit = _WRITE_OP.search(text) or ATTENTION_KERNELS.search(text)
        if hit:
            writers.setdefault(key, set()).add(str(op))
    if not writers:
        return {}
    runs = _run_stats(modules, set(writers))
    out = {}
    for key, ops_seen in writers.items():
        shown = ", ".join(sorted(ops_seen)[:3]) + (", ..." if len(ops_seen) > 3 else "")
        ev = [f"no HLO for this program: ops named for a cache write or attention kernel ({shown}); that the cache "
              "is written in place cannot be checked without HLO"]
        kind = ""
        if _PREFILL_NAME.search(key[0]) and not _DECODE_NAME.search(key[0]):
            kind = "prefill"
            ev.append(f"the program's name ({key[0]}) says prefill")
        elif _DECODE_NAME.search(key[0]) and not _PREFILL_NAME.search(key[0]):
            kind = "decode"
            ev.append(f"the program's name ({key[0]}) says decode")
        out[key] = [kind, "names", ev]
    _kinds_by_runs(out, runs)
    return {k: ServingProgram(k[0], k[1], v[0] or "unknown", v[1], tuple(v[2])) for k, v in out.items()}


def _run_stats(modules: pd.DataFrame, keys: set) -> dict:
    """(module, program id) -> (most runs on a device, median run ps) of the programs in ``keys``."""
    if modules is None or not len(modules):
        return {}
    m = pd.DataFrame({"module": text_numpy(modules, "module"),
                      "pid": column_numpy(modules, "program_id", np.uint64),
                      "device": text_numpy(modules, "device"),
                      "dur": column_numpy(modules, "duration_ps", np.int64)})
    out = {}
    for (mod, pid), g in m.groupby(["module", "pid"], sort=True):
        if (mod, int(pid)) in keys:
            out[(mod, int(pid))] = (int(g.groupby("device").size().max()), float(np.median(g["dur"])))
    return out


def _kinds_by_runs(out: dict, runs: dict) -> None:
    """Programs whose names did not tell: the one with the most runs is the decode step when at least two
    cache-writing programs ran, those with longer median runs than it prefills (module docstring)."""
    ran = {k: runs[k] for k in out if k in runs}
    if len(ran) < 2 or all(v[0] for v in out.values()):
        return
    named = [k for k, v in out.items() if v[0] == "decode"]
    dec = named[0] if len(named) == 1 else min(ran, key=lambda k: (-ran[k][0], ran[k][1], k))
    n_dec, med_dec = ran[dec]
    for k, v in out.items():
        if v[0] or k not in ran:
            continue
        n, med = ran[k]
        if k == dec and n >= 2:
            v[0], v[1] = "decode", "runs"
            v[2].append(f"of the cache-writing programs it runs the most ({n} runs on a device, median "
                        f"{med / 1e6:.3g} µs): the decode step")
        elif k != dec and med > med_dec:
            v[0], v[1] = "prefill", "runs"
            v[2].append(f"its runs take longer (median {med / 1e6:.3g} µs) than the decode step {dec[0]}'s "
                        f"({med_dec / 1e6:.3g} µs, {n_dec} runs): a prefill")


def classify(shapes: dict, ops: pd.DataFrame, modules: pd.DataFrame, workload: str | None = None,
             step_program: tuple | None = None) -> tuple[dict, str, str]:
    """(serving programs by (module, program id), the workload: serving | training, and where that came from:
    trace | given). ``shapes``: :func:`tracekit.analysis.serving_hlo.program_shapes`; ``step_program``: the
    trace's step program (:func:`tracekit.ingest.steps.main_program`), for ``workload='serving'``."""
    if workload not in (None, "", *WORKLOADS):
        raise ValueError(f"workload must be one of {WORKLOADS}, not {workload!r}")
    if workload == "training":
        return {}, "training", "given"
    progs = by_hlo(shapes)
    progs.update(by_names(ops, modules, skip=set(shapes)))
    if workload == "serving":
        if not progs and step_program is not None:
            key = (str(step_program[0]), int(step_program[1]))
            progs[key] = ServingProgram(key[0], key[1], "unknown", "given",
                                        ("--workload serving: the step program, although the trace shows no cache "
                                         "written in place, so not whether it is a prefill or a decode step",),
                                        shapes.get(key))
        return progs, "serving", "given"
    return progs, ("serving" if progs else "training"), "trace"


__all__ = ["ServingProgram", "classify", "by_hlo", "by_names", "KINDS", "WORKLOADS"]
