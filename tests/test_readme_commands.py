"""The README is a manual whose every marked command still runs, from a fresh copy of the checkout.

Markers: an HTML comment right before a fenced block, ``<!-- readme-test[: WORDS] -->``. WORDS (shell-quoted):

* ``exit=N``: the exit status the block must end with (default 0);
* ``columns=N``: the terminal width the block runs at (default 100);
* ``expect="TEXT"`` (repeatable): TEXT must be in the block's output (stdout and stderr together);
* ``install``: the README's first command (make a venv, ``pip install -e .``, then a tracekit command): see below;
* ``ci``: not run here (it is the whole test suite): each of its ``&&``-joined commands must be one that ``.ci/run``
  runs, so CI runs exactly what the README says.

The fence's language says how a block runs: ``bash`` as a bash script (``set -e``), ``python`` through the copy's
Python, and ``text`` as a transcript: each ``$ COMMAND`` line is run and the lines under it must appear in its output
in the same order, each group of lines between ``...`` lines as consecutive lines (so the README's sample output is
the real output of a shipped fixture, not a copy that drifts).

Every block runs in one copy of the checkout (its tracked and untracked-but-not-ignored files), with no network.
The ``install`` block runs as written except for two offline substitutions, so nothing is installed into the test's
own environment and nothing is downloaded: the venv is made ``--without-pip`` and sees the test environment's
packages through a ``.pth`` file (with a ``pip`` that runs the test environment's pip *for the new venv*), and
``pip install -e .`` becomes ``pip install --no-index --no-deps --no-build-isolation -e .`` (the build backend
``setuptools>=77`` comes from the ``test`` extra). The test then checks that the venv's ``tracekit`` command runs the
copy's code; the other blocks run in that venv. Without setuptools>=77 the install check is skipped (saying so)
and the other blocks run with the copy on ``PYTHONPATH``.

The same markers work in ``docs/*.md`` (their sample outputs run here too, so they cannot drift either).

Besides the commands: the README stays within 350 lines and 25 KB, every link to a file or an anchor resolves
inside the repository, and no path in it points outside the repository.
"""
from __future__ import annotations

import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TEXT = README.read_text(encoding="utf-8")
MAX_LINES, MAX_BYTES = 350, 25_000
TIMEOUT_S = 300

_MARK = re.compile(r"^<!-- readme-test(?::(?P<words>[^\n]*?))?\s*-->\n```(?P<lang>\w*)\n(?P<body>.*?)\n```$",
                   re.S | re.M)


@dataclass
class Block:
    line: int
    lang: str
    body: str
    doc: str = "README.md"
    exit: int = 0
    columns: int = 100
    expect: list = field(default_factory=list)
    flags: set = field(default_factory=set)

    @property
    def id(self) -> str:
        first = self.body.strip().splitlines()[0].lstrip("$ ")
        return f"{self.doc}:{self.line}:{first[:40]}"


def blocks(text: str = TEXT, doc: str = "README.md") -> list[Block]:
    out = []
    for m in _MARK.finditer(text):
        b = Block(text.count("\n", 0, m.start()) + 1, m["lang"], m["body"], doc)
        for w in shlex.split(m["words"] or ""):
            key, _, value = w.partition("=")
            if key == "exit":
                b.exit = int(value)
            elif key == "columns":
                b.columns = int(value)
            elif key == "expect":
                b.expect.append(value)
            elif key in ("install", "ci") and not value:
                b.flags.add(key)
            else:
                raise ValueError(f"{doc} line {b.line}: unknown readme-test word {w!r}")
        out.append(b)
    return out


BLOCKS = blocks()
DOC_BLOCKS = [b for path in sorted((ROOT / "docs").glob("*.md"))
              for b in blocks(path.read_text(encoding="utf-8"), f"docs/{path.name}")]


# ---- the copy and the environment the commands run in ---------------------------------------------------------

def _copy_checkout(dest: Path) -> None:
    try:
        files = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=ROOT, check=True,
                               capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):  # not a git checkout (an sdist): copy what is there
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".git", ".venv", ".ci-venv", "__pycache__", "*.so",
                                                                  "*.egg-info", "build"))
        return
    for rel in filter(None, files):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def _setuptools_ok() -> bool:
    try:
        major = int(importlib.metadata.version("setuptools").split(".")[0])
    except (importlib.metadata.PackageNotFoundError, ValueError):
        return False
    return major >= 77


