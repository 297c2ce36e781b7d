"""``tracekit whatif`` against measurement (issue 36): pairs of committed CPU captures where one thing changed
(``fixtures/capture_whatif.py``, 3 repeats a side). The prediction made from one side's captures (the median over
its repeats) is within 25 % of the other side's measured step (the median over its repeats), the measured step read
from the raw XSpace (:func:`test_whatif_replay._raw_step`: protobuf only, no tracekit).

* batch doubled: ``b256 --batch-scale 2`` predicts ``b512``;
* a slow op replaced by a fast one: ``slow --fix jit_first/<its op>`` (that op at its roofline) predicts ``fast``;
* one core vs two (``taskset``) as the chip change, each side priced with the calibration measured under its own
  pinning: ``1core --chip <2core's machine record> --keep-efficiency`` predicts ``2core``, and back.
"""
from __future__ import annotations

import json
import statistics

import pytest

import tracekit
from conftest import FIXTURES
from test_whatif_replay import _raw_step, _xplane
from tracekit.analysis.replay import whatif as wi

W = FIXTURES / "whatif"
REPEATS = (1, 2, 3)
TOLERANCE = 0.25

pytestmark = pytest.mark.skipif(not (W / "cases.json").exists(), reason="fixtures/whatif not captured")


def _measured(name: str) -> float:
    return _raw_step(_xplane(W / name))


def _predicted(name: str, **kw) -> float:
    return wi.whatif(tracekit.load(W / name), wi.Request(**kw))["predicted_step_ps"]


def _record(name: str) -> str:
    return str(W / name / "plugins" / "profile" / "run1" / "cpu.machine.json")


def _slow_op(name: str) -> str:
    """The replaced program's op: the op of ``jit_first`` (the capture script's ``first``) with the most time."""
    ops = tracekit.load(W / name).ops
    first = ops[ops["module"].astype(str) == "jit_first"]
    return "jit_first/" + str(first.groupby("op", observed=True)["duration_ps"].sum().idxmax())


def _check(pred: list, meas: list, what: str) -> None:
    p, m = statistics.median(pred), statistics.median(meas)
    print(f"{what}: predicted {p / 1e9:.3f} ms (repeats {[round(x / 1e9, 3) for x in pred]}), measured "
          f"{m / 1e9:.3f} ms (repeats {[round(x / 1e9, 3) for x in meas]}), error {(p - m) / m:+.1%}")
    assert abs(p - m) <= TOLERANCE * m, (what, p, m)


def test_the_captures_were_made_on_a_quiet_machine():
    cases = json.loads((W / "cases.json").read_text())
    assert len(cases) == 18
    loud = [n for n, c in cases.items() if not c["quiet"]]
    assert not loud, f"captured while the machine was busy: {loud}"
    cores = {c["side"]: len(c["taskset"].split(",")) for c in cases.values() if c["pair"] == "cores"}
    assert cores == {"1core": 1, "2core": 2}
    for n, c in cases.items():
        rec = json.loads(open(_record(n)).read())
        if c["taskset"]:
            assert rec["cpu_count"] == len(c["taskset"].split(",")) == len(rec["affinity"])


def test_batch_doubled():
    pred = [_predicted(f"batch_b256_r{k}", batch_scale=2.0) for k in REPEATS]
    _check(pred, [_measured(f"batch_b512_r{k}") for k in REPEATS], "batch 256 -> 512")
    # not a prediction that holds whatever it says: the step does change
    assert statistics.median(pred) > 1.5 * statistics.median([_measured(f"batch_b256_r{k}") for k in REPEATS])


def test_slow_op_replaced_by_a_fast_one():
    pred = [_predicted(f"slowop_slow_r{k}", fix=(_slow_op(f"slowop_slow_r{k}"),)) for k in REPEATS]
    _check(pred, [_measured(f"slowop_fast_r{k}") for k in REPEATS], "slow op at its roofline")
    assert statistics.median(pred) < 0.8 * statistics.median([_measured(f"slowop_slow_r{k}") for k in REPEATS])


@pytest.mark.parametrize("src,dst", [("1core", "2core"), ("2core", "1core")])
def test_one_core_vs_two_as_the_chip(src, dst):
    pred = [_predicted(f"cores_{src}_r{k}", chip=_record(f"cores_{dst}_r{k}"), keep_efficiency=True)
            for k in REPEATS]
    _check(pred, [_measured(f"cores_{dst}_r{k}") for k in REPEATS], f"{src} -> {dst}")
    here = statistics.median([_measured(f"cores_{src}_r{k}") for k in REPEATS])
    assert abs(statistics.median(pred) - here) > 0.2 * here  # the chip change moves the prediction
