"""A one-host run evaluates each rule on a pod-wide frame (op statistics, devices, memory, overview) once, on the
host: the reduce takes the host's evidence rows where its merged frame equals the host's
(:func:`tracekit.analysis.hostrules.pod_rows`). The oracle is the reduce evaluating every such rule again on its own
frames, as it did before: the reports must be byte-equal."""
import collections

import pandas as pd
import pytest

from conftest import copied_hosts, cpu_fixture, shared_trace
from tracekit import pipeline
from tracekit.analysis import hostrules, rules
from tracekit.analysis.rule_model import load_rules
from tracekit.report import render


def _counting(monkeypatch):
    calls = collections.Counter()
    orig = rules.evidence_rows

    def counted(rule, frames, params):
        calls[rule.id] += 1
        return orig(rule, frames, params)
    monkeypatch.setattr(rules, "evidence_rows", counted)
    return calls


@pytest.mark.parametrize("trace", ["tpu/v6e-4_jax_inference.xplane.pb", "gpu/mi300x_jax_gemm.xplane.pb",
                                   "cpu:train_step", "cpu:sharded8"])
def test_one_host_report_equals_the_reduce_evaluating_again(trace, monkeypatch):
    path = cpu_fixture(trace[4:]) if trace.startswith("cpu:") else shared_trace(trace)
    calls = _counting(monkeypatch)
    shared = render.render(pipeline.analyze(path), "json")
    pod_rules = {r.id for r in load_rules() if r.frame not in hostrules.HOST_FRAMES and not r.check}
    once = dict(calls)
    calls.clear()
    monkeypatch.setattr(hostrules, "pod_rows", lambda pod, rule, frames, same: None)
    again = render.render(pipeline.analyze(path), "json")
    assert shared == again
    evaluated = {r for r in pod_rules if calls[r]}  # (a rule whose frame is empty here is evaluated nowhere)
    assert all(once[r] == 1 for r in evaluated), {r: (once.get(r), calls[r]) for r in evaluated}
    # evaluated twice without the host's rows (on the host, then in the reduce); once with them. (A rule on a frame
    # only the reduce makes, the parallelism axes, runs once either way.)
    assert {r for r in evaluated if calls[r] == 2}, "no rule on a pod-wide frame ran on the host: nothing checked"


def _pod(frame: pd.DataFrame, rule_id: str):
    return hostrules.PodRows({rule_id: frame.iloc[:1]}, {"op_stats": frame})


def _rule(rule_id: str):
    return next(r for r in load_rules() if r.id == rule_id)


def test_pod_rows_only_where_every_frame_read_is_the_hosts():
    rule = _rule("TK004")
    assert rule.frame == "op_stats" and not rule.check
    f = pd.DataFrame({"op": ["a", "b"], "total_ps": [3, 4]})
    pod = _pod(f, rule.id)
    assert hostrules.pod_rows(pod, rule, {"op_stats": f.copy()}, {}) is pod.rows[rule.id]
    changed = f.assign(total_ps=[3, 5])
    assert hostrules.pod_rows(pod, rule, {"op_stats": changed}, {}) is None
    reordered = f[["total_ps", "op"]]
    assert hostrules.pod_rows(pod, rule, {"op_stats": reordered}, {}) is None
    assert hostrules.pod_rows(pod, rule, {}, {}) is None  # (the reduce lacks the frame)
    assert hostrules.pod_rows(None, rule, {"op_stats": f}, {}) is None
    other = _rule("TK012")
    assert hostrules.pod_rows(pod, other, {"op_stats": f}, {}) is None  # (rows the host did not keep)
    check = next(r for r in load_rules() if r.check and r.frame not in hostrules.HOST_FRAMES)
    assert hostrules.pod_rows(hostrules.PodRows({check.id: f}, {check.frame: f}), check, {check.frame: f}, {}) is None


def test_hosts_of_a_pod_keep_no_pod_rows(tmp_path):
    from tracekit.ingest import paths
    from tracekit.options import make
    files = paths.choose(copied_hosts(tmp_path, ("alpha", "beta")), None).files
    summaries, failures = pipeline.map_here(files, make(None), tuple(f.host for f in files))
    assert not failures and len(summaries) == 2
    assert all(s.parts["findings"].pod is None for s in summaries)
    one, _ = pipeline.map_here(files[:1], make(None), ())
    assert one[0].parts["findings"].pod is not None
