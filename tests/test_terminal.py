"""Strings from a trace never drive the terminal: one sanitizer (tracekit/report/termsafe.py) on every terminal path
(text report, info, ops, diff, error messages, the gate's lines); HTML, Markdown, SARIF and JSON keep their own
escaping."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import cpu_fixture
from tracekit.proto import xplane_pb2
from tracekit.report.termsafe import safe, safe_block, safe_tree

EXE = [sys.executable, "-m", "tracekit.cli"]
#: colour, an OSC title, BEL, clear-screen (8-bit CSI), a right-to-left override, an isolate, a newline that would
#: split a table row, a carriage return, a zero-width space, and markup for the HTML report to escape
NASTY = "ev\x1b[31mil\x1b]0;pwned\x07\u202etxt.exe\u2066\nrow2\r\x9b2J\u200b<b>x</b>"
#: what must never reach a terminal
BAD = ("\x1b", "\x07", "\x9b", "\u202e", "\u2066", "\r", "\u200b")


def test_safe_escapes_what_drives_a_terminal():
    s = safe(NASTY)
    assert not any(c in s for c in BAD) and "\n" not in s
    assert "\\x1b[31m" in s and "\\x07" in s and "\\u202e" in s and "\\n" in s and "\\x9b" in s
    assert safe("fusion.1 é 中 😀 [x]") == "fusion.1 é 中 😀 [x]"  # printable text, non-ASCII included, kept
    assert safe(s) == s  # idempotent
    assert safe_block("a\x1b[2J\nb") == "a\\x1b[2J\nb"  # newlines kept in a rendered block
    assert safe_tree({"k\x07": ["a\n", ("b\x1b",)], "n": 3}) == {"k\\x07": ["a\\n", ("b\\x1b",)], "n": 3}


@pytest.fixture(scope="module")
def nasty_trace(tmp_path_factory):
    """The train_step fixture with every op, module and line name, every string stat and the hostname prefixed by
    NASTY."""
    src = cpu_fixture("train_step") / "plugins/profile/run1/cpu.xplane.pb"
    sp = xplane_pb2.XSpace.FromString(src.read_bytes())
    sp.hostnames[:] = [NASTY + "host"]
    for p in sp.planes:
        for md in p.event_metadata.values():
            md.name = NASTY + md.name
        for line in p.lines:
            line.name = NASTY + line.name
            for e in line.events:
                for st in e.stats:
                    if st.WhichOneof("value") == "str_value":
                        st.str_value = NASTY + st.str_value
    d = tmp_path_factory.mktemp("nasty") / "plugins" / "profile" / "run1"
    d.mkdir(parents=True)
    f = d / "evil.xplane.pb"
    f.write_bytes(sp.SerializeToString())
    return f


def run(*args):
    p = subprocess.run(EXE + [str(a) for a in args], capture_output=True, text=True, timeout=300)
    return p


def clean(text: str, where: str):
    for c in BAD:
        assert c not in text, f"{where}: {c!r} reached the terminal"


@pytest.mark.parametrize("cmd", [["analyze", "--fail-on", "info"], ["analyze", "--format", "markdown"],
                                 ["info"], ["ops"], ["ops", "--format", "csv"]])
def test_nothing_from_the_trace_reaches_the_terminal(nasty_trace, cmd):
    p = run(cmd[0], nasty_trace, *cmd[1:])
    assert p.returncode in (0, 1), p.stderr
    clean(p.stdout, "stdout")
    clean(p.stderr, "stderr")


def test_names_do_not_split_table_rows(nasty_trace):
    """A newline in an op name is shown as \\n: every row of the ops table is one line with all its columns."""
    p = run("ops", nasty_trace, "--limit", "0")
    assert p.returncode == 0, p.stderr
    rows = p.stdout.splitlines()[2:]
    assert rows and all("\\n" in r and r.count("row2") == 1 for r in rows if "ev" in r)
    assert not any(r.startswith("row2") for r in rows)


def test_diff_and_errors_are_clean(nasty_trace, tmp_path):
    p = run("diff", nasty_trace, nasty_trace)
    assert p.returncode == 0, p.stderr
    clean(p.stdout, "diff")
    bad = tmp_path / f"{NASTY}.xplane.pb".replace("/", "_")
    bad.write_bytes(b"\x0a\xff")  # corrupt: the error line names the file
    p = run("info", bad)
    assert p.returncode == 2 and "\\x1b" in p.stderr
    clean(p.stderr, "error line")


def test_reports_keep_their_own_escaping(nasty_trace, tmp_path):
    outs = {ext: tmp_path / f"r.{ext}" for ext in ("json", "md", "html", "sarif", "txt")}
    p = run("analyze", nasty_trace, *[a for f in outs.values() for a in ("-o", f)])
    assert p.returncode == 0, p.stderr
    data = json.loads(outs["json"].read_text())
    assert data["inputs"][0]["host"] == NASTY + "host"  # JSON: the data as it is (json escapes it itself)
    json.loads(outs["sarif"].read_text())
    html = outs["html"].read_text()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html  # markup from the trace escaped
    clean(outs["txt"].read_text(), "text report file")
