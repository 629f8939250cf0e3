"""The scrape endpoint over real HTTP, registry ownership, label hygiene, promtool lint."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from engine import CorpusConfig, Document, InvalidArgument, SearchEngine
from engine.config import EmbedderSpec, SentenceTransformerEmbedding
from engine.surfaces.metrics_http import serve_metrics
from tests.support.fakes import RecordingEmbedder
from tests.support.metrics_support import docs, fetch, parse, scrape, scrape_text, value

EXPECTED_FAMILIES = {
    "tandem_documents": "gauge",
    "tandem_documents_degraded": "gauge",
    "tandem_embedder_up": "gauge",
    "tandem_searches": "counter",
    "tandem_search_fallbacks": "counter",
    "tandem_sparse_arm_empty": "counter",
    "tandem_search_duration_seconds": "histogram",
    "tandem_arm_duration_seconds": "histogram",
    "tandem_embed_duration_seconds": "histogram",
    "tandem_repair_documents": "counter",
}


def _spec(model: str = "m") -> SentenceTransformerEmbedding:
    return SentenceTransformerEmbedding(model=model)


@pytest.fixture
def embedder() -> RecordingEmbedder:
    return RecordingEmbedder()


@pytest.fixture
def engine(tmp_path: Path, embedder: RecordingEmbedder) -> Iterator[SearchEngine]:
    def factory(spec: EmbedderSpec) -> RecordingEmbedder:
        return embedder

    with SearchEngine(tmp_path / "engine", embedder_factory=factory) as e:
        yield e


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) != 0


def test_the_document_gauges_say_nothing_of_non_public_documents(
    engine: SearchEngine, embedder: RecordingEmbedder
) -> None:
    """Regression: anyone may read /metrics, and ``tandem_documents`` counted non-public
    documents too (a scrape told how many hidden ones a corpus held, and when they came)."""
    corpus = engine.create_corpus(CorpusConfig(name="docs", embedder=_spec()))
    server = engine.serve_metrics(port=0)
    embedder.down = True  # every document degraded, public or not
    corpus.add(docs(3))
    corpus.add(
        Document(id=f"hidden{i}", text="alpha hidden", access_groups=frozenset({"staff"}))
        for i in range(5)
    )
    samples = scrape(server.url)
    assert value(samples, "tandem_documents", corpus="docs") == 3
    assert value(samples, "tandem_documents_degraded", corpus="docs") == 3
    assert corpus.stats()["documents"] == 8  # the operator's own count still says all
    embedder.down = False
    assert corpus.repair() == 8
    # Regression: the repair counter counted the healed non-public documents too.
    assert value(scrape(server.url), "tandem_repair_documents_total", corpus="docs") == 3
    timed = value(scrape(server.url), EMBED_COUNT, corpus="docs", purpose="documents")
    corpus.add(  # embedded, and not timed: a batch of non-public documents only
        Document(id=f"more{i}", text="beta hidden", access_groups=frozenset({"staff"}))
        for i in range(2)
    )
    embedder.down = True
    corpus.add(
        Document(id=f"late{i}", text="late hidden", access_groups=frozenset({"hr"}))
        for i in range(2)
    )
    embedder.down = False
    assert corpus.repair() == 2
    assert value(scrape(server.url), EMBED_COUNT, corpus="docs", purpose="documents") == timed
    corpus.add(docs(1, "pub"))  # a public one is timed, as before
    assert value(scrape(server.url), EMBED_COUNT, corpus="docs", purpose="documents") == timed + 1


EMBED_COUNT = "tandem_embed_duration_seconds_count"


def test_a_corpus_that_cannot_open_is_skipped_by_scrapes(
    tmp_path: Path, embedder: RecordingEmbedder, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: since scrapes open every corpus of the directory, one whose config did
    not parse made every scrape fail (the refresher raised into the exposition)."""
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as writer:
        writer.create_corpus(CorpusConfig(name="good", embedder=None)).add(docs(2))
        writer.create_corpus(CorpusConfig(name="bad", embedder=None))
    (tmp_path / "corpora" / "bad" / "config.json").write_text("{not json", encoding="utf-8")
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as engine:
        server = engine.serve_metrics()
        with caplog.at_level("WARNING", logger="engine.engine"):
            for _ in range(3):
                assert value(scrape(server.url), "tandem_documents", corpus="good") == 2
                assert value(scrape(server.url), "tandem_documents", corpus="bad") is None
        said = [r for r in caplog.records if "corpus bad not opened" in r.getMessage()]
        assert len(said) == 1  # once, not at every scrape


