"""Adding a whole file: the report keeps a bounded number of rejection reasons, and the
loader reads what editors and tools write (a byte order mark, gzip) and says why a line
is not JSON."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from engine import CorpusConfig, Document, SearchEngine
from engine.surfaces import render
from engine.surfaces.bulk import MAX_KEPT_REJECTIONS, add_all
from engine.surfaces.loaders import DocumentFile, Loaded, Rejected


def test_millions_of_bad_lines_keep_only_the_earliest_reasons(tmp_path: Path) -> None:
    bad = 5 * MAX_KEPT_REJECTIONS + 7
    lines: list[Loaded | Rejected] = [Rejected(n, f"line {n} is bad") for n in range(bad, 0, -1)]
    lines.append(Loaded(bad + 1, Document(id="ok", text="a good line")))
    lines.append(Loaded(bad + 2, Document(id="bad id", text="refused by the engine")))
    with SearchEngine(tmp_path) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="c", embedder=None))
        report = add_all(corpus, lines)
        assert report.added == 1 and len(corpus) == 1
    assert report.rejected_total == bad + 1
    assert len(report.rejected) == MAX_KEPT_REJECTIONS
    assert [r.line for r in report.rejected] == list(range(1, MAX_KEPT_REJECTIONS + 1))
    summary, reasons = render.bulk_summary(report, show_rejections=3)
    assert summary.endswith(f"rejected {bad + 1}")
    assert reasons.splitlines()[-1] == f"... and {bad + 1 - 3} more rejected lines"


@pytest.mark.parametrize("compressed", [False, True])
def test_a_file_may_start_with_a_utf8_byte_order_mark(tmp_path: Path, compressed: bool) -> None:
    content = b"\xef\xbb\xbf" + b'{"id": "a", "text": "one"}\n{"id": "b", "text": "two"}\n'
    path = tmp_path / "docs.jsonl"
    path.write_bytes(gzip.compress(content) if compressed else content)
    verdicts = list(DocumentFile(path))
    assert all(isinstance(v, Loaded) for v in verdicts), verdicts
    assert [v.document.id for v in verdicts if isinstance(v, Loaded)] == ["a", "b"]


def test_a_line_with_an_over_long_integer_says_so_not_too_deep(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_bytes(
        b'{"id": "a", "language_id": ' + b"9" * 5_000 + b"}\n" + b"[" * 100_000 + b"\n"
    )
    long_integer, too_deep = list(DocumentFile(path))
    assert isinstance(long_integer, Rejected) and isinstance(too_deep, Rejected)
    assert long_integer.line == 1 and "4300 digits" in long_integer.reason
    assert "nested" not in long_integer.reason
    assert too_deep.reason == "not valid JSON: too deeply nested"
