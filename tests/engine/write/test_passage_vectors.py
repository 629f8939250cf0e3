"""``SentenceTransformerEmbedding(passages=PassageWindows(...))`` through the engine: a
long document's stored vector is the mean of its windows', so a query about its tail
finds it through the vector arm; the model is shared with corpora that truncate; the
choice survives a reopen and round-trips through the config's JSON."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from dense import PassageMeanEmbedder, split_passages
from engine import (
    CorpusConfig,
    Document,
    OllamaEmbedding,
    PassageWindows,
    SearchEngine,
    SentenceTransformerEmbedding,
)
from engine.embedders import EmbedderPool, build_embedder
from tests.support.fakes import FakeEmbedder, factory_for, word_directions

WINDOWS = PassageWindows(max_words=20, stride_words=10)


def _truncating() -> FakeEmbedder:
    """Reads the first 20 words only, as MiniLM reads its first 256 word pieces."""
    return FakeEmbedder(
        64,
        "truncating",
        vectors=lambda text, dim: word_directions(" ".join(text.split()[:20]), dim),
    )


def _docs() -> list[Document]:
    filler = " ".join(f"filler{i}" for i in range(40))
    return [
        Document(id="tail", title="Report", text=f"{filler} " + "zebra " * 20),
        *(Document(id=f"d{i}", title="Other", text=f"word{i} " * 10) for i in range(8)),
    ]


def _dense_rank(engine: SearchEngine, name: str, query: str) -> int | None:
    corpus = engine.corpus(name)
    for hit in corpus.search(query, top_k=10):
        if hit.source_id == "tail":
            return hit.ranks.dense
    return None


def test_a_query_about_the_tail_finds_the_document_only_with_passages(tmp_path: Path) -> None:
    fake = _truncating()
    with SearchEngine(tmp_path / "e", embedder_factory=factory_for(fake)) as engine:
        truncating = SentenceTransformerEmbedding()
        whole = SentenceTransformerEmbedding(passages=WINDOWS)
        engine.create_corpus(CorpusConfig(name="cut", embedder=truncating)).add(_docs())
        engine.create_corpus(CorpusConfig(name="whole", embedder=whole)).add(_docs())
        # "zebra" is a keyword hit in both; only the vector arm differs.
        assert _dense_rank(engine, "whole", "zebra") == 1
        assert _dense_rank(engine, "cut", "zebra") != 1
        stored = engine.corpus("whole")._store.get_many(["tail"], public_only=False)["tail"]
        text = "Report\n" + _docs()[0].text
        windows = split_passages(
            text.split("\n", 1)[1], max_words=20, stride_words=10, title="Report"
        )
        mean = fake.embed(windows).sum(axis=0)
        assert stored.embedding is not None
        np.testing.assert_allclose(stored.embedding, mean / np.linalg.norm(mean), atol=1e-6)


def test_the_choice_survives_a_reopen_and_repair_uses_it(tmp_path: Path) -> None:
    fake = _truncating()
    config = CorpusConfig(name="whole", embedder=SentenceTransformerEmbedding(passages=WINDOWS))
    with SearchEngine(tmp_path / "e", embedder_factory=factory_for(fake)) as engine:
        fake.down = True  # stored degraded, re-embedded by repair later
        engine.create_corpus(config).add(_docs())
    fake.down = False
    with SearchEngine(tmp_path / "e", embedder_factory=factory_for(fake)) as engine:
        corpus = engine.corpus("whole")
        assert corpus.config == config
        corpus.repair()
        assert _dense_rank(engine, "whole", "zebra") == 1


def test_specs_that_differ_only_in_passages_share_one_model() -> None:
    built: list[object] = []

    def factory(spec: object) -> FakeEmbedder:
        built.append(spec)
        return _truncating()

    pool = EmbedderPool(factory)  # type: ignore[arg-type]
    plain = pool.get(SentenceTransformerEmbedding())
    split = pool.get(SentenceTransformerEmbedding(passages=WINDOWS))
    assert built == [SentenceTransformerEmbedding()]  # the factory saw the model's spec only
    assert isinstance(split, PassageMeanEmbedder) and split.inner is plain
    assert pool.get(SentenceTransformerEmbedding(passages=WINDOWS)) is split
    ollama = OllamaEmbedding(model="nomic-embed-text", passages=WINDOWS)
    wrapped = build_embedder(ollama, factory)  # type: ignore[arg-type]
    assert isinstance(wrapped, PassageMeanEmbedder)
    assert built[-1] == OllamaEmbedding(model="nomic-embed-text")


def test_window_shapes_are_validated_and_round_trip_through_json() -> None:
    config = CorpusConfig(
        name="c", embedder={"kind": "ollama", "model": "m", "passages": {"max_words": 200}}
    )
    assert config.embedder is not None and config.embedder.passages == PassageWindows(
        max_words=200, stride_words=80
    )
    assert CorpusConfig.model_validate_json(config.model_dump_json()) == config
    for bad in ({"max_words": 10, "stride_words": 20}, {"max_words": 8}, {"stride_words": 0}):
        with pytest.raises(ValueError):
            PassageWindows(**bad)


class _PieceAware(FakeEmbedder):
    """A truncating fake that offers word-piece windows, as the local model does."""

    def __init__(self) -> None:
        super().__init__(64, "pieces", vectors=word_directions)
        self.splits: list[str] = []

    def piece_splitter(self) -> object:
        def split(text: str) -> list[str]:
            self.splits.append(text)
            return [text[: len(text) // 2], text[len(text) // 2 :]]

        return split


def test_piece_windows_use_the_models_own_splitter(caplog: pytest.LogCaptureFixture) -> None:
    spec = SentenceTransformerEmbedding(passages=PassageWindows(unit="pieces"))
    model = _PieceAware()
    wrapped = build_embedder(spec, lambda s: model)  # type: ignore[arg-type,return-value]
    assert isinstance(wrapped, PassageMeanEmbedder)
    assert wrapped.windows("Title\nsome body text") == ["Title\nsome", " body text"]
    assert model.splits == ["Title\nsome body text"]
    # a provider without a tokenizer: word windows, and a warning that says so
    plain = build_embedder(spec, lambda s: _truncating())  # type: ignore[arg-type,return-value]
    text = "Title\n" + " ".join(f"w{i}" for i in range(400))
    assert isinstance(plain, PassageMeanEmbedder)
    assert plain.windows(text) == PassageMeanEmbedder(_truncating()).windows(text)
    assert "counted in words" in caplog.text


def test_piece_windows_round_trip_and_need_a_tokenizer() -> None:
    config = CorpusConfig(
        name="c",
        embedder={"kind": "sentence-transformers", "passages": {"unit": "pieces"}},
    )
    assert config.embedder is not None and config.embedder.passages == PassageWindows(unit="pieces")
    assert CorpusConfig.model_validate_json(config.model_dump_json()) == config
    with pytest.raises(ValueError, match="no tokenizer"):
        OllamaEmbedding(model="m", passages=PassageWindows(unit="pieces"))
    with pytest.raises(ValueError):
        PassageWindows(unit="sentences")  # type: ignore[arg-type]


class _RowShort(FakeEmbedder):
    """Answers one row too few (``short``) or a 1-D array (``flat``) for a batch."""

    def __init__(self) -> None:
        super().__init__(64, "row-short", vectors=word_directions)
        self.fault: str | None = None

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = super().embed(texts)
        if self.fault == "short":
            return rows[:-1]
        if self.fault == "flat":
            return rows.reshape(-1)
        return rows


@pytest.mark.parametrize("fault", ["short", "flat"])
def test_a_malformed_answer_for_windows_stores_the_documents_degraded(
    tmp_path: Path, fault: str
) -> None:
    # The means were taken before the corpus's own output check: the add raised a bare
    # ValueError / IndexError and stored nothing, and every later add (which repairs
    # first) failed the same way.
    fake = _RowShort()
    config = CorpusConfig(name="whole", embedder=SentenceTransformerEmbedding(passages=WINDOWS))
    with SearchEngine(tmp_path / "e", embedder_factory=factory_for(fake)) as engine:
        corpus = engine.create_corpus(config)
        fake.fault = fault
        result = corpus.add(_docs())
        assert (result.added, result.degraded) == (len(_docs()), len(_docs()))
        assert {hit.source_id for hit in corpus.search("zebra")} == {"tail"}  # keywords
        fake.fault = None
        assert corpus.repair() == len(_docs())
        assert _dense_rank(engine, "whole", "zebra") == 1
