"""The BEIR loader: layout, graded qrels with a header, judged queries only, errors."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from bench.dataset import BenchDocument, load_beir, read_qrels
from bench.errors import DatasetError
from tests.bench.tiny_beir import TINY_DOCS, write_beir


def test_loads_documents_queries_and_graded_qrels(tiny_beir: Path) -> None:
    data = load_beir(tiny_beir)
    assert data.name == "tiny"
    assert [d.doc_id for d in data.documents] == [d[0] for d in TINY_DOCS]
    assert data.documents[1].title == "Error E-4021 while syncing"
    assert data.qrels["q3"] == {"t3": 2, "t6": 0}
    assert data.qrels["q4"] == {"t4": 1}


def test_keeps_only_queries_with_a_relevant_judgment(tiny_beir: Path) -> None:
    ids = [q.query_id for q in load_beir(tiny_beir).queries]
    assert "q9" not in ids  # in queries.jsonl, never judged
    assert "q5" not in ids  # judged, but nothing relevant: ir-measures leaves it out too
    assert ids == ["q1", "q2", "q3", "q4"]


def test_a_judged_query_without_text_is_left_out_not_timed(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "b")
    with (root / "queries.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "q10", "text": "  "}) + "\n")
        handle.write(json.dumps({"_id": "q11"}) + "\n")
    with (root / "qrels" / "test.tsv").open("a", encoding="utf-8") as handle:
        handle.write("q10\tt1\t1\nq11\tt2\t1\n")
    assert [q.query_id for q in load_beir(root).queries] == ["q1", "q2", "q3", "q4"]


def test_gzipped_corpus_gives_same_documents_and_fingerprint_differs(tmp_path: Path) -> None:
    plain = load_beir(write_beir(tmp_path / "plain"))
    zipped = load_beir(write_beir(tmp_path / "zipped", gzip_corpus=True))
    assert plain.documents == zipped.documents
    assert plain.fingerprint != zipped.fingerprint  # the key hashes the file as stored


def test_full_text_joins_title_and_body() -> None:
    assert BenchDocument("a", "Title", "Body").full_text == "Title\nBody"
    assert BenchDocument("a", "", "Body").full_text == "Body"


def test_qrels_header_is_optional_and_negative_grades_become_zero(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_text("1\td1\t2\n1\td2\t-1\n\n", encoding="utf-8")
    assert read_qrels(path) == {"1": {"d1": 2, "d2": 0}}


def test_qrels_accepts_the_four_column_trec_form(tmp_path: Path) -> None:
    path = tmp_path / "q.tsv"
    path.write_text("query-id\tcorpus-id\tscore\n7\tQ0\td3\t1\n", encoding="utf-8")
    assert read_qrels(path) == {"7": {"d3": 1}}


@pytest.mark.parametrize("missing", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    root = write_beir(tmp_path / "b")
    (root / missing).unlink()
    with pytest.raises(DatasetError, match=Path(missing).name.split(".")[0]):
        load_beir(root)


def test_bad_json_line_reports_file_and_line(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "b")
    with (root / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("{not json\n")
    with pytest.raises(DatasetError, match=r"corpus.jsonl:7"):
        load_beir(root)


def test_bad_qrels_line_is_rejected(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "b")
    with (root / "qrels" / "test.tsv").open("a", encoding="utf-8") as handle:
        handle.write("q1\tt1\n")
    with pytest.raises(DatasetError, match=r"test\.tsv"):
        load_beir(root)


def test_head_keeps_queries_and_changes_fingerprint(tiny_beir: Path) -> None:
    data = load_beir(tiny_beir)
    head = data.head(2)
    assert len(head.documents) == 2
    assert head.queries == data.queries
    assert head.fingerprint != data.fingerprint
    with pytest.raises(ValueError):
        data.head(0)


def test_spread_sample_is_evenly_spaced_and_clamped(tiny_beir: Path) -> None:
    data = load_beir(tiny_beir)
    everything = data.spread_sample(10_000)
    assert everything == data.documents
    two = data.spread_sample(2)
    half = len(data.documents) // 2
    assert two == (data.documents[0], data.documents[half])
    with pytest.raises(ValueError):
        data.spread_sample(0)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="not a directory"):
        load_beir(tmp_path / "nope")


def test_gzip_helper_roundtrip(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "g", gzip_corpus=True)
    with gzip.open(root / "corpus.jsonl.gz", "rt", encoding="utf-8") as handle:
        assert handle.readline().startswith('{"_id": "t1"')


def test_nul_and_lone_surrogates_become_storable_for_every_system(tmp_path: Path) -> None:
    """Scraped collections carry them now and then; each system gets the same cleaned text
    (and Tandem, which refuses both, gets the collection at all)."""
    import json

    from engine import CorpusConfig, Document, SearchEngine

    root = write_beir(tmp_path / "b")
    with (root / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        handle.write(json.dumps({"_id": "odd", "title": "nul\u0000title", "text": "x\ud800y 😀"}))
        handle.write("\n")
    odd = load_beir(root).documents[-1]
    assert (odd.doc_id, odd.title, odd.text) == ("odd", "nul title", "x\ufffdy 😀")
    with SearchEngine(tmp_path / "engine") as engine:
        corpus = engine.create_corpus(CorpusConfig(name="b", embedder=None))
        added = corpus.add([Document(id=d.doc_id, title=d.title, text=d.text) for d in [odd]])
        assert added.added == 1


def test_without_a_test_split_the_dev_judgements_are_scored(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "b")
    test = load_beir(root)
    (root / "qrels" / "test.tsv").rename(root / "qrels" / "dev.tsv")
    dev = load_beir(root)
    assert (test.split, dev.split) == ("test", "dev")
    assert dev.qrels == test.qrels


def test_a_named_split_is_read_and_a_missing_one_is_named(tmp_path: Path) -> None:
    root = write_beir(tmp_path / "b")
    (root / "qrels" / "train.tsv").write_text("q2\tt1\t1\n", encoding="utf-8")
    train = load_beir(root, split="train")
    assert train.split == "train"
    assert train.qrels == {"q2": {"t1": 1}}
    assert [q.query_id for q in train.queries] == ["q2"]
    with pytest.raises(DatasetError, match=r"dev\.tsv"):
        load_beir(root, split="dev")
    for bad in ("../test", "qrels/test", "", ".hidden", "x" * 65):
        with pytest.raises(DatasetError, match="not a split name"):
            load_beir(root, split=bad)


def _with_corpus(root: Path, extra: list[dict[str, str]]) -> Path:
    with (root / "corpus.jsonl").open("a", encoding="utf-8") as handle:
        for record in extra:
            handle.write(json.dumps(record) + "\n")
    return root


def test_a_query_that_is_a_document_is_found_by_id_and_text(tmp_path: Path) -> None:
    root = _with_corpus(
        write_beir(tmp_path / "b"),
        [
            # q2 is indexed as a document (ArguAna, Quora): same id, same words
            {"_id": "q2", "title": "", "text": "  Forgot my\nPassword "},
            # q4's id names a document by accident (Cranfield, CISI): other text
            {"_id": "q4", "title": "Mesh routers", "text": "Cover a large house."},
        ],
    )
    data = load_beir(root)
    assert data.self_indexed == frozenset({"q2"})
    assert data.head(len(TINY_DOCS)).self_indexed == frozenset()


def test_ranking_leaves_out_the_query_s_own_document_only(tmp_path: Path) -> None:
    root = _with_corpus(
        write_beir(tmp_path / "b"),
        [{"_id": "q2", "title": "Forgot my password", "text": "What do I do now?"}],
    )
    data = load_beir(root)
    asked: list[int] = []

    def search(text: str, k: int) -> list[str]:
        asked.append(k)
        return ["q2", "t1", "q4", "t3"][:k]

    by_id = {q.query_id: q for q in data.queries}
    assert data.self_indexed == frozenset({"q2"})
    assert data.ranking(by_id["q2"], search, 2) == ["t1", "q4"]
    assert data.ranking(by_id["q4"], search, 2) == ["q2", "t1"]  # not q4's own document
    assert asked == [3, 2]


def test_without_titles_is_the_same_collection_with_no_title(tmp_path: Path) -> None:
    root = _with_corpus(
        write_beir(tmp_path / "b"),
        [{"_id": "q2", "title": "Forgot my password", "text": "What do I do now?"}],
    )
    data = load_beir(root)
    bare = data.without_titles()
    assert bare.name == "b-notitle"
    assert [d.doc_id for d in bare.documents] == [d.doc_id for d in data.documents]
    assert all(d.title == "" and d.full_text == d.text for d in bare.documents)
    assert (bare.queries, bare.qrels, bare.split) == (data.queries, data.qrels, data.split)
    assert bare.fingerprint != data.fingerprint  # its vectors are cached apart
    # q2's document named the query only in its title
    assert (data.self_indexed, bare.self_indexed) == (frozenset({"q2"}), frozenset())
