"""The parallelism a trace ran (issue 35), against what ``fixtures/capture_parallel.py`` set: for every fixture
(data, FSDP, tensor, data x tensor, experts, pipeline; two sizes each) the mesh axes in mesh order with their
sizes, device groups and roles, the per-device batch, d_model, d_ff, the parameter count and the model FLOPs per
step equal the script's numbers (``oracle.json``). MFU and HFU are checked against the script's model FLOPs and
XLA's ``cost_analysis()`` FLOPs over a step time computed here from the raw xplane events (the protobuf read
directly, no tracekit loader), on a chip-table peak read from chips.yaml with yaml.
"""
from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from functools import lru_cache

import pytest
import yaml
from click.testing import CliRunner

from conftest import FIXTURES, ROOT

CASES = tuple(f"{s}_{z}" for s in ("dp", "fsdp", "tp", "dp_tp", "moe", "pipeline") for z in ("a", "b"))
PAR = FIXTURES / "parallel"
XPLANE = "plugins/profile/run1/cpu.xplane.pb"


def _oracle(case: str) -> dict:
    p = PAR / case / "oracle.json"
    if not p.exists():
        pytest.skip(f"fixture {case} not captured (python fixtures/capture_parallel.py)")
    return json.loads(p.read_text())


@lru_cache(maxsize=None)
def _par(case: str, chip: str | None = None, topology: str | None = None) -> dict:
    from tracekit import pipeline
    return json.loads(pipeline.analyze(PAR / case, chip=chip, topology=topology).to_json())["parallelism"]


@lru_cache(maxsize=None)
def _report(case: str) -> dict:
    from tracekit import pipeline
    return json.loads(pipeline.analyze(PAR / case, chip="TPU v5p", topology="2x2x2", model="transformer").to_json())


@pytest.mark.parametrize("case", CASES)
def test_axes_roles_and_groups_are_what_the_script_set(case):
    o, p = _oracle(case), _par(case)
    got = [(a["size"], a["role"]) for a in p["axes"]]
    want = [(o["mesh"][name], o["roles"][name]) for name in o["mesh_order"]]
    assert got == want, f"{case}: axes {got}, the script set {want}"
    for a, name in zip(p["axes"], o["mesh_order"]):
        assert sorted(map(sorted, a["devices"])) == sorted(map(sorted, o["groups"][name])), (case, name)
        assert a["evidence"] and not a["evidence"][0].startswith("unknown"), (case, name, a["evidence"])
    assert p["devices"] == o["devices"] == 8


@pytest.mark.parametrize("case", CASES)
def test_batch_d_model_d_ff_and_params_are_what_the_script_set(case):
    o, p = _oracle(case), _par(case)
    assert p["per_device_batch_tokens"]["value"] == o["per_device_batch_tokens"]
    assert p["global_batch_tokens"]["value"] == o["global_batch_tokens"]
    assert p["d_model"]["value"] == o["d_model"]
    assert p["d_ff"]["value"] == o["d_ff"]
    assert p["params"]["value"] == o["params"]  # active per token (one expert of 8 for the expert layer)
    assert p["model_flops_per_step"]["value"] == o["model_flops_per_step"]
    if o["experts"]:
        assert p["params"]["experts"] == [o["experts"]] and p["params"]["top_k"] == [1]


def test_sizes_cannot_lean_on_the_order_of_the_dimensions():
    """The fixtures hold both orders: tokens per device below d_model (a), d_ff below d_model (b)."""
    for case in CASES:
        o = _oracle(case)
        if case.endswith("_a"):
            assert o["per_device_batch_tokens"] < o["d_model"] < o["d_ff"]
        else:
            assert o["d_ff"] < o["d_model"] < o["per_device_batch_tokens"]


# ------------------------------------------------------------------------------- MFU and HFU against XLA and the script

