"""Issue 38: the folder above a logdir finds the logdir below it (up to paths.SEARCH_DEPTH levels); several
logdirs below are one line naming them, exit 2; a folder with none is still 'no trace found'."""
from __future__ import annotations

import shutil
from pathlib import Path

from click.testing import CliRunner

from tracekit.cli.app import main

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cpu"


def test_folder_above_a_logdir(tmp_path):
    shutil.copytree(FIX / "train_step", tmp_path / "exp1" / "logs")
    r = CliRunner().invoke(main, ["info", str(tmp_path), "--format", "json"])
    assert r.exit_code == 0, r.output
    assert str(tmp_path / "exp1/logs/plugins/profile/run1/cpu.xplane.pb") in r.output
    shutil.copytree(FIX / "big_matmul", tmp_path / "exp2")
    r = CliRunner().invoke(main, ["analyze", str(tmp_path)])
    assert r.exit_code == 2
    (line,) = [ln for ln in r.output.splitlines() if ln.strip()]
    assert "2 logdirs under this folder" in line and str(tmp_path / "exp2") in line and "exp1/logs" in line


def test_too_deep_or_none(tmp_path):
    shutil.copytree(FIX / "train_step", tmp_path / "a" / "b" / "c" / "d")  # 4 levels: past the search
    r = CliRunner().invoke(main, ["info", str(tmp_path)])
    assert r.exit_code == 2 and "no *.xplane.pb or *.trace.json.gz trace found" in r.output
    assert CliRunner().invoke(main, ["info", str(tmp_path / "a")]).exit_code == 0  # 3 levels: found
