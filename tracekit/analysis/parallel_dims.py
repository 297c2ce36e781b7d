"""The model's sizes as a program's dots and collectives show them: tokens per device, d_model, d_ff, the
weights' parameter count and how many devices the batch is split over.

* **per-device batch (tokens)**: a data input (an entry parameter that is not a weight) that reaches a weight dot
  holds this device's batch: its elements over its last (feature) dimension, times what all-gathers on the way
  multiply it by. Several inputs that disagree give candidates. The gradient dots' contracted sizes (tokens per
  weight gradient: a micro-batch under pipelining) are shown beside it.
* **d_model**: what the first weight dot a data input reaches contracts on the activation side (the residual
  width the input enters the model with).
* **d_ff**: for each weight the dots read, its dimension other than d_model (and other than a batch of local
  experts), times the sizes of the tensor axes whose all-reduce follows a dot contracting that dimension (a
  sharded contraction); the value of the weights that carry the most dot FLOPs, the others as candidates.
* **batch split** (the book's X): over a weight's gradient reductions, the group it is all-reduced over times the
  group it is reduce-scattered over (the largest such product): the devices that hold different parts of the
  batch. Global batch = per-device batch x X.
* **parameters** (N): per weight, its local elements (every layer of a stacked weight) x devices / the group its
  gradient is all-reduced over (the devices that hold the same copy; the rest hold different shards: FSDP, tensor,
  pipeline stages, experts); for a grouped (expert) weight, the share of the experts a token visits: tokens into
  its dots / the per-device batch, over the experts in total. Embedding lookups (gathers) are not dots and are not
  counted.
"""
from __future__ import annotations

import math
from collections import Counter

from tracekit.analysis.parallel_hlo import GRAD_DOT, WEIGHT, WEIGHT_DOT


def _prod(xs) -> int:
    n = 1
    for x in xs:
        n *= int(x)
    return n


def _pick(values: Counter, what: str, unit: str = "", missing: str = "") -> dict:
    """{value, candidates, source}: the most common value; the others as candidates (None: nothing, and
    ``missing`` says why)."""
    if not values:
        return {"value": None, "candidates": [], "source": f"unknown: {missing or 'nothing in the HLO shows it'}"}
    ranked = [v for v, _ in values.most_common()]
    return {"value": ranked[0], "candidates": ranked, "source": what + (f" ({unit})" if unit else "")}


def _key(dims) -> tuple:
    return tuple(sorted(int(d) for d in dims if d != 1))


def gradient_groups(facts, evidence_by_collective: dict) -> dict:
    """weight parameter number -> (the largest group its gradient is all-reduced over: the devices that hold the
    same weight, the largest group it is reduce-scattered over: the devices that hold its shards), matched by shape
    (several weights of one shape share it): the gradient's shape is the weight's, or the shape the dots read it in
    (gathered, a layer's slice of weights stacked for a scan)."""
    by_shape: dict = {}
    for c in facts.collectives:
        n = max((len(g) for g in c.groups), default=0)
        if c.kind not in ("all-reduce", "reduce-scatter") or n < 2:
            continue
        for o in c.operands:
            e = evidence_by_collective.get((c.name, o.index))
            if e is None or e.role not in ("data", "fsdp"):
                continue
            for k in {_key(o.dims), _key(o.result_dims)}:
                ar, rs = by_shape.get(k, (1, 1))
                by_shape[k] = (max(ar, n), rs) if c.kind == "all-reduce" else (ar, max(rs, n))
    out = {}
    for p in facts.params:
        if p.kind != WEIGHT:
            continue
        keys = [_key(p.dims)] + [_key(d.weight_dims) for d in facts.dots
                                 if d.kind == WEIGHT_DOT and d.weight == p.number]
        hit = next((by_shape[k] for k in keys if k in by_shape), None)
        if hit is not None:
            out[p.number] = hit
    return out