@lru_cache(maxsize=None)
def _step_oracle_ps(case: str) -> float:
    """The mean start-to-start step time of the slowest device (largest median), from the raw xplane: a run is the
    op events (an ``hlo_op`` stat) of one (device_ordinal, run_id) of the step module."""
    from tracekit.proto import xplane_pb2
    module = _oracle(case)["module"]
    space = xplane_pb2.XSpace.FromString((PAR / case / XPLANE).read_bytes())
    starts: dict = defaultdict(dict)
    for plane in space.planes:
        names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                st = {}
                for s in ev.stats:
                    n = names.get(s.metadata_id)
                    if n in ("hlo_module", "run_id", "device_ordinal", "hlo_op"):
                        st[n] = names.get(s.ref_value) if s.WhichOneof("value") == "ref_value" else \
                            (s.int64_value or s.uint64_value)
                if "hlo_op" not in st or st.get("hlo_module") != module:
                    continue
                t = line.timestamp_ns * 1000 + ev.offset_ps
                d, r = st.get("device_ordinal", 0), st["run_id"]
                starts[d][r] = min(starts[d].get(r, t), t)
    steps = {}
    for d, runs in starts.items():
        s = sorted(runs.values())
        steps[d] = [b - a for a, b in zip(s, s[1:])]
    slow = max(steps, key=lambda d: (statistics.median(steps[d]), statistics.mean(steps[d])))
    return statistics.mean(steps[slow])


def _v5p_peak() -> float:
    table = yaml.safe_load((ROOT / "tracekit" / "model" / "chips.yaml").read_text())
    v5p = next(c for c in table["chips"] if c["name"] == "TPU v5p")
    return float(v5p["peak_flops_per_s"]["f32"]["value"])  # the fixtures' dots are f32 (one bf16 pass on TPU)


@pytest.mark.parametrize("case", CASES)
def test_mfu_and_hfu_follow_from_the_scripts_flops_and_xla(case):
    o, rep = _oracle(case), _report(case)
    f = rep["overview"]["flops"]
    peak = _v5p_peak()
    # XLA:CPU's 8 virtual devices share one chip: priced as one TPU v5p, its peak counts once
    assert f["peak_flops_per_s"] == pytest.approx(peak)
    t = _step_oracle_ps(case) / 1e12
    assert rep["overview"]["step_time"]["mean_ps"] / 1e12 == pytest.approx(t, rel=0.02)
    assert f["mfu"] == pytest.approx(o["model_flops_per_step"] / (peak * t), rel=0.02)
    assert f["hfu"] == pytest.approx(o["xla_flops_per_step"] / (peak * t), rel=0.02)
    assert f["label"] == "MFU" and f["utilization"] == f["mfu"]
    assert f["hfu_minus_mfu"] == pytest.approx(f["hfu"] - f["mfu"], rel=1e-3, abs=1e-12)
    assert "6 x N x tokens" in f["formula"] and "HFU = executed FLOPs" in f["formula"]
    assert rep["invariant_violations"] == []


def test_hfu_minus_mfu_shows_the_pipeline_bubble():
    """2 stages, 2 micro-batches, 3 ticks: every stage computes on every tick, so the executed FLOPs are about 3/2
    of the model's (less the input gradient the first block never computes)."""
    f = _report("pipeline_a")["overview"]["flops"]
    assert 1.3 < f["hfu"] / f["mfu"] < 1.5 and f["recompute_per_step"] > 0
    g = _report("dp_a")["overview"]["flops"]
    assert g["recompute_per_step"] < 0  # 6·N·tokens counts an input gradient the first block does not compute


def test_without_a_model_count_mfu_is_unknown_not_the_hfu():
    from tracekit import pipeline
    f = json.loads(pipeline.analyze(PAR / "dp_a").to_json())["overview"]["flops"]
    assert f["mfu"] is None and f["hfu"] is not None and f["label"] == "hardware FLOPs utilization"
    assert "MFU unknown" in f["formula"]


# ------------------------------------------------------------------------------------------ the book's limits

def _chip(name):
    from tracekit.model import chips
    return chips.get(name)


def _limit(role, size, group, shape, chip="TPU v5p", tokens=math.nan, d_ff=math.nan):
    from tracekit.analysis import parallel_limits
    from tracekit.model.topology import Topology, wraparound
    c = _chip(chip)
    topo = Topology("torus", shape, 1, wraparound(c, shape), 1, "test")
    return parallel_limits.limit(role, size, (tuple(group),), topo, c, (c.peak_flops_per_s["bf16"], "table"),
                                 tokens, d_ff)


def test_data_and_fsdp_limit_is_the_books_2550_on_v5p_and_850_over_three_axes():
    one = _limit("data", 8, range(8), (8, 1, 1), tokens=2000)
    assert one.threshold == pytest.approx(4.59e14 / (2 * 9e10)) and round(one.threshold) == 2550
    assert one.bound == "communication" and one.axes_spanned == 1
    three = _limit("fsdp", 64, range(64), (4, 4, 4), tokens=1000)
    assert three.axes_spanned == 3 and three.threshold == pytest.approx(2550 / 3) and round(three.threshold) == 850
    assert three.bound == "compute"  # 1,000 tokens per device > 850
    assert "2,550" not in three.formula and "850" in three.formula and "1,000 tokens" in three.formula


