"""Loading BEIR-layout corpora: ``corpus.jsonl[.gz]``, ``queries.jsonl``, ``qrels/test.tsv``.

The layout is the one BEIR publishes: one JSON object per line with ``_id``, ``title``
(optional) and ``text`` for documents, ``_id`` and ``text`` for queries, and a tab-separated
qrels file with a header line ``query-id  corpus-id  score`` whose scores are graded
integers (0 = not relevant). Only queries that have at least one judgment are kept, so that
every query issued in a run is also scored. The judgements are the test split, or the dev
split where a collection publishes no test judgements (BEIR's MS MARCO), unless a split is
named.

Queries that are documents. ArguAna and Quora index every query as a document of the
corpus under the query's own id; BEIR leaves that document out of the query's ranking
(its exact search skips ``corpus_id == query_id``, its evaluation has
``ignore_identical_ids``), or every system scores as if its first answer were wrong
(ArguAna's BM25 reads 0.315 instead of 0.414). Here a document is left out of a query's
ranking when it has the query's id *and* the query's text (``BeirDataset.self_indexed``,
``BeirDataset.ranking``): Cranfield's and CISI's numeric ids coincide with their query ids
by accident, and some of those documents are judged relevant to the same-numbered query.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from bench.errors import DatasetError

logger = logging.getLogger(__name__)

CORPUS_NAMES = ("corpus.jsonl", "corpus.jsonl.gz")
QUERIES_NAME = "queries.jsonl"
QRELS_SPLITS = ("test", "dev")
"""The judgement files tried, in order, when no split is named: ``qrels/<split>.tsv``."""

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
    """A loaded BEIR folder. ``fingerprint`` hashes the corpus file (the vector-cache key);
    ``split`` names the judgements (``qrels/<split>.tsv``); ``self_indexed`` holds the
    queries that are themselves documents of the corpus (same id, same text)."""

    name: str
    documents: tuple[BenchDocument, ...]
    queries: tuple[BenchQuery, ...]
    qrels: Qrels
    fingerprint: str
    split: str = "test"
    self_indexed: frozenset[str] = field(default=frozenset())

    def ranking(
        self, query: BenchQuery, search: Callable[[str, int], Sequence[str]], k: int
    ) -> list[str]:
        """``search(text, k)``'s ranked ids for ``query``, as they are judged: a query that
        is itself a document asks for one more and leaves its own document out (BEIR's
        convention; see the module docstring)."""
        if query.query_id not in self.self_indexed:
            return list(search(query.text, k))
        ranked = search(query.text, k + 1)
        return [doc_id for doc_id in ranked if doc_id != query.query_id][:k]

    def without_titles(self) -> BeirDataset:
        """The same collection with every title removed (named ``<name>-notitle``): a probe
        of how a system does on collections that have none (FiQA, Quora), made from one
        that has them, with the same queries and judgements."""
        documents = tuple(dataclasses.replace(d, title="") for d in self.documents)
        return dataclasses.replace(
            self,
            name=f"{self.name}-notitle",
            documents=documents,
            fingerprint=f"{self.fingerprint}:notitle",
            self_indexed=queries_indexed_as_documents(documents, self.queries),
        )

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
            split=self.split,
            self_indexed=queries_indexed_as_documents(self.documents[:n_docs], self.queries),
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


def corpus_name(folder: str | Path) -> str:
    """The name a BEIR folder's corpus is reported under: the final component of its
    resolved path (``bench.run.RunConfig`` refuses two folders that share one)."""
    return Path(folder).resolve().name


def load_beir(folder: str | Path, split: str | None = None) -> BeirDataset:
    """Load a BEIR folder with the judgements of ``split`` (default: the first of
    ``QRELS_SPLITS`` the folder has); raises ``DatasetError`` naming the file that is
    missing or bad."""
    root = Path(folder)
    if not root.is_dir():
        raise DatasetError(f"not a directory: {root}")
    corpus_path = _find_corpus(root)
    documents = tuple(_read_documents(corpus_path))
    if not documents:
        raise DatasetError(f"empty corpus: {corpus_path}")
    split = _checked_split(split) if split is not None else _default_split(root)
    qrels = read_qrels(root / "qrels" / f"{split}.tsv")
    all_queries = _read_queries(root / QUERIES_NAME)
    # Timed and scored alike: a query with no text (a system may refuse it) or no
    # document judged relevant (graded 0 only: nothing to find, and ir-measures leaves
    # it out of every mean) is left out of both, and said so.
    queries = tuple(q for q in all_queries if q.text.strip() and _relevant(qrels.get(q.query_id)))
    kept = {q.query_id for q in queries}
    unjudged = [q for q in all_queries if q.query_id in qrels and q.query_id not in kept]
    if unjudged:
        logger.warning(
            "%s: %d judged queries left out (no text, or no document judged relevant)",
            root.name,
            len(unjudged),
        )
    if not queries:
        raise DatasetError(f"no query in {root / QUERIES_NAME} has a judgment")
    return BeirDataset(
        name=corpus_name(root),
        documents=documents,
        queries=queries,
        qrels={q.query_id: qrels[q.query_id] for q in queries},
        fingerprint=file_sha256(corpus_path),
        split=split,
        self_indexed=queries_indexed_as_documents(documents, queries),
    )


class _Hit(Protocol):
    @property
    def source_id(self) -> str: ...


class PassageSearch(Protocol):
    """What ``search_ids`` reads: a Tandem corpus, one node or sharded."""

    def search(self, query: str, top_k: int = ...) -> Sequence[_Hit]: ...


def search_ids(corpus: PassageSearch) -> Callable[[str, int], list[str]]:
    """``corpus``'s search as ``BeirDataset.ranking`` calls it: text and depth in, ids out."""

    def search(text: str, k: int) -> list[str]:
        return [hit.source_id for hit in corpus.search(text, top_k=k)]

    return search


