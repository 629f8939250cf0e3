"""One on-disk tantivy index per corpus: the storage half of the tantivy backend.

Commit semantics - what is visible when:

- ``upsert`` and ``delete`` each commit before they return and reload the reader, so a
  search that starts after the call returns sees the change; a search already running
  keeps the consistent snapshot it started with. There is no pending, uncommitted state.
- A call that raises has written nothing: the writer rolls back on any error.
- Writing needs tantivy's single-writer lock. If another writer (this process or another)
  holds it, the call raises ``SparseIndexLockedError``; searching keeps working.
- ``commit()`` exists for callers that batch: everything is committed already, so it only
  reloads the reader to pick up commits made by another process (readers reload only
  then, or after a write through this object: never on their own).
- ``create_missing=False``: opening never creates an index (only ``clear()`` does), for
  owners that share the directory with other processes and rebuild it under their own
  lock. ``read_only=True``: never writes; a directory this process may not write to is
  read through a ``ShadowDirectory`` (tantivy locks a file even to read).

Schema and text layout: ``sparse.tantivy_schema``. The index is derived data: a
missing or corrupt directory raises ``SparseIndexCorruptError`` on write, and the owner
rebuilds it with ``clear()`` followed by ``upsert``.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from os import PathLike
from pathlib import Path

import tantivy

from sparse.analyzers import Analyzer, LanguageAnalyzers
from sparse.contracts import (
    DEFAULT_TITLE_WEIGHT,
    FieldKind,
    SparseDocument,
    is_field_name,
)
from sparse.errors import (
    SparseError,
    SparseIndexCorruptError,
    SparseIndexLockedError,
    is_contained,
)
from sparse.shadow_dir import ShadowDirectory
from sparse.tantivy_schema import (
    F_ANALYZER,
    F_ID,
    build_schema,
    check_title_weight,
    layout_document,
)

logger = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
_WRITER_HEAP_BYTES = 64_000_000  # per indexing thread
_BULK_DOCS = 5_000  # from this many documents a write indexes on several threads
_MAX_WRITER_THREADS = 4  # (small writes stay on one: every thread makes its own segment)


@dataclass(frozen=True)
class IndexView:
    """A consistent read snapshot: the searcher, the analyzers that hold documents, and
    how many documents BM25 counts (``documents``: every document names one analyzer, so
    the analyzers' document frequencies sum to tantivy's own count — deleted documents
    not yet merged away included, as in every term's document frequency — which the
    Python binding does not expose)."""

    searcher: tantivy.Searcher
    schema: tantivy.Schema
    analyzers_in_use: tuple[Analyzer, ...]
    documents: int = 0


class TantivyIndex:
    """A corpus's tantivy index at ``path``; see the module docstring for semantics.

    The constructor does no I/O. The index is opened, or created when ``path`` is missing
    or an empty directory, on first use. Thread-safe: writes are serialised, reads are not.
    ``fields`` declares the filterable fields (name -> kind) documents may carry.
    ``store_text=False`` indexes the body without storing it, for an owner that keeps the
    text elsewhere: hits carry no excerpt unless the backend is given that owner's texts
    (``TantivyBackend(texts=...)``). Every hit reads its stored document, and
    without the body those reads touch a small fraction of the blocks (measured on
    SciFact: 100 reads 0.34 ms instead of 1.06 ms), and the index is smaller.
    ``title_weight`` (1..``MAX_TITLE_WEIGHT``): how many times a title is indexed ahead of
    its body (``indexed_text``; the default ``DEFAULT_TITLE_WEIGHT`` is chosen on training
    judgements); an index built with another weight does not open (the owner rebuilds).
    """

    def __init__(
        self,
        path: str | PathLike[str],
        analyzers: LanguageAnalyzers | Mapping[int, Analyzer] | None = None,
        fields: Mapping[str, FieldKind] | None = None,
        *,
        store_text: bool = True,
        title_weight: int = DEFAULT_TITLE_WEIGHT,
        create_missing: bool = True,
        read_only: bool = False,
    ) -> None:
        self._title_weight = check_title_weight(title_weight)
        declared = dict(fields or {})
        for name, kind in declared.items():
            if not is_field_name(name) or not isinstance(kind, FieldKind):
                raise ValueError(f"invalid filterable field {name!r}: {kind!r}")
        self._fields = declared
        self._store_text = bool(store_text)
        if analyzers is None:
            analyzers = LanguageAnalyzers()
        elif not isinstance(analyzers, LanguageAnalyzers):
            analyzers = LanguageAnalyzers(by_language=analyzers)
        self._path = Path(path)
        # Checked on every search: a plain string spares pathlib's joins (~10 µs a call).
        self._meta_file = os.fspath(self._path / "meta.json")
        self._analyzers = analyzers
        self._lock = threading.RLock()
        self._index: tantivy.Index | None = None
        self._create_missing = bool(create_missing) and not read_only
        self._read_only = bool(read_only)
        self._shadow: ShadowDirectory | None = None
        self._told_unopenable = False  # a read-only index that cannot open says so once

    @property
    def path(self) -> Path:
        return self._path

    @property
    def analyzers(self) -> LanguageAnalyzers:
        return self._analyzers

    @property
    def fields(self) -> Mapping[str, FieldKind]:
        """The declared filterable fields (name -> kind)."""
        return dict(self._fields)

    @property
    def title_weight(self) -> int:
        return self._title_weight

    @property
    def stores_text(self) -> bool:
        """False for an index built with ``store_text=False`` (its hits carry no body)."""
        return self._store_text

    @cached_property
    def schema(self) -> tantivy.Schema:
        return build_schema(
            self._fields,
            store_text=self._store_text,
            title_weight=self._title_weight,
            analyzers=self._analyzers,
        )

    @cached_property
    def query_analyzers(self) -> Mapping[Analyzer, tantivy.TextAnalyzer]:
        """One ``TextAnalyzer`` per routed analyzer, to analyze query text exactly as
        documents."""
        return {analyzer: analyzer.build() for analyzer in self._analyzers.routed}

    def is_available(self) -> bool:
        """True when the index opens and its directory is intact. Never raises."""
        try:
            self._open()
        except SparseError:
            return False
        return os.path.isfile(self._meta_file)

    def view(self) -> IndexView:
        """A read snapshot for one search. Raises ``SparseIndexCorruptError``."""
        index = self._open()
        if not os.path.isfile(self._meta_file):
            raise SparseIndexCorruptError(f"index directory is gone: {self._path}")
        searcher = index.searcher()
        counts = {a: searcher.doc_freq(F_ANALYZER, a.value) for a in self._analyzers.routed}
        in_use = tuple(a for a, count in counts.items() if count > 0)
        return IndexView(
            searcher=searcher,
            schema=self.schema,
            analyzers_in_use=in_use,
            documents=sum(counts.values()),
        )

    def doc_count(self) -> int:
        """Number of live documents visible to searches now."""
        return int(self.view().searcher.num_docs)

    def upsert(self, docs: Sequence[SparseDocument]) -> None:
        """Add or replace (by ``source_id``) ``docs``, then commit; later ids win ties.

        A non-public document is not indexed (an indexed version of its id is deleted):
        no ``AccessContext`` can search it yet, and indexed it would still count in BM25's
        statistics — the document count, each term's document frequency, the average
        length — so the order of public hits would tell an anonymous caller which words
        non-public documents hold.
        """
        if isinstance(docs, SparseDocument):
            raise ValueError("upsert takes a sequence of SparseDocument, not a single one")
        checked = [(doc, self._to_tantivy(doc)) for doc in docs]  # every one validated
        prepared = [(doc.source_id, laid if doc.public else None) for doc, laid in checked]
        if prepared:
            threads = _bulk_threads() if len(prepared) >= _BULK_DOCS else 1
            self._write(lambda writer: _add_all(writer, prepared), threads)

    def delete(self, source_ids: Iterable[str]) -> None:
        """Delete the documents with these source ids (unknown ids are ignored), commit."""
        if isinstance(source_ids, str | bytes):  # read as its characters: "ab" as "a", "b"
            raise ValueError("delete takes a collection of ids, not a single string")
        ids = list(source_ids)
        for source_id in ids:
            if not isinstance(source_id, str):
                raise ValueError(f"source ids must be str, got {type(source_id).__name__}")
        if ids:
            self._write(lambda writer: _delete_all(writer, ids))

    def remove_temp_files(self) -> int:
        """Delete the temporary files killed writes left; returns how many. tantivy writes
        ``meta.json`` (and ``.managed.json``) through a ``.tmp*`` file it renames, and a
        process killed between the two leaves that file for good — its garbage collection
        knows only the files its commits list. Call it holding every writer off (the
        engine's write lock); a no-op on a read-only index."""
        if self._read_only:
            return 0
        removed = 0
        for stray in self._path.glob(".tmp*"):
            try:
                if stray.is_file() and not stray.is_symlink():
                    stray.unlink()
                    removed += 1
            except OSError:
                continue  # tried again at the next open
        return removed

    def collect_garbage(self) -> None:
        """Delete the files no commit refers to. A writer killed mid-commit leaves the
        files of its commit behind, named by its operation stamp; the next writer works
        at the same stamp (the last commit's) and cannot create them (``FileAlreadyExists``),
        so every write failed until the index was rebuilt. Call it holding every writer off
        (the engine's write lock)."""
        if self._read_only:
            return
        with self._lock:
            index = self._open()
            writer = self._writer(index, 1)
            try:
                writer.garbage_collect_files()
            except ValueError as exc:
                raise SparseError(f"cannot clean up {self._path}") from exc
            finally:
                writer.wait_merging_threads()

    def commit(self) -> None:
        """Everything is committed already; reload to see other processes' commits.
        ``SparseError`` when the files cannot be read (a drop or a rebuild elsewhere took
        them away mid-reload: tantivy's own ``ValueError`` reached a search before)."""
        index = self._open()
        if self._shadow is not None:
            self._shadow.sync()
        try:
            index.reload()
        except ValueError as exc:
            raise SparseError(f"cannot reload the index at {self._path}") from exc

    def clear(self) -> None:
        """Delete the whole directory and start an empty index (the rebuild path)."""
        if self._read_only:
            raise SparseError(f"index at {self._path} is open read-only")
        with self._lock:
            self._index = None
            try:
                if self._path.is_dir():
                    shutil.rmtree(self._path)
                elif self._path.exists():
                    self._path.unlink()
            except OSError as exc:
                raise SparseError(f"cannot clear index at {self._path}") from exc
            self._index = self._open_locked(create=True)

    def close(self) -> None:
        """Release the index; a later call reopens it."""
        with self._lock:
            self._index = None
            if self._shadow is not None:
                self._shadow.close()
                self._shadow = None

    def _open(self) -> tantivy.Index:
        index = self._index
        if index is not None:
            return index
        with self._lock:
            index = self._index
            if index is None:
                index = self._index = self._open_locked(create=self._create_missing)
            return index

    def _open_locked(self, *, create: bool) -> tantivy.Index:
        path = self._path
        try:
            if not create and not (path / "meta.json").is_file():
                raise SparseIndexCorruptError(f"no index at {path}")
            if not path.exists():
                path.mkdir(parents=True)
            if not path.is_dir():
                raise SparseIndexCorruptError(f"index path is not a directory: {path}")
            if not (path / "meta.json").exists() and any(path.iterdir()):
                raise SparseIndexCorruptError(f"not a tantivy index, not overwriting: {path}")
            if self._read_only and not os.access(path, os.W_OK):
                if self._shadow is None:
                    self._shadow = ShadowDirectory(path)
                path = self._shadow.sync()
            index = tantivy.Index(self.schema, str(path), reuse=True)
            # Readers see new commits when ``commit()`` (or a write here) reloads them,
            # never behind their owner's back: an owner that shares the directory with
            # other processes decides when its view moves.
            index.config_reader("manual")
        except SparseIndexCorruptError:
            raise
        except (ValueError, OSError) as exc:
            if self._read_only and not self._told_unopenable:
                # Its schema is another's (an older version's analyzers or title weight)
                # or it is damaged: only a writable open rebuilds it, and until then every
                # keyword search answers from its owner's fallback. Say so once, not per
                # search, and not silently.
                self._told_unopenable = True
                logger.warning(
                    "keyword index at %s cannot be opened read-only (%s: built by another "
                    "version or with other settings, or damaged); a writable open rebuilds "
                    "it from the store, keyword searches fall back until then",
                    path,
                    type(exc).__name__,
                )
            raise SparseIndexCorruptError(f"cannot open tantivy index at {path}") from exc
        for analyzer in self._analyzers.routed:
            index.register_tokenizer(analyzer.tokenizer_name, analyzer.build())
        return index

    def _write(self, action: Callable[[tantivy.IndexWriter], None], threads: int = 1) -> None:
        if self._read_only:
            raise SparseError(f"index at {self._path} is open read-only")
        with self._lock:
            index = self._open()
            if not (self._path / "meta.json").is_file():
                raise SparseIndexCorruptError(f"index directory is gone: {self._path}")
            writer = self._writer(index, threads)
            try:
                action(writer)
                writer.commit()
            except BaseException as exc:
                writer.rollback()
                if not is_contained(exc):  # an interrupt stays one
                    raise
                raise SparseError(f"write to {self._path} failed") from exc
            finally:
                writer.wait_merging_threads()
            index.reload()

    def _writer(self, index: tantivy.Index, threads: int) -> tantivy.IndexWriter:
        try:
            return index.writer(_WRITER_HEAP_BYTES * threads, threads)
        except ValueError as exc:
            if "LockBusy" in str(exc) or "lock" in str(exc).lower():
                raise SparseIndexLockedError(f"writer lock held on {self._path}") from exc
            raise SparseIndexCorruptError(f"cannot write to {self._path}") from exc

    def _to_tantivy(self, doc: SparseDocument) -> tantivy.Document:
        if not isinstance(doc, SparseDocument):
            raise ValueError(f"expected SparseDocument, got {type(doc).__name__}")
        if not isinstance(doc.source_id, str) or not doc.source_id:
            raise ValueError("a document needs a non-empty str source_id")
        for name in ("title", "text", "url"):
            if not isinstance(getattr(doc, name), str):
                raise ValueError(f"{name} must be a str, got {type(getattr(doc, name)).__name__}")
        if not _is_int64(doc.language_id) or doc.language_id < 0:
            raise ValueError(f"language_id must be an int >= 0, got {doc.language_id!r}")
        if doc.page_uid is not None and not _is_int64(doc.page_uid):
            raise ValueError(f"page_uid must be a 64-bit int or None, got {doc.page_uid!r}")
        analyzer = self._analyzers.for_language(doc.language_id)
        for name, value in doc.fields:
            kind = self._fields.get(name)
            declared = (kind is FieldKind.KEYWORD and isinstance(value, str)) or (
                kind is FieldKind.INTEGER and isinstance(value, int) and _is_int64(value)
            )
            if not declared:
                raise ValueError(f"field {name!r} is not declared as {type(value).__name__}")
        return layout_document(
            doc, analyzer, title_weight=self._title_weight, store_text=self._store_text
        )


def _add_all(
    writer: tantivy.IndexWriter, docs: Sequence[tuple[str, tantivy.Document | None]]
) -> None:
    for source_id, doc in docs:
        writer.delete_documents_by_term(F_ID, source_id)
        if doc is not None:
            writer.add_document(doc)


def _delete_all(writer: tantivy.IndexWriter, source_ids: Sequence[str]) -> None:
    for source_id in source_ids:
        writer.delete_documents_by_term(F_ID, source_id)


def _bulk_threads() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(_MAX_WRITER_THREADS, cores))


def _is_int64(value: object) -> bool:
    return (
        isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= _INT64_MAX
    )
