"""The layout's rules, checked from the source itself (no tracekit module is imported here): the AST of every
``.py`` under ``tracekit/``, including the code of programs kept in string constants (``python -c``).

* no import cycles, lazy imports inside functions included;
* imports only go down the stages: spine <- ingest <- model <- analysis <- report <- pipeline <- run <- cli;
* no ``_private`` name of another tracekit module, whether imported or reached as an attribute of an imported
  module (a package's own private submodule is its own);
* no re-export shims: a tracekit name a module imports at its top is used there (package ``__init__`` files,
  the public faces, excepted);
* the top of ``tracekit/`` holds the stage packages and the spine only.
"""
from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PKG = ROOT / "tracekit"
STAGES = ("ingest", "model", "analysis", "report", "run", "cli")
#: the modules at the top of tracekit/ that every stage may use (besides the generated ``proto`` package)
SPINE = ("errors", "units", "schema", "columns", "grouping", "fileio", "threads", "collector", "progress", "version",
         "artefacts", "options", "records")
#: import layers: a module may import its own layer and those below it
LAYER = {"proto": 0, **{m: 0 for m in SPINE}, "ingest": 1, "model": 2, "analysis": 3, "report": 4, "pipeline": 5,
         "run": 6, "cli": 7}


def _where(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = list(p.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()
#: compiled extensions (no .py source): modules too
EXTENSIONS = {".".join(p.relative_to(ROOT).parts[:-1] + (p.name.split(".")[0],))
              for p in PKG.rglob("*.so")} | {"tracekit.ingest.wirec",
                                             "tracekit.analysis.replay.walkc"}  # (built or not)


def _is_module(name: str) -> bool:
    return name in MODULES or name in EXTENSIONS


def _trees(path: Path) -> list[ast.AST]:
    """The module's AST and the ASTs of string constants in it that are Python programs with imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = [tree]
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "import" in node.value:
            try:
                sub = ast.parse(node.value)
            except SyntaxError:
                continue
            if any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(sub)):
                out.append(sub)
    return out


def _imports(name: str, path: Path):
    """(imported module, imported names or None, node) for every tracekit import of the module, at any depth."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for tree in _trees(path):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "tracekit":
                        yield a.name, None, node
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against this module's package
                    up = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if base.split(".")[0] != "tracekit":
                    continue
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    yield (sub, None, node) if _is_module(sub) else (base, a.name, node)


def _graph() -> dict[str, set[str]]:
    return {name: {m for m, _, _ in _imports(name, path) if m != name} for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_one():
    """(The check above can fail.)"""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYER.get(parts[1]) if len(parts) > 1 else None


def test_imports_only_go_down_the_stages():
    bad = []
    for name, path in MODULES.items():
        if name == "tracekit":
            continue  # the public face resolves load/Trace/capture/profile lazily from the stages
        for target, _, node in _imports(name, path):
            if target == "tracekit":
                bad.append(f"{_where(path)}:{node.lineno} imports the package face `tracekit`")
            elif _layer(target) is not None and _layer(target) > _layer(name):
                bad.append(f"{_where(path)}:{node.lineno} imports {target} (a later stage)")
    assert bad == []


def _private_uses(name: str, path: Path) -> list[str]:
    out = []
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for tree in _trees(path):
        bound: dict[str, str] = {}  # local name -> tracekit module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "tracekit":
                        bound[a.asname or "tracekit"] = a.name if a.asname else "tracekit"
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tracekit":
                for a in node.names:
                    sub = f"{node.module}.{a.name}"
                    private = a.name.startswith("_") and not a.name.startswith("__")
                    own_submodule = _is_module(sub) and node.module == pkg
                    if private and node.module != name and not own_submodule:
                        out.append(f"{_where(path)}:{node.lineno} from {node.module} import {a.name}")
                    if _is_module(sub):
                        bound[a.asname or a.name] = sub
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            chain, v = [node.attr], node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if not isinstance(v, ast.Name) or v.id not in bound:
                continue
            mod = bound[v.id]
            for attr in reversed(chain):  # walk down the dotted name while it names modules
                if attr.startswith("_") and not attr.startswith("__") and mod != name:
                    out.append(f"{_where(path)}:{node.lineno} {mod}.{attr}")
                    break
                if not _is_module(f"{mod}.{attr}"):
                    break
                mod = f"{mod}.{attr}"
    return out


def test_no_private_names_of_other_modules():
    bad = [u for name, path in MODULES.items() for u in _private_uses(name, path)]
    assert bad == []


def test_the_private_name_finder_finds_them(tmp_path):
    """(The check above can fail: an import, an attribute of an imported module, and code in a string.)"""
    src = tmp_path / "probe.py"
    src.write_text("from tracekit.ingest.trace import _host\nfrom tracekit.ingest import trace\n"
                   "import tracekit.analysis.intervals as iv\n"
                   "def f():\n    return trace._sorted, iv.DeviceIndex, iv._groups\n"
                   "CODE = 'from tracekit.run.hook import _analysis_main; _analysis_main()'\n")
    found = _private_uses("tracekit.probe", src)
    assert len(found) == 4 and all("probe.py" in f for f in found)
    assert {f.split(" ", 1)[1] for f in found} == {"from tracekit.ingest.trace import _host",
                                                  "tracekit.ingest.trace._sorted",
                                                  "tracekit.analysis.intervals._groups",
                                                  "from tracekit.run.hook import _analysis_main"}


def test_no_reexport_shims():
    """Every tracekit name a module imports at its top is used in it: nothing is imported only to be found
    there by others (package ``__init__`` files, the public faces, may hand names on)."""
    bad = []
    for name, path in MODULES.items():
        if path.name == "__init__.py" or name.startswith("tracekit.proto"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tracekit":
                for a in node.names:
                    local = a.asname or a.name
                    if local not in used:
                        bad.append(f"{_where(path)}:{node.lineno} imports {local} and never uses it")
    assert bad == []


def test_top_level_holds_the_stages_and_the_spine():
    top = {p.name for p in PKG.iterdir() if not p.name.startswith((".", "__pycache__"))}
    packages = {p for p in top if (PKG / p).is_dir()}
    modules = {p[:-3] for p in top if p.endswith(".py")}
    assert packages == {*STAGES, "proto"}
    assert modules == {"__init__", "pipeline", *SPINE}
    assert top == packages | {m + ".py" for m in modules}
    for stage in STAGES:
        assert (PKG / stage / "__init__.py").read_text().startswith('"""'), f"{stage} says what the stage is"


def test_docs_architecture_names_the_stages_and_the_spine():
    """docs/architecture.md's "Architecture" section maps every stage package and names the spine."""
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("\n## Architecture\n", 1)[1].split("\n## ", 1)[0]
    missing = [f"{stage}/" for stage in STAGES if f"`{stage}/`" not in section]
    missing += [m for m in ("pipeline", *SPINE) if f"`{m}`" not in section]
    assert missing == []


def test_no_pandas_query_or_eval():
    """Nothing in tracekit calls ``DataFrame.query``/``.eval`` or ``pandas.eval``: rule expressions go through
    tracekit.analysis.rule_expr (pandas' python engine ran arbitrary code, and on threads it failed now and then in
    CI with ``SystemError: AST constructor recursion depth mismatch``)."""
    calls = [f"{_where(path)}:{node.lineno}" for path in MODULES.values() for tree in _trees(path)
             for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr in ("query", "eval")]
    assert calls == []


# ---- one engine (issue 34) ---------------------------------------------------------------------------------------

ENGINE = PKG / "report" / "engine"


def _defs(path: Path) -> dict:
    """A module's top-level functions, classes and assigned names -> their nodes."""
    out = {}
    for n in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(n, (ast.FunctionDef, ast.ClassDef)):
            out[n.name] = n
        elif isinstance(n, ast.Assign):
            out.update({t.id: n for t in n.targets if isinstance(t, ast.Name)})
    return out


def test_exactly_one_module_builds_the_report():
    """The report envelope (its schema) is assembled in one module, the engine's reduce; no other module builds a
    Report from an analysis (a Report read back from its JSON takes one argument); each section is one module of
    the engine with NAME, summarize and reduce, registered once."""
    schema_in = [name for name, path in MODULES.items() if '"tracekit.report/1"' in path.read_text(encoding="utf-8")]
    assert schema_in == ["tracekit.report.engine.reduce"]
    built = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "Report" \
                    and (len(node.args) > 1 or node.keywords):
                built.append(name)
    assert built == ["tracekit.report.engine.reduce"]
    init = ast.parse((ENGINE / "__init__.py").read_text(encoding="utf-8"))
    (sections,) = [ast.literal_eval(n.value) for n in init.body if isinstance(n, ast.Assign)
                   and any(getattr(t, "id", "") == "SECTIONS" for t in n.targets)]
    assert len(set(sections)) == len(sections)
    names = []
    for s in sections:
        d = _defs(ENGINE / f"{s}.py")
        assert {"NAME", "summarize", "reduce"} <= set(d), s
        names.append(ast.literal_eval(d["NAME"].value))
    assert len(set(names)) == len(names)


def test_the_second_engine_and_the_old_loader_are_gone():
    run = PKG / "run"
    assert not (run / "podreduce.py").exists() and not (run / "podreport.py").exists()
    assert "build" not in _defs(PKG / "report" / "envelope.py")
    assert not (run / "hosts.py").exists()
    for name, path in MODULES.items():
        d = _defs(path)
        assert "load_parts" not in d, name
        assert not (name.endswith(".hosts") and "load" in d), name


def _option_names() -> set:
    tree = ast.parse((PKG / "options.py").read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Options"]
    return {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign)}


def _from_options(node, aliases: set) -> bool:
    """A default that is None or names a value of tracekit.options (``DEFAULTS.x``, ``options.DEFAULTS.x``, a
    name imported from it)."""
    if isinstance(node, ast.Constant) and node.value is None:
        return True
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id in aliases


def option_defaults(path: Path, options: set) -> list[str]:
    """Where a module outside tracekit/options.py gives an option (a field of Options) a default of its own: a
    function parameter or a click option named like one, with a default that is not None and not taken from
    tracekit.options."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "tracekit.options":
            aliases |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module == "tracekit":
            aliases |= {a.asname or a.name for a in node.names if a.name == "options"}
        elif isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "tracekit.options" and a.asname}
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = node.args
            pos = a.posonlyargs + a.args
            pairs = list(zip(pos[len(pos) - len(a.defaults):], a.defaults)) + \
                [(k, d) for k, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None]
            for arg, default in pairs:
                if arg.arg in options and not _from_options(default, aliases):
                    bad.append(f"{_where(path)}:{node.lineno} {getattr(node, 'name', 'lambda')}({arg.arg}=...)")
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "option":
            flags = [c.value for c in node.args if isinstance(c, ast.Constant) and isinstance(c.value, str)]
            dest = next((f for f in flags if not f.startswith("-")), None) or \
                next((f.lstrip("-").replace("-", "_") for f in flags if f.startswith("--")), "")
            for kw in node.keywords:
                if kw.arg == "default" and dest in options and not _from_options(kw.value, aliases):
                    bad.append(f"{_where(path)}:{node.lineno} --{dest} default")
    return bad


#: parameters named like an option that are not one: the pure-Python decoder mirrors the C decoder's signature,
#: where -1 means "no limit" (tracekit.ingest.wirec.read_space)
NOT_OPTIONS = {"tracekit/ingest/pywire.py read_space(max_events=...)"}


def test_no_option_default_outside_the_options_module():
    options = _option_names()
    assert {"chip", "hidden", "fail_on", "max_evidence", "jobs"} <= options
    bad = [b for name, path in MODULES.items() if name != "tracekit.options" for b in option_defaults(path, options)]
    assert [b for b in bad if f"{b.split(':')[0]} {b.split(' ', 1)[1]}" not in NOT_OPTIONS] == []


def test_the_option_default_finder_finds_them(tmp_path):
    """(The check above can fail: a parameter, a keyword-only parameter and a click option.)"""
    src = tmp_path / "probe.py"
    src.write_text("import click\nfrom tracekit.options import DEFAULTS\n"
                   "def f(x, hidden=0.9, chip=None, exposed=DEFAULTS.exposed, *, fail_on='never'):\n    pass\n"
                   "opt = click.option('--max-evidence', default=10)\nok = click.option('--jobs', default=DEFAULTS.jobs)\n")
    found = option_defaults(src, _option_names())
    assert [f.split(" ", 1)[1] for f in found] == ["f(hidden=...)", "f(fail_on=...)", "--max_evidence default"]
