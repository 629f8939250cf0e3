"""Adding a whole file to a corpus: batches, per-document rejection, a running tally.

``Corpus.add`` is all-or-nothing per call (one invalid document refuses the batch). To
reject documents individually, each document first goes through the checks ``Corpus.add``
runs on it (``validate_document``, then ``encode_fields`` against the corpus's declared
fields), so a document the engine would refuse is rejected on its own, with the engine's
own words, and the rest of the batch is stored in one call. Should the engine still
refuse a batch (a check that looks at the batch, not one document), it is split in halves
and retried until the offending documents stand alone; validation happens before anything
is written, so a refused batch costs only its validation.

Each batch is one ``Corpus.add`` (all-or-nothing), so a whole file is not: an engine error
after some lines were stored or rejected (a write that waited out another process's
lock, a full disk) raises ``AddStopped``, which says what was stored and rejected and the
first line that was not.
Writes are upserts, so sending the file again is safe.

A batch holds at most ``batch_size`` documents and is sent early once its titles and
texts hold ``BATCH_TEXT_CHARS`` characters, so documents at the text cap do not pile up
gigabytes before the first write.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from engine import AddResult, Corpus, Document, EngineError, FieldType, InvalidArgument
from engine.documents import validate_document
from engine.fields import encode_fields
from engine.surfaces.loaders import Loaded, Rejected

BATCH_SIZE = 512
BATCH_TEXT_CHARS = 64 * 1024 * 1024
"""A batch is sent once its documents' titles and texts hold this many characters (64 Mi,
64 documents at the 1,000,000-character text cap), whatever ``batch_size`` allows."""
MAX_KEPT_REJECTIONS = 1_000
"""Rejections a report keeps (the earliest lines); the rest are only counted, so a file
of millions of bad lines costs no more memory than one of a thousand."""


@dataclass(slots=True)
class BulkReport:
    """What adding one file did, document by document."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    degraded: int = 0
    rejected: list[Rejected] = field(default_factory=list)
    """The rejections of the earliest lines, at most ``MAX_KEPT_REJECTIONS``, by line."""
    rejected_total: int = 0

    def reject(self, item: Rejected) -> None:
        self.rejected_total += 1
        self.rejected.append(item)
        if len(self.rejected) >= 2 * MAX_KEPT_REJECTIONS:
            self.finish()

    def finish(self) -> None:
        """Sorts the kept rejections by line and drops those past the cap."""
        self.rejected.sort(key=lambda r: r.line)
        del self.rejected[MAX_KEPT_REJECTIONS:]

    def count(self, result: AddResult) -> None:
        self.added += result.added
        self.updated += result.updated
        self.unchanged += result.unchanged
        self.degraded += result.degraded


class AddStopped(Exception):
    """An engine error (``error``, also the ``__cause__``) stopped ``add_all`` after it had
    stored or rejected lines: every line before ``next_line`` was stored or rejected, as
    ``report`` counts; the batch of lines ``next_line``..``last_line`` was being written
    (stored or not: an error can come after the store committed it); none after it."""

    def __init__(
        self, report: BulkReport, next_line: int, last_line: int, error: EngineError
    ) -> None:
        super().__init__(
            f"{error} — stopped at line {next_line}: the lines before it were stored or "
            f"rejected, the valid lines of {next_line}-{last_line} may have been stored (an "
            "error can follow the store's commit), none after; adding the same input again "
            "is safe (writes are upserts)"
        )
        self.report = report
        self.next_line = next_line
        self.last_line = last_line
        self.error = error


def add_all(
    corpus: Corpus,
    lines: Iterable[Loaded | Rejected],
    *,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[BulkReport], None] | None = None,
    report: BulkReport | None = None,
) -> BulkReport:
    """Add every loaded document to ``corpus``; collect rejections with their reasons.

    ``on_batch`` sees the running report after every batch (for a progress display).
    ``report``: the tally to keep (a new one by default), which the caller still holds
    when the add is interrupted part-way. An id repeated within a batch counts as an
    update by its later lines (the engine stores the last), as its lines in separate
    batches do.

    Engine errors other than ``InvalidArgument`` (disk full, a busy lock, ...) stop it:
    raised as they are while no line was stored or rejected yet, as ``AddStopped`` (what
    was stored and rejected, where it stopped) once one was — rejected lines of the
    batch that failed are not lost from the report.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    report = BulkReport() if report is None else report
    declared = corpus.config.fields
    batch: list[Loaded] = []
    chars = 0
    for item in lines:
        if isinstance(item, Rejected):
            report.reject(item)
            continue
        refusal = refusal_of(item.document, declared)
        if refusal is not None:
            report.reject(Rejected(item.line, refusal))
            continue
        batch.append(item)
        chars += len(item.document.title) + len(item.document.text)
        if len(batch) >= batch_size or chars >= BATCH_TEXT_CHARS:
            _add_batch(corpus, batch, report)
            batch, chars = [], 0
            if on_batch is not None:
                on_batch(report)
    if batch:
        _add_batch(corpus, batch, report)
    if on_batch is not None:
        on_batch(report)
    report.finish()
    return report


def refusal_of(document: Document, declared: Mapping[str, FieldType]) -> str | None:
    """Why ``Corpus.add`` would refuse ``document`` on its own (its message, word for
    word), or ``None``: the engine's per-document checks, in the engine's order."""
    try:
        checked = validate_document(document)
        encode_fields(checked.id, checked.fields, declared)
    except InvalidArgument as exc:
        return str(exc)
    return None


def _add_batch(corpus: Corpus, batch: Sequence[Loaded], report: BulkReport) -> None:
    pending: list[Sequence[Loaded]] = [batch]
    while pending:
        part = pending.pop()
        try:
            report.count(corpus.add(_documents(part), progress=False))
            report.updated += len(part) - len({item.document.id for item in part})
        except InvalidArgument as exc:
            if len(part) == 1:
                report.reject(Rejected(part[0].line, str(exc)))
            else:
                middle = len(part) // 2
                pending.extend((part[middle:], part[:middle]))  # first half is popped first
        except EngineError as exc:
            # Parts are added in line order: everything before this part was stored or
            # rejected, nothing after it.
            if report.added or report.updated or report.unchanged or report.rejected_total:
                report.finish()
                raise AddStopped(report, part[0].line, part[-1].line, exc) from exc
            raise


def _documents(part: Sequence[Loaded]) -> list[Document]:
    return [item.document for item in part]
