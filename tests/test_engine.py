"""The engine's parts, against oracles written out here: claims atoms against a per-picosecond bitmap, the
cross-host collective wait against the definition (clip(last start - start, 0, duration)) worked by hand, the
section protocol with a toy section whose answer the synthetic trace's construction gives, and the one Options
dataclass (defaults in one place, JSON round trip, the hook's child receiving them)."""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tracekit import pipeline
from tracekit.analysis import claims, interconnect
from tracekit.ingest.synth import SpaceBuilder
from tracekit.options import DEFAULTS, Options, make

ROOT = Path(__file__).resolve().parents[1]


def _bitmap_union(claims_of: list, span: dict) -> int:
    """Union of claims by marking every picosecond (small ranges only): the definition, no interval algebra."""
    per: dict = {}
    for c in claims_of:
        for k, (s, e) in c.items():
            m = per.setdefault(k, np.zeros(400, bool))
            for a, b in zip(s, e):
                m[a:b] = True
    return sum(min(int(m.sum()), span.get(k, 10**9)) for k, m in per.items())


def test_atoms_union_of_any_rules_is_the_union_of_their_claims():
    rng = np.random.default_rng(34)
    by_rule = {}
    for r in ("TK001", "TK003", "TK004", "TK011"):
        c = {}
        for dev in ("TPU:0", "TPU:1"):
            s = np.sort(rng.integers(0, 300, 12))
            c[("h", dev)] = (s, s + rng.integers(0, 60, 12))  # overlapping, zero-length ones too
        by_rule[r] = c
    by_rule["TK005"] = {("h", "TPU:0"): (np.array([5]), np.array([5]))}  # a claim of no length
    a = claims.atoms(by_rule)
    assert a.with_claims == set(by_rule)
    span = {("h", "TPU:0"): 250}
    for n in range(1, 6):
        for rules in itertools.combinations(sorted(by_rule), n):
            want = _bitmap_union([by_rule[r] for r in rules], span)
            assert claims.atoms_union([a], set(rules), span) == want, rules
            assert claims.union_ps([by_rule[r] for r in rules], span) == want, rules


def _host_part(execs, first_start):
    """A HostPart of one collective op with one instance, from (start, duration) of the host's executions."""
    s = np.array([e[0] for e in execs], np.int64)
    d = np.array([e[1] for e in execs], np.int64)
    L = s.max()
    ops = pd.DataFrame([{"module": "m", "program_id": 1, "op": "all-reduce.1", "kind": "all-reduce", "n": len(s),
                         "devices": tuple(f"TPU:{i}" for i in range(len(s))), "dur_sum": int(d.sum()),
                         "size_bytes": 1 << 20, "gmax": 4, "pred_sum": 0.0, "pred_n": 0, "bound": "ici",
                         "first_start": first_start, "first_host": "h", "first_device": "TPU:0", "groups": "",
                         "span": "", "phases": "", "reason": "", "pattern": "", "global_bytes": 1 << 20}],
                       columns=interconnect.OP_COLUMNS)
    inst = {"op": np.array([0], np.int32), "is_async": np.array([False]), "group": np.array([7]),
            "k": np.array([0]), "n": np.array([len(s)]), "arrival": np.array([L]), "start_sum": np.array([s.sum()]),
            "min_end": np.array([(s + d).min()]), "max_end": np.array([(s + d).max()]), "dur_sum": np.array([d.sum()]),
            "skew": np.array([float(np.clip(L - s, 0, d).sum())])}
    return interconnect.HostPart(ops, inst)


