"""Source ids as real collections spell them: Wikipedia titles, URIs, punctuation and
non-ASCII letters are accepted end to end (add, search, fetch, delete, the JSON Lines
loader and the HTTP API); whitespace, control and invisible characters are refused, and
so are ids with a ``.`` or ``..`` path segment (a URL client resolves them)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from engine import CorpusConfig, Document, InvalidArgument, SearchEngine, SourceNotFound
from engine import documents as engine_documents
from engine.limits import MAX_SOURCE_ID_CHARS, is_lookup_source_id, is_valid_source_id
from engine.surfaces.http import ServerSettings, create_app
from engine.surfaces.loaders import LineError, document_from_json

# Ids of BEIR collections (DBPedia-Entity, FEVER, Touché, NFCorpus) and others.
REAL_IDS = (
    "<dbpedia:Animalia_(book)>",
    '"Heroes"_(David_Bowie_album)',
    "Beyoncé",
    "Awaken,_My_Love!",
    "c67482ba-2019-04-18T13:32:05Z-00000-000",
    "MED-10",
    "C++",
    "100%_pure?",
    "東京タワー",
    "a" * MAX_SOURCE_ID_CHARS,
    "...",
    ".hidden",
    "a/b.c/...",
    "v1.2",
    "https://example.org/a?b=1#c",
)
REFUSED_IDS = (
    "",
    "two words",
    "tab\tinside",
    "line\nbreak",
    "nul\x00",
    "del\x7f",
    "\u202eevil",  # right-to-left override: an id would not read as what it is
    "zero\u200bwidth",
    "lone\ud800surrogate",
    "\u00a0",  # no-break space
    "a" * (MAX_SOURCE_ID_CHARS + 1),
)
# Refused for new documents only: an older version stored them, and they can still be
# looked up (``is_lookup_source_id``).
DOT_SEGMENT_IDS = (
    ".",  # ids until a review showed clients resolving them in URLs
    "..",
    "a/../b",  # the URL path segments a client resolves before sending
    "x/../../../victim",
    "./x",
    "x/.",
    "x\\..",  # WHATWG URL parsers read a backslash as a slash
    "%2e%2E",  # ... and %2e as a dot
    "x/.%2e/y",
)


@pytest.mark.parametrize("source_id", REAL_IDS)
def test_real_ids_are_valid(source_id: str) -> None:
    assert is_valid_source_id(source_id)


@pytest.mark.parametrize("source_id", REFUSED_IDS + DOT_SEGMENT_IDS)
def test_whitespace_control_invisible_characters_and_dot_segments_are_refused(
    tmp_path: Path, source_id: str
) -> None:
    assert not is_valid_source_id(source_id)
    with SearchEngine(tmp_path) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="ids", embedder=None))
        with pytest.raises(InvalidArgument, match="printable"):
            corpus.add([Document(id="fine", text="kept?"), Document(id=source_id, text="x")])
        assert len(corpus) == 0  # the batch was refused whole
        refused = InvalidArgument if source_id in REFUSED_IDS else SourceNotFound
        with pytest.raises(refused):
            corpus.fetch_source(source_id)


def test_an_id_an_older_version_stored_with_a_dot_segment_is_still_read_and_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Audit: the new write rule was applied to look-ups too, so documents an older
    version had stored under ``a/../b`` could no longer be fetched, and a memory
    ``recall`` whose hits held one failed whole."""
    legacy = ["./README.md", "docs/../guide.md", "a/./b", ".", ".."]
    with SearchEngine(tmp_path) as engine:
        corpus = engine.create_corpus(CorpusConfig(name="ids", embedder=None))
        with monkeypatch.context() as old_version:  # the rule without its dot segments
            old_version.setattr(engine_documents, "is_valid_source_id", is_lookup_source_id)
            corpus.add([Document(id=i, text=f"legacy shelf {n}") for n, i in enumerate(legacy)])
        assert {p.source_id for p in corpus.search("legacy shelf")} == set(legacy)
        for n, source_id in enumerate(legacy):
            assert corpus.fetch_source(source_id).text == f"legacy shelf {n}"
        with pytest.raises(InvalidArgument, match="path segment"):  # not added again
            corpus.add([Document(id=legacy[0], text="new text")])
        assert corpus.delete(legacy) == len(legacy) and len(corpus) == 0


