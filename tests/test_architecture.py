"""The layout's rules, checked from the source itself (no tracekit module is imported here): the AST of every
``.py`` under ``tracekit/``, including the code of programs kept in string constants (``python -c``).

* no import cycles, lazy imports inside functions included;
* imports only go down the stages: spine <- ingest <- model <- analysis <- report <- pipeline <- run <- cli;
* no ``_private`` name of another tracekit module, whether imported or reached as an attribute of an imported
  module (a package's own private submodule, such as the C decoder ``tracekit.ingest._wire``, is its own);
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
         "artefacts", "options")
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
              for p in PKG.rglob("*.so")} | {"tracekit.ingest._wire"}


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


def test_readme_architecture_names_the_stages_and_the_spine():
    """The README's "Architecture" section maps every stage package and names the spine."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
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
