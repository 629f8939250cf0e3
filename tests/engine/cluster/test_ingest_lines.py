"""Distributed ingest reads JSON Lines as ``tandem add`` does: lines end at ``\\n`` only,
each line is decoded on its own, gzip is told by content, and a row ``Corpus.add`` would
refuse is rejected alone — never the whole job."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engine import CorpusConfig, FieldType, SearchableCorpus, SearchEngine
from engine.errors import SourceNotFound
from engine.surfaces.bulk import add_all
from engine.surfaces.loaders import DocumentFile

pytest.importorskip("ray.data")

from engine.cluster import ShardedCorpus
from engine.cluster.ingest import ingest
from engine.cluster.ingest_rows import file_lines

FIELDS = {"year": FieldType.INTEGER, "author": FieldType.KEYWORD}
BOM = b"\xef\xbb\xbf"


def _line(row: object) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode("utf-8") + b"\n"


def _hostile_file() -> bytes:
    """Rows `tandem add` takes or rejects one by one, and Ray's text reader did not."""
    return b"".join(
        [
            BOM + _line({"id": "g0", "text": "good zero"}),  # a byte order mark first
            # Legal inside a JSON string, and line breaks to str.splitlines():
            _line({"id": "sep", "text": "a\u2028b \u2029 c \x85 d \x1c e"}),
            b'{"id": "latin", "text": "caf\xe9"}\n',  # not UTF-8: this line only
            b"[" * 100_000 + b"]" * 100_000 + b"\n",  # nested past the recursion limit
            b'{"id": "s1", "text": "broken \\ud800 pair"}\n',  # a lone surrogate
            _line({"id": "f1", "text": "x", "year": 1.5}),  # no integer
            _line({"id": "d1", "text": "x", "author": {"ada": 1}}),  # no keyword
            _line({"id": "x", "text": "valid first row"}),
            _line({"id": "x", "text": "refused last row", "year": "nope"}),
            *(_line({"id": f"g{i}", "text": f"good {i}", "year": 2000 + i}) for i in range(1, 6)),
        ]
    )


IDS = ["g0", "sep", "latin", "s1", "f1", "d1", "x", *(f"g{i}" for i in range(1, 6))]


def _text_or_none(corpus: SearchableCorpus, source_id: str) -> str | None:
    try:
        return corpus.fetch_source(source_id).text
    except SourceNotFound:
        return None


def test_file_lines_cut_lines_as_the_loader_does() -> None:
    data = BOM + _line({"id": "a", "text": "x\u2028y"}) + b"\n  \n" + b"\xff\n"
    rows = list(file_lines({"bytes": data, "path": "/some/where/in.txt"}))
    first = json.dumps({"id": "a", "text": "x\u2028y"}, ensure_ascii=False) + "\n"
    assert [(r["text"], r["error"], r["where"]) for r in rows] == [
        (first, "", "in.txt line 1"),
        ("", "not valid UTF-8", "in.txt line 4"),
    ]


def test_hostile_rows_are_rejected_alone_as_tandem_add_rejects_them(
    ray_cluster: None, tmp_path: Path
) -> None:
    """Regression: a lone surrogate, a float in an integer field, JSON nested too deep or
    one byte that is not UTF-8 failed the whole ingest part-written; U+2028 cut a line in
    pieces; a byte order mark cost the first row; a dict field value was stored as its
    keys; a repeated id whose last row was bad lost its good first row; and a gzip file
    needed a .gz name."""
    source = tmp_path / "rows.txt"  # gzip, told by content
    source.write_bytes(gzip.compress(_hostile_file()))
    with SearchEngine(tmp_path / "single") as engine:
        single = engine.create_corpus(CorpusConfig(name="one", embedder=None, fields=FIELDS))
        expected = add_all(single, DocumentFile(source, FIELDS))
        stored = {i: _text_or_none(single, i) for i in IDS}
        stored = {i: text for i, text in stored.items() if text is not None}
    corpus = ShardedCorpus.create(
        tmp_path / "sharded", CorpusConfig(name="many", embedder=None, fields=FIELDS), 2
    )
    try:
        report = ingest(corpus, source, embed_actors=1, batch_size=4, progress=False)
        assert report.rejected == expected.rejected_total == 6
        assert report.written == len(stored) == 8
        assert {i: _text_or_none(corpus, i) for i in stored} == stored
        assert stored["x"] == "valid first row"
        assert not {"latin", "s1", "f1", "d1"} & set(stored)
        assert all(_text_or_none(corpus, i) is None for i in ("latin", "s1", "f1", "d1"))
        reasons = "\n".join(report.rejections)
        assert "rows.txt line 3: not valid UTF-8" in reasons
        assert "rows.txt line 4: not valid JSON: too deeply nested" in reasons
        assert "lone surrogate" in reasons
    finally:
        corpus.close()
