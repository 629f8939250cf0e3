"""Adding a whole file to a corpus: batches, per-document rejection, a running tally.

``Corpus.add`` is all-or-nothing per call (one invalid document refuses the batch). To
reject documents individually, a refused batch is split in halves and retried until the
offending documents stand alone; validation happens before anything is written, so a
refused batch costs only its validation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from engine import AddResult, Corpus, Document, InvalidArgument
from engine.surfaces.loaders import Loaded, Rejected

BATCH_SIZE = 512
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


def add_all(
    corpus: Corpus,
    lines: Iterable[Loaded | Rejected],
    *,
    batch_size: int = BATCH_SIZE,
    on_batch: Callable[[BulkReport], None] | None = None,
) -> BulkReport:
    """Add every loaded document to ``corpus``; collect rejections with their reasons.

    ``on_batch`` sees the running report after every batch (for a progress display).

    Engine errors other than ``InvalidArgument`` (disk full, ...) propagate: documents of
    batches that returned before are durable, the rest were not added.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    report = BulkReport()
    batch: list[Loaded] = []
    for item in lines:
        if isinstance(item, Rejected):
            report.reject(item)
            continue
        batch.append(item)
        if len(batch) >= batch_size:
            _add_batch(corpus, batch, report)
            batch = []
            if on_batch is not None:
                on_batch(report)
    if batch:
        _add_batch(corpus, batch, report)
    if on_batch is not None:
        on_batch(report)
    report.finish()
    return report


def _add_batch(corpus: Corpus, batch: Sequence[Loaded], report: BulkReport) -> None:
    pending: list[Sequence[Loaded]] = [batch]
    while pending:
        part = pending.pop()
        try:
            report.count(corpus.add(_documents(part), progress=False))
        except InvalidArgument as exc:
            if len(part) == 1:
                report.reject(Rejected(part[0].line, str(exc)))
            else:
                middle = len(part) // 2
                pending.extend((part[middle:], part[:middle]))  # first half is popped first


def _documents(part: Sequence[Loaded]) -> list[Document]:
    return [item.document for item in part]
