"""Passage vectors measured: ``python -m bench passages --data DIR... --out DIR``.

For each BEIR folder: how many documents the model truncates (title + text over its
``max_seq_length`` word pieces, the model's own tokenizer), and what embedding long
documents as the mean of their word windows (``PassageWindows``, the engine's
``dense.PassageMeanEmbedder``) does against truncation:

- cost: windows per document, and encoding seconds for the same spread sample of
  documents both ways (ingest pays this; the query path and the index do not change:
  one vector per document either way, so the index size is printed to show it);
- quality on the test judgements: the vector arm alone (exact top 100), Tandem hybrid
  with RRF (the default) and with z-score fusion, each through ``SearchEngine`` with the
  vectors supplied and every query embedded by the engine (hybrid p50 printed).

The z-score dense weight is chosen on training judgements (``qrels/train.tsv`` with
``queries.full.jsonl``, when a folder has them: SciFact) for each vector recipe, from
``WEIGHT_GRID``, and only then applied to the test judgements. Folders without training
judgements use the engine's default weight. Passage vectors are cached beside the
truncated ones (another recipe, another key).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.dataset import (
    BeirDataset,
    BenchQuery,
    load_beir,
    portable_path,
    queries_indexed_as_documents,
    read_qrels,
    search_ids,
)
from bench.encoder import DEFAULT_MODEL, SentenceEncoder, Vectors
from bench.quality import evaluate
from bench.report import git_revision, machine_info
from bench.timing import dir_size_bytes
from bench.vector_cache import DEFAULT_CACHE_DIR, VectorCache

logger = logging.getLogger(__name__)

WEIGHT_GRID = (0.3, 0.4, 0.45, 0.5, 0.6, 0.7)
SAMPLE_DOCS = 200
TOP = 100
CORPUS = "bench"


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How document vectors are made: ``windows`` (max words, stride) or ``None``, the
    model truncates; ``pieces``: windows cut by the model's tokenizer instead
    (``dense.PieceSplitter``, ``PassageWindows(unit="pieces")``)."""

    label: str
    windows: tuple[int, int] | None = None
    pieces: bool = False

    @property
    def cache_suffix(self) -> str:
        if self.pieces:
            return "passages:pieces"
        assert self.windows is not None
        return f"passages:{self.windows[0]}/{self.windows[1]}"

    def embedder(self, encoder: SentenceEncoder) -> Any:
        adapter = _EncoderAsEmbedder(encoder)
        if self.windows is None and not self.pieces:
            return adapter
        from dense import PassageMeanEmbedder, PieceSplitter

        if self.pieces:
            model = encoder._model  # the loaded sentence-transformers model (its tokenizer)
            splitter = PieceSplitter(lambda: (model.tokenizer, int(model.max_seq_length)))
            return PassageMeanEmbedder(adapter, splitter=splitter)
        assert self.windows is not None
        max_words, stride = self.windows
        return PassageMeanEmbedder(adapter, max_words=max_words, stride_words=stride)

    def spec(self) -> Any:
        import engine

        windows = None
        if self.pieces:
            windows = engine.PassageWindows(unit="pieces")
        elif self.windows is not None:
            max_words, stride = self.windows
            windows = engine.PassageWindows(max_words=max_words, stride_words=stride)
        return engine.SentenceTransformerEmbedding(passages=windows)


TRUNCATE = Recipe("truncate")
PASSAGES = Recipe("passages 160/80", (160, 80))
PIECES = Recipe("passages in pieces", pieces=True)
SPLIT = (PASSAGES, PIECES)
RECIPES = (TRUNCATE, *SPLIT)


class _EncoderAsEmbedder:
    """``SentenceEncoder`` as a ``dense.Embedder`` (batches through sentence-transformers)."""

    def __init__(self, encoder: SentenceEncoder) -> None:
        self._encoder = encoder

    @property
    def name(self) -> str:
        return self._encoder.model

    @property
    def dimension(self) -> int:
        return self._encoder.dimension

    def is_available(self) -> bool:
        return True

    def embed(self, texts: Sequence[str]) -> Vectors:
        return self._encoder.encode(list(texts))


