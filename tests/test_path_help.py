"""Issue 38: the --help of every command that takes a trace path says what the path may be."""
from __future__ import annotations

import click
from click.testing import CliRunner

from tracekit.cli.app import main


def _commands(group, prefix=()):
    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, prefix + (name,))
        else:
            yield prefix + (name,), cmd


def test_every_path_command_says_what_path_may_be():
    checked = 0
    for words, cmd in _commands(main):
        args = [p.name for p in cmd.params if isinstance(p, click.Argument)]
        if "path" not in args and "base" not in args:
            continue
        out = CliRunner().invoke(main, [*words, "--help"], env={"COLUMNS": "200"}).output
        flat = " ".join(out.split())
        assert ("PATH: a trace file" in flat) if "path" in args else ("BASE and NEW: each a trace file" in flat), words
        assert "a run folder" in flat and "a logdir" in flat and "a folder above one logdir" in flat, words
        checked += 1
    assert checked >= 8, checked
