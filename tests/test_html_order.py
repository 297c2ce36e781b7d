"""Issue 38: the HTML reads findings first, then the overview, then memory; source paths are shown relative to the
project or site-packages (the JSON keeps the recorded path whole)."""
from __future__ import annotations

from pathlib import Path

from tracekit.report.sourcepath import shortener

ROOT = Path(__file__).resolve().parent.parent


def test_findings_then_overview_then_memory():
    import tracekit
    from tracekit import pipeline
    from tracekit.report import render
    rep = pipeline.analyze(tracekit.load(str(ROOT / "fixtures/cpu/train_step")))
    assert rep.data["findings"] and rep.data.get("memory")
    page = render.render(rep, "html")
    at = [page.index(f'<section id="{s}">') for s in ("summary", "findings", "overview", "memory", "ops")]
    assert at == sorted(at), at
    full = {o["source_file"] for o in rep.data["top_ops"] if o["source_file"]}
    assert full and all(p.startswith("/") for p in full)


def test_shortener_written_out():
    got = shortener(["/home/u/proj/model/a.py", "/home/u/proj/train.py", "/opt/py/lib/python3.11/site-packages/flax/linen/x.py",
                     "/usr/lib/python3/dist-packages/jax/_src/api.py", "rel.py", ""])
    assert got == {"/home/u/proj/model/a.py": "proj/model/a.py", "/home/u/proj/train.py": "proj/train.py",
                   "/opt/py/lib/python3.11/site-packages/flax/linen/x.py": "flax/linen/x.py",
                   "/usr/lib/python3/dist-packages/jax/_src/api.py": "jax/_src/api.py", "rel.py": "rel.py"}
    assert shortener(["/work/wt/trust/fixtures/capture_cpu.py"]) == {
        "/work/wt/trust/fixtures/capture_cpu.py": "fixtures/capture_cpu.py"}
