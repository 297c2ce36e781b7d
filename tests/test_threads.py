"""How many threads a stage's pool gets: none on small traces, bounded by TRACEKIT_THREADS on large ones."""
from tracekit import threads


def test_small_inputs_run_without_a_pool(monkeypatch):
    monkeypatch.setenv("TRACEKIT_THREADS", "8")
    assert threads.pool_threads(0) == 1
    assert threads.pool_threads(threads.SMALL_ROWS - 1) == 1


def test_large_inputs_are_bounded_by_the_setting_and_the_stage(monkeypatch):
    monkeypatch.setenv("TRACEKIT_THREADS", "8")
    assert threads.pool_threads(threads.SMALL_ROWS) == 2          # the stage's own bound
    assert threads.pool_threads(threads.SMALL_ROWS, most=4) == 4
    monkeypatch.setenv("TRACEKIT_THREADS", "1")                  # the hook's child: one thread
    assert threads.pool_threads(10 * threads.SMALL_ROWS, most=4) == 1
    monkeypatch.setenv("TRACEKIT_THREADS", "junk")                # unreadable: the CPUs this process may use
    assert 1 <= threads.pool_threads(threads.SMALL_ROWS) <= 2