def test_scrape_parses_and_follows_degradation(
    engine: SearchEngine, embedder: RecordingEmbedder
) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="docs", embedder=_spec()))
    server = engine.serve_metrics(port=0)
    assert server.port > 0 and server.url == f"http://127.0.0.1:{server.port}/metrics"
    text = scrape_text(server.url)
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert EXPECTED_FAMILIES.items() <= families.items()
    assert value(parse(text), "tandem_documents_degraded", corpus="docs") == 0

    embedder.down = True
    corpus.add(docs(4))
    corpus.search("alpha bravo")
    samples = scrape(server.url)
    assert value(samples, "tandem_documents_degraded", corpus="docs") == 4
    assert value(samples, "tandem_documents", corpus="docs") == 4
    assert value(samples, "tandem_embedder_up", corpus="docs") == 0
    assert value(samples, "tandem_search_duration_seconds_count", corpus="docs") == 1

    embedder.down = False
    corpus.repair()
    corpus.search("alpha bravo")
    samples = scrape(server.url)
    assert value(samples, "tandem_documents_degraded", corpus="docs") == 0
    assert value(samples, "tandem_embedder_up", corpus="docs") == 1
    assert value(samples, "tandem_repair_documents_total", corpus="docs") == 4
    assert value(samples, "tandem_searches_total", corpus="docs", strategy="hybrid") == 1
    assert value(samples, "tandem_searches_total", corpus="docs", strategy="keyword") == 1
    assert value(samples, "tandem_embed_duration_seconds_count", corpus="docs", purpose="query")
    assert value(samples, "tandem_arm_duration_seconds_count", corpus="docs", arm="dense") == 1


def test_healthz_unknown_paths_methods_and_clean_stop(engine: SearchEngine) -> None:
    server = engine.serve_metrics()
    base = f"http://127.0.0.1:{server.port}"
    assert fetch(f"{base}/healthz")[0::2] == (200, "ok\n")
    assert fetch(f"{base}/nope")[0] == 404
    assert fetch(f"{base}/metrics?name[]=x")[0] == 200
    for path in ("/metrics", "/healthz"):  # the state of now: no cache may keep it
        with urllib.request.urlopen(f"{base}{path}", timeout=10) as answer:
            assert answer.headers.get_all("Cache-Control") == ["no-store"], path
            assert answer.headers["X-Content-Type-Options"] == "nosniff", path
    request = urllib.request.Request(f"{base}/metrics", data=b"x", method="POST")
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=5)
    assert info.value.code == 405
    server.stop()
    server.stop()  # idempotent
    assert not server.running
    assert _refused(server.port)


def test_a_refused_body_is_never_read_as_a_second_request(engine: SearchEngine) -> None:
    """The endpoint reads no request body; one smuggled inside a POST must not be
    answered as a request of its own on the kept-alive connection."""
    server = engine.serve_metrics()
    inner = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    request = (
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + str(len(inner)).encode()
        + b"\r\n\r\n"
        + inner
    )
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(4096):  # the server closes after its one answer
            answer += chunk
    assert answer.count(b"HTTP/1.1 ") == 1
    assert answer.startswith(b"HTTP/1.1 405")
    server.stop()


def test_engine_close_stops_its_endpoints(tmp_path: Path) -> None:
    engine = SearchEngine(tmp_path / "e")
    server = engine.serve_metrics()
    assert fetch(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
    engine.close()
    assert not server.running and _refused(server.port)
    with pytest.raises(InvalidArgument):
        engine.serve_metrics()


def test_bad_ports_are_rejected(engine: SearchEngine) -> None:
    for port in (-1, 65_536, True, "80"):
        with pytest.raises(ValueError):
            engine.serve_metrics(port=port)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        serve_metrics(object())  # type: ignore[arg-type]


def test_two_engines_in_one_process_do_not_collide(tmp_path: Path) -> None:
    a_embedder, b_embedder = RecordingEmbedder(), RecordingEmbedder()
    b_embedder.down = True
    before = {m.name for m in prometheus_client.REGISTRY.collect()}
    with (
        SearchEngine(tmp_path / "a", embedder_factory=lambda s: a_embedder) as a,
        SearchEngine(tmp_path / "b", embedder_factory=lambda s: b_embedder) as b,
    ):
        assert a.registry is not b.registry
        a.create_corpus(CorpusConfig(name="docs", embedder=_spec())).add(docs(2))
        b.create_corpus(CorpusConfig(name="docs", embedder=_spec())).add(docs(5))
        sa, sb = a.serve_metrics(), b.serve_metrics()
        assert sa.port != sb.port
        assert value(scrape(sa.url), "tandem_documents_degraded", corpus="docs") == 0
        assert value(scrape(sb.url), "tandem_documents_degraded", corpus="docs") == 5
        assert value(scrape(sa.url), "tandem_documents", corpus="docs") == 2
    after = {m.name for m in prometheus_client.REGISTRY.collect()}
    assert after == before
    assert not any(name.startswith("tandem") for name in after)


def test_labels_are_bounded_to_corpus_names_and_enum_values(
    engine: SearchEngine, embedder: RecordingEmbedder
) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="docs", embedder=_spec()))
    engine.create_corpus(CorpusConfig(name="kw", embedder=None)).add(docs(2))
    server = engine.serve_metrics()
    corpus.add(docs(3))
    for query in ("alpha", "bravo charlie", "zulu zulu zulu", "ünïcödé?"):
        corpus.search(query)
        engine.corpus("kw").search(query)
    embedder.failing = True
    corpus.search("what about this one")
    embedder.down = True
    corpus.search("and this")
    allowed = {
        "corpus": {"docs", "kw"},
        "strategy": {"hybrid", "keyword"},
        "reason": {"embedder_down", "embedder_error", "embedder_timeout"},
        "arm": {"sparse", "dense", "completion"},
        "purpose": {"query", "documents"},
    }
    samples = scrape(server.url)
    for sample in samples:
        for label, label_value in sample.labels.items():
            if label == "le":
                continue
            assert label in allowed, sample
            assert label_value in allowed[label], sample
    assert value(samples, "tandem_searches_total", corpus="kw", strategy="keyword") == 4


