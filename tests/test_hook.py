"""tracekit.profile: the post-run hook reports, and never breaks the training job."""
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import tracekit  # noqa: E402
from tracekit.run import hook as hook_mod  # noqa: E402
from tracekit.errors import FindingsError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_flax.py"

_f = jax.jit(lambda x: jnp.tanh(x @ x))
_x = jnp.ones((64, 64))
_f(_x).block_until_ready()


def work(n=3):
    x = _x
    for _ in range(n):
        x = _f(x).block_until_ready()
    return x


def reports(logdir) -> list[Path]:
    return sorted(Path(logdir).glob("plugins/profile/*/tracekit-report.*"))


def fake_analysis(monkeypatch, payload=None, code=None):
    """Replace the analysis child by one that prints ``payload`` (or runs ``code``); records the calls."""
    calls = []

    def cmd(run, spec):
        calls.append((run, spec))
        if code is not None:
            return [sys.executable, "-c", code]
        return [sys.executable, "-c", "import sys; print(sys.argv[1])", json.dumps(payload)]

    monkeypatch.setattr(hook_mod, "analysis_command", cmd)
    return calls


def warnings_of(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "training goes on" in
            r.getMessage()]


# -- the example training run, end to end -----------------------------------------------------------------------

def _run_example(tmp_path, env_extra=None):
    pytest.importorskip("flax")
    pytest.importorskip("optax")
    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, str(EXAMPLE), "--logdir", str(tmp_path / "logs")], capture_output=True,
                          text=True, timeout=120, env=env, cwd=tmp_path)


def test_example_writes_reports(tmp_path):
    p = _run_example(tmp_path)
    assert p.returncode == 0, p.stderr
    assert "training done" in p.stdout
    files = reports(tmp_path / "logs")
    assert any(f.name == "tracekit-report.json" for f in files), p.stderr
    data = json.loads(next(f for f in files if f.suffix == ".json").read_text())
    assert data["summary"]["steps"] == 5 and data["summary"]["op_executions"] > 0
    assert "finding(s) in 5 step(s)" in p.stderr  # the logged summary
    try:
        import tracekit.report.render.html  # noqa: F401
        assert any(f.name == "tracekit-report.html" for f in files)
    except ImportError:
        assert "no html report" in p.stderr


def test_example_survives_failing_analysis(tmp_path):
    p = _run_example(tmp_path, {"TRACEKIT_HOOK_FAIL": "1"})
    assert p.returncode == 0, p.stderr
    assert "training done" in p.stdout
    assert "WARNING" in p.stderr and "analysis of" in p.stderr and "failed" in p.stderr
    assert not reports(tmp_path / "logs")


# -- failures inside tracekit are warnings -----------------------------------------------------------------------