@dataclass
class Fresh:
    repo: Path
    env: dict
    venv: bool
    install: subprocess.CompletedProcess | None = None


def _run(cmd, fresh: Fresh, stdin: str | None = None, columns: int = 100) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=fresh.repo, env=dict(fresh.env, COLUMNS=str(columns)), input=stdin,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def _install(fresh: Fresh, block: Block) -> subprocess.CompletedProcess:
    """The README's install line, offline (module docstring)."""
    head = "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && "
    body = block.body.strip()
    assert body.startswith(head), f"the install line no longer starts with {head!r}: update this test"
    venv = fresh.repo / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT_S)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    paths = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "readme-test-deps.pth").write_text("".join(p + "\n" for p in paths))
    pip = venv / "bin" / "pip"
    pip.write_text('#!/bin/sh\nexec "$(dirname "$0")/python" -m pip "$@"\n')
    pip.chmod(0o755)
    script = (". .venv/bin/activate && pip install -q --no-index --no-deps --no-build-isolation -e . && "
              + body[len(head):])
    return _run(["bash", "-c", script], fresh)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory) -> Fresh:
    repo = tmp_path_factory.mktemp("readme") / "tracekit"
    repo.mkdir()
    _copy_checkout(repo)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith(("PIP_", "TRACEKIT_"))}
    env.update(COLUMNS="100", NO_COLOR="1", TERM="dumb", JAX_PLATFORMS="cpu", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INPUT="1", TRACEKIT_CACHE_DIR=str(repo.parent / "cache"),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    f = Fresh(repo, env, venv=_setuptools_ok())
    if f.venv:
        (install,) = [b for b in BLOCKS if "install" in b.flags]
        f.install = _install(f, install)
        if (repo / ".venv" / "bin" / "tracekit").exists():
            env["VIRTUAL_ENV"] = str(repo / ".venv")
            env["PATH"] = os.pathsep.join([str(repo / ".venv" / "bin"), env["PATH"]])
    else:
        env["PYTHONPATH"] = str(repo)
    return f


def _output(p: subprocess.CompletedProcess) -> str:
    return p.stdout + p.stderr


def _check(block: Block, p: subprocess.CompletedProcess, what: str) -> None:
    out = _output(p)
    assert p.returncode == block.exit, f"{block.doc} line {block.line}: {what} exited {p.returncode}:\n{out[-4000:]}"
    for text in block.expect:
        assert text in out, f"{block.doc} line {block.line}: {what}: {text!r} not in its output:\n{out[-4000:]}"


def _transcript(body: str) -> list[tuple[str, list[list[str]]]]:
    """``$ cmd`` lines and, under each, its expected lines in groups split at ``...``."""
    out = []
    for line in body.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], [[]]))
        elif line.strip() == "...":
            out[-1][1].append([])
        else:
            out[-1][1][-1].append(line.rstrip())
    return out


def _in_order(groups: list[list[str]], actual: list[str]) -> str | None:
    """None when every group is a run of consecutive lines of ``actual``, the groups in order; else the group
    that is missing."""
    at = 0
    for g in filter(None, groups):
        for i in range(at, len(actual) - len(g) + 1):
            if actual[i:i + len(g)] == g:
                at = i + len(g)
                break
        else:
            return "\n".join(g)
    return None


@pytest.mark.parametrize("block", [b for b in BLOCKS + DOC_BLOCKS if not b.flags], ids=lambda b: b.id)
def test_readme_command(block: Block, fresh: Fresh):
    if block.lang == "python":
        _check(block, _run(["python", "-"], fresh, stdin=block.body + "\n", columns=block.columns), "the Python block")
    elif block.lang == "bash":
        _check(block, _run(["bash", "-ec", block.body], fresh, columns=block.columns), "the command")
    elif block.lang == "text":
        for cmd, groups in _transcript(block.body):
            p = _run(["bash", "-c", cmd], fresh, columns=block.columns)
            _check(block, p, f"`{cmd}`")
            missing = _in_order(groups, [ln.rstrip() for ln in _output(p).splitlines()])
            assert missing is None, (f"{block.doc} line {block.line}: `{cmd}` no longer prints\n{missing}\n"
                                     f"(re-run it with COLUMNS={block.columns} and paste its real output); "
                                     f"it printed:\n{_output(p)[-6000:]}")
    else:
        pytest.fail(f"{block.doc} line {block.line}: a readme-test block is bash, python or text, not {block.lang!r}")


