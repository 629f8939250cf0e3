"""The search route's fast lane answers exactly what the declared FastAPI route answers.

Every request below is sent to two apps over the same engine directory: the real one
(lane in front) and one with the lane removed, so FastAPI's route answers it. Status,
headers that matter and JSON must agree; a spy proves the lane really answered the
well-formed ones (else the comparison would prove nothing). Also: which searches run
on the event loop and which on a worker thread, and the request metrics' route label.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from engine import Corpus, CorpusConfig, Document
from engine.surfaces.http import ServerSettings, create_app, search_lane
from engine.surfaces.http.search_lane import SearchLane
from sparse.tantivy_index import TantivyIndex
from tests.engine.surfaces.test_http_api import _build, _engine


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("lane") / "engine"
    _build(path)  # corpora "help" (hybrid, fake embedder), "kw" (keyword), "memory"
    return path


def _app(home: Path, *, lane: bool) -> FastAPI:
    app = create_app(ServerSettings(home=home), engine_factory=_engine)
    if not lane:
        app.user_middleware = [m for m in app.user_middleware if m.cls is not SearchLane]  # type: ignore[comparison-overlap]
    return app


@pytest.fixture(scope="module")
def with_lane(home: Path) -> Iterator[TestClient]:
    with TestClient(_app(home, lane=True)) as client:
        yield client


@pytest.fixture(scope="module")
def without_lane(home: Path) -> Iterator[TestClient]:
    with TestClient(_app(home, lane=False)) as client:
        yield client


JSON = {"content-type": "application/json"}

# (corpus, raw body, whether the lane itself should answer it)
REQUESTS: list[tuple[str, bytes, bool]] = [
    ("kw", b'{"query": "reset password"}', True),
    ("help", b'{"query": "reset password"}', True),
    ("kw", b'{"query": "password", "top_k": 2, "offset": 1}', True),
    ("kw", b'{"query": "password", "top_k": -5, "offset": 99999}', True),
    ("kw", b'{"query": "password", "mode": "keyword"}', True),
    ("help", b'{"query": "password", "filters": {"year": {"gte": 2021}}}', True),
    ("kw", b'{"query": "password", "filters": [{"author": "ops"}, {"year": 2021}]}', True),
    ("kw", b'{"query": "password", "filters": {"nope": 1}}', True),  # engine: 422 naming it
    ("kw", b'{"query": "password", "filters": {"year": "soon"}}', True),
    ("kw", b'{"query": "password", "filters": {"year": 9223372036854775807}}', True),
    # Past 64 bits orjson reads a float where json keeps an int: the route answers.
    ("kw", b'{"query": "password", "filters": {"year": 100000000000000000000}}', False),
    ("kw", b'{"query": "password", "filters": {"year": -18446744073709551617}}', False),
    ("kw", b'{"query": "x"}', True),  # too short: no passages
    ("kw", b'{"query": "vault password"}', True),  # the private document stays out
    ("absent", b'{"query": "password"}', True),  # 404 corpus_not_found
    ("kw", b'{"query": "password", "top_k": "three"}', False),  # model refuses: FastAPI
    ("kw", b'{"query": "password", "bogus": 1}', False),
    ("kw", b'{"top_k": 3}', False),
    ("kw", b'{"query": "password"', False),  # not JSON
    ("kw", b'{"query": "pass\xffword"}', False),  # not UTF-8
    ("kw", b"[" * 5_000 + b"]" * 5_000, False),  # deeper than either parser goes
    # orjson before 3.10 recursed without a limit: 200,000 levels killed the server.
    ("kw", b'{"query": "password", "filters": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", False),
    ("kw", b'{"query": "password", "filters": {"year": -9223372036854775809}}', False),
    ("kw", b'{"query": "password", "filters": {"year": -9223372036854775808}}', False),
    ("kw", b'{"query": NaN}', False),
    ("kw", b"[1, 2]", False),
    ("kw", b"", False),
    ("Bad-Name", b'{"query": "password"}', False),  # the path pattern refuses it
]


@pytest.mark.parametrize(("corpus", "body", "lane_answers"), REQUESTS)
def test_the_lane_and_the_route_give_the_same_answer(
    with_lane: TestClient,
    without_lane: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    corpus: str,
    body: bytes,
    lane_answers: bool,
) -> None:
    parsed: list[object] = []
    real_parse = search_lane._parse

    def spy(raw: bytes) -> Any:
        request = real_parse(raw)
        parsed.append(request)
        return request

    monkeypatch.setattr(search_lane, "_parse", spy)
    url = f"/v1/corpora/{corpus}/search"
    fast = with_lane.post(url, content=body, headers=JSON)
    slow = without_lane.post(url, content=body, headers=JSON)
    assert (fast.status_code, fast.json()) == (slow.status_code, slow.json())
    assert fast.headers["content-type"] == slow.headers["content-type"] == "application/json"
    for name, value in (("x-content-type-options", "nosniff"), ("cache-control", "no-store")):
        assert fast.headers.get_list(name) == slow.headers.get_list(name) == [value]
    answered_by_lane = bool(parsed) and parsed[0] is not None
    assert answered_by_lane == lane_answers
    if fast.status_code == 200:
        assert "staff-only" not in fast.text and "vault" not in fast.text


def test_other_content_types_and_methods_pass_through(with_lane: TestClient) -> None:
    url = "/v1/corpora/kw/search"
    as_text = with_lane.post(
        url, content=b'{"query": "password"}', headers={"content-type": "text/plain"}
    )
    assert as_text.status_code == 415  # FastAPI: the body is not JSON; told to say JSON
    assert with_lane.get(url).status_code == 405
    plus_json = with_lane.post(
        url, content=b'{"query": "password"}', headers={"content-type": "application/vnd.x+json"}
    )
    assert plus_json.status_code == 200 and plus_json.json()["passages"]


def test_an_oversized_body_is_refused_before_the_lane_reads_it(home: Path) -> None:
    app = create_app(ServerSettings(home=home, max_body_bytes=1024), engine_factory=_engine)
    with TestClient(app) as client:
        big = b'{"query": "' + b"a" * 4096 + b'"}'
        declared = client.post("/v1/corpora/kw/search", content=big, headers=JSON)
        assert declared.status_code == 413
        assert declared.json()["error"]["code"] == "body_too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield big[:1000]
            yield big[1000:]

        streamed = client.post("/v1/corpora/kw/search", content=chunks(), headers=JSON)
        assert streamed.status_code == 413
        assert streamed.json()["error"]["code"] == "body_too_large"


def test_lane_requests_are_counted_under_the_route_template(with_lane: TestClient) -> None:
    def counted() -> float:
        text = with_lane.get("/metrics").text
        total = 0.0
        for line in text.splitlines():
            if (
                line.startswith("tandem_http_requests_total{")
                and 'route="/v1/corpora/{name}/search"' in line
                and 'status="200"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total

    before = counted()
    for _ in range(3):
        assert (
            with_lane.post("/v1/corpora/kw/search", json={"query": "password"}).status_code == 200
        )
    assert counted() == before + 3


def _search_threads(client: TestClient, corpus: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    real = Corpus.search

    def recording(self: Corpus, *args: Any, **kwargs: Any) -> Any:
        names.append(threading.current_thread().name)
        return real(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Corpus, "search", recording)
        response = client.post(f"/v1/corpora/{corpus}/search", json={"query": "password"})
    assert response.status_code == 200
    return names


def test_keyword_searches_run_in_place_and_model_searches_on_a_worker_thread(
    with_lane: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    in_place = _search_threads(with_lane, "kw", monkeypatch)
    on_thread = _search_threads(with_lane, "help", monkeypatch)
    assert len(in_place) == len(on_thread) == 1
    assert not in_place[0].startswith("AnyIO worker thread")
    assert on_thread[0].startswith("AnyIO worker thread")


def test_a_keyword_search_that_may_wait_goes_to_a_worker_thread(
    with_lane: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Corpus, "_searches_are_short", lambda self: False)
    assert _search_threads(with_lane, "kw", monkeypatch)[0].startswith("AnyIO worker thread")


def test_searches_are_short_only_without_a_model_and_with_a_current_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _engine(tmp_path / "e") as engine:
        keyword = engine.create_corpus(CorpusConfig(name="kw", embedder=None))
        hybrid = engine.create_corpus(CorpusConfig(name="hy", embedder="fake-model"))  # type: ignore[arg-type]
        keyword.add([Document(id="a", text="durable words")])
        hybrid.add([Document(id="a", text="durable words")])
        assert keyword._searches_are_short() and not hybrid._searches_are_short()
        assert engine._opened("kw") is keyword and engine._opened("absent") is None

        def full(self: TantivyIndex, docs: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(TantivyIndex, "upsert", full)
        keyword.add([Document(id="b", text="more words")])  # stored; the index is behind
        assert not keyword._searches_are_short()  # the database fallback may scan
        assert next(p.source_id for p in keyword.search("more words")) == "b"
    assert engine._opened("kw") is None  # a closed engine has nothing open
