"""Author estimates are evidence, not truth: where an op's FLOPs are stated by someone (a kernel's author, through
the trace's ``flops`` stat or a Pallas ``cost_estimate`` in the instruction's config) and its own shapes give a
figure too, the two are weighed, and where they disagree by more than 2x a model warning names both numbers and
where each came from.

* **Shapes win** for the models whose FLOPs come from the op's shapes and its library's config
  (:data:`tracekit.model.custom_calls.SHAPE_MODELS`: vendor GEMMs, cuDNN convolutions and attention,
  TransformerEngine attention, Pallas kernels whose shapes are a matmul or an attention). Where the shapes give a
  range (attention of unknown causality), a stated figure inside the range is taken (it settles the causality); a
  stated figure within 2x of the range is no disagreement.
* **The trace stands** for XLA's own ops (the stat is the compiler's count from the same HLO): where the op holds a
  matmul (a dot, or a fusion with one) and tracekit's HLO cost model disagrees by more than 2x, the warning names
  both, and the trace's figure is used.
* **Bytes** of a custom call never fall below one read of its operands and one write of its results, whatever is
  stated (:func:`tracekit.model.roofline` applies the floor; an author's 0 moves nothing, which no kernel does).

The roofline join calls :func:`disagreements` once and hands them on (:attr:`tracekit.model.roofline.Joined.disagreements`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from tracekit.model import custom_calls
from tracekit.schema import CostSource

FACTOR = 2.0  #: more than this far apart (either way) is a disagreement
TRACE_STAT = "the trace's flops stat"


def shape_model(src: np.ndarray, models: list) -> np.ndarray:
    """Where the cost source codes ``src`` (``CostSource`` values, then ``len(CostSource) + i`` for
    ``models[i]``) name a model whose FLOPs come from the shapes."""
    codes = [len(CostSource) + i for i, m in enumerate(models)
             if m.removeprefix("model:") in custom_calls.SHAPE_MODELS]
    return np.isin(src, codes) if codes else np.zeros(len(src), bool)


def disagree(stated: np.ndarray, derived: np.ndarray, hi: np.ndarray | None = None) -> np.ndarray:
    """Elementwise :func:`tracekit.model.custom_calls.disagrees`: a stated figure more than :data:`FACTOR` below
    the derived one, or above its range's top (``hi``, NaN: no range) times :data:`FACTOR`, or 0 against work."""
    stated, derived = np.asarray(stated, float), np.asarray(derived, float)
    top = derived if hi is None else np.where(np.asarray(hi, float) > derived, hi, derived)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(stated) & np.isfinite(derived) & (derived > 0)
        return ok & ((stated <= 0) | (stated * FACTOR < derived) | (stated > top * FACTOR))


def disagreements(ops: pd.DataFrame, inv: np.ndarray, tf: np.ndarray, u: dict) -> list[dict]:
    """The model warnings of one join: ``ops`` its rows, ``inv`` each row's identity, ``tf`` each row's flops stat
    (NaN where none), ``u`` the per-identity costs (:func:`tracekit.model.identity.per_identity`). One entry per
    (module, op, stated source): module, op, stated_flops, stated_source, derived_flops, derived_source, used
    (which figure the roofline uses) and message."""
    out: list[dict] = []
    if not len(ops) or not len(u["src"]):
        return out
    src, models = np.asarray(u["src"]), u["models"]
    shaped = shape_model(src, models)
    xla_matmul = (src == CostSource.HLO) & (np.asarray(u["dot_m"], np.int64) > 0)
    derived, hi = np.asarray(u["flops"], float), np.asarray(u["flops_hi"], float)
    # (1) the instruction's own figure (a Pallas cost_estimate), once per identity
    ids = np.flatnonzero(shaped & disagree(u["stated_flops"], derived, hi))
    first = _first_rows(inv, ids)
    for i, r in zip(ids, first):
        out.append(_entry(ops, r, float(u["stated_flops"][i]), str(u["stated_source"][i]), derived[i],
                          _model(src[i], models), "shapes"))
    # (2) the trace's flops stat, per row (a stat may differ between executions), first per (module, op)
    # (only rows of identities a stat can disagree with: the row-sized temporaries of every row with a stat were
    # the join's peak memory at 1.2 M op executions)
    cand = (shaped | xla_matmul)[inv]
    cand &= ~np.isnan(tf)
    if cand.any():
        rows = np.flatnonzero(cand)
        del cand
        row_id = inv[rows]
        d, h = derived[row_id], hi[row_id]
        bad = disagree(tf[rows], d, h)
        _, at = np.unique(row_id[bad], return_index=True)  # the first disagreeing row of each identity
        for r in rows[bad][np.sort(at)]:
            i = int(inv[r])
            shapes = bool(shaped[i])
            out.append(_entry(ops, r, float(tf[r]), TRACE_STAT, derived[i],
                              _model(src[i], models) if shapes else "tracekit's HLO cost model",
                              "shapes" if shapes else "trace"))
    seen, uniq = set(), []
    for e in out:
        key = (e["module"], e["op"], e["stated_source"])
        if key not in seen:
            seen.add(key)
            uniq.append(e)
    return uniq


def _first_rows(inv: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """A row of each identity in ``ids`` (its first)."""
    if not len(ids):
        return np.zeros(0, np.int64)
    order = np.argsort(inv, kind="stable")
    pos = np.searchsorted(inv[order], ids)
    return order[pos]


def _model(code, models: list) -> str:
    i = int(code) - len(CostSource)
    return models[i] if 0 <= i < len(models) else "tracekit's HLO cost model"


def _entry(ops: pd.DataFrame, r: int, stated: float, stated_source: str, derived: float, derived_source: str,
           used: str) -> dict:
    module, op = str(ops["module"].iat[r]), str(ops["op"].iat[r])
    who = f"{stated_source} (the kernel author's estimate)" if stated_source == TRACE_STAT and used == "shapes" \
        else stated_source
    what = "the shapes' figure is used" if used == "shapes" else "the trace's figure is used"
    return {"module": module, "op": op, "stated_flops": stated, "stated_source": stated_source,
            "derived_flops": derived, "derived_source": derived_source, "used": used,
            "message": f"model: {op} ({module}): {who} says {stated:.4g} FLOPs, its shapes {derived:.4g} "
                       f"({derived_source}), more than {FACTOR:g}x apart: {what}"}