def truncation(encoder: SentenceEncoder, dataset: BeirDataset) -> dict[str, float]:
    """Documents whose title + text exceed the model's window, by its own tokenizer."""
    model = encoder._model  # the loaded sentence-transformers model (its tokenizer)
    limit = int(model.max_seq_length)
    texts = [d.full_text for d in dataset.documents]
    lengths = [len(ids) for ids in model.tokenizer(texts, add_special_tokens=True)["input_ids"]]
    over = sum(1 for n in lengths if n > limit)
    return {
        "max_seq_length": float(limit),
        "truncated_docs": float(over),
        "truncated_share": over / len(lengths),
        "median_pieces": float(statistics.median(lengths)),
    }


def recipe_vectors(
    recipe: Recipe, encoder: SentenceEncoder, dataset: BeirDataset, cache: VectorCache
) -> Vectors:
    if recipe is TRUNCATE:
        truncated, _ = cache.get_or_compute(encoder, dataset, progress=False)
        return truncated
    key = f"{encoder.model}|{recipe.cache_suffix}"
    cached = cache.load(key, dataset)
    if cached is not None:
        return cached
    vectors: Vectors = recipe.embedder(encoder).embed([d.full_text for d in dataset.documents])
    cache.store(key, dataset, vectors)
    return vectors


def encode_cost(encoder: SentenceEncoder, dataset: BeirDataset) -> dict[str, float]:
    """Seconds to embed the same spread sample truncated and by each splitting recipe,
    and each recipe's windows per document over the whole corpus."""
    sample = [d.full_text for d in dataset.spread_sample(SAMPLE_DOCS)]
    out: dict[str, float] = {}
    for recipe in RECIPES:
        embedder = recipe.embedder(encoder)
        start = time.perf_counter()
        embedder.embed(sample)
        out[f"{recipe.label}_sample_s"] = time.perf_counter() - start
    for recipe in SPLIT:
        out[f"{recipe.label}_encode_ratio"] = (
            out[f"{recipe.label}_sample_s"] / out[f"{TRUNCATE.label}_sample_s"]
        )
        splitter = recipe.embedder(encoder)
        windows = sum(len(splitter.windows(d.full_text)) for d in dataset.documents)
        out[f"{recipe.label}_windows_per_doc"] = windows / len(dataset.documents)
    return out


def dense_quality(
    dataset: BeirDataset, vectors: Vectors, query_vectors: Vectors
) -> dict[str, float]:
    scores = query_vectors @ vectors.T
    top = np.argsort(-scores, axis=1, kind="stable")[:, :TOP]
    ids = [d.doc_id for d in dataset.documents]
    run = {
        q.query_id: [ids[int(j)] for j in row] for q, row in zip(dataset.queries, top, strict=True)
    }
    return evaluate(dataset.qrels, run).as_dict()


def tandem_quality(
    dataset: BeirDataset, vectors: Vectors, recipe: Recipe, fusion: Any, workdir: Path
) -> dict[str, float]:
    """Tandem hybrid through ``SearchEngine``: vectors supplied, queries embedded by the
    engine; nDCG@10 etc. on ``dataset``'s judgements, search p50, disk size."""
    import engine

    directory = Path(tempfile.mkdtemp(dir=workdir))
    with engine.SearchEngine(str(directory)) as api:
        config = engine.CorpusConfig(name=CORPUS, embedder=recipe.spec(), fusion=fusion)
        corpus = api.create_corpus(config)
        docs = [
            engine.Document(id=d.doc_id, title=d.title, text=d.text, url="")
            for d in dataset.documents
        ]
        for start in range(0, len(docs), 10_000):
            corpus.add(
                docs[start : start + 10_000],
                embeddings=vectors[start : start + 10_000],
                progress=False,
            )
        corpus.search("warm up", top_k=10)
        search = search_ids(corpus)
        run: dict[str, list[str]] = {}
        times: list[float] = []
        for query in dataset.queries:
            started = time.perf_counter()
            run[query.query_id] = dataset.ranking(query, search, TOP)
            times.append(time.perf_counter() - started)
    out = evaluate(dataset.qrels, run).as_dict()
    out["p50_ms"] = statistics.median(times) * 1e3
    out["disk_mib"] = dir_size_bytes(directory) / 2**20
    return out


