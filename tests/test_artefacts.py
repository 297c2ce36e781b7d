"""tracekit's cached artefact of its built-in YAML files: read back instead of parsed, keyed by the files' contents,
never holding what JSON cannot hold unchanged, off with TRACEKIT_NO_CACHE."""
from __future__ import annotations

import math

import pytest

from tracekit import artefacts
from tracekit.analysis import rule_model


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACEKIT_NO_CACHE", raising=False)
    return tmp_path / "cache"


def _no_parsing(monkeypatch):
    def refuse(path, text):
        raise AssertionError(f"{path} parsed although the cache holds it")
    monkeypatch.setattr(artefacts, "parse_yaml", refuse)


def test_builtin_rules_come_from_the_cache_the_second_time(cache, monkeypatch):
    rule_model.forget_parsed()  # (as a new process starts: nothing parsed yet)
    first = rule_model.load_rules()
    assert len(list(cache.glob("rules-*.json"))) == 1
    _no_parsing(monkeypatch)
    rule_model.forget_parsed()
    second = rule_model.load_rules()
    same = [repr((r.id, r.params, r.cases, r.where, r.savings)) for r in first]  # repr: NaN in cases equals NaN
    assert [repr((r.id, r.params, r.cases, r.where, r.savings)) for r in second] == same


def test_an_edited_file_gets_a_new_entry_and_nan_survives(cache, tmp_path, monkeypatch):
    f = tmp_path / "a.yaml"
    f.write_text("x: .nan\ny: [1, 2]\n")
    assert math.isnan(artefacts.yaml_docs([f], "t")[0]["x"])
    f.write_text("x: 3\n")
    assert artefacts.yaml_docs([f], "t") == [{"x": 3}]  # not the stale entry
    assert len(list(cache.glob("t-*.json"))) == 2
    _no_parsing(monkeypatch)
    assert artefacts.yaml_docs([f], "t") == [{"x": 3}]


def test_what_json_cannot_hold_is_not_cached(cache, tmp_path):
    f = tmp_path / "b.yaml"
    f.write_text("1: one\nwhen: 2024-01-02\n")  # a number key and a date
    doc = artefacts.yaml_docs([f], "t")[0]
    assert doc[1] == "one" and str(doc["when"]) == "2024-01-02"
    assert not list(cache.glob("t-*.json"))


def test_no_cache_when_turned_off(cache, tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKIT_NO_CACHE", "1")
    f = tmp_path / "c.yaml"
    f.write_text("x: 1\n")
    assert artefacts.yaml_docs([f], "t") == [{"x": 1}]
    assert not cache.exists()


def test_invalid_yaml_is_a_clear_error(cache, tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text("x: [1, 2\n")
    with pytest.raises(artefacts.YamlError) as e:
        artefacts.yaml_docs([f], "t")
    assert e.value.path == f
