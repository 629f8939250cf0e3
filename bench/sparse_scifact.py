"""SciFact nDCG@10 and latency of the sparse arm alone (tantivy through the facade).

Run from the repository root: ``python -m bench.sparse_scifact [--data DIR]`` or
``python bench/sparse_scifact.py``. Indexes the corpus into a temporary directory with
``TantivyIndex``, runs every query with judgments in ``qrels/<split>.tsv`` through
``KeywordSearchFacade.index_backed`` (limit 100) and prints nDCG@10 (``ir_measures``) and
the p50 latency of ``facade.search`` at limit 100 and 10.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import ir_measures

from sparse.contracts import SparseDocument
from sparse.facade import KeywordSearchFacade
from sparse.tantivy_backend import TantivyBackend
from sparse.tantivy_index import TantivyIndex

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"


def _corpus(data: Path) -> Iterator[SparseDocument]:
    path = data / "corpus.jsonl.gz"
    opener = gzip.open if path.exists() else open
    with opener(path if path.exists() else data / "corpus.jsonl", "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            yield SparseDocument(source_id=row["_id"], title=row.get("title", ""), text=row["text"])


def _queries(data: Path) -> dict[str, str]:
    queries: dict[str, str] = {}
    for name in ("queries.jsonl", "queries.full.jsonl"):
        path = data / name
        if path.exists():
            with path.open(encoding="utf-8") as fh:
                for line in fh:
                    row = json.loads(line)
                    queries.setdefault(row["_id"], row["text"])
    return queries


def _qrels(path: Path) -> list[ir_measures.Qrel]:
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    return [ir_measures.Qrel(q, d, int(s)) for q, d, s in (row.split("\t") for row in rows)]


def _p50_ms(facade: KeywordSearchFacade, texts: list[str], limit: int) -> float:
    timings = []
    for text in texts:
        start = time.perf_counter()
        facade.search(text, limit)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="BEIR folder")
    parser.add_argument("--split", default="test", help="qrels split (tune on train only)")
    args = parser.parse_args(argv)

    qrels = _qrels(args.data / "qrels" / f"{args.split}.tsv")
    queries = _queries(args.data)
    query_ids = sorted({qrel.query_id for qrel in qrels})
    with tempfile.TemporaryDirectory(prefix="tandem-sparse-") as tmp:
        index = TantivyIndex(Path(tmp) / "scifact")
        start = time.perf_counter()
        docs = list(_corpus(args.data))
        index.upsert(docs)
        indexing_s = time.perf_counter() - start
        facade = KeywordSearchFacade.index_backed([TantivyBackend(index)])
        run = [
            ir_measures.ScoredDoc(qid, hit.source_id, float(hit.score or 0.0))
            for qid in query_ids
            for hit in facade.search(queries[qid], 100)
        ]
        texts = [queries[qid] for qid in query_ids]
        p50_100 = _p50_ms(facade, texts, 100)
        p50_10 = _p50_ms(facade, texts, 10)
        index.close()
    ndcg = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, run)[ir_measures.nDCG @ 10]
    print(
        f"docs={len(docs)} queries={len(query_ids)} split={args.split} indexing_s={indexing_s:.2f}"
    )
    print(f"nDCG@10={ndcg:.4f}")
    print(f"p50_ms limit=100: {p50_100:.3f}  limit=10: {p50_10:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
