"""Every command's text table fits the terminal (issue 38): at COLUMNS=80 and 200 on committed fixtures, no line
is longer than the width, each table row is one line (as many rows as the JSON output of the same command has
records), and the ops table's numbers equal the JSON values at their printed precision."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli.app import main

FIX = Path(__file__).resolve().parent.parent / "fixtures"
TRACES = [FIX / "cpu" / "allreduce_exposed", FIX / "collectives" / "mesh4x4", FIX / "cpu" / "train_step"]
WIDTHS = [80, 200]
SEP = "─"


def _run(args, width):
    r = CliRunner().invoke(main, args, env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    return r.output


def _table_rows(text: str) -> list[str]:
    """The data rows of the first table: the lines after its header rule up to a blank or note line."""
    lines = text.split("\n")
    i = next(k for k, ln in enumerate(lines) if ln and set(ln) == {SEP})
    out = []
    for ln in lines[i + 1:]:
        if not ln.strip() or ln.startswith("(") or set(ln) == {SEP}:
            break
        out.append(ln)
    return out


def _fits(text: str, width: int) -> None:
    long = [ln for ln in text.split("\n") if len(ln) > width]
    assert not long, long


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_ops_table_fits_and_rows_match_json(trace, width):
    text = _run(["ops", str(trace), "--limit", "0"], width)
    _fits(text, width)
    recs = json.loads(_run(["ops", str(trace), "--limit", "0", "--format", "json"], width))
    rows = _table_rows(text)
    assert len(rows) == len(recs) > 0
    header = text.split("\n")[0].split()
    cols = {h: i for i, h in enumerate(header)}
    for row, rec in zip(rows, recs):
        cells = re.split(r"\s{2,}", row.strip())
        assert len(cells) == len(header), row  # no cell wrapped or merged
        assert int(cells[cols["count"]].replace(",", "")) == rec["occurrences"]
        _same_time(cells[cols["total"]], rec["total_ps"])
        _same_pct(cells[cols["share"]], rec["busy_share"])


def _same_time(cell: str, ps: float) -> None:
    num, unit = cell.split()
    scale = {"s": 1e12, "ms": 1e9, "µs": 1e6, "ns": 1e3, "ps": 1}[unit]
    digits = len(num.replace(".", "").lstrip("0")) or 1
    got = float(num)
    # the printed value is the JSON value rounded to its printed significant digits (independent of fmt_time)
    assert float(f"{ps / scale:.{max(digits, 1)}g}") == pytest.approx(got, rel=1e-9) or \
        abs(ps / scale - got) <= 0.5 * 10 ** (len(num.split(".")[0]) - digits), (cell, ps)


def _same_pct(cell: str, share: float) -> None:
    assert cell.endswith("%")
    num = cell[:-1]
    decimals = len(num.split(".")[1]) if "." in num else 0
    assert abs(share * 100 - float(num)) <= 0.5 * 10 ** -decimals + 1e-9, (cell, share)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_collectives_table_fits(trace, width):
    text = _run(["collectives", str(trace)], width)
    _fits(text, width)
    recs = json.loads(_run(["collectives", str(trace), "--format", "json"], width))["collectives"]
    if recs:
        assert len(_table_rows(text)) == len(recs)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_memory_view_fits_and_lists_only_programs_that_ran(trace, width):
    text = _run(["memory", str(trace)], width)
    _fits(text, width)
    data = json.loads(_run(["memory", str(trace), "--format", "json"], width))
    ran = [p for p in data.get("programs") or [] if p["memory_space"] in ("device", "host")
           and (p.get("executions") is None or p["executions"] > 0)]
    if ran:
        assert len(_table_rows(text)) == min(len(ran), 8)


def test_narrow_table_leaves_columns_out_with_a_note():
    text = _run(["ops", str(FIX / "cpu" / "train_step")], 80)
    assert "left out to fit the width" in text
    wide = _run(["ops", str(FIX / "cpu" / "train_step")], 200)
    assert "left out" not in wide and "headroom" in wide.split("\n")[0]


def test_width_from_the_terminal_on_stderr_when_stdout_is_piped(monkeypatch):
    from tracekit.cli import options
    monkeypatch.delenv("COLUMNS", raising=False)

    def size(fd):
        if fd == 2:
            return os.terminal_size((123, 40))
        raise OSError("not a terminal")
    monkeypatch.setattr(options.os, "get_terminal_size", size)
    assert options.term_width() == 123
    monkeypatch.setattr(options.os, "get_terminal_size", lambda fd: (_ for _ in ()).throw(OSError()))
    assert options.term_width() == 100
    monkeypatch.setenv("COLUMNS", "77")
    assert options.term_width() == 77


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("trace", TRACES, ids=lambda p: p.name)
def test_info_paragraphs_wrap_between_words(trace, width):
    text = _run(["info", str(trace)], width)
    plain = CliRunner().invoke(main, ["info", str(trace)], env={"COLUMNS": "100000"}).output
    assert text.split() == plain.split()  # wrapped at spaces only: the same words, none cut mid-word
    _fits("\n".join(ln for ln in text.split("\n") if not ln.startswith("  ")), width)


@pytest.mark.parametrize("width", WIDTHS)
def test_rules_list_fits_with_units_on_parameters(width):
    text = _run(["rules"], width)
    _fits(text, width)
    from tracekit.analysis import rule_model
    rules = rule_model.load_rules()
    assert len(_table_rows(text)) == len(rules)
    assert "min_gap_ps=" not in text
    if width == 200:
        assert "min_gap=10 µs" in text  # TK003's default 10_000_000 ps