def test_dropping_a_corpus_forgets_its_series(engine: SearchEngine) -> None:
    engine.create_corpus(CorpusConfig(name="gone", embedder=_spec())).add(docs(2))
    engine.corpus("gone").search("alpha")
    server = engine.serve_metrics()
    assert value(scrape(server.url), "tandem_documents", corpus="gone") == 2
    engine.drop_corpus("gone")
    assert not [s for s in scrape(server.url) if s.labels.get("corpus") == "gone"]


def test_a_drop_in_multiprocess_mode_neither_warns_nor_fails(
    engine: SearchEngine, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """prometheus_client's ``remove`` only warns in multiprocess mode (`tandem serve
    --workers N`): every drop printed its warning once per series and worker."""
    engine.create_corpus(CorpusConfig(name="gone", embedder=_spec())).add(docs(2))
    engine.corpus("gone").search("alpha")
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        engine.drop_corpus("gone")
    assert "gone" not in engine.list_corpora()


def test_scrapes_reuse_one_reader_connection_per_store(
    engine: SearchEngine, embedder: RecordingEmbedder
) -> None:
    """Each scrape runs on a new HTTP thread; the store reads must not follow it."""
    corpus = engine.create_corpus(CorpusConfig(name="docs", embedder=_spec()))
    corpus.add(docs(2))
    server = engine.serve_metrics()
    scrape(server.url)
    readers = corpus._store._connections.reader_count()
    for _ in range(15):
        scrape(server.url)
    assert corpus._store._connections.reader_count() == readers


def _promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        reason = "promtool not installed (apt-get install prometheus)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI must run this test")
        pytest.skip(reason)
    return path


def test_promtool_lints_the_exposition(engine: SearchEngine, embedder: RecordingEmbedder) -> None:
    promtool = _promtool()
    corpus = engine.create_corpus(CorpusConfig(name="docs", embedder=_spec()))
    embedder.down = True
    corpus.add(docs(3))
    corpus.search("alpha")
    embedder.down = False
    corpus.repair()
    corpus.search("alpha")
    text = scrape_text(engine.serve_metrics().url)
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result


def test_stopped_metrics_servers_are_let_go(tmp_path: Path) -> None:
    """Regression: every ``serve_metrics`` stayed in the engine's list after ``stop()``
    (500 start/stop cycles held 500), for the life of the engine."""
    with SearchEngine(tmp_path) as engine:
        for _ in range(20):
            engine.serve_metrics().stop()
        server = engine.serve_metrics()
        assert engine._servers == [server]


def test_a_scrape_covers_corpora_nobody_opened_and_ones_created_since(
    tmp_path: Path, embedder: RecordingEmbedder
) -> None:
    """Regression: the endpoint published the gauges of corpora opened in its engine
    only, so ``SearchEngine(path).serve_metrics()`` showed none, and `tandem
    serve-metrics` never showed a corpus another process created after it started."""
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as writer:
        writer.create_corpus(CorpusConfig(name="old", embedder=_spec())).add(docs(3))
    with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as engine:
        server = engine.serve_metrics()
        assert value(scrape(server.url), "tandem_documents", corpus="old") == 3
        assert value(scrape(server.url), "tandem_embedder_up", corpus="old") is not None
        with SearchEngine(tmp_path, embedder_factory=lambda spec: embedder) as other:
            other.create_corpus(CorpusConfig(name="new", embedder=None)).add(docs(2))
        assert value(scrape(server.url), "tandem_documents", corpus="new") == 2