def dims(facts, axes, evidence_by_collective: dict, n_devices: int) -> dict:
    """The sizes (module docstring) as ``{per_device_batch_tokens, d_model, d_ff, batch_split,
    global_batch_tokens, params}``, each {value, candidates, source}."""
    weights = {p.number: p for p in facts.params if p.kind == WEIGHT}
    wdots = [d for d in facts.dots if d.kind == WEIGHT_DOT]
    tok = Counter(t for _, _, t, _, _ in facts.data_inputs if t > 0)
    dm = Counter(d for _, _, _, d, _ in facts.data_inputs if d > 0)
    no_input = "no data input (a parameter the step does not update) reaches a dot that reads a weight"
    out = {"per_device_batch_tokens": _pick(tok, "a data input's elements / its last dimension", missing=no_input),
           "d_model": _pick(dm, "what the first weight dot a data input reaches contracts", missing=no_input)}
    grads = Counter(d.tokens for d in facts.dots if d.kind == GRAD_DOT and d.tokens > 0)
    if grads:
        out["per_device_batch_tokens"]["gradient_dot_tokens"] = sorted(grads)
    if out["per_device_batch_tokens"]["value"] is None and grads:
        out["per_device_batch_tokens"] = _pick(grads, "tokens the weight-gradient dots contract (no data input "
                                                      "reaches a weight dot)")
    d_model = out["d_model"]["value"]
    # the tensor factor of a contracted size: tensor axes whose all-reduce follows a dot contracting it
    tensor = {}
    for a in axes:
        if a.role == "tensor":
            for e in a.direct:
                if e.role == "tensor" and e.contracts:
                    tensor.setdefault(e.contracts, set()).add((a.index, a.size))
    ff: Counter = Counter()
    for d in wdots:
        free = [s for i, s in enumerate(d.weight_dims) if i not in d.weight_batch and s != 1]
        if d_model in free:
            free.remove(d_model)
        if len(free) != 1:
            continue
        f = free[0] * _prod(size for _, size in tensor.get(free[0], ()))
        ff[f] += d.flops
    out["d_ff"] = _pick(ff, "the weights' dimension other than d_model (x the tensor axes that shard it), "
                            "weighted by dot FLOPs", missing="no weight (a parameter the step updates) has one "
                            "dimension besides d_model" if d_model else "d_model is unknown")
    groups = gradient_groups(facts, evidence_by_collective)
    split = max((ar * rs for ar, rs in groups.values()), default=1)
    out["batch_split"] = {"value": split, "source": "the largest group a weight gradient is reduced over"
                          if groups else "no weight gradient is reduced: the batch is not split"}
    t = out["per_device_batch_tokens"]["value"]
    out["global_batch_tokens"] = {"value": t * split if t else None, "source": "per-device batch x batch split"}
    out["params"] = _params(facts, weights, wdots, groups, n_devices, t)
    return out


def _params(facts, weights: dict, wdots: list, groups: dict, n_devices: int, tokens) -> dict:
    """{value (active per token), total, experts, top_k, per_weight[], source}: see the module docstring."""
    rows, total, active = [], 0.0, 0.0
    experts_seen, topk_seen = set(), set()
    for n, p in sorted(weights.items()):
        g, _rs = groups.get(n, (1, 1))
        copies = max(n_devices // max(g, 1), 1)  # the devices holding different parts of it
        whole = _prod(p.dims) * copies
        mine = [d for d in wdots if d.weight == n]
        share, experts, k = 1.0, 0, math.nan
        grouped = [d for d in mine if d.weight_batch]
        if grouped and tokens:
            d = grouped[0]
            e_local = _prod(d.weight_dims[i] for i in d.weight_batch)
            experts = e_local * copies
            into = max(dd.tokens * _prod(dd.act_dims[i] for i in dd.act_batch) for dd in grouped)
            k = into / tokens
            share = k / experts if experts else 1.0
            experts_seen.add(experts)
            topk_seen.add(round(k, 3))
        total += whole
        active += whole * share
        rows.append({"parameter": p.name, "local_dims": list(p.dims), "elements": whole, "shards": copies,
                     "replicated_over": g, "experts": experts, "active_share": share})
    src = ("the weights' local elements x devices / the group their gradient is all-reduced over (the devices "
           "holding the same copy); expert weights x tokens into their dots / tokens / experts" if rows else
           "unknown: no weight (an entry parameter the step updates and a dot reads): not a training step, or its "
           "weights are not parameters")
    return {"value": active if rows else None, "total": total if rows else None, "per_weight": rows,
            "experts": sorted(experts_seen), "top_k": sorted(topk_seen), "source": src}
