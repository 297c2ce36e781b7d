import functools
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TRACEKIT_SHARED_TRACES", ROOT.parent / "shared" / "traces"))
FIXTURES = ROOT / "fixtures"
CPU_CASES = ("train_step", "sharded8", "allreduce_exposed", "matvec_b1", "sleepy_steps", "big_matmul")


#: set in CI (.ci/run), where ../shared/traces is always beside the clone: a missing third-party trace then fails
#: the test instead of skipping it, so the third-party checks cannot quietly stop running
REQUIRE_SHARED = os.environ.get("TRACEKIT_REQUIRE_SHARED", "") not in ("", "0")


def shared_missing(rel: str) -> None:
    """Skip the test (``rel`` is not under ../shared/traces), or fail it when TRACEKIT_REQUIRE_SHARED=1."""
    why = f"third-party trace {rel} not available ({SHARED} absent or incomplete)"
    if REQUIRE_SHARED:
        pytest.fail(why + "; TRACEKIT_REQUIRE_SHARED=1 makes it a failure (unset it where ../shared is not beside "
                    "the clone)", pytrace=False)
    pytest.skip(why)


def shared_trace(rel: str) -> Path:
    p = SHARED / rel
    if not p.exists():
        shared_missing(rel)
    return p


def cpu_fixture(case: str) -> Path:
    p = FIXTURES / "cpu" / case
    if not p.exists():
        pytest.skip(f"fixture {case} not captured")
    return p


def copied_hosts(tmp_path: Path, names, case: str = "allreduce_exposed") -> Path:
    """A run folder under ``tmp_path`` holding the one host file of CPU fixture ``case`` once per name in
    ``names`` (``<name>.xplane.pb``, in that order): a pod of identical hosts."""
    import shutil
    src = next((cpu_fixture(case) / "plugins" / "profile" / "run1").glob("*.xplane.pb"))
    run = tmp_path / "plugins" / "profile" / "run1"
    run.mkdir(parents=True)
    for name in names:
        shutil.copy(src, run / f"{name}.xplane.pb")
    return run


#: the xdist group of the modules that read the default report of many traces through :func:`default_report`: one
#: worker runs them all, so each trace is analyzed once per session
REPORTS_GROUP = "default_reports"


@functools.lru_cache(maxsize=None)
def default_report(path: str):
    """``tracekit.pipeline.analyze(path)`` with the default options, once per process: the Report is shared by
    every test that reads it (none changes it), in the modules of :data:`REPORTS_GROUP`."""
    from tracekit import pipeline
    return pipeline.analyze(path)


def pytest_sessionstart(session):
    """Byte-compile tracekit's modules once, as ``pip install`` does for a regular install: an editable install
    writes no .pyc where PYTHONDONTWRITEBYTECODE is set (this machine and CI set it), and every command a test
    starts in a child process (the CLI, the hook's child, pool and Dask workers) would compile every module again
    (~0.2 CPU-s each). Up-to-date files are left as they are; the xdist workers find them done."""
    import compileall
    compileall.compile_dir(str(ROOT / "tracekit"), quiet=2)


@pytest.fixture
def v6e():
    return shared_trace("tpu/v6e-4_jax_inference.xplane.pb")


@pytest.fixture(autouse=True, scope="session")
def _isolated_calibration(tmp_path_factory):
    """Tests never read a developer's own `tracekit calibrate` result: CPU peaks come from the built-in estimate."""
    old = os.environ.get("TRACEKIT_HOME")
    os.environ["TRACEKIT_HOME"] = str(tmp_path_factory.mktemp("tracekit_home"))
    # captures made by the tests record their machine without spending seconds calibrating it
    os.environ.setdefault("TRACEKIT_MACHINE_CALIBRATE_S", "0")
    yield
    if old is None:
        os.environ.pop("TRACEKIT_HOME", None)
    else:
        os.environ["TRACEKIT_HOME"] = old


def varint(n: int) -> bytes:
    """Protobuf base-128 varint of ``n`` (two's complement for negatives), for tests that hand-craft wire bytes."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)
