"""Issue 38: `tracekit diff` diffs memory too: donation that changed the aliased bytes and the live peak is
said, with XLA's own memory_analysis() of each side (fixtures/cpu/cases.json, written by the capture script) as
the oracle. Shown, not gating."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tracekit.cli.app import main

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cpu"
CASES = json.loads((FIX / "cases.json").read_text())["cases"]


def _diff(*args, width=200):
    return CliRunner().invoke(main, ["diff", str(FIX / "donation_undonated"), str(FIX / "donation_donated"), *args],
                              env={"COLUMNS": str(width)})


def test_donation_changes_aliased_bytes_and_the_live_peak():
    r = _diff("--format", "json")
    assert r.exit_code == 0, r.output
    mem = {(m["program"], m["what"]): m for m in json.loads(r.output)["memory"]}
    xb, xn = (CASES[c]["xla_memory"]["train_step"] for c in ("donation_undonated", "donation_donated"))
    alias = mem[("jit_train_step", "alias_bytes")]
    assert (alias["base_bytes"], alias["new_bytes"]) == (xb["alias_size_in_bytes"], xn["alias_size_in_bytes"]) \
        == (0, 8 << 20)  # the 8 MiB of parameters and momentum the fixture donates
    temp = mem[("jit_train_step", "temp_bytes")]
    assert (temp["base_bytes"], temp["new_bytes"]) == (xb["temp_size_in_bytes"], xn["temp_size_in_bytes"])
    peak = mem[("jit_train_step", "live_peak_bytes")]
    assert peak["base_bytes"] == xb["peak_memory_in_bytes"] and peak["new_bytes"] < peak["base_bytes"]
    assert ("jit_train_step", "argument_bytes") not in mem  # unchanged: not listed
    assert not any(m["program"] in ("jit_init_params", "jit_stage") for m in mem.values())  # never ran in the window
    assert ("jit_relayout", "live_peak_bytes") not in mem  # ran on both sides, unchanged


def test_the_text_and_markdown_say_it():
    from tracekit.units import fmt_num
    for width in (80, 200):
        r = _diff(width=width)
        assert r.exit_code == 0, r.output
        flat = " ".join(r.output.split())
        assert (f"jit_train_step: aliased 0 B → {fmt_num(8 << 20, 'B')}: outputs now reuse arguments' buffers "
                "(donated); live peak") in flat
        assert all(len(line) <= width for line in r.output.splitlines())
    md = _diff("--format", "markdown").output
    assert "### Memory" in md and "| jit\\_train\\_step | aliased | 0 B | 8.39 MB |" in md
