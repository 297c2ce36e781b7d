"""The terminal report laid out with rich: every line fits the width (80 and 200 columns), numbers are never cut
and table columns stay aligned, names from the trace print as they are (no markup, control characters escaped),
identical device rows fold, colour only when asked (--color, NO_COLOR)."""
from __future__ import annotations

import copy
import re

import pytest
from click.testing import CliRunner

from conftest import FIXTURES, cpu_fixture
from tracekit import pipeline
from tracekit.cli import main
from tracekit.report.render import text

ANSI = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def rep():
    return pipeline.analyze(str(cpu_fixture("allreduce_exposed")))


def _table(out: str, title: str) -> list[str]:
    lines = out.splitlines()
    i = next(k for k, l in enumerate(lines) if l.startswith(title))
    body = []
    for l in lines[i + 1:]:
        if not l.strip() or l.startswith("("):
            break
        body.append(l)
    return body


@pytest.mark.parametrize("width", [80, 200])
def test_fits_the_width_and_keeps_columns(rep, width):
    out = text.render(rep, width=width)
    assert max(len(l) for l in out.splitlines()) <= width
    rows = _table(out, "Top ops by time")
    head, rule, body = rows[0], rows[1], rows[2:]
    assert set(rule.strip()) == {"─"} and len(body) == min(len(rep.data["top_ops"]), 12)
    # right-aligned numeric columns end at the header's end on every row
    for name in ("n", "time", "share", "eff"):
        m = re.search(rf"(?<!\S){re.escape(name)}(?!\S)", head)
        if m is None:
            continue
        end = m.end()
        assert all(r[end - 1] != " " and (len(r) == end or r[end] == " ") for r in body), (name, body)
    # numbers are never cut, whatever the width
    assert "…" not in "".join(r[len(r.split()[0]):] for r in body if r.split())
    shown = [r.split()[0] for r in body]
    for op, cell in zip([o["op"] for o in rep.data["top_ops"][:12]], shown):  # a name whole, or its two ends
        head, dots, tail = cell.partition("…")
        assert cell == op or (dots and op.startswith(head) and op.endswith(tail) and len(head) >= 3), (op, cell)
    assert text._cut("broadcast_add_fusion.1", 14) == "broadca…sion.1"


def test_paragraphs_wrap_between_words_not_inside_numbers(rep):
    out = text.render(rep, width=80)
    for l in out.splitlines():
        assert not re.match(r"^\s*(ps|ns|µs|ms|s|B|MB|GB|%)\b", l.strip()), l  # a unit never starts a line
    words = set(re.findall(r"[A-Za-z_]{4,}", " ".join(f["message"] for f in rep.data["findings"])))
    flat = " ".join(out.split())
    for f in rep.data["findings"]:
        assert " ".join(f["message"].split()) in flat  # every message whole, re-wrapped only at spaces
    assert words


def test_trace_names_print_as_they_are(rep):
    d = copy.deepcopy(rep.data)
    d["top_ops"][0]["op"] = "[bold]fusion[/bold].3\x1b[31m"
    d["findings"][0]["message"] = "op [red]x[/red] is slow"
    out = text.render(d, width=200)
    assert "[bold]fusion[/bold].3\\x1b[31m" in out and "\x1b" not in out
    assert "op [red]x[/red] is slow" in out


def _same_step_stats(data: dict) -> dict:
    """``data`` with every device's step statistics equal to the first's (each device's steps are its own runs,
    start to start, so real devices differ a little)."""
    d = copy.deepcopy(data)
    first = d["step_stats"][0]
    d["step_stats"] = [{**first, "host": r["host"], "device": r["device"]} for r in d["step_stats"]]
    return d


def test_identical_device_rows_fold(rep):
    out = text.render(_same_step_stats(rep.data), width=100)
    assert "CPU:0–7 (8 devices)" in out
    d = _same_step_stats(rep.data)
    d["step_stats"][3]["max_ps"] += 10**12  # CPU:3 differs: three rows
    rows = _table(text.render(d, width=100), "Step time per device")[2:]
    assert [r.split()[0] for r in rows if r.startswith("CPU")] == ["CPU:0–2", "CPU:3", "CPU:4–7"]
    assert text.device_range(["GPU:1", "GPU:4", "GPU:6"]) == "GPU:1,4,6 (3 devices)"


def test_device_ids_fold_in_numeric_order():
    """Rows come sorted as text (CPU:0, CPU:1, CPU:10, ..., CPU:9): the folded cell reads the ids as numbers, so 64
    devices are 'CPU:0–63', not 'CPU:0,1,10,11,...'."""
    names = sorted(f"CPU:{i}" for i in range(64))
    assert names[2] == "CPU:10"
    assert text.device_range(names) == "CPU:0–63 (64 devices)"
    assert text.device_range(["GPU:6", "GPU:1", "GPU:4"]) == "GPU:1,4,6 (3 devices)"
    mesh = FIXTURES / "collectives" / "mesh4x4x4"
    if not mesh.exists():
        pytest.skip("collective fixtures not captured")
    out = text.render(_same_step_stats(pipeline.analyze(mesh).data), width=100)
    assert "CPU:0–63 (64 devices)" in out


def test_color_flag_and_no_color(rep, monkeypatch):
    path = str(cpu_fixture("allreduce_exposed"))
    res = CliRunner().invoke(main, ["analyze", path, "--color", "always"])
    assert res.exit_code == 0 and ANSI.search(res.output)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "80")
    res = CliRunner().invoke(main, ["analyze", path, "--color", "auto"])
    assert res.exit_code == 0 and not ANSI.search(res.output)
    assert max(len(l) for l in res.output.splitlines()) <= 80
    assert not ANSI.search(text.render(rep, color=False)) and ANSI.search(text.render(rep, color=True))
    # on a terminal: auto means colour unless NO_COLOR is set; never and always win over both
    from tracekit.cli import options
    monkeypatch.setattr(options.sys.stdout, "isatty", lambda: True, raising=False)
    assert options.terminal("auto")["color"] is False and options.terminal("always")["color"] is True
    monkeypatch.delenv("NO_COLOR")
    assert options.terminal("auto")["color"] is True and options.terminal("never")["color"] is False
    assert options.terminal("auto")["width"] == 80


def test_utilization_said_once_when_mfu_is_unknown():
    """Without a model FLOP count the overview gives the HFU once (its own line) and says only that MFU is unknown;
    with one (--model-flops-per-step), the MFU-and-HFU line gives both with their formula."""
    path = str(cpu_fixture("big_matmul"))
    out = CliRunner().invoke(main, ["analyze", path], env={"COLUMNS": "200"}).output
    assert out.count("hardware FLOPs utilization:") == 1 and "HFU =" not in out
    assert "MFU: unknown: no model FLOP count" in out
    out = CliRunner().invoke(main, ["analyze", path, "--model-flops-per-step", "1e9"],
                             env={"COLUMNS": "200"}).output
    assert "MFU and HFU: HFU = " in out and "MFU = model FLOPs per step / (peak x step time) = 1 GFLOP / (" in out and "MFU: unknown" not in out
