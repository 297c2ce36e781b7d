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


def test_the_run_taken_is_named(tmp_path):
    """A logdir of several runs: the newest is taken, and one warning says so and names the others, on the
    in-process and the --jobs path alike; --run NAME says nothing."""
    import json
    prof = tmp_path / "logs" / "plugins" / "profile"
    for name in ("2026_01", "2026_02", "2026_03"):
        shutil.copytree(FIX / "train_step" / "plugins" / "profile" / "run1", prof / name)
    want = f"{prof}: took run 2026_03, the newest of 3 runs (others: 2026_02, 2026_01); --run NAME picks another"
    for extra in ([], ["--jobs", "2"]):
        r = CliRunner().invoke(main, ["analyze", str(tmp_path / "logs"), "--format", "json", *extra])
        assert r.exit_code == 0, r.output
        rep = json.loads(r.output[r.output.index("{"):])
        assert want in rep["warnings"], rep["warnings"]
        assert [i["path"] for i in rep["inputs"]] == [str(prof / "2026_03" / "cpu.xplane.pb")]
    r = CliRunner().invoke(main, ["analyze", str(tmp_path / "logs"), "--run", "2026_01", "--format", "json"])
    assert "took run" not in r.output
