"""definitions.json: atomic replacement, absent vs corrupt."""

from __future__ import annotations

import os

import pytest
from hutch_broker.store import CorruptDefinitionsError, load_definitions, save_definitions

DEFINITIONS = {
    "vhosts": [{"name": "/"}, {"name": "v\u00e9\U0001f407"}],
    "queues": [{"name": "q", "vhost": "/", "durable": True, "arguments": {"x-max-length": 10}}],
    "policies": [],
}


def test_save_then_load(tmp_path):
    path = tmp_path / "definitions.json"
    save_definitions(path, DEFINITIONS)
    assert load_definitions(path) == DEFINITIONS
    save_definitions(path, {"vhosts": []})
    assert load_definitions(path) == {"vhosts": []}
    assert [p.name for p in tmp_path.iterdir()] == ["definitions.json"]  # no temp files left


def test_absent_file_is_none(tmp_path):
    assert load_definitions(tmp_path / "definitions.json") is None


@pytest.mark.parametrize(
    "content",
    [b"", b'{"vhosts": [', b"\xff\xfe{}", b"[1, 2]", b"null", b"{} trailing"],
    ids=["empty", "truncated", "not-utf8", "list", "null", "trailing"],
)
def test_corrupt_file_is_a_clear_error(tmp_path, content):
    path = tmp_path / "definitions.json"
    path.write_bytes(content)
    with pytest.raises(CorruptDefinitionsError, match=r"definitions\.json"):
        load_definitions(path)


def test_a_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "definitions.json"
    save_definitions(path, DEFINITIONS)

    def crash(*_args):
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="fire"):
        save_definitions(path, {"vhosts": []})
    monkeypatch.undo()

    assert load_definitions(path) == DEFINITIONS
    assert [p.name for p in tmp_path.iterdir()] == ["definitions.json"]


def test_unserialisable_definitions_leave_the_file_alone(tmp_path):
    path = tmp_path / "definitions.json"
    save_definitions(path, DEFINITIONS)
    with pytest.raises(TypeError):
        save_definitions(path, {"bad": object()})
    assert load_definitions(path) == DEFINITIONS
