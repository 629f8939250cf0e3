"""Loading BEIR-layout corpora: ``corpus.jsonl[.gz]``, ``queries.jsonl``, ``qrels/test.tsv``.

The layout is the one BEIR publishes: one JSON object per line with ``_id``, ``title``
(optional) and ``text`` for documents, ``_id`` and ``text`` for queries, and a tab-separated
qrels file with a header line ``query-id  corpus-id  score`` whose scores are graded
integers (0 = not relevant). Only queries that have at least one judgment are kept, so that
every query issued in a run is also scored.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bench.errors import DatasetError

CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
QUERIES_NAME = "queries.jsonl"
QRELS_PATH = Path("qrels") / "test.tsv"

Qrels = dict[str, dict[str, int]]
"""query id → {document id → graded relevance}."""


@dataclass(frozen=True, slots=True)
class BenchDocument:
    """One corpus document as every system receives it."""

    doc_id: str
    title: str
    text: str

    @property
    def full_text(self) -> str:
        """Title and body joined: what gets embedded and what single-field systems index."""
        return f"{self.title}\n{self.text}" if self.title else self.text


@dataclass(frozen=True, slots=True)
class BenchQuery:
    """One judged query."""

    query_id: str
    text: str


@dataclass(frozen=True, slots=True)
class BeirDataset:
    """A loaded BEIR folder. ``fingerprint`` hashes the corpus file (the vector-cache key)."""

    name: str
    documents: tuple[BenchDocument, ...]
    queries: tuple[BenchQuery, ...]
    qrels: Qrels
    fingerprint: str

    def head(self, n_docs: int) -> BeirDataset:
        """The first ``n_docs`` documents, with the same queries and judgments."""
        if n_docs < 1:
            raise ValueError(f"n_docs must be >= 1, got {n_docs}")
        return BeirDataset(
            name=self.name,
            documents=self.documents[:n_docs],
            queries=self.queries,
            qrels=self.qrels,
            fingerprint=f"{self.fingerprint}:head{n_docs}",
        )

    def spread_sample(self, n_docs: int) -> tuple[BenchDocument, ...]:
        """``n_docs`` documents evenly spaced over the corpus (all of them if it is
        smaller): a throughput sample whose lengths follow the whole corpus, not its head."""
        if n_docs < 1:
            raise ValueError(f"n_docs must be >= 1, got {n_docs}")
        total = len(self.documents)
        if n_docs >= total:
            return self.documents
        return tuple(self.documents[(i * total) // n_docs] for i in range(n_docs))


def load_beir(folder: str | Path, name: str | None = None) -> BeirDataset:
    """Load a BEIR folder; raises ``DatasetError`` naming the file that is missing or bad."""
    root = Path(folder)
    if not root.is_dir():
        raise DatasetError(f"not a directory: {root}")
    corpus_path = _find_corpus(root)
    documents = tuple(_read_documents(corpus_path))
    if not documents:
        raise DatasetError(f"empty corpus: {corpus_path}")
    qrels = read_qrels(root / QRELS_PATH)
    all_queries = _read_queries(root / QUERIES_NAME)
    queries = tuple(q for q in all_queries if qrels.get(q.query_id))
    if not queries:
        raise DatasetError(f"no query in {root / QUERIES_NAME} has a judgment")
    return BeirDataset(
        name=name or root.resolve().name,
        documents=documents,
        queries=queries,
        qrels={q.query_id: qrels[q.query_id] for q in queries},
        fingerprint=file_sha256(corpus_path),
    )


def read_qrels(path: Path) -> Qrels:
    """Parse a graded qrels TSV with a header line; non-positive grades are kept as 0."""
    if not path.is_file():
        raise DatasetError(f"missing qrels file: {path}")
    qrels: Qrels = {}
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            fields = line.rstrip("\n").split("\t")
            if line_no == 1 and not _is_int(fields[-1]):
                continue  # the header
            if len(fields) < 3 or not _is_int(fields[-1]):
                if not line.strip():
                    continue
                raise DatasetError(f"{path}:{line_no}: expected query-id, corpus-id, score")
            query_id, doc_id, grade = fields[0], fields[-2], int(fields[-1])
            qrels.setdefault(query_id, {})[doc_id] = max(grade, 0)
    return qrels


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _find_corpus(root: Path) -> Path:
    for candidate in CORPUS_NAMES:
        if (root / candidate).is_file():
            return root / candidate
    raise DatasetError(f"missing {' or '.join(CORPUS_NAMES)} in {root}")


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open(encoding="utf-8")


def _json_lines(path: Path) -> Iterator[dict[str, object]]:
    with _open_text(path) as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DatasetError(f"{path}:{line_no}: invalid JSON") from exc
            if not isinstance(record, dict) or "_id" not in record:
                raise DatasetError(f"{path}:{line_no}: expected an object with '_id'")
            yield record


def _read_documents(path: Path) -> Iterator[BenchDocument]:
    for record in _json_lines(path):
        yield BenchDocument(
            doc_id=str(record["_id"]),
            title=_storable(record.get("title")),
            text=_storable(record.get("text")),
        )


def _storable(value: object) -> str:
    """A JSON string as every system can store it, the same for all of them: NUL becomes a
    space and a lone surrogate (legal as a JSON escape, not in UTF-8) U+FFFD. Scraped
    collections carry both now and then; an engine that refuses them (Tandem does, with
    a clear error) would otherwise not get the collection at all."""
    text = str(value or "")
    if "\x00" in text:
        text = text.replace("\x00", " ")
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    return text


def _read_queries(path: Path) -> list[BenchQuery]:
    if not path.is_file():
        raise DatasetError(f"missing queries file: {path}")
    return [
        BenchQuery(query_id=str(r["_id"]), text=_storable(r.get("text"))) for r in _json_lines(path)
    ]


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True