def test_tensor_limit_is_m_times_f_over_2550():
    """The book's examples: LLaMA-3 70B (F ~ 28,672): 8-way fine, 16-way comms-bound; Gemma 7B (F ~ 49,152):
    comms-bound from 20-way."""
    llama8 = _limit("tensor", 8, range(8), (8, 1, 1), d_ff=28672)
    assert llama8.threshold == pytest.approx(28672 / 2550) and llama8.bound == "compute"
    llama16 = _limit("tensor", 16, range(16), (16, 1, 1), d_ff=28672)
    assert llama16.bound == "communication" and "at most 11-way" in llama16.remedy
    gemma = _limit("tensor", 20, range(20), (20, 1, 1), d_ff=49152)
    assert 49152 / 2550 == pytest.approx(19.3, abs=0.05) and gemma.bound == "communication"
    two_axes = _limit("tensor", 16, range(16), (4, 4, 1), d_ff=28672)
    assert two_axes.axes_spanned == 2 and two_axes.threshold == pytest.approx(2 * 28672 / 2550)
    assert two_axes.bound == "compute"


def test_dcn_limit_and_the_hbm_ridge_are_different_quantities():
    from tracekit.analysis import parallel_limits
    from tracekit.model.topology import parse, from_trace
    v5p = _chip("TPU v5p")
    topo = from_trace([], {}, v5p, spec="2x2x1@2")
    dcn = parallel_limits.limit("data", 2, ((0, 4),), topo, v5p, (4.59e14, "table"), 1000.0, math.nan)
    assert dcn.kind == "dcn" and dcn.threshold == pytest.approx(4.59e14 / 6.25e9)  # 73,440 tokens per slice
    assert dcn.value == 1000.0 and dcn.bound == "communication"
    assert parse("2x2x1@2").slices == 2
    v5e = _chip("TPU v5e")
    ridge = v5e.ridge_flops_per_byte("bf16")  # HBM: 1.97e14 / 8.1e11
    assert ridge == pytest.approx(240, rel=0.02)
    ici = _limit("data", 4, range(4), (4, 1), chip="TPU v5e", tokens=100)
    assert ici.threshold == pytest.approx(1.97e14 / (2 * 4.5e10)) and abs(ici.threshold - ridge) > 1000


def test_the_reports_limits_follow_from_the_chip_table():
    table = yaml.safe_load((ROOT / "tracekit" / "model" / "chips.yaml").read_text())
    v5p = next(c for c in table["chips"] if c["name"] == "TPU v5p")
    link = float(v5p["interconnect"]["link_bw_bytes_per_s"]["value"])
    peak = float(v5p["peak_flops_per_s"]["f32"]["value"])
    p = _par("dp_tp_a", "TPU v5p", "2x2x2")  # (the report's JSON: 6 significant digits)
    data, tensor = p["axes"]
    lim = data["limit"]
    # the data axis {0,2,4,6} of a 2x2x2 slice spans two torus axes
    assert lim["peak_flops_per_s"] == peak and lim["bandwidth_bytes_per_s"] == 2 * link
    assert lim["axes_spanned"] == 2 and lim["threshold"] == pytest.approx(peak / (2 * link) / 2, rel=1e-5)
    assert lim["value"] == 32 and lim["bound"] == "communication"
    t = tensor["limit"]
    assert t["threshold"] == pytest.approx(1 * 384 / (peak / (2 * link)), rel=1e-5) and t["value"] == 2
    assert t["bound"] == "communication"
    rep = _report("dp_tp_a")
    tk = [f for f in rep["findings"] if f["rule_id"] == "TK027"]
    assert tk and tk[0]["evidence_count"] == 2 and "1,275" in tk[0]["message"] + json.dumps(tk[0]["evidence"])


# ------------------------------------------------------------------------------------- axes from replica groups

def _coll(name, groups=(), pairs=(), kind="all-reduce"):
    from tracekit.analysis.parallel_hlo import Collective
    return Collective(name, kind, tuple(tuple(g) for g in groups), tuple(pairs), 0.0, ())


