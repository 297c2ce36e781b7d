"""A word longer than the width (a long path) is never cut mid-word: it stands whole on its own line, and every
other line still fits (found when the clone's path made `info`'s trace path 81 characters at 80 columns)."""
from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from tracekit.cli.app import main
from tracekit.report.render.text import fit_para

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cpu" / "allreduce_exposed"


def test_fit_para_keeps_long_words_whole():
    word = "/a/" + "b" * 90 + "/cpu.xplane.pb"
    text = f"trace: {word} and then some ordinary words that wrap across the width as usual"
    for width in (40, 80):
        out = fit_para(text, width=width)
        assert out.split() == text.split()
        assert word in out.splitlines()[1]  # whole, on its own line
        assert all(len(ln) <= width for ln in out.splitlines() if word not in ln)


def test_info_with_a_path_longer_than_the_width(tmp_path):
    deep = tmp_path / ("x" * 60) / "run"
    shutil.copytree(FIX, deep)
    r = CliRunner().invoke(main, ["info", str(deep)], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    wide = CliRunner().invoke(main, ["info", str(deep)], env={"COLUMNS": "100000"}).output
    assert r.output.split() == wide.split()
    path = str(deep / "plugins/profile/run1/cpu.xplane.pb")
    assert len(path) > 80 and path in r.output.split()