@pytest.mark.parametrize("a,b", [
    ([(90, 220), (100, 210)], [(150, 160), (140, 169)]),  # consistent clocks: the last start before every end
    ([(90, 60), (100, 30)], [(150, 160), (140, 169)]),  # A's clock behind: the last start past A's ends
    ([(90, 80), (100, 30)], [(150, 160), (140, 169)]),  # between A's ends (130 < 150 < 170): capped per host
])
def test_cross_host_wait_is_the_definition(a, b):
    """The wait of each execution is clip(L - start, 0, duration) with L the last start over both hosts: summed by
    hand here over every execution, against the reduce of the two hosts' sums."""
    every = a + b
    L = max(s for s, _ in every)
    want = sum(min(max(L - s, 0), d) for s, d in every)
    got = interconnect.reduce([_host_part(a, 90), _host_part(b, 140)])
    row = got.iloc[0]
    assert row["executions"] == 4 and row["total_ps"] == sum(d for _, d in every)
    if a[0][1] == 80:  # L between A's ends: the one case the sums cannot split; capped at A's device time
        a_ends = [s + d for s, d in a]
        assert min(a_ends) < L < max(a_ends)
        capped = min(len(a) * L - sum(s for s, _ in a), sum(d for _, d in a)) + \
            sum(min(max(L - s, 0), d) for s, d in b)
        assert row["skew_ps"] * 4 == pytest.approx(capped)
    else:
        assert row["skew_ps"] * 4 == pytest.approx(want)
        assert row["transfer_ps"] * 4 == pytest.approx(sum(d for _, d in every) - want)


def _toy_section():
    mod = types.ModuleType("toy")
    mod.NAME, mod.TITLE = "toy", "Toy section"
    mod.summarize = lambda hv: int(len(hv.trace.devices))
    mod.reduce = lambda parts, ctx: {"toy": {"devices": sum(parts), "hosts": len(parts),
                                             "op_time_ps": ctx.totals.op_time_ps}}
    mod.facts = lambda d: [("devices", str(d["toy"]["devices"]))] if "toy" in d else []
    return mod


def test_a_new_section_is_one_module_in_the_registry(tmp_path, monkeypatch):
    """A section registered beside the built-in ones: its part per host, its reduce once, its facts in every
    rendering. Host h of the run has h + 1 devices: 1 + 2 + 3."""
    from tracekit.report import engine, render
    for h in range(3):
        b = SpaceBuilder(hostname=f"h{h}")
        for dev in range(h + 1):
            ops = b.plane(f"/device:TPU:{dev}", {"device_type_string": "TPU v6 Lite"}).line("XLA Ops",
                                                                                          timestamp_ns=1000)
            ops.event("%fusion.1 = f32[8]{0} fusion(f32[8]{0} %p), kind=kLoop", 0, 1000, display="fusion.1",
                      md_stats={"program_id": 7})
        (tmp_path / f"h{h}.xplane.pb").write_bytes(b.serialize())
    built_in = engine.sections()
    monkeypatch.setattr(engine, "sections", lambda: built_in + [_toy_section()])
    rep = pipeline.analyze(tmp_path)
    assert rep.data["toy"] == {"devices": 6, "hosts": 3, "op_time_ps": 6 * 1000}
    assert "devices: 6" in render.render(rep, "text")
    assert "**devices:** 6" in render.render(rep, "markdown")
    assert "<b>devices:</b> 6" in render.render(rep, "html")


def test_options_hold_every_default_once():
    assert Options() == DEFAULTS and DEFAULTS.fail_on == "never" and DEFAULTS.hidden == 0.9
    o = make(chip="v6e", params={"TK003": {"min_gap_ps": 10}}, rules_dirs=[Path("r")])
    assert o.params == (("TK003", (("min_gap_ps", 10),)),) and o.params_dict == {"TK003": {"min_gap_ps": 10}}
    assert o.rules_dirs == ("r",) and Options.from_json(json.loads(json.dumps(o.to_json()))) == o
    assert make(o) is o and o.for_worker().dask is None
    with pytest.raises(TypeError, match="unknown option"):
        make(chips="v6e")
    with pytest.raises(TypeError):
        pipeline.analyze("x", hiden=0.5)


def test_the_hooks_child_analyzes_with_the_options_it_is_sent(tmp_path):
    """``tracekit.profile(options=...)`` sends the options to the analysis child: ``select`` leaves one rule."""
    import shutil

    from tracekit.run import hook as hook_mod
    src = ROOT / "fixtures" / "cpu" / "train_step" / "plugins" / "profile" / "run1"
    run = tmp_path / "run1"
    shutil.copytree(src, run)
    spec = {"outputs": ["json"], "fail_on": "never", "options": Options(select=("TK004",), hidden=0.5).to_json()}
    p = subprocess.run(hook_mod.analysis_command(run, spec), capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    rep = json.loads((run / "tracekit-report.json").read_text())
    assert list(rep["params"]["rules"]) == ["TK004"] and rep["params"]["hidden"] == 0.5
