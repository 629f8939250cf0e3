"""System names, selection parsing and "skipped: not installed"."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from bench.errors import SystemUnavailable
from bench.systems import registry
from bench.systems.base import SystemContext, SystemName
from bench.systems.registry import SPECS, build, parse_systems


def test_every_system_has_a_spec() -> None:
    assert set(SPECS) == set(SystemName)


def test_parse_keeps_order_and_drops_duplicates() -> None:
    assert parse_systems("bm25s, tantivy,bm25s") == (SystemName.BM25S, SystemName.TANTIVY)
    assert parse_systems(None) == tuple(SystemName)
    assert parse_systems("all") == tuple(SystemName)


def test_unknown_system_lists_the_valid_names() -> None:
    with pytest.raises(ValueError, match="tandem-hybrid"):
        parse_systems("elasticsearch")


def test_missing_package_makes_the_system_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "txtai" else real(name)
    )
    assert registry.missing_requirements(SystemName.TXTAI_HYBRID) == ["txtai"]
    ctx = SystemContext(tmp_path, "all-MiniLM-L6-v2", lambda: pytest.fail("no encoder"))
    with pytest.raises(SystemUnavailable, match="not installed: txtai"):
        build(SystemName.TXTAI_HYBRID, ctx)


def test_model_use_is_declared_for_vector_systems() -> None:
    assert SPECS[SystemName.FAISS_FLAT].uses_model
    assert SPECS[SystemName.TANDEM_HYBRID].uses_vectors
    assert not SPECS[SystemName.TANDEM_HYBRID].embeds_queries  # Tandem embeds itself
    assert not SPECS[SystemName.TANTIVY].uses_model
    assert {s for s in SystemName if SPECS[s].peer} == {
        SystemName.GLUE,
        SystemName.LANCEDB_HYBRID,
        SystemName.TXTAI_HYBRID,
    }