def test_unwritable_logdir(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with tracekit.profile(logdir=blocker / "logs"):
        out = work()
    assert out.shape == (64, 64)
    assert warnings_of(caplog)
    hook = tracekit.profile(logdir=blocker / "logs", start_step=1, num_steps=2)
    for i in range(5):
        hook.step(i)
        work(1)
    hook.close()
    assert len(warnings_of(caplog)) == 2  # one warning per hook, not one per step


def test_analysis_failure_and_timeout(tmp_path, monkeypatch, caplog):
    fake_analysis(monkeypatch, code="import sys; sys.exit('boom')")
    with tracekit.profile(logdir=tmp_path, fail_on="info"):
        work()
    assert any("failed: boom" in w for w in warnings_of(caplog))
    caplog.clear()
    fake_analysis(monkeypatch, code="import time; time.sleep(30)")
    with tracekit.profile(logdir=tmp_path, timeout_s=1):
        work()
    assert any("ran past timeout_s=1" in w for w in warnings_of(caplog))


def test_trace_already_running(tmp_path, caplog):
    jax.profiler.start_trace(str(tmp_path / "theirs"))
    try:
        with tracekit.profile(logdir=tmp_path / "ours"):
            work()
        assert any("cannot start the profiler" in w for w in warnings_of(caplog))
    finally:
        jax.profiler.stop_trace()  # their trace is still theirs to stop
    assert not (tmp_path / "ours" / "plugins").exists()


def test_profiler_errors_do_not_propagate(tmp_path, monkeypatch, caplog):
    calls = fake_analysis(monkeypatch, {"fails": False})
    real_stop = jax.profiler.stop_trace

    def broken_stop():
        real_stop()
        raise RuntimeError("export failed")

    monkeypatch.setattr(jax.profiler, "stop_trace", broken_stop)
    hook = tracekit.profile(logdir=tmp_path, start_step=0, num_steps=2)
    for i in range(4):
        hook.step(i)
        work(1)
    hook.close()
    assert any("export failed" in w for w in warnings_of(caplog)) and not calls
    hook = tracekit.profile(logdir=tmp_path, start_step=0)
    hook.step("not a number")  # a bad argument is a warning too
    hook.close()


def test_bad_options_are_warnings(tmp_path, monkeypatch, caplog):
    fake_analysis(monkeypatch, {"fails": True})
    with tracekit.profile(logdir=tmp_path, fail_on="sometimes", outputs=("json", "pdf")):
        work()
    assert len(warnings_of(caplog)) == 2  # and fail_on is off: nothing raised
    caplog.clear()
    with tracekit.profile(logdir=tmp_path, outputs=5, timeout_s="soon"):  # nonsense arguments: warnings too
        work()
    assert warnings_of(caplog)


def test_recursive_decorated_function(tmp_path, monkeypatch, caplog):
    calls = fake_analysis(monkeypatch, {"fails": False})

    @tracekit.profile(logdir=tmp_path)
    def rec(n):
        work(1)
        return rec(n - 1) if n else "done"

    assert rec(2) == "done"
    assert len(calls) == 1 and not warnings_of(caplog)


# -- fail_on, results, process index --------------------------------------------------------------------------

def test_fail_on_raises_only_at_the_end(tmp_path, monkeypatch):
    payload = {"fails": True, "findings": [{"rule_id": "TK003", "name": "device-idle-gaps", "severity": "warning"}],
               "summary_lines": ["1 finding(s)"], "worst": "warning"}
    calls = fake_analysis(monkeypatch, payload)
    hook = tracekit.profile(logdir=tmp_path, start_step=1, num_steps=2, fail_on="warning")
    for i in range(6):  # the window closes at step 3 and the analysis runs; nothing raises mid-loop
        hook.step(i)
        work(1)
    with pytest.raises(FindingsError, match="TK003 device-idle-gaps") as ei:
        hook.close()
    # (checked after close, which waits for the analysis thread: on a loaded machine it may not have started yet)
    assert calls and calls[0][1]["fail_on"] == "warning"
    assert ei.value.findings[0]["severity"] == "warning"
    hook.close()  # a second close does not raise again
    # no finding reached the severity: no raise
    fake_analysis(monkeypatch, dict(payload, fails=False))
    with tracekit.profile(logdir=tmp_path, fail_on="error"):
        work()
    # a training error is not masked by the gate
    fake_analysis(monkeypatch, payload)
    with pytest.raises(ZeroDivisionError):
        with tracekit.profile(logdir=tmp_path, fail_on="warning"):
            1 / 0


@pytest.mark.parametrize("fail_on,fails", [("error", False), ("warning", True)])
def test_gate_of_the_real_analysis(tmp_path, fail_on, fails):
    """The child computes ``fails`` from the real findings: train_step has a warning and an info, no error."""
    import shutil
    src = ROOT / "fixtures" / "cpu" / "train_step" / "plugins" / "profile" / "run1"
    if not src.exists():
        pytest.skip("fixture missing")
    run = tmp_path / "run1"
    shutil.copytree(src, run)
    p = subprocess.run(hook_mod.analysis_command(run, {"outputs": ["json", "md"], "fail_on": fail_on}),
                       capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["fails"] is fails and res["worst"] == "warning"
    assert (run / "tracekit-report.json").exists() and res["json"] == str(run / "tracekit-report.json")
    assert len(res["summary_lines"]) == 1 + min(3, len(res["findings"]))


def test_decorator_and_real_analysis(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="tracekit")

    @tracekit.profile(logdir=tmp_path, outputs=("json",))
    def train(n):
        return work(n).shape

    assert train(3) == (64, 64)
    files = reports(tmp_path)
    assert [f.name for f in files] == ["tracekit-report.json"]
    assert any("finding(s) in" in r.getMessage() for r in caplog.records)


def test_only_process_zero_analyzes(tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="tracekit")
    calls = fake_analysis(monkeypatch, {"fails": False})
    monkeypatch.setattr(jax, "process_index", lambda *a, **k: 1)
    with tracekit.profile(logdir=tmp_path / "a"):
        work()
    assert not calls and any("leaves the analysis to process 0" in r.getMessage() for r in caplog.records)
    assert list((tmp_path / "a").glob("plugins/profile/*/*.xplane.pb"))  # it still traced
    with tracekit.profile(logdir=tmp_path / "b", all_processes=True):
        work()
    assert len(calls) == 1


THREAD_SPY = """
import concurrent.futures as cf, json, os, sys
from tracekit.ingest import wire
seen = {"decode_threads": [], "pool_workers": []}
real = wire.wirec.read_space
def read_space(data, threads=1, *a, **k):
    seen["decode_threads"].append(threads)
    return real(data, threads, *a, **k)
wire.wirec.read_space = read_space
class Pool(cf.ThreadPoolExecutor):
    def __init__(self, max_workers=None, *a, **k):
        seen["pool_workers"].append(max_workers)
        super().__init__(max_workers, *a, **k)
cf.ThreadPoolExecutor = Pool
import atexit
atexit.register(lambda: open(os.environ["THREAD_SPY_OUT"], "w").write(json.dumps(seen)))
sys.argv = [sys.argv[0]] + sys.argv[1:]
from tracekit.run.hookchild import main
main()
"""


def test_analysis_child_runs_on_one_thread(tmp_path, monkeypatch):
    """The hook's analysis child decodes and runs its pools on one thread by default (training keeps the other
    cores; niceness alone left it 1.2-1.4x slower on 2 cores), and on ``threads=N`` when asked."""
    import shutil

    from tracekit.ingest import wire
    if wire.wirec is None:
        pytest.skip("the C decoder's threads")
    src = ROOT / "fixtures" / "cpu" / "sharded8" / "plugins" / "profile" / "run1"
    if not src.exists():
        pytest.skip("fixture missing")
    for threads, want in ((None, 1), (2, 2)):
        run = tmp_path / f"run{want}"
        shutil.copytree(src, run)
        out = tmp_path / f"seen{want}.json"
        monkeypatch.setenv("THREAD_SPY_OUT", str(out))
        monkeypatch.setenv("TRACEKIT_THREADS", "8")  # what the job itself uses must not leak into the child
        monkeypatch.setattr(hook_mod, "analysis_command",
                            lambda run, spec: [sys.executable, "-c", THREAD_SPY, str(run), json.dumps(spec)])
        h = tracekit.profile(logdir=tmp_path, outputs=("json",), **({} if threads is None else {"threads": threads}))
        h._analyze(run)
        seen = json.loads(out.read_text())
        assert seen["decode_threads"] and set(seen["decode_threads"]) == {want}, seen
        # the analysis starts no pool of its own; any pool that does start is bounded by the setting
        assert all(w is not None and w <= want for w in seen["pool_workers"]), seen
        assert h.result and h.result["written"], h.result
    env = hook_mod.child_env()
    assert all(env[k] == "1" for k in hook_mod.THREAD_VARIABLES)


def test_summary_logged_at_info_once_prefixed_and_whole(tmp_path, monkeypatch, caplog):
    """Issue 38: the hook's summary is INFO (a warning finding is news, not a fault of the job), its one prefix is
    the logger's name (no 'tracekit tracekit:' under a '%(name)s: %(message)s' format), and a long finding message
    is logged whole."""
    caplog.set_level(logging.INFO, logger="tracekit")
    long_msg = "x" * 400 + " end-of-message"
    payload = {"fails": False, "findings": [{"rule_id": "TK003", "name": "device-idle-gaps", "severity": "warning"}],
               "summary_lines": ["1 finding(s) in 2 step(s)", "1. [warning] TK003 device-idle-gaps: " + long_msg],
               "worst": "warning"}
    fake_analysis(monkeypatch, payload)
    with tracekit.profile(logdir=tmp_path):
        work()
    recs = [r for r in caplog.records if "finding(s) in" in r.getMessage()]
    assert len(recs) == 1 and recs[0].levelno == logging.INFO and recs[0].name == "tracekit"
    assert "end-of-message" in recs[0].getMessage()
    assert not any(r.getMessage().startswith("tracekit") for r in caplog.records if r.name == "tracekit")


def test_summary_lines_keep_the_whole_message(tmp_path):
    """The child's summary lines carry each finding's message whole (a log line is never cut)."""
    from types import SimpleNamespace

    from tracekit.run.hookchild import summary_lines
    msg = "word " * 100 + "last"
    rep = SimpleNamespace(data={"summary": {"steps": 2, "profiled_ps": 10**9, "claimed_savings_ps": 10**6}},
                          findings=[{"severity": "info", "rule_id": "TK001", "name": "n", "message": msg,
                                     "savings_ps": 10**6, "claims_time": False}])
    lines = summary_lines(rep, [])
    assert lines[1].endswith(" ".join(msg.split()))


NO_LOGDIR = """
import json, os, sys
import jax, jax.numpy as jnp
import tracekit

f = jax.jit(lambda x: jnp.tanh(x @ x) * 0.5)
g = jax.jit(lambda x: jnp.sin(x) + 1.0)
x = jnp.ones((96, 96))
f(x).block_until_ready(), g(x).block_until_ready()

def block(x):
    for _ in range(4):
        x = g(f(x)).block_until_ready()
    return x

with tracekit.profile() as p:
    block(x)
rep = p.report
jax.profiler.start_trace(sys.argv[1])  # the same block, written to a trace that is read back
block(x)
jax.profiler.stop_trace()
tr = tracekit.load(sys.argv[1])
ops = tr.device_ops
print(json.dumps({"report": rep.data["summary"]["op_executions"], "steps": rep.data["summary"]["steps"],
                  "top": {r["op"]: r["occurrences"] for r in rep.data["top_ops"]},
                  "written": int(len(ops)), "by_op": ops["op"].astype(str).value_counts().to_dict()}))
"""


def test_profile_without_logdir_leaves_no_files_and_gives_the_report(tmp_path):
    """`with tracekit.profile() as p:` without a logdir: p.report after the block, its op count equal to the
    count read back from a written trace of the same block, and no file left in the working folder or TMPDIR."""
    work, tmp, written = tmp_path / "work", tmp_path / "tmp", tmp_path / "written"
    work.mkdir(), tmp.mkdir()
    (tmp_path / "block.py").write_text(NO_LOGDIR)
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, str(tmp_path / "block.py"), str(written)], cwd=work, env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["written"] > 0 and out["report"] == out["written"]
    for op, n in out["top"].items():  # per op too
        assert n == out["by_op"][op], op
    assert list(work.iterdir()) == [] and list(tmp.iterdir()) == []
