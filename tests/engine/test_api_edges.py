"""The Python API as a newcomer meets it (a review's findings): documents that pickle,
"none" is no model name, a dict handed to ``add`` named as one, ``~`` in a path, and a
config built without validation refused before it is written."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from pathlib import Path

import pytest

from engine import CorpusConfig, Document, InvalidArgument, SearchEngine


def test_documents_pickle_and_deep_copy_with_their_fields() -> None:
    """Regression: ``fields`` defaults to a MappingProxyType, which does not pickle, so a
    Document could not cross a process pool or be deep-copied."""
    for doc in (
        Document(id="a"),
        Document(id="b", title="t", text="x", access_groups=frozenset({"g"}), fields={"y": 1}),
    ):
        for copied in (pickle.loads(pickle.dumps(doc)), copy.deepcopy(doc)):
            assert copied == doc and dict(copied.fields) == dict(doc.fields)
            assert copied.access_groups == doc.access_groups


@pytest.mark.parametrize("word", ["none", "off", " None "])
def test_a_word_for_no_model_is_refused_as_a_model_name(word: str) -> None:
    """Regression: ``embedder="none"`` made a hybrid corpus whose every document was
    degraded (the CLI and HTTP refused it; the Python API did not)."""
    with pytest.raises(ValueError, match="embedder=None"):
        CorpusConfig(name="a", embedder=word)  # type: ignore[arg-type]


def test_a_dict_given_to_add_is_named_as_one(tmp_path: Path) -> None:
    with SearchEngine(tmp_path) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        with pytest.raises(InvalidArgument, match=r"not a dict \(use Document\(\*\*d\)\)"):
            corpus.add({"id": "a", "text": "x"})  # type: ignore[arg-type]
        assert len(corpus) == 0


def test_a_path_under_home_is_the_homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: ``SearchEngine("~/x")`` made a directory named "~" where it ran."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with SearchEngine("~/engine") as engine:
        engine.create_corpus(CorpusConfig(name="c", embedder=None))
    assert (tmp_path / "home" / "engine" / "corpora" / "c").is_dir()
    assert not (tmp_path / "~").exists()


def test_a_config_built_without_validation_is_refused_before_it_is_written(
    tmp_path: Path,
) -> None:
    """Regression: pydantic's ``model_copy(update=...)`` skips validation; such a config
    was written, listed, and could not be opened or created again."""
    bad = CorpusConfig(name="b", embedder=None).model_copy(update={"title_weight": "3"})
    with SearchEngine(tmp_path) as engine:
        with pytest.raises(InvalidArgument, match="title_weight"):
            engine.create_corpus(bad)
        assert engine.list_corpora() == []
        engine.create_corpus(CorpusConfig(name="b", embedder=None))  # the name is free


@pytest.mark.parametrize(
    "call",
    [
        lambda eng: eng.serve_metrics(port=-1),
        lambda eng: eng.serve_metrics(port=70_000),
        lambda eng: eng.serve_metrics(host=""),
        lambda eng: eng.start_repairer(interval_s=0),
        lambda eng: eng.start_repairer(batch_size=0),
    ],
    ids=["port -1", "port 70000", "empty host", "interval 0", "batch 0"],
)
def test_bad_arguments_of_the_engines_services_are_invalid_arguments(
    tmp_path: Path, call: Callable[[SearchEngine], object]
) -> None:
    """Review: these raised a bare ``ValueError``, which code catching ``EngineError``
    (the root of what the engine raises on purpose) let through."""
    with SearchEngine(tmp_path) as eng, pytest.raises(InvalidArgument):
        call(eng)


def test_a_path_with_a_nul_is_an_invalid_argument(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="NUL"):
        SearchEngine(str(tmp_path / "a\x00b"))
