"""The progress line shows only on a terminal and is cleared at the end."""
import io

from conftest import cpu_fixture
from tracekit import pipeline
from tracekit.progress import Progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_only_on_a_tty(monkeypatch):
    monkeypatch.delenv("TRACEKIT_NO_PROGRESS", raising=False)
    tty, pipe = _Tty(), io.StringIO()
    pipeline.analyze(cpu_fixture("big_matmul"), progress=Progress(stream=tty))
    out = tty.getvalue()
    for stage in ("loading the trace", "roofline", "timelines", "rules", "report"):
        assert stage in out
    p = Progress(stream=pipe)
    p.stage("loading the trace")
    p.done()
    assert pipe.getvalue() == ""


def test_progress_can_be_turned_off(monkeypatch):
    monkeypatch.setenv("TRACEKIT_NO_PROGRESS", "1")
    tty = _Tty()
    p = Progress(stream=tty)
    p.stage("x")
    p.done()
    assert tty.getvalue() == ""
