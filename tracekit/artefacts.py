"""tracekit's own compiled artefacts: its built-in YAML files (the rules in ``rules/``, the chip table) parsed once
and kept as JSON in a cache folder, keyed by tracekit's version and the files' exact contents.

A later run reads one small JSON file (about a millisecond) instead of importing a YAML parser and parsing every
file (about 70 ms of each command's start). The key is tracekit's, never an input trace's: nothing of a trace is
kept, and a changed rule file (a new tracekit, an edited checkout) simply gets a new entry. Documents that do not
survive a JSON round trip unchanged are not cached. Folder: ``$TRACEKIT_CACHE_DIR``, else
``$XDG_CACHE_HOME/tracekit``, else ``~/.cache/tracekit``; ``TRACEKIT_NO_CACHE=1`` turns the cache off; a folder
that cannot be written means no cache, never an error.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tracekit.version import __version__

#: bumped when what is cached (or how it is keyed) changes
FORMAT = 1


class YamlError(ValueError):
    """A file that is not valid YAML: ``path`` and the parser's first line."""

    def __init__(self, path: Path, message: str):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message


def cache_dir() -> Path | None:
    """Where artefacts are kept (None: the cache is off)."""
    if os.environ.get("TRACEKIT_NO_CACHE", "") not in ("", "0"):
        return None
    if os.environ.get("TRACEKIT_CACHE_DIR"):
        return Path(os.environ["TRACEKIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tracekit"


#: why a file with an anchor or alias is refused, and what to do (YamlError's message)
NO_ALIASES = ("YAML anchors and aliases (&name, *name, <<: *name) are not allowed in tracekit's YAML files "
              "(a few lines of them can stand for billions of values); write each value out in full")


class AliasRefused(Exception):
    """An anchor or alias event: raised by :func:`plain_loader`'s loader before any node is built."""

    def __init__(self, line: int):
        super().__init__(line)
        self.line = line


def _no_alias(event) -> None:
    import yaml
    if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
        raise AliasRefused(event.start_mark.line + 1)


_LOADER = None


def plain_loader():
    """A SafeLoader that refuses anchors and aliases (``&a``/``*a``, merge keys) where they are composed, so a
    "billion laughs" document is refused before it is expanded. libyaml composes in C, so there the events are
    read first (one pass, one event at a time, no node built) and the document composed only when none has an
    anchor or alias; the pure-Python loader checks each event as it composes it."""
    global _LOADER
    if _LOADER is None:
        import yaml
        if hasattr(yaml, "CSafeLoader"):
            class PlainLoader(yaml.CSafeLoader):
                def __init__(self, stream):
                    super().__init__(stream)
                    self.text = stream

                def get_single_data(self):
                    for event in yaml.parse(self.text, Loader=yaml.CSafeLoader):
                        _no_alias(event)
                    return super().get_single_data()
        else:
            class PlainLoader(yaml.SafeLoader):
                def compose_node(self, parent, index):
                    _no_alias(self.peek_event())
                    return super().compose_node(parent, index)
        _LOADER = PlainLoader
    return _LOADER


def parse_yaml(path: Path, text: str):
    """One YAML document (no cache): what user files go through; anchors and aliases refused
    (:func:`plain_loader`). Invalid YAML: :class:`YamlError`."""
    import yaml  # only when the cache cannot serve
    try:
        return yaml.load(text, Loader=plain_loader())
    except AliasRefused as e:
        raise YamlError(path, f"line {e.line}: {NO_ALIASES}") from None
    except yaml.YAMLError as e:
        raise YamlError(path, str(e).splitlines()[0]) from None
    except (ValueError, RecursionError, MemoryError) as e:  # e.g. an integer of more digits than Python converts
        raise YamlError(path, f"a value cannot be read ({type(e).__name__}: {str(e)[:120]})") from None


def _same(a, b) -> bool:
    """Equal values of equal types (NaN equals NaN): what a JSON round trip must give back."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b or (isinstance(a, float) and a != a and b != b)


def _store(target: Path, docs: list) -> None:
    try:
        text = json.dumps(docs)
        if not _same(json.loads(text), docs):  # a value JSON cannot hold as it is (a date, a number key): no cache
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)  # readers see the whole file or none
    except (OSError, TypeError, ValueError):
        pass


def yaml_docs(paths: list[Path], kind: str) -> list:
    """The parsed YAML document of each file in ``paths`` (in order), from the cache when it holds these exact
    files; ``kind`` names the entry (``rules``, ``chips``). Invalid YAML: :class:`YamlError`."""
    texts = [Path(p).read_text(encoding="utf-8") for p in paths]
    h = hashlib.sha256(f"{FORMAT}\0{__version__}".encode())
    for p, t in zip(paths, texts):
        h.update(b"\0" + Path(p).name.encode() + b"\0" + t.encode())
    folder = cache_dir()
    target = folder / f"{kind}-{h.hexdigest()[:32]}.json" if folder is not None else None
    if target is not None:
        try:
            docs = json.loads(target.read_text(encoding="utf-8"))
            if isinstance(docs, list) and len(docs) == len(paths):
                return docs
        except (OSError, ValueError):
            pass
    docs = [parse_yaml(Path(p), t) for p, t in zip(paths, texts)]
    if target is not None:
        _store(target, docs)
    return docs
