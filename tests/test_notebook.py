"""A Report and a Trace in a notebook: short reprs, the HTML report's body as _repr_html_ (scoped styles, no
scripts, no external resources, ids unique per report), findings and ops as DataFrames."""
from __future__ import annotations

import json
import re

import pandas as pd
import pytest

import tracekit
from conftest import cpu_fixture
from tracekit import pipeline
from tracekit.report.envelope import Report


@pytest.fixture(scope="module")
def analyzed():
    tr = tracekit.load(cpu_fixture("allreduce_exposed"))
    return tr, pipeline.analyze(tr)


def test_short_reprs(analyzed):
    tr, rep = analyzed
    r = repr(rep)
    assert "\n" not in r and len(r) < 400 and r.startswith("<tracekit Report")
    f = rep.data["findings"]
    assert f"{len(f)} finding(s)" in r and f[0]["rule_id"] in r
    t = repr(tr)
    assert "\n" not in t and len(t) < 300 and "8 device(s)" in t and f"{int((~tr.ops['is_async']).sum()):,} op" in t
    assert len(str(rep)) < 400  # print(report) no longer dumps the envelope


def test_repr_html_is_self_contained_and_scoped(analyzed):
    _, rep = analyzed
    h = rep._repr_html_()
    assert 'id="step-timeline"' in h and 'id="device-breakdown"' in h
    assert "<script" not in h and "<link" not in h and not re.search(r"\b(src|href)=\"(https?:)?//", h)
    assert "http://" not in h.replace("http://www.w3.org", "") and "https://" not in h
    tag = re.match(r'<div class="(tk[0-9a-f]{8}) tracekit-report">', h).group(1)
    css = re.search(r"<style>(.*?)</style>", h, re.S).group(1)
    selectors = [sel for rule in re.findall(r"([^{}]+)\{[^{}]*\}", css) for sel in rule.split(",")]
    assert selectors and all(s.strip().startswith(f".{tag}") for s in selectors)
    for f in rep.data["findings"]:
        assert f["rule_id"] in h
    # two reports in one notebook: their SVG clip ids differ
    other = pipeline.analyze(str(cpu_fixture("train_step")))._repr_html_()
    ids = lambda s: set(re.findall(r'id="((?:plot|tl)-clip-[^"]+)"', s))  # noqa: E731
    assert ids(h) and not ids(h) & ids(other)


def test_frames(analyzed):
    tr, rep = analyzed
    ff = rep.findings_frame()
    assert list(ff["rule_id"]) == [f["rule_id"] for f in rep.data["findings"]]
    assert list(ff["savings_ps"]) == [f["savings_ps"] for f in rep.data["findings"]]
    assert ff["savings_ps"].dtype == "int64" and {"message", "fix", "severity"} <= set(ff.columns)
    of = rep.ops_frame()
    sync = tr.ops[~tr.ops["is_async"]]
    # every op, not only the report's top 25: one row per distinct (module, op), times summing to the op time
    assert len(of) == len(sync.groupby(["module", "program_id", "op"], observed=True))
    assert int(of["total_ps"].sum()) == int(sync["duration_ps"].sum())
    top = pd.DataFrame(rep.data["top_ops"])
    assert list(of["op"].astype(str).head(len(top))) == list(top["op"])
    # a report read back from its JSON has no op table: the top ops
    back = Report(json.loads(rep.to_json()))
    assert list(back.ops_frame()["op"]) == list(top["op"]) and len(back.findings_frame()) == len(ff)


def test_ipython_uses_the_html(analyzed):
    formatters = pytest.importorskip("IPython.core.formatters")
    _, rep = analyzed
    data, _ = formatters.format_display_data(rep)
    assert data["text/html"] == rep._repr_html_() and data["text/plain"] == repr(rep)