def _dot_segment(value: str) -> bool:
    segments = re.split(r"[/\\]", value)
    return any(s.lower().replace("%2e", ".") in (".", "..") for s in segments)


@given(st.text(alphabet=st.sampled_from("ab./\\%2eE ") | st.characters(), max_size=300))
def test_the_rule_is_printable_without_whitespace_or_dot_segments(value: str) -> None:
    expected = (
        1 <= len(value) <= MAX_SOURCE_ID_CHARS
        and value.isprintable()
        and not any(ch.isspace() for ch in value)
        and not _dot_segment(value)
    )
    assert is_valid_source_id(value) is expected


def test_real_ids_round_trip_through_every_surface(tmp_path: Path) -> None:
    docs = [
        Document(id=source_id, title=f"Entry {i}", text=f"zebra crossing number{i}")
        for i, source_id in enumerate(REAL_IDS)
    ]
    with SearchEngine(tmp_path / "home") as engine:
        corpus = engine.create_corpus(CorpusConfig(name="ids", embedder=None))
        assert corpus.add(docs).added == len(REAL_IDS)
        found = {p.source_id for p in corpus.search("zebra crossing", top_k=50)}
        assert found == set(REAL_IDS)
        for i, source_id in enumerate(REAL_IDS):
            assert corpus.search(f"number{i}", top_k=1)[0].source_id == source_id
            assert corpus.fetch_source(source_id).text == f"zebra crossing number{i}"
        assert corpus.delete([REAL_IDS[0]]) == 1
        with pytest.raises(SourceNotFound):
            corpus.fetch_source(REAL_IDS[0])
    app = create_app(ServerSettings(home=tmp_path / "home"))
    with TestClient(app) as client:
        for source_id in REAL_IDS[1:]:
            response = client.get(f"/v1/corpora/ids/sources/{quote(source_id, safe='')}")
            assert response.status_code == 200, (source_id, response.text)
            assert response.json()["source_id"] == source_id
        hits = client.post("/v1/corpora/ids/search", json={"query": "zebra", "top_k": 50})
        assert {h["source_id"] for h in hits.json()["passages"]} == set(REAL_IDS[1:])


def test_the_loader_takes_real_ids_and_names_the_rule_for_refused_ones() -> None:
    for source_id in REAL_IDS:
        assert document_from_json({"id": source_id, "text": "x"}).id == source_id
    with pytest.raises(LineError, match="printable"):
        document_from_json({"id": "two words", "text": "x"})
    for dotted in ("..", "x/../../../victim"):
        with pytest.raises(LineError, match=r"no \. or \.\. path segment"):
            document_from_json({"id": dotted, "text": "x"})


def test_a_dot_segment_id_cannot_reach_the_corpus_route(tmp_path: Path) -> None:
    """Regression: ``..`` was a valid id, and then ``x/../../../k``; clients resolve dot
    segments out of a path (``/documents/..`` -> the corpus itself), so deleting that
    document dropped the corpus. Such ids are refused at upload now."""
    token = "t0ken-for-tests-0123456789"
    (tmp_path / "token").write_text(token, encoding="utf-8")
    auth = {"Authorization": f"Bearer {token}"}
    app = create_app(ServerSettings(home=tmp_path / "home", token_file=tmp_path / "token"))
    with TestClient(app) as client:
        client.post("/v1/corpora", json={"name": "k", "embedder": None}, headers=auth)
        upload = client.post(
            "/v1/corpora/k/documents",
            json=[
                {"id": "..", "text": "a"},
                {"id": ".", "text": "b"},
                # curl and requests sent a delete of this one to DELETE /v1/corpora/k
                {"id": "x/../../../k", "text": "d"},
                {"id": "ok", "text": "c"},
            ],
            headers=auth,
        )
        report = upload.json()
        assert upload.status_code == 200 and report["added"] == 1, report
        assert [r["line"] for r in report["rejected"]] == [1, 2, 3]
        assert "no . or .. path segment" in report["rejected"][0]["reason"]
        assert client.get("/v1/corpora/k/sources/ok").status_code == 200
