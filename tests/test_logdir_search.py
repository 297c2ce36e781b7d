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


def _runs(root: Path, names) -> Path:
    prof = root / "plugins" / "profile"
    for name in names:
        shutil.copytree(FIX / "train_step" / "plugins" / "profile" / "run1", prof / name)
    return prof


def _report(*args):
    import json
    r = CliRunner().invoke(main, ["analyze", *map(str, args), "--format", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output[r.output.index("{"):])


TOOK = ("took the run 2026_03, the newest (last by name) of 3 under plugins/profile; the others: 2026_02, 2026_01; "
        "--run NAME takes another")


def test_the_run_taken_is_named_in_process_and_on_the_pod_path(tmp_path):
    """A logdir of several runs: the newest is taken, and one warning says so and names the others, on the
    in-process and the --jobs path alike; --run NAME says nothing."""
    prof = _runs(tmp_path / "logs", ("2026_01", "2026_03", "2026_02"))
    for extra in ([], ["--jobs", "2"]):
        rep = _report(tmp_path / "logs", *extra)
        assert TOOK in rep["warnings"], rep["warnings"]
        assert [i["path"] for i in rep["inputs"]] == [str(prof / "2026_03" / "cpu.xplane.pb")]
    rep = _report(tmp_path / "logs", "--run", "2026_01")
    assert not any("took the" in w for w in rep["warnings"])
    assert [i["path"] for i in rep["inputs"]] == [str(prof / "2026_01" / "cpu.xplane.pb")]
    one = tmp_path / "one"
    _runs(one, ("only",))
    assert not any("took the" in w for w in _report(one)["warnings"])  # a logdir's only run: nothing was chosen
    r = CliRunner().invoke(main, ["info", str(tmp_path / "logs")], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and f"warning: {TOOK}" in r.output


def test_the_pod_path_says_it_for_several_hosts(tmp_path):
    """Runs of two hosts each: --jobs 2 maps the hosts of the run taken, and its report says which run it was."""
    prof = tmp_path / "logs" / "plugins" / "profile"
    src = FIX / "train_step" / "plugins" / "profile" / "run1" / "cpu.xplane.pb"
    for name in ("2026_01", "2026_02"):
        (prof / name).mkdir(parents=True)
        for h in ("hostA", "hostB"):
            shutil.copy(src, prof / name / f"{h}.xplane.pb")
    want = ("took the run 2026_02, the newest (last by name) of 2 under plugins/profile; the others: 2026_01; "
            "--run NAME takes another")
    for extra in ([], ["--jobs", "2"]):
        rep = _report(tmp_path / "logs", *extra)
        assert want in rep["warnings"]
        assert [i["host"] for i in rep["inputs"]] == ["hostA", "hostB"]
        assert all("/2026_02/" in i["path"] for i in rep["inputs"])


def test_a_folder_whose_sub_folder_holds_traces_says_which(tmp_path):
    """`analyze .` in a folder with no trace of its own whose sub-folder holds traces: the sub-folder taken is
    named (and, with several, the others)."""
    shutil.copytree(FIX / "train_step" / "plugins" / "profile" / "run1", tmp_path / "b")
    rep = _report(tmp_path)
    assert "took the sub-folder b, the only one holding traces (this folder has none itself)" in rep["warnings"]
    shutil.copytree(FIX / "train_step" / "plugins" / "profile" / "run1", tmp_path / "a")
    (tmp_path / "c").mkdir()  # no trace: not a candidate
    rep = _report(tmp_path)
    assert ("took the sub-folder b, the newest (last by name) of 2 holding traces (this folder has none itself); "
            "the others: a; --run NAME takes another") in rep["warnings"]
    assert [i["path"] for i in rep["inputs"]] == [str(tmp_path / "b" / "cpu.xplane.pb")]


def test_the_logdir_below_is_named(tmp_path):
    _runs(tmp_path / "exp1" / "logs", ("2026_01", "2026_02"))
    rep = _report(tmp_path)
    assert ("took the logdir exp1/logs, the only one below this folder; took the run 2026_02, the newest (last by "
            "name) of 2 under plugins/profile; the others: 2026_01; --run NAME takes another") in rep["warnings"]


def test_commands_without_a_report_say_it_on_stderr(tmp_path):
    """ops, memory, collectives, hlo and diff print no report: the line goes to stderr, stdout stays the table."""
    import json
    _runs(tmp_path / "logs", ("2026_01", "2026_03", "2026_02"))
    for args in (["ops", "--format", "json"], ["memory", "--format", "json"], ["collectives", "--format", "json"],
                 ["hlo", "--format", "json"]):
        extra = ["ynn_fusion.3"] if args[0] == "hlo" else []
        r = CliRunner().invoke(main, [args[0], str(tmp_path / "logs"), *extra, *args[1:]], env={"COLUMNS": "300"})
        assert r.exit_code == 0, r.output
        assert f"tracekit: warning: {TOOK}" in r.stderr and "took the" not in r.stdout
        json.loads(r.stdout)
    r = CliRunner().invoke(main, ["diff", str(tmp_path / "logs"), str(tmp_path / "logs")], env={"COLUMNS": "300"})
    assert r.stderr.count(TOOK) == 2
