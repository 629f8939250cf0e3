"""The public API as README.md's prose writes it: type-checked, never run.

tests/test_readme_types.py runs ``mypy --strict`` over this file together with the
README's python blocks (which tests/test_readme.py runs). Each call below is one the
README shows inline or one run time accepts; ``refused`` holds what run time refuses,
each line carrying the one ``type: ignore`` it needs (``--strict`` reports an unneeded
ignore, so an annotation widened past what run time takes fails the test too).
"""

from __future__ import annotations

import datetime

from dense import VectorStorage
from engine import (
    And,
    Corpus,
    CorpusConfig,
    Eq,
    FieldType,
    Filter,
    FusionWeights,
    In,
    NaturalLanguage,
    OllamaEmbedding,
    PassageWindows,
    Range,
    SearchableCorpus,
    SearchEngine,
    SentenceTransformerEmbedding,
    ZScoreFusion,
)
from engine.cluster import ShardedCorpus


def configs() -> list[CorpusConfig]:
    """Every ``CorpusConfig`` shorthand the README uses, and the spelled-out forms."""
    return [
        CorpusConfig(name="docs", embedder="all-MiniLM-L6-v2"),
        CorpusConfig(name="kw", embedder=None),
        CorpusConfig(
            name="ol",
            embedder=OllamaEmbedding(model="nomic-embed-text", host="http://127.0.0.1:11434"),
        ),
        CorpusConfig(name="st", embedder=SentenceTransformerEmbedding(passages=PassageWindows())),
        CorpusConfig(
            name="pc",
            embedder=SentenceTransformerEmbedding(passages=PassageWindows(unit="pieces")),
        ),
        CorpusConfig(name="z", fusion="zscore"),
        CorpusConfig(name="r", fusion="rrf"),
        CorpusConfig(name="z2", fusion=ZScoreFusion(dense_weight=0.45)),
        CorpusConfig(name="f", fields={"author": "keyword", "year": "integer", "sent": "date"}),
        CorpusConfig(name="f2", fields={"author": FieldType.KEYWORD, "year": "integer"}),
        CorpusConfig(name="q", vector_storage="sq8"),
        CorpusConfig(name="q2", vector_storage=VectorStorage.FLOAT32),
        CorpusConfig(name="l", languages={1: "fr", 2: "de"}),
        CorpusConfig(name="t", title_weight=3),
        CorpusConfig(name="c", complete_windows=False),
        CorpusConfig(name="n", natural=NaturalLanguage(model="llama3.2")),
        CorpusConfig(name="w", rrf_k=60, weights=FusionWeights(dense=0.5), window=100),
    ]


def filters(corpus: Corpus) -> list[object]:
    """Every form ``filters`` takes: an expression, a dict, JSON text, a list or tuple."""
    clauses = [Eq("author", "Walter"), In("tag", ["war", "home"]), Range("year", gte=1940)]
    combined: Filter = And(*clauses)
    chained = Eq("author", "Walter") & In("tag", ["war"]) & Range("year", lt=1946)
    dicts = [{"author": "Walter"}, {"year": {"gte": 1942}}]
    return [
        corpus.search("war", filters=combined),
        corpus.search("war", filters=chained),
        corpus.search("war", filters=clauses),
        corpus.search("war", filters=clauses[0]),
        corpus.search("war", filters=clauses[0] & clauses[1]),
        corpus.search("war", filters=dicts),
        corpus.search("war", filters=[{"author": "Walter"}, Eq("year", 1942)]),
        corpus.search("war", filters=({"sent": {"gte": "1942-01-01"}},)),
        corpus.search("war", filters='{"author": "Walter"}'),
        corpus.search("war", filters={"sent": {"gte": datetime.date(1942, 1, 1)}}),
        corpus.search("war", filters=None),
    ]


def every_corpus(corpus: Corpus, sharded: ShardedCorpus) -> list[object]:
    """``SearchableCorpus`` and ``ShardedCorpus`` take the filters ``Corpus`` takes."""
    either: list[SearchableCorpus] = [corpus, sharded]
    clauses = [Eq("author", "Walter"), Range("year", lte=1943)]
    return [
        *(c.search("war", filters=clauses) for c in either),
        *(c.search("war", filters=[{"author": "Walter"}, In("year", [1942])]) for c in either),
        sharded.search("war", filters=clauses),
    ]


def refused(engine: SearchEngine) -> None:
    """What run time refuses is still a type error."""
    CorpusConfig(name="z", fusion="zcore")  # type: ignore[arg-type]
    CorpusConfig(name="f", fields={"author": "text"})  # type: ignore[dict-item]
    CorpusConfig(name="q", vector_storage="sq4")  # type: ignore[arg-type]
    CorpusConfig(name="x", embedder=3)  # type: ignore[arg-type]
    CorpusConfig(embedder="all-MiniLM-L6-v2")  # type: ignore[call-arg]
    CorpusConfig(name="x", mode="hybrid")  # type: ignore[call-arg]
    CorpusConfig(name="x", window="100")  # type: ignore[arg-type]
    And(Eq("author", "Walter"), {"year": 1942})  # type: ignore[arg-type]
    engine.corpus("docs").search("war", filters=1942)  # type: ignore[arg-type]
