"""How many threads the decoder uses: TRACEKIT_THREADS when it is a number, else the CPUs (at most 8)."""
import os

from tracekit import threads


def test_setting_wins_when_readable(monkeypatch):
    monkeypatch.setenv("TRACEKIT_THREADS", "3")
    assert threads.default_threads() == 3
    monkeypatch.setenv("TRACEKIT_THREADS", "0")  # at least one
    assert threads.default_threads() == 1


def test_unreadable_setting_falls_back_to_the_cpus(monkeypatch):
    monkeypatch.setenv("TRACEKIT_THREADS", "junk")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    assert threads.default_threads() == max(1, min(cpus, 8))
    monkeypatch.delenv("TRACEKIT_THREADS")
    assert threads.default_threads() == max(1, min(cpus, 8))
