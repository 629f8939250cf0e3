"""Agent memory: ``remember(text, scope)`` and ``recall(query, scope)`` over one corpus.

A memory corpus is an ordinary corpus that declares a ``scope`` keyword field; a memory is
an ordinary public document whose ``scope`` field says whose or which task's memory it is
(an agent, a user, a project). ``recall`` is ``Corpus.search`` filtered by scope — hybrid
when the corpus has an embedder, keyword otherwise — so every search rule holds: no mode,
clamped inputs, public documents only, no text in logs or metrics.

The corpus is created on the first ``remember`` when it does not exist yet (with the
embedder given to ``Memory``); ``recall`` before any ``remember`` finds nothing. A memory's
id defaults to a digest of its scope and text, so remembering the same thing twice stores
it once.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from engine import (
    Corpus,
    CorpusConfig,
    CorpusExists,
    CorpusNotFound,
    Document,
    FieldType,
    InvalidArgument,
    SearchEngine,
    SentenceTransformerEmbedding,
    SourceNotFound,
)
from engine.config import EmbedderSpec
from engine.documents import validate_document
from engine.fields import is_keyword_value
from engine.limits import MAX_TITLE_CHARS

__all__ = [
    "DEFAULT_MEMORY_CORPUS",
    "MAX_MEMORY_CHARS",
    "SCOPE_FIELD",
    "Memory",
    "Recalled",
    "Remembered",
]

DEFAULT_MEMORY_CORPUS = "memory"
SCOPE_FIELD = "scope"
MAX_MEMORY_CHARS = 20_000
"""A memory's text holds at most this many characters (memories are notes, not documents)."""


@dataclass(frozen=True, slots=True)
class Remembered:
    """What ``remember`` stored: the memory's id, its scope, and whether it was new."""

    id: str
    scope: str
    added: bool


@dataclass(frozen=True, slots=True)
class Recalled:
    """One recalled memory, best first: its id, title, full text and fused score."""

    id: str
    title: str
    text: str
    score: float


def _check_scope(scope: object) -> str:
    # Printable too (no C1 controls, zero-width or bidi characters), and no space at
    # either end (nor only spaces): a scope that prints like another ("alice" and
    # "alice\u200b", "bob" and " bob ") would read as the same one in answers.
    if not is_keyword_value(scope) or not isinstance(scope, str) or not scope.isprintable():
        raise InvalidArgument("scope must be 1-256 printable characters")
    if scope.strip() != scope:  # "   " too: it is not empty, its strip() is
        raise InvalidArgument(
            "scope must be 1-256 printable characters, not starting or ending with a space"
        )
    return scope


def memory_id(text: str, scope: str) -> str:
    """The default id of a memory: the same text in the same scope is one memory."""
    digest = hashlib.sha256(f"{scope}\x00{text}".encode()).hexdigest()
    return f"m-{digest[:32]}"


class Memory:
    """Remember and recall short texts by scope, in corpus ``corpus`` of ``engine``.

    ``embedder`` is used only when the corpus has to be created (``None``: keyword only).
    """

    def __init__(
        self,
        engine: SearchEngine,
        corpus: str = DEFAULT_MEMORY_CORPUS,
        *,
        embedder: EmbedderSpec | None = SentenceTransformerEmbedding(),  # noqa: B008 (frozen)
    ) -> None:
        self._engine = engine
        self._name = corpus
        self._embedder = embedder

    @property
    def corpus_name(self) -> str:
        return self._name

    def remember(
        self, text: str, scope: str, *, title: str = "", id: str | None = None
    ) -> Remembered:
        """Store ``text`` under ``scope`` (durable when this returns).

        Raises ``InvalidArgument`` for empty or over-long text (``MAX_MEMORY_CHARS``), a
        scope that is not a keyword value (or not printable, or with a space at either
        end), an id outside the source-id grammar, anything
        ``Corpus.add`` refuses in a document (a NUL character, ...), or a corpus of that name
        that is not a memory corpus. A refused memory creates no corpus: the document is
        checked before the corpus is created or opened.
        """
        if not isinstance(text, str) or not text.strip():
            raise InvalidArgument("a memory needs non-empty text")
        if len(text) > MAX_MEMORY_CHARS:
            raise InvalidArgument(
                f"a memory holds at most {MAX_MEMORY_CHARS} characters, got {len(text)}"
            )
        if not isinstance(title, str) or len(title) > MAX_TITLE_CHARS:
            raise InvalidArgument(f"title must be a string of at most {MAX_TITLE_CHARS} characters")
        scope = _check_scope(scope)
        doc_id = memory_id(text, scope) if id is None else id
        document = Document(id=doc_id, title=title, text=text, fields={SCOPE_FIELD: scope})
        validate_document(document)  # a refused memory leaves no corpus behind
        corpus = self._corpus(create=True)
        assert corpus is not None
        # The check and the write under one hold of the write lock: checked outside it,
        # two scopes remembering one id at once both passed, and one replaced the other.
        with corpus._writing():
            # Whoever chose the id (the caller, or ``memory_id`` from scope and text):
            unheld = ({SCOPE_FIELD: frozenset([scope])}, True)  # no document holds the id
            fields, public = corpus._field_values([doc_id]).get(doc_id, unheld)
            if fields.get(SCOPE_FIELD) != frozenset([scope]) or not public:
                # An id names one memory in one scope: replacing another scope's would
                # lose it through a caller who cannot even see it — so would replacing a
                # document several scopes share (added with a list of scopes), which
                # every one of them is refused; a non-public document is no memory to
                # replace (it gets the same words, though a refusal of an id that
                # fetch_source calls absent still tells that one holds it: README says
                # to keep non-public documents out of a memory corpus).
                raise InvalidArgument(f"memory id {doc_id!r} is taken in another scope")
            result = corpus.add([document], progress=False)
        return Remembered(id=doc_id, scope=scope, added=result.added == 1)

    def recall(self, query: str, scope: str | None = None, top_k: int = 5) -> list[Recalled]:
        """The memories that best match ``query``, best first, within ``scope`` if given.

        Clamped like ``Corpus.search`` (a too-short query recalls nothing). Before the
        first ``remember`` there is nothing to recall: ``[]``.
        """
        filters = None if scope is None else {SCOPE_FIELD: _check_scope(scope)}
        corpus = self._corpus(create=False)
        if corpus is None:
            return []
        recalled: list[Recalled] = []
        for hit in corpus.search(query, top_k=top_k, filters=filters):
            try:
                source = corpus.fetch_source(hit.source_id)
            except SourceNotFound:  # forgotten between the search and the read
                continue
            recalled.append(Recalled(hit.source_id, hit.title, source.text, hit.score))
        return recalled

    def _corpus(self, *, create: bool) -> Corpus | None:
        try:
            corpus = self._engine.corpus(self._name)
        except CorpusNotFound:
            if not create:
                return None
            config = CorpusConfig(
                name=self._name,
                embedder=self._embedder,
                fields={SCOPE_FIELD: FieldType.KEYWORD},
            )
            try:
                corpus = self._engine.create_corpus(config)
            except CorpusExists:  # created meanwhile by another caller
                corpus = self._engine.corpus(self._name)
        if corpus.config.fields.get(SCOPE_FIELD) is not FieldType.KEYWORD:
            raise InvalidArgument(
                f"corpus {self._name!r} is not a memory corpus: it declares no "
                f"{SCOPE_FIELD!r} keyword field"
            )
        return corpus