def train_view(folder: Path, dataset: BeirDataset) -> BeirDataset | None:
    """The same documents with the training judgements, or None without them."""
    qrels_path = folder / "qrels" / "train.tsv"
    queries_path = folder / "queries.full.jsonl"
    if not qrels_path.is_file() or not queries_path.is_file():
        return None
    qrels = read_qrels(qrels_path)
    texts: dict[str, str] = {}
    with queries_path.open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            texts[str(row["_id"])] = str(row["text"])
    queries = tuple(BenchQuery(q, texts[q]) for q in sorted(qrels) if q in texts and qrels[q])
    if not queries:
        return None
    return dataclasses.replace(
        dataset,
        queries=queries,
        qrels={q.query_id: qrels[q.query_id] for q in queries},
        split="train",
        self_indexed=queries_indexed_as_documents(dataset.documents, queries),
    )


def _zscore(weight: float) -> Any:
    import engine.config

    return engine.config.ZScoreFusion(dense_weight=weight)


def run_folder(
    folder: Path, encoder: SentenceEncoder, cache: VectorCache, workdir: Path
) -> dict[str, Any]:
    import engine.config

    dataset = load_beir(folder)
    result: dict[str, Any] = {
        "corpus": dataset.name,
        "docs": len(dataset.documents),
        "queries": len(dataset.queries),
        **truncation(encoder, dataset),
        **encode_cost(encoder, dataset),
    }
    train = train_view(folder, dataset)
    query_vectors = encoder.encode([q.text for q in dataset.queries])
    for recipe in RECIPES:
        vectors = recipe_vectors(recipe, encoder, dataset, cache)
        row: dict[str, Any] = {"dense": dense_quality(dataset, vectors, query_vectors)}
        row["rrf"] = tandem_quality(dataset, vectors, recipe, engine.config.RRFFusion(), workdir)
        weight = engine.config.DEFAULT_DENSE_WEIGHT
        if train is not None:
            sweep = {
                w: tandem_quality(train, vectors, recipe, _zscore(w), workdir)["ndcg@10"]
                for w in WEIGHT_GRID
            }
            row["train_ndcg_by_weight"] = sweep
            weight = max(WEIGHT_GRID, key=lambda w: (sweep[w], -abs(w - 0.5)))
        row["zscore_weight"] = weight
        row["zscore"] = tandem_quality(dataset, vectors, recipe, _zscore(weight), workdir)
        result[recipe.label] = row
    return result


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "# Passage vectors: the mean of document windows against truncation",
        "",
        "nDCG@10 / R@100 on test judgements; z-score weight chosen on training judgements "
        "where the folder has them (else the engine default); encode ratio: seconds to embed "
        f"the same {SAMPLE_DOCS} documents by the recipe / truncated. Recipes: word windows "
        "(160 words, stride 80) and windows in the model's word pieces (each filling its "
        "input, half-window stride).",
        "",
        "| corpus | docs | truncated | recipe | windows/doc | encode ratio | vector arm | "
        "RRF hybrid | z-score hybrid (w) | hybrid p50 ms | disk MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for recipe in RECIPES:
            row = r[recipe.label]
            split = recipe is not TRUNCATE
            windows = f"{r[f'{recipe.label}_windows_per_doc']:.2f}" if split else "1"
            ratio = f"{r[f'{recipe.label}_encode_ratio']:.2f}" if split else "1"
            lines.append(
                f"| {r['corpus']} | {r['docs']} | {r['truncated_share']:.0%} | {recipe.label} | "
                f"{windows} | {ratio} | "
                f"{row['dense']['ndcg@10']:.4f} / {row['dense']['recall@100']:.4f} | "
                f"{row['rrf']['ndcg@10']:.4f} / {row['rrf']['recall@100']:.4f} | "
                f"{row['zscore']['ndcg@10']:.4f} / {row['zscore']['recall@100']:.4f} "
                f"({row['zscore_weight']}) | {row['rrf']['p50_ms']:.1f} | "
                f"{row['rrf']['disk_mib']:.1f} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench passages", description=__doc__)
    parser.add_argument("--data", type=Path, nargs="+", required=True, metavar="DIR")
    parser.add_argument("--out", type=Path, default=Path("bench-results") / "passages")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE_DIR)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    encoder = SentenceEncoder(args.model).load()
    cache = VectorCache(args.cache)
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for folder in args.data:
            logger.info("passages: %s", folder)
            result = run_folder(folder, encoder, cache, Path(workdir))
            result["data"] = portable_path(folder)
            results.append(result)
    record = {"revision": git_revision(), "machine": machine_info(), "corpora": results}
    (args.out / "passages.json").write_text(json.dumps(record, indent=2), encoding="utf-8")
    (args.out / "passages.md").write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    return 0
