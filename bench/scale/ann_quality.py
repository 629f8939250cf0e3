"""Relevance on real data with each vector index kind: SciFact nDCG@10 with the HNSW graph
forced on, and with its SQ8 variant, against exact search.

The engine answers SciFact (5,183 documents) exactly — it builds a graph only from 50,000
vectors — so this check forces one (``hnsw_threshold=0``) on the engine's own index
(``dense.FaissIndex``, default parameters) over the real MiniLM vectors. Measured: the
dense arm alone (100 deep), and hybrid as the engine fuses it (RRF, k = 60, over a
100-deep keyword window from a Tandem keyword corpus and the 100-deep dense window), plus
recall@10 of each kind against exact search. Targets: HNSW within 0.002 of exact, SQ8
within 0.005 of float32.

``python -m bench.scale.ann_quality [--data DIR] [--out DIR]`` writes ``ann_quality.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.dataset import BeirDataset, dataset_record, load_beir
from bench.encoder import DEFAULT_MODEL, SentenceEncoder
from bench.quality import evaluate
from bench.report import git_revision
from bench.scale.anchors import DEFAULT_DATA_DIR
from bench.vector_cache import VectorCache

WINDOW = 100
HNSW_NDCG_TOLERANCE = 0.002
SQ8_NDCG_TOLERANCE = 0.005


def _keyword_runs(dataset: BeirDataset, workdir: Path) -> dict[str, list[str]]:
    import engine

    with engine.SearchEngine(str(workdir / "keyword")) as eng:
        corpus = eng.create_corpus(engine.CorpusConfig(name="kw", embedder=None))
        docs = [
            engine.Document(id=d.doc_id, title=d.title, text=d.text, url="")
            for d in dataset.documents
        ]
        corpus.add(docs, progress=False)
        return {
            q.query_id: [h.source_id for h in corpus.search(q.text, top_k=WINDOW)]
            for q in dataset.queries
        }


def measure(dataset: BeirDataset, model: str, workdir: Path) -> dict[str, Any]:
    from dense import FaissIndex, VectorStorage
    from fusion import rrf

    encoder = SentenceEncoder(model)
    vectors, _cached = VectorCache().get_or_compute(encoder, dataset, progress=False)
    queries = encoder.encode([q.text for q in dataset.queries])
    ids = [d.doc_id for d in dataset.documents]
    dim = int(vectors.shape[1])

    exact = FaissIndex(dim, hnsw_threshold=10**9)
    exact.add(ids, vectors)
    hnsw = FaissIndex(dim, hnsw_threshold=0, build_delay_s=0.0)
    start = time.perf_counter()
    hnsw.add(ids, vectors)
    if not hnsw.wait_for_graph(timeout=None):
        raise RuntimeError("graph build did not finish")
    build_s = time.perf_counter() - start
    path = workdir / "hnsw.faiss"
    hnsw.save(path)
    sq8 = FaissIndex.load(path, storage=VectorStorage.SQ8)
    kinds = {"exact": exact, "hnsw_float32": hnsw, "hnsw_sq8": sq8}

    keyword = _keyword_runs(dataset, workdir)
    dense_runs: dict[str, dict[str, list[str]]] = {}
    for name, index in kinds.items():
        dense_runs[name] = {
            q.query_id: [doc_id for doc_id, _ in index.search(queries[i], WINDOW)]
            for i, q in enumerate(dataset.queries)
        }
    out: dict[str, Any] = {
        "dataset": dataset.name,
        "documents": len(ids),
        "queries": len(dataset.queries),
        "graph_build_s": build_s,
        "ef_search": max(hnsw.effective_ef(), 2 * WINDOW),  # what a 100-deep search uses
    }
    for name in kinds:
        run = dense_runs[name]
        fused = {qid: [h.id for h in rrf([keyword[qid], run[qid]], k=60, limit=10)] for qid in run}
        out[f"{name}_dense_ndcg_at_10"] = evaluate(dataset.qrels, run).ndcg_at_10
        out[f"{name}_hybrid_ndcg_at_10"] = evaluate(dataset.qrels, fused).ndcg_at_10
        out[f"{name}_recall_at_10"] = _recall(dense_runs["exact"], run)
    out["keyword_ndcg_at_10"] = evaluate(dataset.qrels, keyword).ndcg_at_10
    for arm in ("dense", "hybrid"):
        exact_ndcg = out[f"exact_{arm}_ndcg_at_10"]
        float_ndcg = out[f"hnsw_float32_{arm}_ndcg_at_10"]
        out[f"hnsw_{arm}_ndcg_delta"] = float_ndcg - exact_ndcg
        out[f"sq8_{arm}_ndcg_loss"] = float_ndcg - out[f"hnsw_sq8_{arm}_ndcg_at_10"]
    out["hnsw_within_tolerance"] = all(
        abs(out[f"hnsw_{arm}_ndcg_delta"]) <= HNSW_NDCG_TOLERANCE for arm in ("dense", "hybrid")
    )
    out["sq8_within_tolerance"] = all(
        out[f"sq8_{arm}_ndcg_loss"] <= SQ8_NDCG_TOLERANCE for arm in ("dense", "hybrid")
    )
    for index in kinds.values():
        index.close()
    return out


def _recall(truth: dict[str, list[str]], found: dict[str, list[str]], k: int = 10) -> float:
    return float(np.mean([len(set(truth[q][:k]) & set(found[q][:k])) / k for q in truth]))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale.ann_quality")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA_DIR / "scifact")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--out", type=Path, default=Path("bench-results") / "scale")
    args = parser.parse_args(argv)
    dataset = load_beir(args.data)
    with tempfile.TemporaryDirectory(prefix="bench-ann-quality-") as tmp:
        result = measure(dataset, args.model, Path(tmp))
    result |= {
        "dataset": dataset_record(dataset, args.data),
        "revision": git_revision(),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_avg": os.getloadavg(),
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ann_quality.json").write_text(json.dumps(result, indent=2, sort_keys=True))
    print(json.dumps(result, indent=2, sort_keys=True))
    ok = result["hnsw_within_tolerance"] and result["sq8_within_tolerance"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