def test_an_axis_seen_only_inside_a_product_is_derived():
    from tracekit.analysis.parallel_axes import axes_of
    tensor = [(0, 1), (2, 3), (4, 5), (6, 7)]
    axes, _ = axes_of([_coll("t", tensor), _coll("all", [range(8)])])
    assert [(a.size, a.derived) for a in axes] == [(4, True), (2, False)]
    assert sorted(axes[0].groups) == [(0, 2, 4, 6), (1, 3, 5, 7)]


def test_a_product_of_two_axes_spans_both_and_permute_pairs_make_chains():
    from tracekit.analysis.parallel_axes import axes_of
    data = [(0, 4), (1, 5), (2, 6), (3, 7)]
    expert = [(0, 1, 2, 3), (4, 5, 6, 7)]
    axes, by = axes_of([_coll("d", data), _coll("e", expert), _coll("all", [range(8)]),
                        _coll("p", pairs=[(0, 1), (1, 2), (2, 3), (4, 5), (5, 6), (6, 7)],
                              kind="collective-permute")])
    assert [a.size for a in axes] == [2, 4]
    assert sorted(by[tuple([tuple(range(8))])]) == [0, 1]
    assert by[((0, 1, 2, 3), (4, 5, 6, 7))] == [1]  # the permute's chains are the expert groups


def test_collectives_of_scalars_only_leave_the_axis_unknown():
    from tracekit.analysis import parallel_axes
    from tracekit.analysis.parallel_hlo import Collective, Operand, ProgramFacts
    loss = Operand(0, (), (), "f32", 4, "computed", "loss")
    facts = ProgramFacts("m", 1, (), (), (Collective("psum", "all-reduce", (tuple(range(4)),), (), 4.0, (loss,)),))
    (a,) = parallel_axes.assign_roles(facts)
    assert a.role == "unknown" and a.evidence[0].startswith("unknown")


# ------------------------------------------------------------------------------------------ every format, the command

def test_every_format_shows_the_section():
    from tracekit import pipeline
    from tracekit.report import render
    rep = pipeline.analyze(PAR / "moe_a", chip="TPU v5p", topology="2x2x2", model="transformer")
    text, md, html = (render.render(rep, f) for f in ("text", "markdown", "html"))
    for out in (text, md, html):
        assert "Parallelism" in out and "expert" in out and "MFU and HFU" in out
    # the engine's section: its facts, one line per axis (Markdown and HTML escape "<")
    for out in (text, md.replace("&lt;", "<"), html.replace("&lt;", "<")):
        assert "axis 0 data" in out and "axis 1 expert" in out and "rests on" in out
        assert "comms-bound: 32 <= 2,550 tokens/device" in out
    assert "<h2>Parallelism</h2>" in html and "### Parallelism" in md