def test_readme_install_line(fresh: Fresh):
    """The first command: a venv, `pip install -e .`, a report of a shipped fixture (offline; module docstring)."""
    (block,) = [b for b in BLOCKS if "install" in b.flags]
    assert block is BLOCKS[0], "the install line is the README's first command"
    if not fresh.venv:
        pytest.skip("setuptools>=77 (the `test` extra) is not installed: the offline install cannot build")
    _check(block, fresh.install, "the install line")
    where = _run(["python", "-c", "import tracekit, shutil; print(tracekit.__file__, shutil.which('tracekit'))"],
                 fresh)
    module, script = where.stdout.split()
    assert Path(module).resolve().is_relative_to(fresh.repo.resolve()), where.stdout
    assert Path(script).resolve().is_relative_to((fresh.repo / ".venv").resolve()), where.stdout


def test_readme_test_command_is_what_ci_runs():
    (block,) = [b for b in BLOCKS if "ci" in b.flags]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")

    def norm(cmd: str) -> str:
        return " ".join(w for w in shlex.split(cmd.strip().removeprefix("python -m ")) if w != "-q")

    ci_cmds = {norm(line) for line in ci.splitlines() if line.strip() and not line.startswith("#")}
    for cmd in block.body.strip().split("&&"):
        assert norm(cmd) in ci_cmds, f"{block.doc} line {block.line}: `{cmd.strip()}` is not what .ci/run runs"


def test_readme_marks_the_first_commands():
    """The README opens with the install-and-analyze line and the test command; each kind of block is marked."""
    assert "install" in BLOCKS[0].flags and "ci" in BLOCKS[1].flags
    assert {b.lang for b in BLOCKS} >= {"bash", "python", "text"}
    assert sum(1 for b in BLOCKS if b.lang == "text" and "tracekit analyze fixtures/" in b.body) >= 1


def test_readme_length():
    assert len(TEXT.splitlines()) <= MAX_LINES and len(TEXT.encode("utf-8")) <= MAX_BYTES


# ---- links and paths ---------------------------------------------------------------------------------------------

def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(md: str) -> set[str]:
    md = re.sub(r"^```.*?^```", "", md, flags=re.S | re.M)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.*)$", md, flags=re.M)}


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _bad_links(md: Path) -> list[str]:
    bad = []
    for target in _LINK.findall(md.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        doc = (md.parent / path).resolve() if path else md.resolve()
        if not doc.is_relative_to(ROOT) or not doc.exists():
            bad.append(target)
        elif anchor and doc.suffix == ".md" and anchor not in _anchors(doc.read_text(encoding="utf-8")):
            bad.append(target)
    return bad


def test_every_link_resolves_inside_the_repository():
    """The README's links and anchors, and those of the docs it sends readers to."""
    assert _bad_links(README) == []
    assert {p.name: _bad_links(p) for p in (ROOT / "docs").glob("*.md") if _bad_links(p)} == {}


def test_no_path_outside_the_repository():
    assert "../" not in TEXT and "](/" not in TEXT
    assert not re.search(r"(?<![\w.])/(work|tmp|home|root|Users)/", TEXT)
    assert "shared/traces" not in TEXT
    top = {p.name for p in ROOT.iterdir()}
    missing = [t for t in re.findall(r"`([\w.-]+(?:/[\w.-]+)+/?)`", TEXT)
               if t.split("/")[0] in top and not (ROOT / t).exists()]
    assert missing == []


def test_markers_parse():
    """The parser itself, on a made-up README: words, languages, transcripts, ordered groups."""
    sample = ('x\n<!-- readme-test: exit=2 expect="a b" expect=c -->\n```text\n$ one\nl1\nl2\n...\nl3\n$ two\n```\n'
              '<!-- readme-test -->\n```bash\necho hi\n```\n')
    (a, b) = blocks(sample)
    assert (a.line, a.lang, a.exit, a.expect, b.lang, b.exit) == (2, "text", 2, ["a b", "c"], "bash", 0)
    assert _transcript(a.body) == [("one", [["l1", "l2"], ["l3"]]), ("two", [[]])]
    assert _in_order([["l1", "l2"], ["l3"]], ["h", "l1", "l2", "x", "l3"]) is None
    assert _in_order([["l1", "l2"]], ["l1", "x", "l2"]) == "l1\nl2"
    assert _in_order([["l3"], ["l1"]], ["l1", "l3"]) == "l1"
    with pytest.raises(ValueError):
        blocks("<!-- readme-test: bogus -->\n```bash\nx\n```\n")
