"""Adding a whole file: the report keeps a bounded number of rejection reasons."""

from __future__ import annotations

from pathlib import Path

from engine import CorpusConfig, Document, SearchEngine
from engine.surfaces import render
from engine.surfaces.bulk import MAX_KEPT_REJECTIONS, add_all
from engine.surfaces.loaders import Loaded, Rejected


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
