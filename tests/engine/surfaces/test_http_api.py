"""The ``/v1`` HTTP API in process (FastAPI's TestClient, the app's real lifespan).

The engine behind the app embeds with a deterministic fake, so the hybrid corpus is
hybrid without loading a model. Every answer is compared with what the Python API says
for the same arguments, errors with the one JSON shape, and every write with and without
the token. ``test_http_serve.py`` runs the real ``tandem serve`` process.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Message

from engine import Corpus, CorpusConfig, Document, EngineBusy, SearchEngine
from engine.limits import MAX_GREP_PATTERN
from engine.surfaces.bulk import BATCH_SIZE
from engine.surfaces.http import ServerSettings, create_app
from engine.surfaces.http.schemas import CorpusResponse, passage_body
from tests.support.fakes import HashEmbedder, RecordingEmbedder, SwitchableEmbedder, factory_for

TOKEN = "t0ken-for-tests-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}

DOCS = [
    Document(
        id="reset",
        title="Reset your password",
        text="To reset your password open Settings, choose Security and follow the link.",
        url="/help/reset",
        fields={"year": 2021, "author": "ops"},
    ),
    Document(
        id="billing",
        title="Billing and invoices",
        text="Invoices are sent monthly. Update your credit card under Billing.",
        url="/help/billing",
        fields={"year": 2019, "author": "finance"},
    ),
    Document(
        id="guide/export",
        title="Export your data",
        text="Export every project as a zip archive from the Data page. password hints",
        url="/help/export",
        fields={"year": 2023, "author": "ops"},
    ),
    Document(
        id="staff-only",
        title="Internal password policy",
        text="Staff rotate the vault password every quarter.",
        access_groups=frozenset({"staff"}),
        fields={"year": 2022, "author": "ops"},
    ),
    Document(id="backtrack", title="Backtracking bait", text="a" * 5_000 + "!"),
]
FIELDS = {"year": "integer", "author": "keyword"}
PRIVATE = ("staff-only", "vault", "Internal password policy")


def _engine(path: Path) -> SearchEngine:
    return SearchEngine(path, embedder_factory=factory_for(HashEmbedder()))


def _build(home: Path) -> None:
    with _engine(home) as engine:
        for name, embedder in (("help", "fake-model"), ("kw", None)):
            corpus = engine.create_corpus(
                CorpusConfig(name=name, embedder=embedder, fields=FIELDS)  # type: ignore[arg-type]
            )
            corpus.add(DOCS)
        engine.create_corpus(
            CorpusConfig(name="memory", embedder=None, fields={"scope": "keyword"})  # type: ignore[arg-type]
        )


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("http") / "engine"
    _build(path)
    return path


def _client(home: Path, *, token: str | None = TOKEN, **caps: Any) -> Iterator[TestClient]:
    token_file = None
    if token is not None:
        token_file = home.parent / "token"
        token_file.write_text(token + "\n", encoding="utf-8")
    settings = ServerSettings(home=home, token_file=token_file, **caps)
    app = create_app(settings, engine_factory=_engine)
    with TestClient(app) as client:
        yield client


@pytest.fixture(scope="module")
def client(home: Path) -> Iterator[TestClient]:
    """A read-mostly server over ``home`` (tests that write use their own corpora)."""
    yield from _client(home)


def error_of(response: Any, status: int) -> dict[str, str]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}, body
    assert body["error"]["message"] and "Traceback" not in response.text
    return body["error"]  # type: ignore[no-any-return]


def search(client: TestClient, corpus: str, **body: Any) -> Any:
    return client.post(f"/v1/corpora/{corpus}/search", json=body)


# -- reads --------------------------------------------------------------------------------


@pytest.mark.parametrize("corpus", ["help", "kw"])
def test_search_answers_exactly_what_corpus_search_answers(client: TestClient, corpus: str) -> None:
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    target = engine.corpus(corpus)
    cases: list[dict[str, Any]] = [
        {"query": "password"},
        {"query": "reset password settings", "top_k": 2},
        {"query": "password", "top_k": 1, "offset": 1},
        {"query": "the", "top_k": 10_000, "offset": -5},  # clamped, never refused
        {"query": "password", "top_k": 0},
        {"query": "  x  "},  # too short after trimming: no passages
        {"query": ""},
        {"query": "password " * 500},  # too long: cut, answered
        {"query": "invoices", "language_id": -3},
        {"query": "password", "filters": {"year": {"gte": 2021}, "author": ["ops"]}},
        {"query": "password", "filters": [{"author": "ops"}, {"year": {"lt": 2022}}]},
    ]
    for body in cases:
        answer = search(client, corpus, **body)
        assert answer.status_code == 200, (body, answer.text)
        expected = target.search(
            body["query"],
            body.get("top_k", 10),
            body.get("offset", 0),
            body.get("language_id"),
            filters=body.get("filters"),
        )
        start = max(0, min(body.get("offset", 0), 1_000))
        assert answer.json() == {
            "passages": [
                json.loads(json.dumps(passage_body(start + i, p)))
                for i, p in enumerate(expected, 1)
            ]
        }, body
        assert not any(marker in answer.text for marker in PRIVATE)
    hybrid = search(client, "help", query="reset password").json()["passages"][0]
    if corpus == "help":  # both arms answered: this corpus really is hybrid
        assert hybrid["ranks"]["sparse"] is not None and hybrid["ranks"]["dense"] is not None


def test_paging_past_the_deepest_offset_answers_an_empty_page(client: TestClient) -> None:
    """Regression: an offset past 1,000 was clamped to it, so with 1,250 matches the page
    at 1,200 repeated the page at 1,000 and a client paging until an empty page never
    stopped. Past 1,000 the page is empty — still a 200, never a refusal."""
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    engine.create_corpus(CorpusConfig(name="pages", embedder=None)).add(
        Document(id=f"d{i:04d}", title=f"t{i}", text="apple " + "filler " * (i % 50))
        for i in range(1_250)
    )
    for offset in (1_001, 5_000, 10**30):
        answer = search(client, "pages", query="apple", top_k=200, offset=offset)
        assert answer.status_code == 200 and answer.json() == {"passages": []}, offset
    bad = search(client, "pages", query="apple", offset=5_000, filters={"nope": 1})
    assert error_of(bad, 422)["code"] == "invalid_argument"  # the filter is still checked
    last = search(client, "pages", query="apple", top_k=200, offset=1_000).json()["passages"]
    assert [p["rank"] for p in last] == list(range(1_001, 1_201))
    seen: list[str] = []
    offset = 0
    for _ in range(100):  # a bound: a page that repeats forever fails, not hangs
        page = search(client, "pages", query="apple", top_k=200, offset=offset).json()
        if not page["passages"]:
            break
        assert page["passages"][0]["rank"] == offset + 1
        seen += [p["source_id"] for p in page["passages"]]
        offset += len(page["passages"])
    else:
        pytest.fail("paging never reached an empty page")
    assert len(seen) == len(set(seen)) == 1_200
    assert seen[1_000:] == [p["source_id"] for p in last]


def test_a_legacy_mode_field_is_answered_as_if_absent_and_never_echoed(
    client: TestClient,
) -> None:
    plain = search(client, "help", query="password reset")
    for mode in ("keyword", "hybrid", "vector", 42, None, {"x": 1}):
        legacy = search(client, "help", query="password reset", mode=mode)
        assert legacy.status_code == 200 and legacy.content == plain.content
        assert "mode" not in legacy.text
    spec = client.get("/openapi.json").json()
    assert '"mode"' not in json.dumps(spec)  # no mode in any schema
    assert "fallback" not in plain.text


def test_request_errors_share_one_shape_and_name_the_problem(client: TestClient) -> None:
    bad_filter = error_of(search(client, "help", query="x y", filters={"yeer": 1}), 422)
    assert bad_filter["code"] == "invalid_argument" and "yeer" in bad_filter["message"]
    wrong_type = error_of(search(client, "help", query="x y", filters={"year": "old"}), 422)
    assert "year" in wrong_type["message"]
    assert error_of(search(client, "nope", query="x y"), 404)["code"] == "corpus_not_found"
    assert error_of(search(client, "Bad.Name", query="x y"), 422)["code"] == "invalid_request"
    unknown = error_of(search(client, "help", query="x y", colour="red"), 422)
    assert "colour" in unknown["message"]
    assert error_of(search(client, "help", top_k=3), 422)["code"] == "invalid_request"
    assert error_of(search(client, "help", query=["not", "text"]), 422)
    broken = client.post(
        "/v1/corpora/help/search",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert error_of(broken, 422)["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("route", "body", "field"),
    [
        ("search", {"query": "password", "top_k": True}, "top_k"),
        ("search", {"query": "password", "offset": False}, "offset"),
        ("search", {"query": "password", "language_id": True}, "language_id"),
        ("evidence", {"query": "password", "top_k": True}, "top_k"),
        ("grep", {"pattern": "password", "limit": True}, "limit"),
        ("grep", {"pattern": "password", "fixed": "yes"}, "fixed"),
        ("grep", {"pattern": "password", "fixed": 1}, "fixed"),
    ],
)
def test_a_boolean_is_not_a_count_and_only_true_or_false_is_a_flag(
    client: TestClient, route: str, body: dict[str, Any], field: str
) -> None:
    """Regression: pydantic's lax mode read ``top_k: true`` as 1 (one passage) and
    ``fixed: "yes"`` as plain-text grep."""
    answer = client.post(f"/v1/corpora/help/{route}", json=body)
    error = error_of(answer, 422)
    assert error["code"] == "invalid_request" and error["message"].startswith(f"{field}: ")


def test_a_count_sent_as_a_numeric_string_is_read_as_its_number(client: TestClient) -> None:
    as_text = search(client, "help", query="password", top_k="1")
    assert as_text.status_code == 200
    assert as_text.json() == search(client, "help", query="password", top_k=1).json()
    assert error_of(client.get("/v2/anything"), 404)["code"] == "not_found"
    assert error_of(client.put("/v1/corpora/help/search"), 405)["code"] == "method_not_allowed"


# Bodies neither orjson (the search lane) nor json (FastAPI, uploads) can read, and why.
NOT_JSON = {
    "truncated": (b'{"query": "pass"', "Expecting ',' delimiter"),
    "not UTF-8": (b'{"query": "pass\xffword"}', "not UTF-8"),
    "too deep": (b"[" * 10_000 + b"]" * 10_000, "too deeply nested"),
    "over-long integer": (b'{"query": "pass", "top_k": ' + b"9" * 5_000 + b"}", "4300 digits"),
}
ROUTES_WITH_A_BODY = [
    "/v1/corpora/kw/search",
    "/v1/corpora/kw/evidence",
    "/v1/corpora/kw/grep",
    "/v1/corpora/kw/ask",
    "/v1/recall",
    "/v1/corpora",
    "/v1/memories",
    "/v1/corpora/kw/documents",
]


@pytest.mark.parametrize("route", ROUTES_WITH_A_BODY)
@pytest.mark.parametrize("kind", sorted(NOT_JSON))
def test_a_body_that_is_not_json_gets_one_answer_on_every_route(
    client: TestClient, route: str, kind: str
) -> None:
    body, reason = NOT_JSON[kind]
    answer = client.post(route, content=body, headers={**AUTH, "content-type": "application/json"})
    err = error_of(answer, 422)
    assert err["code"] == "invalid_json", err
    assert err["message"].startswith("the body is not valid JSON: ") and reason in err["message"]
    if kind != "too deep":
        assert "nested" not in err["message"]


@pytest.mark.parametrize("route", [r for r in ROUTES_WITH_A_BODY if not r.endswith("/documents")])
def test_a_json_body_sent_as_a_form_is_told_to_say_json(client: TestClient, route: str) -> None:
    """Regression: ``curl -d '{...}'`` (the README's first example) sends a form's
    Content-Type; FastAPI then kept the body as bytes and answered 422 "Input should be
    a valid dictionary", nowhere near the cause."""
    body = b'{"query": "reset password", "text": "note", "scope": "a", "name": "n2"}'
    for media in ("application/x-www-form-urlencoded", "text/plain; charset=utf-8", None):
        typed = {} if media is None else {"content-type": media}
        answer = client.post(route, content=body, headers={**AUTH, **typed})
        err = error_of(answer, 415)
        assert err["code"] == "unsupported_media_type"
        named = "none given" if media is None else media.split(";")[0]
        assert "Content-Type: application/json" in err["message"] and named in err["message"]
    json_type = client.post(
        route, content=b'{"query": 5}', headers={**AUTH, "content-type": "application/json"}
    )
    assert json_type.status_code == 422  # a JSON body of the wrong shape is still a 422


def test_the_readmes_curl_search_example_is_answered(client: TestClient) -> None:
    """The README's curl line, its flags read as curl reads them (-H a header, -d the body
    of a POST), against a corpus of this app."""
    readme = (Path(__file__).parents[3] / "README.md").read_text(encoding="utf-8")
    command = re.search(
        r"^curl -s localhost:8000/v1/corpora/docs/search.*?'\n(?!\s)", readme, re.M | re.S
    )
    assert command is not None
    words = shlex.split(command.group(0).replace("\\\n", " "))
    headers = dict(
        tuple(part.strip() for part in value.split(":", 1))
        for flag, value in itertools.pairwise(words)
        if flag == "-H"
    )
    body = words[words.index("-d") + 1]
    answer = client.post("/v1/corpora/kw/search", content=body.encode(), headers=headers)
    assert answer.status_code == 200, answer.text
    assert isinstance(answer.json()["passages"], list)


def test_the_schema_documents_the_answer_to_a_body_that_is_not_json(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    with_body = [
        (path, method, op)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if "requestBody" in op
    ]
    assert len(with_body) == len(ROUTES_WITH_A_BODY)
    for path, method, op in with_body:
        assert "400" not in op["responses"], (method, path)
        unprocessable = op["responses"]["422"]
        assert "invalid_json" in unprocessable["description"], (method, path)
        assert unprocessable["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"
        }


def test_the_schema_declares_the_grep_pattern_cap(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    pattern = spec["components"]["schemas"]["GrepRequest"]["properties"]["pattern"]
    assert pattern["maxLength"] == MAX_GREP_PATTERN
    at_cap = client.post("/v1/corpora/kw/grep", json={"pattern": "x" * MAX_GREP_PATTERN})
    assert at_cap.status_code == 200
    over = client.post("/v1/corpora/kw/grep", json={"pattern": "x" * (MAX_GREP_PATTERN + 1)})
    err = error_of(over, 422)
    assert err["code"] == "invalid_request" and err["message"].startswith("pattern: ")
    assert str(MAX_GREP_PATTERN) in err["message"]


def test_sources_absent_and_non_public_get_the_same_404(client: TestClient) -> None:
    found = client.get("/v1/corpora/help/sources/guide/export")
    assert found.status_code == 200
    assert found.json()["source_id"] == "guide/export" and found.json()["truncated"] is False
    absent = client.get("/v1/corpora/help/sources/no-such-id")
    private = client.get("/v1/corpora/help/sources/staff-only")
    assert error_of(absent, 404) == error_of(private, 404)
    assert absent.content == private.content and absent.headers.get(
        "content-length"
    ) == private.headers.get("content-length")


def test_an_id_ending_in_a_newline_is_not_read_as_the_id_before_it(client: TestClient) -> None:
    # Starlette's route pattern ends in "$", which matches before a final newline: the
    # path's "victim\n" reached the route as "victim", and a DELETE removed that document.
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    corpus = engine.create_corpus(CorpusConfig(name="newline", embedder=None))
    corpus.add([Document(id="victim", title="Victim", text="still here")])
    try:
        assert client.get("/v1/corpora/newline/sources/victim%0A").status_code == 422
        gone = client.delete("/v1/corpora/newline/documents/victim%0A", headers=AUTH)
        assert gone.status_code == 200 and gone.json() == {"deleted": 0}
        assert client.get("/v1/corpora/newline/sources/victim").json()["text"] == "still here"
    finally:
        engine.drop_corpus("newline")


def test_evidence_grep_and_the_grep_time_budget(client: TestClient) -> None:
    evidence = client.post("/v1/corpora/help/evidence", json={"query": "invoices", "top_k": 2})
    assert evidence.status_code == 200 and evidence.json()["evidence"].startswith("[1] billing")
    matches = client.post("/v1/corpora/kw/grep", json={"pattern": r"pass\w+"}).json()["matches"]
    assert {m["source_id"] for m in matches} == {"reset", "guide/export"}  # never staff-only
    fixed = client.post("/v1/corpora/kw/grep", json={"pattern": "a zip", "fixed": True})
    assert [m["source_id"] for m in fixed.json()["matches"]] == ["guide/export"]
    slow = error_of(client.post("/v1/corpora/kw/grep", json={"pattern": "(a+)+$"}), 422)
    assert slow["code"] == "grep_timeout" and "time budget" in slow["message"]
    long = error_of(
        client.post("/v1/corpora/kw/grep", json={"pattern": "x" * (MAX_GREP_PATTERN + 1)}), 422
    )
    assert str(MAX_GREP_PATTERN) in long["message"]
    assert error_of(client.post("/v1/corpora/kw/grep", json={"pattern": "("}), 422)
    # four characters that would grow the regex stack to ~1 GB and answer a bare 500
    recursive = error_of(client.post("/v1/corpora/kw/grep", json={"pattern": "(?R)"}), 422)
    assert recursive["code"] == "invalid_argument" and "subroutine" in recursive["message"]


def test_ask_on_a_corpus_without_questions_is_a_clear_409(client: TestClient) -> None:
    off = error_of(client.post("/v1/corpora/kw/ask", json={"question": "how to reset?"}), 409)
    assert off["code"] == "questions_off" and "--ask-model" in off["message"]


def test_a_read_over_its_time_budget_is_503_with_a_clear_code(home: Path) -> None:
    for client in _client(home, request_budget_s=0.001):
        slow = client.post("/v1/corpora/help/search", json={"query": "password"})
        if slow.status_code == 200:  # a fast machine answered within a millisecond
            continue
        err = error_of(slow, 503)
        assert err["code"] == "time_budget_exceeded" and "budget" in err["message"]
        assert client.get("/healthz").status_code == 200  # and the server lives on


# -- writes ---------------------------------------------------------------------------------


def test_every_write_needs_the_token_checked_before_the_body(client: TestClient) -> None:
    writes = [
        ("POST", "/v1/corpora", {"name": "new1", "embedder": None}),
        ("POST", "/v1/corpora/kw/documents", [{"id": "w1", "text": "x"}]),
        ("DELETE", "/v1/corpora/kw/documents/reset", None),
        ("DELETE", "/v1/corpora/kw", None),
        ("POST", "/v1/memories", {"text": "note", "scope": "a"}),
    ]
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    before = (engine.list_corpora(), len(engine.corpus("kw")))
    for method, url, body in writes:
        for headers in (
            {},
            {"Authorization": "Bearer wrong-token-0123456789"},
            {"Authorization": TOKEN},
        ):
            answer = client.request(method, url, json=body, headers=headers)
            err = error_of(answer, 401)
            assert err["code"] == "unauthorized"
            assert answer.headers["www-authenticate"].startswith("Bearer")
        # Not even a malformed body is looked at without the token.
        garbage = client.request(
            method, url, content=b"{oops", headers={"content-type": "application/json"}
        )
        assert garbage.status_code == 401
    assert (engine.list_corpora(), len(engine.corpus("kw"))) == before


def test_without_a_configured_token_writes_are_refused_not_open(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TANDEM_API_TOKEN", raising=False)
    for client in _client(home, token=None):
        answer = client.post("/v1/corpora", json={"name": "x1", "embedder": None}, headers=AUTH)
        assert error_of(answer, 403)["code"] == "writes_disabled"
        assert client.post("/v1/corpora/kw/search", json={"query": "password"}).status_code == 200


def test_create_chooses_fusion_and_title_weight(client: TestClient) -> None:
    made = client.post(
        "/v1/corpora",
        json={"name": "tuned", "embedder": None, "fusion": "zscore", "title_weight": 1},
        headers=AUTH,
    )
    assert made.status_code == 201
    assert (made.json()["fusion"], made.json()["title_weight"]) == ("zscore", 1)
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    config = engine.corpus("tuned").config
    assert (config.fusion.kind, config.title_weight) == ("zscore", 1)
    for bad in ({"fusion": "borda"}, {"title_weight": 0}, {"title_weight": 9}):
        answer = client.post("/v1/corpora", json={"name": "bad1", **bad}, headers=AUTH)
        assert answer.status_code == 422, bad
    for no_model in ("none", "Off"):  # not a model name: pointed to embedder null
        answer = client.post(
            "/v1/corpora", json={"name": "bad1", "embedder": no_model}, headers=AUTH
        )
        assert answer.status_code == 422 and "embedder null" in answer.text, no_model
    # A field named like a document key could never be filled from an upload's top-level
    # key (that is the document's own title or URL): its values were dropped silently.
    for key in ("url", "title"):
        answer = client.post(
            "/v1/corpora",
            json={"name": "bad1", "embedder": None, "fields": {key: "keyword"}},
            headers=AUTH,
        )
        assert answer.status_code == 422 and "document key" in answer.text, key
    assert "bad1" not in engine.list_corpora()


def test_create_names_an_analyzer_per_language(client: TestClient) -> None:
    made = client.post(
        "/v1/corpora",
        json={"name": "multi", "embedder": None, "languages": {"1": "fr", "2": "es"}},
        headers=AUTH,
    )
    assert made.status_code == 201
    assert made.json()["languages"] == {"1": "fr", "2": "es"}
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    corpus = engine.corpus("multi")
    assert dict(corpus.config.languages) == {1: "fr", 2: "es"}
    corpus.add([Document(id="c", title="Les chevaux", text="Course.", language_id=1)])
    found = client.post(
        "/v1/corpora/multi/search", json={"query": "cheval", "language_id": 1}
    ).json()["passages"]
    assert [p["source_id"] for p in found] == ["c"]  # French stemming: chevaux = cheval
    for bad in ({"1": "klingon"}, {"x": "fr"}, {"-1": "fr"}, {"99999999": "fr"}, {"1": 3}):
        answer = client.post("/v1/corpora", json={"name": "bad2", "languages": bad}, headers=AUTH)
        assert answer.status_code == 422, bad
    assert "bad2" not in engine.list_corpora()


def test_the_schema_of_a_created_corpus_declares_its_languages(client: TestClient) -> None:
    """Regression: the 201 body of POST /v1/corpora carried "languages" that its declared
    response model (CorpusResponse) did not list."""
    spec = client.get("/openapi.json").json()
    created = spec["paths"]["/v1/corpora"]["post"]["responses"]["201"]
    ref = created["content"]["application/json"]["schema"]["$ref"]
    schema = spec["components"]["schemas"][ref.rsplit("/", 1)[1]]
    languages = schema["properties"]["languages"]
    assert languages["type"] == "object" and languages["description"]
    assert languages["additionalProperties"] == {"type": "string"}
    assert "languages" in schema["required"]
    made = client.post(
        "/v1/corpora",
        json={"name": "schemed", "embedder": None, "languages": {"3": "de"}},
        headers=AUTH,
    )
    assert made.status_code == 201
    body = made.json()
    assert set(body) == set(schema["properties"]) == set(CorpusResponse.model_fields)
    assert CorpusResponse.model_validate(body).languages == {3: "de"}


def test_create_add_delete_and_drop_with_the_token(client: TestClient) -> None:
    created = client.post(
        "/v1/corpora",
        json={"name": "letters", "embedder": None, "fields": {"year": "integer"}},
        headers=AUTH,
    )
    assert created.status_code == 201
    assert created.json() == {
        "name": "letters",
        "embedder": None,
        "fields": {"year": "integer"},
        "fusion": "rrf",
        "title_weight": 3,
        "languages": {},
    }
    again = client.post("/v1/corpora", json={"name": "letters", "embedder": None}, headers=AUTH)
    assert error_of(again, 409)["code"] == "corpus_exists"
    bad_field = client.post(
        "/v1/corpora",
        json={"name": "x2", "embedder": None, "fields": {"Year": "integer"}},
        headers=AUTH,
    )
    assert "Year" in error_of(bad_field, 422)["message"]

    docs = [
        {"id": "l1", "title": "To Emma", "text": "The war news is grim.", "year": 1942},
        {"id": "l2", "text": "The war is over.", "fields": {"year": 1945}},
        {"id": "bad id", "text": "whitespace in the id"},
        {"id": "l3", "text": "wrong type", "year": "1942"},
        {"id": "l4", "text": "private war", "access_groups": ["staff"]},
        "not an object",
    ]
    added = client.post("/v1/corpora/letters/documents", json=docs, headers=AUTH).json()
    assert (added["added"], added["rejected_total"]) == (3, 3)
    assert [r["line"] for r in added["rejected"]] == [3, 4, 6]
    assert "year" in added["rejected"][1]["reason"]

    ndjson = b"\n".join(
        [
            json.dumps(
                {"id": "l1", "text": "The war news is grim.", "title": "To Emma", "year": 1942}
            ).encode(),
            b"{broken",
            b"",
            json.dumps({"id": "l5", "text": "war and peace", "year": 1950}).encode(),
        ]
    )
    streamed = client.post(
        "/v1/corpora/letters/documents",
        content=ndjson,
        headers={**AUTH, "content-type": "application/x-ndjson"},
    ).json()
    assert (streamed["added"], streamed["rejected_total"]) == (1, 1)
    assert streamed["updated"] + streamed["unchanged"] == 1  # l1 again
    assert streamed["rejected"][0]["line"] == 2

    hits = search(client, "letters", query="war", filters={"year": {"gte": 1943}}).json()
    assert {p["source_id"] for p in hits["passages"]} == {"l2", "l5"}
    assert "l4" not in search(client, "letters", query="private war").text

    deleted = client.delete("/v1/corpora/letters/documents/l1", headers=AUTH)
    assert deleted.json() == {"deleted": 1}
    assert client.delete("/v1/corpora/letters/documents/l1", headers=AUTH).json() == {"deleted": 0}
    assert client.delete("/v1/corpora/letters", headers=AUTH).json() == {"dropped": "letters"}
    assert error_of(search(client, "letters", query="war"), 404)["code"] == "corpus_not_found"


def test_an_upload_that_is_not_utf8_or_too_deep_says_which(home: Path) -> None:
    for client in _client(home):
        latin1 = '[{"id": "café", "text": "latin-1 bytes"}]'.encode("latin-1")
        deep = b"[" * 100_000 + b"]" * 100_000
        for body, reason in ((latin1, "not UTF-8"), (deep, "too deeply nested")):
            answer = client.post(
                "/v1/corpora/kw/documents",
                content=body,
                headers={**AUTH, "content-type": "application/json"},
            )
            err = error_of(answer, 422)
            assert err["code"] == "invalid_json" and reason in err["message"]


def test_an_over_long_integer_in_an_upload_is_named_not_called_too_deep(
    client: TestClient,
) -> None:
    document = b'{"id": "n1", "text": "t", "language_id": ' + b"9" * 5_000 + b"}"
    ndjson = client.post(
        "/v1/corpora/kw/documents",
        content=document + b"\n",
        headers={**AUTH, "content-type": "application/x-ndjson"},
    ).json()
    [rejected] = ndjson["rejected"]
    assert rejected["line"] == 1 and rejected["reason"].startswith("not valid JSON: ")
    assert "4300 digits" in rejected["reason"] and "nested" not in rejected["reason"]
    array = client.post(
        "/v1/corpora/kw/documents",
        content=b"[" + document + b"]",
        headers={**AUTH, "content-type": "application/json"},
    )
    err = error_of(array, 422)
    assert err["code"] == "invalid_json" and "4300 digits" in err["message"]
    assert "ValueError" not in err["message"]


def test_an_ndjson_upload_may_start_with_a_utf8_bom(client: TestClient) -> None:
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    engine.create_corpus(CorpusConfig(name="bom", embedder=None))
    bom = b"\xef\xbb\xbf"
    lines = [bom + b'{"id": "b1", "text": "first"}', b'{"id": "b2", "text": "second"}']
    added = client.post(
        "/v1/corpora/bom/documents",
        content=b"\n".join(lines) + b"\n" + bom + b'{"id": "b3"}\n',
        headers={**AUTH, "content-type": "application/x-ndjson"},
    ).json()
    assert added["added"] == 2 and len(engine.corpus("bom")) == 2
    [rejected] = added["rejected"]  # a BOM marks the start of a file, not of any line
    assert rejected["line"] == 3 and "BOM" in rejected["reason"]


def test_upload_caps_refuse_the_whole_body_and_write_nothing(home: Path) -> None:
    for client in _client(
        home, max_body_bytes=4096, max_upload_bytes=64 * 1024, max_line_bytes=2048
    ):
        engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
        engine.create_corpus(CorpusConfig(name="capped", embedder=None))
        good = json.dumps({"id": "ok", "text": "fine"}).encode()
        long_line = json.dumps({"id": "big", "text": "x" * 3000}).encode()
        over = client.post(
            "/v1/corpora/capped/documents",
            content=good + b"\n" + long_line + b"\n",
            headers={**AUTH, "content-type": "application/x-ndjson"},
        )
        err = error_of(over, 413)
        assert err["code"] == "line_too_long" and "line 2" in err["message"]
        huge = [{"id": f"d{i}", "text": "y" * 500} for i in range(200)]
        assert (
            error_of(client.post("/v1/corpora/capped/documents", json=huge, headers=AUTH), 413)[
                "code"
            ]
            == "body_too_large"
        )

        def chunks(line: bytes = good + b"\n") -> Iterator[bytes]:  # no Content-Length
            for _ in range(100):
                yield line
            yield b"z" * 70_000

        streamed = client.post(
            "/v1/corpora/capped/documents",
            content=chunks(),
            headers={**AUTH, "content-type": "application/x-ndjson"},
        )
        assert error_of(streamed, 413)["code"] in ("body_too_large", "line_too_long")
        assert len(engine.corpus("capped")) == 0  # nothing of any refused upload was added
        big_query = search(client, "kw", query="p" * 5000)
        assert "4 KiB" in error_of(big_query, 413)["message"]
        media = client.post(
            "/v1/corpora/capped/documents",
            content=b"id,text",
            headers={**AUTH, "content-type": "text/csv"},
        )
        assert error_of(media, 415)["code"] == "unsupported_media_type"


def test_an_upload_stopped_by_a_busy_lock_says_what_it_stored(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: an upload's earlier batches are durable when a later one waits out
    another process's lock; the 503 said only "busy", so a client could not tell that
    half its documents were in."""
    engine: SearchEngine = client.app.state.engine  # type: ignore[attr-defined]
    corpus = engine.create_corpus(CorpusConfig(name="halfway", embedder=None))
    real, calls = Corpus.add, []

    def add(self: Corpus, documents: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the second batch waited out another process's write
            raise EngineBusy("corpus 'halfway': another write held the lock for 30 s")
        return real(self, documents, **kwargs)

    monkeypatch.setattr(Corpus, "add", add)
    lines = [json.dumps({"id": f"d{n}", "text": f"shared {n}"}) for n in range(BATCH_SIZE + 5)]
    answer = client.post(
        "/v1/corpora/halfway/documents",
        content=("\n".join(lines) + "\n").encode(),
        headers={**AUTH, "content-type": "application/x-ndjson"},
    )
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    body = answer.json()
    assert body["error"]["code"] == "engine_busy"
    assert f"stopped at line {BATCH_SIZE + 1}" in body["error"]["message"]
    assert body["stopped_at_line"] == BATCH_SIZE + 1
    assert body["written"]["added"] == BATCH_SIZE == len(corpus)
    monkeypatch.undo()
    again = client.post(  # and sending it again completes it
        "/v1/corpora/halfway/documents",
        content=("\n".join(lines) + "\n").encode(),
        headers={**AUTH, "content-type": "application/x-ndjson"},
    )
    assert again.status_code == 200 and again.json()["added"] == 5
    assert len(corpus) == BATCH_SIZE + 5


def _hang_up(client: TestClient, path: str, content_type: bytes, first: bytes) -> list[Message]:
    """Send ``first`` of a body said to be 100,000 bytes long to ``path``, then hang up;
    what the app sent back."""
    messages = iter(
        [
            {"type": "http.request", "body": first, "more_body": True},
            {"type": "http.disconnect"},
        ]
    )
    sent: list[Message] = []

    async def receive() -> Message:
        return next(messages)

    async def send(message: Message) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"authorization", f"Bearer {TOKEN}".encode()),
            (b"content-type", content_type),
            (b"content-length", b"100000"),
        ],
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "app": client.app,
    }
    client.portal.call(client.app, scope, receive, send)  # type: ignore[union-attr]
    return sent


def _counted(client: TestClient, route: str) -> list[str]:
    metrics = client.get("/metrics").text
    label = f'route="{route}"'
    return [
        line
        for line in metrics.splitlines()
        if line.startswith("tandem_http_requests_total") and label in line
    ]


def test_a_client_hanging_up_mid_upload_is_no_server_error(
    client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression: Starlette's ClientDisconnect escaped to the last-resort guard, which
    logged an ERROR and counted a 500 for every upload a client abandoned."""
    client.post("/v1/corpora", json={"name": "hangup", "embedder": None}, headers=AUTH)
    with caplog.at_level("DEBUG", logger="engine.surfaces.http.ops"):
        sent = _hang_up(
            client,
            "/v1/corpora/hangup/documents",
            b"application/x-ndjson",
            b'{"id": "a", "text": "x"}\n',
        )
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert not [m for m in sent if m.get("status") == 500]
    counted = _counted(client, "/v1/corpora/{name}/documents")
    assert not [line for line in counted if 'status="500"' in line]
    assert [line for line in counted if 'status="499"' in line]
    assert len(client.app.state.engine.corpus("hangup")) == 0  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("path", "route", "first"),
    [
        ("/v1/corpora/hung/search", "/v1/corpora/{name}/search", b'{"query": "abc"}'),
        ("/v1/corpora/hung/grep", "/v1/corpora/{name}/grep", b'{"pattern": "abc"}'),
    ],
    ids=["search", "grep"],
)
def test_a_client_hanging_up_mid_body_is_counted_as_gone(
    client: TestClient, path: str, route: str, first: bytes
) -> None:
    """Review: the search lane took a hang-up for the end of the body and searched the
    part that had arrived (a complete JSON object: counted a 200 and a search); FastAPI's
    routes answered 400. Both now count the README's 499 and run nothing."""
    client.post("/v1/corpora", json={"name": "hung", "embedder": None}, headers=AUTH)
    before = {status: _count(client, route, status) for status in ("200", "400", "499")}
    searches_before = _searches(client)
    _hang_up(client, path, b"application/json", first)
    after = {status: _count(client, route, status) for status in ("200", "400", "499")}
    assert after == {**before, "499": before["499"] + 1}
    assert _searches(client) == searches_before


def _count(client: TestClient, route: str, status: str) -> float:
    label = f'status="{status}"'
    return sum(float(line.rsplit(" ", 1)[1]) for line in _counted(client, route) if label in line)


def _searches(client: TestClient) -> float:
    metrics = client.get("/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("tandem_searches_total{")
    )


def test_agent_memory_remember_and_recall_by_scope(client: TestClient) -> None:
    notes = [("alice", "Alice prefers green tea in the morning"), ("bob", "Bob prefers coffee")]
    for scope, text in notes:
        done = client.post("/v1/memories", json={"text": text, "scope": scope}, headers=AUTH)
        assert done.status_code == 201 and done.json()["added"] is True
    again = client.post("/v1/memories", json={"text": notes[0][1], "scope": "alice"}, headers=AUTH)
    assert again.json()["added"] is False  # the same memory is stored once
    mine = client.post("/v1/recall", json={"query": "prefers", "scope": "alice"}).json()
    assert [m["text"] for m in mine["memories"]] == [notes[0][1]]
    both = client.post("/v1/recall", json={"query": "prefers", "mode": "hybrid"}).json()
    assert {m["text"] for m in both["memories"]} == {t for _, t in notes}
    assert client.post("/v1/recall", json={"query": "prefers", "scope": "carol"}).json() == {
        "memories": []
    }
    bad = client.post("/v1/memories", json={"text": "x", "scope": "a\x07b"}, headers=AUTH)
    assert "scope" in error_of(bad, 422)["message"]
    # " alice " would be a scope of its own that prints like "alice"; "   " no scope at all.
    for padded in (" alice ", "   "):
        bad = client.post("/v1/memories", json={"text": "x", "scope": padded}, headers=AUTH)
        assert "space" in error_of(bad, 422)["message"]
        bad = client.post("/v1/recall", json={"query": "prefers", "scope": padded})
        assert "space" in error_of(bad, 422)["message"]


# -- operations, page, headers -----------------------------------------------------------------


def test_metrics_count_the_searches_this_server_answered(client: TestClient) -> None:
    def searches() -> float:
        text = client.get("/metrics").text
        total = 0.0
        for line in text.splitlines():
            if line.startswith('tandem_searches_total{corpus="kw"'):
                total += float(line.rsplit(" ", 1)[1])
        return total

    before = searches()
    for _ in range(3):
        search(client, "kw", query="password")
    assert searches() == before + 3
    text = client.get("/metrics").text
    assert 'tandem_http_requests_total{method="POST",route="/v1/corpora/{name}/search"' in text
    assert "password" not in text  # no query text in any label
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz").json()
    assert ready["status"] == "ready" and ready["corpora"] >= 3


def test_metrics_show_a_corpus_another_process_created_before_it_is_searched(
    tmp_path: Path,
) -> None:
    """Regression: a corpus created elsewhere while the server ran had no gauges until
    someone searched it (the refresh follows open corpora only)."""
    home = tmp_path / "engine"
    _build(home)
    for client in _client(home):
        with _engine(home) as other:
            other.create_corpus(
                CorpusConfig(name="fresh", embedder=None, fields=FIELDS)  # type: ignore[arg-type]
            ).add(DOCS[:3])
        assert 'tandem_documents{corpus="fresh"} 3.0' in client.get("/metrics").text


def test_no_cors_and_a_locked_down_page(client: TestClient) -> None:
    preflight = client.options(
        "/v1/corpora/kw/search",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers
    cross = client.post(
        "/v1/corpora/kw/search", json={"query": "password"}, headers={"Origin": "https://x.example"}
    )
    assert "access-control-allow-origin" not in cross.headers
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert 'role="search"' in page.text and 'for="q"' in page.text
    for asset in ("search.js", "search.css"):
        assert client.get(f"/static/{asset}").status_code == 200
    assert client.get("/static/../app.py").status_code == 404
    docs = client.get("/docs")
    assert docs.status_code == 200 and "/docs/assets/swagger-ui-bundle.js" in docs.text
    bundle = client.get("/docs/assets/swagger-ui-bundle.js")
    assert bundle.status_code == 200
    # Swagger UI sends the API's writes: no other site may frame it (it could, before).
    for answer in (docs, bundle):
        assert answer.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
        assert answer.headers["x-content-type-options"] == "nosniff"


def test_every_answer_says_nosniff_and_no_api_or_operations_answer_may_be_stored(
    client: TestClient, home: Path
) -> None:
    """Regression: the JSON API's answers carried neither header (only the page had
    nosniff), so a browser or a shared cache could keep a search answer, which depends
    on access and changes with every write."""
    api = [
        client.post("/v1/corpora/kw/search", json={"query": "password"}),  # the fast lane
        client.post("/v1/corpora/kw/search", json={"query": "password", "top_k": "x"}),  # 422
        client.post("/v1/corpora/absent/search", json={"query": "password"}),  # 404, lane
        client.put("/v1/corpora/kw/search", json={}),  # 405
        client.post("/v1/corpora/kw/evidence", json={"query": "password"}),
        client.get("/v1/corpora/kw/sources/reset"),
        client.get("/v1/corpora/kw/sources/staff-only"),  # 404
        client.get("/v1/corpora"),
        client.get("/v1/nowhere"),  # 404 of no route
        client.post("/v1/recall", json={"query": "prefers"}),
        client.post("/v1/memories", json={"text": "x", "scope": "a"}),  # 401: no token
        client.get("/metrics"),  # the operations' answers are the state of now
        client.get("/healthz"),
        client.get("/readyz"),
    ]
    for capped in _client(home, max_body_bytes=1024):  # 413 from the body cap
        api.append(capped.post("/v1/corpora/kw/search", json={"query": "p" * 2000}))
    for answer in api:
        where = f"{answer.request.method} {answer.request.url.path} {answer.status_code}"
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"], where
        assert answer.headers.get_list("cache-control") == ["no-store"], where
    assert {a.status_code for a in api} >= {200, 401, 404, 405, 413, 422}
    for path, cache in [
        ("/", None),
        ("/static/search.js", "no-cache"),  # the page's own, kept
        ("/docs", None),
        ("/openapi.json", None),
        ("/nowhere", None),
    ]:
        answer = client.get(path)
        assert answer.headers.get_list("x-content-type-options") == ["nosniff"], path
        assert answer.headers.get("cache-control") == cache, path


def test_no_redirect_to_the_host_a_request_names(client: TestClient) -> None:
    """Regression: "/v1/corpora/" answered 307 to http://<the request's Host>/v1/corpora,
    an open redirect for whoever sets the Host header (a shared cache, a proxy)."""
    for path in ("/v1/corpora/", "/docs/", "/metrics/"):
        answer = client.get(path, headers={"Host": "evil.example"}, follow_redirects=False)
        assert answer.status_code == 404, path
        assert "location" not in answer.headers


def test_the_server_loads_each_query_model_before_it_is_ready(tmp_path: Path) -> None:
    """Startup warms every hybrid corpus's embedder (the first search of each worker must
    not pay for loading a model); an embedder that fails to warm up does not stop it."""
    home = tmp_path / "engine"
    recorder = RecordingEmbedder()
    failing = SwitchableEmbedder(RecordingEmbedder(name="failing"))
    failing.failing = True
    by_model = {"good": recorder, "bad": failing}

    def engine(path: Path) -> SearchEngine:
        return SearchEngine(path, embedder_factory=lambda spec: by_model[spec.model])  # type: ignore[return-value]

    with engine(home) as setup:
        for name, model in (("good", "good"), ("bad", "bad"), ("kw", None)):
            setup.create_corpus(CorpusConfig(name=name, embedder=model))  # type: ignore[arg-type]
        setup.corpus("good").add([Document(id="d1", title="Anything", text="at all")])
    before = recorder.texts_embedded
    failing.embed_calls = 0
    app = create_app(ServerSettings(home=home), engine_factory=engine)
    with TestClient(app) as client:
        warmed = recorder.texts_embedded
        assert warmed > before, "the good corpus's model was not called before any request"
        assert failing.embed_calls >= 1
        assert client.get("/readyz").status_code == 200
        answer = client.post("/v1/corpora/good/search", json={"query": "anything at all"})
        assert answer.status_code == 200 and answer.json()["passages"]
        assert recorder.texts_embedded == warmed + 1  # the search embedded its query only
