"""tracekit capture: from a running job's profiler server, from a script run under the profiler, and from a
Python function (tracekit.capture)."""
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("jax")

from tracekit.errors import TraceError  # noqa: E402

CLI = [sys.executable, "-m", "tracekit.cli"]

SERVER = textwrap.dedent("""
    import sys, time
    import jax, jax.numpy as jnp
    jax.profiler.start_server(int(sys.argv[1]))
    f = jax.jit(lambda x: jnp.tanh(x @ x) * 0.5)
    x = jnp.ones((128, 128))
    f(x).block_until_ready()
    print("READY", flush=True)
    t0, i = time.time(), 0
    while time.time() - t0 < 60:  # bounded: the test kills it long before
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            x = f(x).block_until_ready()
        i += 1
""")

TINY = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp
    f = jax.jit(lambda x: jnp.sin(x @ x))
    x = jnp.ones((64, 64))
    for i in range(3):
        with jax.profiler.StepTraceAnnotation("train", step_num=i):
            x = f(x).block_until_ready()
    print("script ran as", __name__, sys.argv[1:])
    sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_cli(*args, cwd=None, timeout=120):
    return subprocess.run(CLI + list(args), capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_capture_from_running_job(tmp_path):
    port = free_port()
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    child = subprocess.Popen([sys.executable, str(script), str(port)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        ready = threading.Event()
        threading.Thread(target=lambda: child.stdout.readline() == "READY\n" and ready.set(), daemon=True).start()
        assert ready.wait(60), "the profiled job did not start"
        out = tmp_path / "report.json"
        p = run_cli("capture", "--port", str(port), "--duration-ms", "1500", "--logdir", str(tmp_path / "logs"),
                    "-o", str(out))
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("tracekit ") and "Top ops by time" in p.stdout
        assert "trace in" in p.stderr
        data = json.loads(out.read_text())
        assert data["summary"]["op_executions"] > 0 and data["summary"]["steps"] > 0
        runs = list((tmp_path / "logs" / "plugins" / "profile").iterdir())
        assert len(runs) == 1 and list(runs[0].glob("*.xplane.pb"))
    finally:
        child.kill()
        child.wait()


def test_capture_nothing_listening(tmp_path):
    p = run_cli("capture", "--port", str(free_port()), "--duration-ms", "200", "--logdir", str(tmp_path))
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing is listening" in lines[0], p.stderr


def test_capture_script(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    p = run_cli("capture", "--logdir", "logs", "--", sys.executable, "tiny.py", "0", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "script ran as __main__ ['0']" in p.stdout
    assert "tracekit " in p.stdout and "Top ops by time" in p.stdout
    assert list((tmp_path / "logs" / "plugins" / "profile").glob("*/*.xplane.pb"))


def test_capture_script_exit_status_passes_through(tmp_path):
    (tmp_path / "tiny.py").write_text(TINY)
    p = run_cli("capture", "--logdir", "logs", "-o", "r.json", "--", sys.executable, "tiny.py", "3", cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    assert json.loads((tmp_path / "r.json").read_text())["summary"]["op_executions"] > 0  # report still written


def test_capture_script_without_jax_work(tmp_path):
    (tmp_path / "nojax.py").write_text("import sys\nprint('hi')\nsys.exit(int(sys.argv[1]))\n")
    p = run_cli("capture", "--logdir", "logs", "--", sys.executable, "nojax.py", "0", cwd=tmp_path)
    assert p.returncode == 2 and "no trace was written" in p.stderr
    p = run_cli("capture", "--logdir", "logs", "--", sys.executable, "nojax.py", "5", cwd=tmp_path)
    assert p.returncode == 5 and "exited with status 5" in p.stderr


def test_capture_usage_errors(tmp_path):
    for args, msg in ((["capture"], "nothing to capture"),
                      (["capture", "--", "bash", "x.sh"], "Python interpreter"),
                      (["capture", "--", sys.executable, "missing.py"], "no such script"),
                      (["capture", "--port", "1", "--", sys.executable, "x.py"], "not both"),
                      (["capture", "-o", "r.xyz", "--", sys.executable, "x.py"], "cannot tell the format")):
        p = run_cli(*args, cwd=tmp_path)
        assert p.returncode == 2 and msg in p.stderr, (args, p.stderr)


def test_python_command_parsing():
    from tracekit.run.capture import _python_command
    assert _python_command(["python3", "-u", "-X", "dev", "t.py", "-v"]) == (["python3", "-u", "-X", "dev"],
                                                                             ["t.py", "-v"])
    assert _python_command(["python", "-m", "pkg.train", "--lr", "1"]) == (["python"], ["-m", "pkg.train", "--lr", "1"])
    with pytest.raises(TraceError):
        _python_command(["python", "-c", "print(1)"])


def test_capture_function(tmp_path):
    import jax
    import jax.numpy as jnp

    import tracekit
    f = jax.jit(lambda a, b: jnp.tanh(a @ b))
    x = jnp.ones((128, 128))
    rep = tracekit.capture(f, x, x, steps=2)
    assert rep.data["summary"]["op_executions"] > 0
    assert rep.data["summary"]["steps"] == 2
    rep = tracekit.capture(f, x, b=x, logdir=tmp_path)  # kwargs go to fn; logdir keeps the trace
    assert list((tmp_path / "plugins" / "profile").glob("*/*.xplane.pb"))
    with pytest.raises(TraceError):
        tracekit.capture(f, x, x, steps=0)


def test_capture_function_with_trace_running(tmp_path):
    import jax
    import jax.numpy as jnp

    from tracekit.run.capture import capture
    jax.profiler.start_trace(str(tmp_path / "other"))
    try:
        with pytest.raises(TraceError, match="cannot start the profiler"):
            capture(jax.jit(lambda a: a + 1), jnp.ones(4))
    finally:
        jax.profiler.stop_trace()


def test_import_is_lazy():
    code = ("import sys, tracekit; p = tracekit.profile; c = tracekit.capture; "
            "assert callable(p) and callable(c); assert 'jax' not in sys.modules, 'jax imported'")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr


def test_new_run_picks_the_fresh_run(tmp_path):
    from tracekit.run.capture import new_run, trace_files
    old = tmp_path / "plugins" / "profile" / "2020_01_01"
    old.mkdir(parents=True)
    (old / "h.xplane.pb").write_bytes(b"x")
    before = trace_files(tmp_path)
    assert new_run(tmp_path, before) is None
    fresh = tmp_path / "plugins" / "profile" / "2021_01_01"
    fresh.mkdir()
    (fresh / "h.xplane.pb").write_bytes(b"y")
    os.utime(fresh / "h.xplane.pb", (time.time() + 1, time.time() + 1))
    assert new_run(tmp_path, before) == Path(fresh)


SELF_TRACING = textwrap.dedent("""
    import sys
    import jax, jax.numpy as jnp

    def warm_up(x):
        return jnp.cos(x) + 1.0

    def train_step(x):
        return jnp.tanh(x @ x) * 0.5

    warm, step = jax.jit(warm_up), jax.jit(train_step)
    x = jnp.ones((64, 64))
    for _ in range(4):  # tracekit's own trace starts after the first compile: this is what it would see
        x = warm(x).block_until_ready()
    x = step(x).block_until_ready()  # compiled before the script's trace
    STEPS = int(sys.argv[2])
    if sys.argv[3] == "context":
        with jax.profiler.trace(sys.argv[1]):
            for i in range(STEPS):
                with jax.profiler.StepTraceAnnotation("train", step_num=i):
                    x = step(x).block_until_ready()
    else:
        jax.profiler.start_trace(sys.argv[1])
        for i in range(STEPS):
            with jax.profiler.StepTraceAnnotation("train", step_num=i):
                x = step(x).block_until_ready()
        jax.profiler.stop_trace()
""")


@pytest.mark.parametrize("how", ["context", "start_trace"])
def test_capture_of_a_self_tracing_script_reports_its_own_steps(tmp_path, how):
    """The script traces its steps itself (jax.profiler.trace / start_trace into its own folder): the report is
    of that trace, with the script's 6 steps and its step program, not tracekit's trace of the warm-up."""
    (tmp_path / "selftrace.py").write_text(SELF_TRACING)
    p = run_cli("capture", "--logdir", "tk", "-o", "r.json", "--", sys.executable, "selftrace.py", "own", "6", how,
                cwd=tmp_path, timeout=240)
    assert p.returncode == 0, p.stderr
    assert "the script traced itself" in p.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    own = list((tmp_path / "own" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert [(tmp_path / i["path"]).resolve() for i in data["inputs"]] == [own[0].resolve()]  # the script's trace
    assert data["summary"]["steps"] == 6  # the number of steps the script ran under its trace
    assert {r["module"] for r in data["top_ops"]} == {"jit_train_step"}  # no warm-up program in the window
    assert any("the script traced itself" in w for w in data["warnings"])
