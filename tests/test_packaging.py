"""A wheel holds only the packages pyproject.toml lists: every package folder under tracekit/ must be listed."""
from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_package_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "tracekit").rglob("__init__.py")}
    assert found - listed == set(), f"add to [tool.setuptools] packages: {sorted(found - listed)}"
    missing = {p for p in listed - found if p not in cfg.get("package-dir", {})}
    assert missing == set(), f"listed but not a package folder: {sorted(missing)}"