def test_the_command_prints_text_and_json_and_refuses_bad_input(tmp_path):
    from tracekit.cli import main
    r = CliRunner().invoke(main, ["parallelism", str(PAR / "tp_b"), "--format", "json", "--chip", "TPU v5p",
                                  "--model", "transformer"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert [a["role"] for a in d["parallelism"]["axes"]] == ["tensor"] and d["flops"]["mfu"] is not None
    r = CliRunner().invoke(main, ["parallelism", str(PAR / "tp_b")])
    assert r.exit_code == 0 and "tensor" in r.output and "d_ff 96" in r.output
    r = CliRunner().invoke(main, ["parallelism", str(tmp_path / "missing.xplane.pb")])
    assert r.exit_code == 2 and "Traceback" not in r.output


def test_report_format_documents_the_section():
    doc = (ROOT / "docs" / "report-format.md").read_text()
    for key in ("`parallelism`", "per_device_batch_tokens", "hfu_minus_mfu", "`mfu`"):
        assert key in doc, key


def test_gpu_gemm_custom_calls_are_dots():
    """XLA:GPU rewrites dots into cuBLAS GEMM custom calls (result, workspace): a data-parallel step written as XLA
    emits it (forward GEMM x @ W, weight-gradient GEMM x^T @ h over the 32 tokens, the gradient all-reduced over 8
    GPUs) gives a data axis of 8, 32 tokens per device, d_model 128 and d_ff 384."""
    import json as _json
    from tracekit.analysis import parallel_axes, parallel_dims, parallel_hlo
    from tracekit.ingest.synth import instr, module, shape
    from tracekit.proto import hlo_pb2

    def gemm(lc, rc):
        dd = {"lhs_contracting_dimensions": [str(x) for x in lc], "rhs_contracting_dimensions": [str(x) for x in rc],
              "lhs_batch_dimensions": [], "rhs_batch_dimensions": []}
        return dict(custom_call_target="__cublas$lt$matmul",
                    backend_config=_json.dumps({"gemm_backend_config": {"dot_dimension_numbers": dd}}).encode())

    def tup(*s):
        return hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.TUPLE, tuple_shapes=list(s))
    ws = shape("s8", [1 << 20])
    groups = [hlo_pb2.ReplicaGroup(replica_ids=list(range(8)))]
    ins = [instr("w", "parameter", shape("bf16", [128, 384]), parameter_number=0, id=1),
           instr("x", "parameter", shape("bf16", [32, 128]), parameter_number=1, id=2),
           instr("fwd", "custom-call", tup(shape("bf16", [32, 384]), ws), [2, 1], id=3, **gemm([1], [0])),
           instr("h", "get-tuple-element", shape("bf16", [32, 384]), [3], tuple_index=0, id=4),
           instr("wgrad", "custom-call", tup(shape("bf16", [128, 384]), ws), [2, 4], id=5, **gemm([0], [0])),
           instr("g", "get-tuple-element", shape("bf16", [128, 384]), [5], tuple_index=0, id=6),
           instr("ar", "all-reduce", shape("bf16", [128, 384]), [6], replica_groups=groups, channel_id=1,
                 use_global_device_ids=True, id=7),
           instr("new_w", "subtract", shape("bf16", [128, 384]), [1, 7], id=8),
           instr("out", "tuple", tup(shape("bf16", [128, 384])), [8], id=9)]
    facts = parallel_hlo.module_facts(7, module("jit_step", 7, ins))
    assert [d.kind for d in facts.dots] == [parallel_hlo.WEIGHT_DOT, parallel_hlo.GRAD_DOT]
    (axis,) = parallel_axes.assign_roles(facts)
    assert (axis.size, axis.role) == (8, "data") and "wgrad" in axis.evidence[0]
    ev = {(c.name, o.index): e for c in facts.collectives for o in c.operands
          if (e := parallel_axes.classify(c, o, {p.number: p for p in facts.params if p.kind == "weight"},
                                          {d.name: d for d in facts.dots})) is not None}
    sizes = parallel_dims.dims(facts, [axis], ev, 8)
    assert sizes["per_device_batch_tokens"]["value"] == 32 and sizes["d_model"]["value"] == 128
    assert sizes["d_ff"]["value"] == 384 and sizes["params"]["value"] == 128 * 384
    assert sizes["global_batch_tokens"]["value"] == 32 * 8


def test_a_collective_operand_the_module_does_not_hold_is_left_out():
    """A damaged module (found by the long property fuzz: an instruction turned into a ragged-all-to-all whose
    operand ids name no instruction) gives the collective the operands it does hold, instead of failing the
    parallelism section (which took the whole analysis with it)."""
    from tracekit.analysis import parallel_hlo
    from tracekit.ingest.synth import instr, module, shape
    from tracekit.proto import hlo_pb2
    groups = [hlo_pb2.ReplicaGroup(replica_ids=list(range(4)))]
    ins = [instr("x", "parameter", shape("bf16", [64, 128]), parameter_number=0, id=1),
           instr("y", "parameter", shape("bf16", [64, 128]), parameter_number=1, id=2),
           instr("ar", "all-reduce", shape("bf16", [64, 128]), [1, 4611686018427387904, 2], replica_groups=groups,
                 channel_id=1, use_global_device_ids=True, id=3),
           instr("out", "tuple", hlo_pb2.ShapeProto(element_type=hlo_pb2.PrimitiveType.TUPLE,
                                                    tuple_shapes=[shape("bf16", [64, 128])]), [3], id=4)]
    facts = parallel_hlo.module_facts(7, module("jit_step", 7, ins))
    (coll,) = facts.collectives
    assert [o.index for o in coll.operands] == [0, 2]
    assert all(o.dims == (64, 128) for o in coll.operands)


def test_the_pod_path_reduces_the_hosts_summaries_to_the_same_section(tmp_path):
    """Two hosts (the same capture twice): the map per host and the reduce on the driver (--jobs) give the
    parallelism section and MFU/HFU the single process gives."""
    from tracekit import pipeline
    from tracekit.run import pod
    src = (PAR / "dp_tp_a" / XPLANE).read_bytes()
    for h in ("host0", "host1"):
        (tmp_path / f"{h}.xplane.pb").write_bytes(src)
    kw = dict(chip="TPU v5p", topology="2x2x2", model="transformer")
    one = json.loads(pipeline.analyze(tmp_path, **kw).to_json())
    many = json.loads(pod.analyze(tmp_path, jobs=2, **kw).to_json())
    assert many["parallelism"] == one["parallelism"]
    assert [a["role"] for a in one["parallelism"]["axes"]] == ["data", "tensor"]
    for k in ("mfu", "hfu", "model_per_step", "formula"):
        assert many["overview"]["flops"][k] == one["overview"]["flops"][k], k


# ------------------------------------------------------------------------------ weights scanned over layers
_SCAN_SCRIPT = r"""
import base64, json, os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
L, D, F, B, S = 4, 128, 384, 4, 8
mesh = Mesh(np.array(jax.devices()), ("x",))
out = {}
for mode in ("dp", "fsdp"):
    spec = (P(None, "x", None), P(None, None, "x")) if mode == "fsdp" else (P(), P())
    def loss(p, x, y):
        def layer(h, w):
            wi, wo = w
            if mode == "fsdp":
                wi = jax.lax.all_gather(wi, "x", axis=0, tiled=True)
                wo = jax.lax.all_gather(wo, "x", axis=1, tiled=True)
            return h + jax.nn.gelu(h @ wi) @ wo, None
        h, _ = jax.lax.scan(layer, x, p)  # the stacked weights [L, ...] carried through a while loop
        return jnp.mean((h - y) ** 2)
    def body(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return jax.tree_util.tree_map(lambda a, b: a - 1e-3 * b, p, g), jax.lax.pmean(l, "x")
    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(spec, P("x"), P("x")), out_specs=(spec, P())),
                donate_argnums=0)
    p = (jax.device_put(jnp.ones((L, D, F)), NamedSharding(mesh, spec[0])),
         jax.device_put(jnp.ones((L, F, D)), NamedSharding(mesh, spec[1])))
    x = jax.device_put(jnp.ones((8 * B, S, D)), NamedSharding(mesh, P("x")))
    c = f.lower(p, x, x).compile()
    out[mode] = base64.b64encode(c.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto()).decode()
print(json.dumps(out))
"""


def test_weights_scanned_over_layers_are_followed_into_the_loop():
    """``lax.scan`` over stacked weights (MaxText's layout): the weights enter a while loop as a carry and are
    sliced per layer inside it. Data parallel and FSDP, 4 layers of d_model 128, d_ff 384, 32 tokens per device:
    the roles, sizes and N = 4 x 2 x 128 x 384 come out as set (a walk that stops at the loop would see no weight,
    and must then say unknown, never guess)."""
    import base64
    import os
    import subprocess
    import sys
    pytest.importorskip("jax")
    from tracekit.analysis import parallel_axes, parallel_dims, parallel_hlo
    from tracekit.proto import hlo_pb2
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", _SCAN_SCRIPT], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    for mode, blob in json.loads(p.stdout.strip().splitlines()[-1]).items():
        facts = parallel_hlo.module_facts(1, hlo_pb2.HloModuleProto.FromString(base64.b64decode(blob)))
        axes = parallel_axes.assign_roles(facts)
        assert [(a.size, a.role) for a in axes] == [(8, {"dp": "data", "fsdp": "fsdp"}[mode])], mode
        w = {q.number: q for q in facts.params if q.kind == "weight"}
        dots = {d.name: d for d in facts.dots}
        ev = {(c.name, o.index): e for c in facts.collectives for o in c.operands
              if (e := parallel_axes.classify(c, o, w, dots)) is not None}
        s = parallel_dims.dims(facts, axes, ev, 8)
        got = [s[k]["value"] for k in ("per_device_batch_tokens", "d_model", "d_ff", "params", "global_batch_tokens")]
        assert got == [32, 128, 384, 4 * 2 * 128 * 384, 256], mode
        # without the loop's weights in view the same collectives would carry no role
        bare = parallel_hlo.ProgramFacts("m", 1, (), facts.dots, facts.collectives)
        assert all(a.role == "unknown" for a in parallel_axes.assign_roles(bare))