def load_for_run(
    folder: str | Path, split: str | None = None, drop_titles: bool = False
) -> BeirDataset:
    """The collection a benchmark run scores: ``load_beir``, titles removed if asked."""
    dataset = load_beir(folder, split=split)
    return dataset.without_titles() if drop_titles else dataset


def _checked_split(split: str) -> str:
    """A split names a file in ``qrels/``: letters, digits, ``_``, ``-``, ``.``; no path."""
    name = split.strip()
    if not name or len(name) > 64 or not all(c.isalnum() or c in "_-." for c in name):
        raise DatasetError(f"not a split name (like test, dev or train): {split!r}")
    if name.startswith("."):
        raise DatasetError(f"not a split name (like test, dev or train): {split!r}")
    return name


def _default_split(root: Path) -> str:
    """The first split of ``QRELS_SPLITS`` with a qrels file; the first one when none has
    (``read_qrels`` then names the missing file)."""
    for split in QRELS_SPLITS:
        if (root / "qrels" / f"{split}.tsv").is_file():
            return split
    return QRELS_SPLITS[0]


def queries_indexed_as_documents(
    documents: Sequence[BenchDocument], queries: Sequence[BenchQuery]
) -> frozenset[str]:
    """Ids of the queries that are themselves documents: a document with the query's id
    whose text (title and body, or body) contains the query's text or is contained in it,
    compared with whitespace collapsed and case folded."""
    by_id = {q.query_id: q for q in queries}
    found = set()
    for document in documents:
        query = by_id.get(document.doc_id)
        if query is None:
            continue
        asked = _comparable(query.text)
        held = _comparable(document.full_text)
        if asked and held and (asked in held or held in asked):
            found.add(query.query_id)
    return frozenset(found)


def _comparable(text: str) -> str:
    return " ".join(text.split()).casefold()


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


def _relevant(judgements: Mapping[str, int] | None) -> bool:
    return judgements is not None and any(grade > 0 for grade in judgements.values())


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


def portable_path(path: Path) -> str:
    """``path`` as a result file records it: relative to the working directory, or
    ``~/...`` under the home directory; never absolute."""
    resolved = path.expanduser().resolve()
    home = Path.home().resolve()
    if resolved.is_relative_to(home) and not resolved.is_relative_to(Path.cwd().resolve()):
        return "~/" + resolved.relative_to(home).as_posix()
    return os.path.relpath(resolved, Path.cwd().resolve())


def dataset_record(dataset: BeirDataset, folder: Path) -> dict[str, object]:
    """What a result file says of the collection it scored: its name, its folder (relative
    to the working directory, never absolute), the judgements and their size."""
    return {
        "name": dataset.name,
        "path": portable_path(folder),
        "judgements": dataset.split,
        "documents": len(dataset.documents),
        "queries": len(dataset.queries),
    }
