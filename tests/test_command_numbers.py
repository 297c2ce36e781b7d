"""Issue 38's Done-when for every command's text output, at 80 and 200 columns: no line longer than the width (a
single word longer than the width, a path, stands whole on its own line: the one exception), each table row one
line (as many cells as its header), and every printed number equal to the JSON value at its printed precision.

The precision check is written out here, not taken from tracekit's formatters: a time is printed in the largest
of s/ms/µs/ns (else ps) that it reaches, to 3 significant digits (whole units from 100 up); a count of bytes,
FLOP/s or B/s in the largest of P/T/G/M/k it reaches, to 3 significant digits; a share with one decimal, in %.
``test_command_widths.py`` has the ops, collectives, memory, info and rules list checks this file builds on."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracekit.cli.app import main

FIX = Path(__file__).resolve().parent.parent / "fixtures"
WIDTHS = [80, 200]
RULE = "─"
TIME = (("s", 1e12), ("ms", 1e9), ("µs", 1e6), ("ns", 1e3), ("ps", 1.0))
SI = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0))


def _run(args, width, code=0):
    r = CliRunner().invoke(main, [str(a) for a in args], env={"COLUMNS": str(width)})
    assert r.exit_code == code, r.output
    return r.output


def _fits(text: str, width: int) -> None:
    long = [ln for ln in text.split("\n") if len(ln) > width and len(ln.split()) > 1]
    assert not long, long


def _tables(text: str) -> dict[str, list[dict]]:
    """Every table of a text output: its header line -> its rows as {header: cell} (cells split at 2+ spaces;
    a row with another number of cells than its header fails: it wrapped or two cells ran together)."""
    lines, out = text.split("\n"), {}
    for i, ln in enumerate(lines):
        if ln.strip() and set(ln.strip()) == {RULE} and i:
            heads = re.split(r"\s{2,}", lines[i - 1].strip())
            rows = []
            for row in lines[i + 1:]:
                cells = re.split(r"\s{2,}", row.strip())
                if not row.strip() or row.startswith(("(", " ")) or set(row.strip()) == {RULE} or len(cells) == 1:
                    break  # (a paragraph right after the table: one run of words)
                assert len(cells) == len(heads), (heads, row)
                rows.append(dict(zip(heads, cells)))
            out[lines[i - 1].strip()] = rows
    return out


def _sig3(x: float) -> float:
    return float(f"{x:.3g}")


def same_scaled(cell: str, value, units, suffix: str = "") -> None:
    """``cell`` ('12.3 ms', '4.19 MB', '46 T') is ``value`` in the largest unit it reaches, at 3 significant
    digits (whole units from 100 up); '—' for a missing value."""
    if value is None:
        assert cell == "—", cell
        return
    a = abs(float(value))
    for unit, div in units:
        if a >= div or div == units[-1][1]:
            break
    want_unit = unit + suffix
    num, _, got_unit = cell.partition(" ")
    assert got_unit.strip() == want_unit.strip(), (cell, value, want_unit)
    v = float(value) / div
    want = round(v) if (units is TIME and abs(v) >= 100) or (units is TIME and div == 1.0) else _sig3(v)
    assert float(num) == pytest.approx(want, rel=1e-9, abs=1e-12), (cell, value)


def same_time(cell, ps):
    same_scaled(cell, ps, TIME)


def same_si(cell, x, unit=""):
    same_scaled(cell, x, SI, unit)


def same_pct(cell: str, share) -> None:
    if share is None:
        assert cell.startswith("—"), cell
        return
    num = cell.split("%")[0]
    assert float(num) == pytest.approx(round(100 * share, 1), abs=0.05 + 1e-9), (cell, share)


def same_int(cell: str, n) -> None:
    assert int(cell.replace(",", "")) == n, (cell, n)


# ---------------------------------------------------------------------------------------------------- analyze
def _two_hosts(tmp_path) -> Path:
    d = tmp_path / "two"
    d.mkdir()
    for h, case in (("hostA", "train_step"), ("hostB", "sharded8")):
        shutil.copy(FIX / "cpu" / case / "plugins/profile/run1/cpu.xplane.pb", d / f"{h}.xplane.pb")
    return d


ANALYZED = [FIX / "cpu" / "train_step", FIX / "collectives" / "mesh4x4", FIX / "cpu" / "donation_donated", "two"]


def _device_records(rows_json, multi):
    return {(f"{r['host']}/{r['device']}" if multi else r["device"]): r for r in rows_json}


def _expand(label: str) -> list[str]:
    """'CPU:0–7 (8 devices)' / 'hostA/CPU:0–3, hostB/CPU:0–3 (8 devices)' / 'GPU:1,4,6 (3 devices)' -> names."""
    if not label.endswith("devices)"):
        return [label]
    out = []
    for part in label.rsplit(" (", 1)[0].split(", "):
        m = re.match(r"^(.*?)(\d+)(?:–(\d+))?$", part)
        if m.group(3):
            out += [f"{m.group(1)}{i}" for i in range(int(m.group(2)), int(m.group(3)) + 1)]
        else:
            pre = re.match(r"^(.*?)([\d,]+)$", part)
            out += [f"{pre.group(1)}{i}" for i in pre.group(2).split(",")]
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("trace", ANALYZED, ids=lambda p: getattr(p, "name", p))
def test_analyze_numbers_equal_the_json(trace, width, tmp_path):
    trace = _two_hosts(tmp_path) if trace == "two" else trace
    text = _run(["analyze", trace], width)
    _fits(text, width)
    d = json.loads(_run(["analyze", trace, "--format", "json"], width))
    tables = _tables(text)
    multi = d["summary"]["hosts"] > 1
    steps = next((rows for h, rows in tables.items() if h.startswith("device ")), [])
    assert len(steps) == 0 if not d["step_stats"] else len(steps) > 0
    recs = _device_records(d["step_stats"], multi)
    for row in steps:
        names = _expand(row["device"])
        for name in names:
            r = recs.pop(name)
            same_int(row["steps"], r["steps"])
            for col, key in (("mean", "mean_ps"), ("median", "median_ps"), ("p90", "p90_ps"), ("max", "max_ps")):
                same_time(row[col], r[key])
    assert not recs  # every device's row shown (the fixtures have at most 16 rows)
    ops = next(rows for h, rows in tables.items() if h.startswith("op ") and " n " in f" {h} ")
    assert len(ops) == min(12, len(d["top_ops"]))
    for row, r in zip(ops, d["top_ops"]):
        assert r["op"] in row["op"] or "…" in row["op"]
        same_int(row["n"], r["occurrences"])
        same_time(row["time"], r["total_ps"])
        same_pct(row["share"], r["busy_share"])
        for col, key, fn in (("flops", "flops", same_si), ("headroom", "headroom_ps", same_time),
                             ("eff", "efficiency", same_pct)):
            if col in row:
                fn(row[col], r.get(key))
        if "bytes" in row:
            same_si(row["bytes"], r.get("bytes_accessed"), "B")
    progs = next((rows for h, rows in tables.items() if h.startswith("program ")), [])
    ran = [p for p in d["memory"].get("programs") or [] if p["memory_space"] in ("device", "host")
           and (p.get("executions") is None or p["executions"] > 0)]
    assert len(progs) == min(len(ran), 8)
    assert "jit_convert_element_type" not in text.split("Memory (XLA")[-1]  # init programs: never in the window
    for row, p in zip(progs, ran):
        for col, key in (("arguments", "argument_bytes"), ("outputs", "output_bytes"), ("aliased", "alias_bytes"),
                         ("temporaries", "temp_bytes")):
            if col in row:
                same_si(row[col], p[key], "B")
        same_si(row["live peak"].split(" (")[0], p["live_peak_bytes"], "B")
    if progs:  # after the findings
        assert text.index("Findings") < text.index("Memory (XLA's buffer assignment)")


# ---------------------------------------------------------------------------------------------------- the rest
@pytest.mark.parametrize("width", WIDTHS)
def test_collectives_numbers_equal_the_json(width):
    trace = FIX / "collectives" / "mesh4x4"
    text = _run(["collectives", trace], width)
    _fits(text, width)
    recs = json.loads(_run(["collectives", trace, "--format", "json"], width))["collectives"]
    rows = next(iter(_tables(text).values()))
    assert len(rows) == len(recs) > 0
    for row, r in zip(rows, recs):
        same_int(row["executions"], r["executions"])
        same_time(row["time"], r["time_ps"])
        for col, key, fn in (("skew", "skew_ps", same_time), ("predicted", "predicted_ps", same_time),
                             ("efficiency", "efficiency", same_pct)):
            if col in row:
                fn(row[col], r[key])
        for col, key in (("bytes", "global_bytes"), ("algbw", "algbw_bytes_per_s"), ("busbw", "busbw_bytes_per_s")):
            if col in row:
                same_si(row[col], r[key], "B" if col == "bytes" else "B/s")


@pytest.mark.parametrize("width", WIDTHS)
def test_memory_numbers_equal_the_json(width):
    trace = FIX / "cpu" / "donation_donated"
    text = _run(["memory", trace], width)
    _fits(text, width)
    m = json.loads(_run(["memory", trace, "--format", "json"], width))
    tables = _tables(text)
    progs = next(rows for h, rows in tables.items() if h.startswith("program "))
    ran = [p for p in m["programs"] if p["executions"] > 0]
    assert len(progs) == len(ran) == 2  # jit_train_step and jit_relayout; the init programs never ran
    for row, p in zip(progs, ran):
        same_si(row["live peak"].split(" (")[0], p["live_peak_bytes"], "B")
        for col, key in (("arguments", "argument_bytes"), ("temporaries", "temp_bytes"), ("aliased", "alias_bytes")):
            if col in row:
                same_si(row[col], p[key], "B")
    bufs = next(rows for h, rows in tables.items() if h.startswith("size "))
    shown = [b for b in m["buffers"] if any(b["module"] == p["module"] and b["program_id"] == p["program_id"]
                                            for p in ran)]
    for row, b in zip(bufs, shown):
        same_si(row["size"], b["size_bytes"], "B")


@pytest.mark.parametrize("width", WIDTHS)
def test_diff_numbers_equal_the_json(width):
    args = ["diff", FIX / "cpu" / "donation_undonated", FIX / "cpu" / "donation_donated"]
    text = _run(args, width)
    _fits(text, width)
    d = json.loads(_run(args + ["--format", "json"], width))
    tables = _tables(text)
    ops = next(rows for h, rows in tables.items() if h.startswith("op "))
    shown = [r for r in d["ops"] if r["status"] == "added"]
    assert len(ops) == len(shown) > 0
    for row, r in zip(ops, shown):
        same_time(row["impact"].lstrip("+-"), abs(r["impact_ps"]))
    bd = next(rows for h, rows in tables.items() if h.startswith("step breakdown"))
    for row, r in zip(bd, d["breakdown"]):
        same_pct(row["base"], r["base_share"])
        same_pct(row["new"], r["new_share"])
    mem = next(rows for h, rows in tables.items() if h.startswith("program "))
    assert len(mem) == len(d["memory"]) > 0
    for row, r in zip(mem, d["memory"]):
        same_si(row["base"], r["base_bytes"], "B")
        same_si(row["new"], r["new_bytes"], "B")
        same_si(row["change"].split(" (")[0].lstrip("+-"), abs(r["change_bytes"]), "B")
    st = d["step_time"]
    line = " ".join(text.split())
    m = re.search(r"step time \(median\): (\S+ \S+) → (\S+ \S+)", line)
    same_time(m.group(1), st["base"]["median_ps"])
    same_time(m.group(2), st["new"]["median_ps"])


@pytest.mark.parametrize("width", WIDTHS)
def test_chips_numbers_equal_the_json(width):
    text = _run(["chips"], width)
    _fits(text, width)
    recs = {r["name"]: r for r in json.loads(_run(["chips", "--format", "json"], width))}
    rows = next(iter(_tables(text).values()))
    assert len(rows) == len(recs)
    for row in rows:
        head, _, tail = row["name"].partition("…")  # a name cut in its middle to fit
        (r,) = [v for k, v in recs.items() if (k == head if not tail else k.startswith(head) and k.endswith(tail))]
        for col, key in (("bf16 FLOP/s", "bf16"), ("f32 FLOP/s", "f32"), ("int8 FLOP/s", "int8")):
            if col in row:
                same_si(row[col], r["peak_flops_per_s"].get(key))
        if "HBM" in row:
            same_si(row["HBM"], r["hbm_bytes"], "B")
        if "HBM B/s" in row:
            same_si(row["HBM B/s"], r["hbm_bw_bytes_per_s"])
    _fits(_run(["chips", "--sources"], width), width)


@pytest.mark.parametrize("width", WIDTHS)
def test_info_numbers_equal_the_json(width):
    for trace in (FIX / "cpu" / "train_step", FIX / "collectives" / "mesh4x4"):
        text = " ".join(_run(["info", trace], width).split())
        inv = json.loads(_run(["info", trace, "--format", "json"], width))
        if inv["devices"]:
            m = re.search(r"time span of device events: (\S+ \S+); ([\d,]+) device events on (\d+) device", text)
            same_time(m.group(1), inv["span_ps"])
            same_int(m.group(2), inv["device_events"])
            same_int(m.group(3), len(inv["devices"]))
        else:
            m = re.search(r"its ops among ([\d,]+) events on host threads", text)
            same_int(m.group(1), inv["host_thread_events"])
        for ln in inv["lines"][:40]:
            assert f"{ln['events']:,}" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_the_commands_without_numbers_to_check_fit(width, tmp_path):
    """hlo (an instruction wraps between words), rules explain / rules test, export's summary line, calibrate."""
    _fits(_run(["hlo", FIX / "cpu" / "train_step", "ynn_fusion.3"], width), width)
    _fits(_run(["rules", "explain", "TK003"], width), width)
    _fits(_run(["rules", "test", str(Path(__file__).resolve().parents[1] / "rules")], width), width)
    _fits(_run(["export", FIX / "cpu" / "train_step", "-o", tmp_path / "x.json"], width), width)
    _fits(_run(["calibrate", "--seconds", "1", "--path", tmp_path / "cpu.json"], width), width)
