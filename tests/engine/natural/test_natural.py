"""``Corpus.ask`` against the Ollama stand-in, through the real ``ollama`` client."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from engine import (
    Corpus,
    CorpusConfig,
    Document,
    Eq,
    FieldType,
    InvalidArgument,
    NaturalLanguage,
    NaturalSearchUnavailable,
    Range,
    RateLimited,
    SearchEngine,
)
from engine.config import SentenceTransformerEmbedding
from engine.natural import output_schema
from engine.natural.schema import MAX_OUTPUT_CHARS, MAX_OUTPUT_TOKENS, system_prompt
from tests.support.fakes import SwitchableEmbedder
from tests.support.natural_standin import CHAT_MODEL, FLOOD_BYTES, ChatBehaviour, ChatStandIn
from tests.support.ollama_standin import Behaviour, Reply

FIELDS = {"author": FieldType.KEYWORD, "year": FieldType.INTEGER, "sent": FieldType.DATE}
SECRET = "Zebrafish-Kohlrabi"  # appears in stored records only: must never reach the model
QUESTION = "What did Walter write to Emma about the war in 1941?"


def _natural(standin: ChatStandIn, **overrides: Any) -> NaturalLanguage:
    settings: dict[str, Any] = {
        "model": CHAT_MODEL,
        "host": standin.host,
        # generous: requests expected to succeed must not fail on a loaded box; the tests
        # that wait for a timeout pass their own short ones
        "timeout_s": 10.0,
        "health_timeout_s": 10.0,
    }
    settings.update(overrides)
    return NaturalLanguage(**settings)


def _letters() -> list[Document]:
    docs = []
    for i in range(12):
        author = ("Walter Benjamin", "Emma Goldman", "Otto Neurath")[i % 3]
        docs.append(
            Document(
                id=f"l{i:02d}",
                title=f"Letter {i} {SECRET}",
                text=f"a letter about the war and the city, {SECRET} number {i}",
                fields={"author": author, "year": 1936 + i},
            )
        )
    return docs


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[SearchEngine]:
    with SearchEngine(tmp_path / "nl") as eng:
        yield eng


def _corpus(engine: SearchEngine, standin: ChatStandIn, **natural: Any) -> Corpus:
    corpus = engine.create_corpus(
        CorpusConfig(
            name=f"c{len(engine.list_corpora())}",
            embedder=None,
            fields=FIELDS,
            natural=_natural(standin, **natural),
        )
    )
    corpus.add(_letters())
    return corpus


def _answer(keywords: list[str], filters: dict[str, Any]) -> str:
    return json.dumps({"keywords": keywords, "filters": filters})


def test_the_request_carries_the_schema_and_the_question_only(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin)
    corpus.ask(QUESTION)
    (body,) = chat_standin.chat_bodies
    declared = corpus.config.fields
    assert body["model"] == CHAT_MODEL
    assert body["format"] == output_schema(declared)
    assert body["messages"] == [
        {"role": "system", "content": system_prompt(declared)},
        {"role": "user", "content": QUESTION},
    ]
    assert body["stream"] is False
    # the model stops at a bounded length (a model looping in JSON mode would fill its context)
    assert body["options"] == {"temperature": 0, "num_predict": MAX_OUTPUT_TOKENS}
    assert MAX_OUTPUT_TOKENS >= MAX_OUTPUT_CHARS  # a token is at least one character
    sent = json.dumps(chat_standin.counts()) + json.dumps(body)
    sent += json.dumps(chat_standin.last_body("/api/show"))
    for record in (SECRET, "Benjamin", "Goldman", "Neurath", "l01", "1937"):
        assert record not in sent  # no stored record, value or id leaves the machine
    assert set(chat_standin.counts()) == {"/api/show", "/api/chat"}


def test_good_output_applies_filters_and_returns_passages(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin)
    chat_standin.content = _answer(
        ["war"], {"author": ["walter"], "year": {"min": 1936, "max": 1942}}
    )
    answer = corpus.ask(QUESTION, top_k=10)
    got = answer.interpretation
    assert got.keywords == ("war",)
    assert [(v.field, v.extracted, v.resolved) for v in got.values] == [
        ("author", "walter", ("Walter Benjamin",))
    ]
    assert got.filters == Eq("author", "Walter Benjamin") & Range("year", gte=1936, lte=1942)
    assert sorted(p.source_id for p in answer.passages) == ["l00", "l03", "l06"]
    same = corpus.search(got.query, top_k=10, filters=got.filters)
    assert [p.source_id for p in answer.passages] == [p.source_id for p in same]
    assert got.to_dict()["filters"] == [
        {"author": "Walter Benjamin"},
        {"year": {"gte": 1936, "lte": 1942}},
    ]


def test_unresolved_values_fall_back_to_keyword_text(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin)
    corpus.add([Document(id="z", text="Zeppelin over the city", fields={"author": "Otto Neurath"})])
    chat_standin.content = _answer(["city"], {"author": ["Zeppelin"]})
    answer = corpus.ask("anything by Zeppelin about the city?")
    assert answer.interpretation.values[0].applied is False
    assert answer.interpretation.query == "city Zeppelin"
    assert answer.interpretation.filters is None
    assert answer.passages[0].source_id == "z"


def test_a_value_only_non_public_documents_carry_is_neither_revealed_nor_applied(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin)
    corpus.add(
        [
            Document(
                id="memo",
                text="classified memo about the war",
                fields={"author": "Agent Smith (informant 42)"},
                access_groups=frozenset({"secret"}),
            )
        ]
    )
    chat_standin.content = _answer(["war"], {"author": ["Smith"]})
    answer = corpus.ask("anything by smith about the war?")
    value = answer.interpretation.values[0]
    assert value.resolved == () and value.applied is False
    assert "Agent" not in json.dumps(answer.interpretation.to_dict())
    assert answer.interpretation.query == "war Smith"
    assert "memo" not in {p.source_id for p in answer.passages}


def test_ambiguous_values_are_not_guessed(engine: SearchEngine, chat_standin: ChatStandIn) -> None:
    corpus = _corpus(engine, chat_standin)
    chat_standin.content = _answer(["war"], {"author": ["n"]})  # in Benjamin, Goldman, Neurath
    answer = corpus.ask(QUESTION)
    assert answer.interpretation.values[0].resolved == ()
    assert answer.interpretation.filters is None


def test_filters_without_keywords_browse_the_eligible_documents(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin)
    chat_standin.content = _answer([], {"author": ["Emma Goldman"]})
    answer = corpus.ask("everything Emma wrote")
    assert answer.interpretation.query == ""
    assert [p.source_id for p in answer.passages] == ["l01", "l04", "l07", "l10"]


def test_an_empty_interpretation_searches_the_question(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin)
    answer = corpus.ask("letter number 7")
    assert answer.interpretation.query == "letter number 7"
    assert answer.passages and answer.passages[0].source_id == "l07"


BAD_OUTPUTS = {
    "malformed_json": '{"keywords": ["war"], "filters": {',
    "not_an_object": '["war"]',
    "overlong_keyword": _answer(["x" * 65], {}),
    "overlong_value": _answer([], {"author": ["y" * 129]}),
    "too_many_keywords": _answer([f"k{i}" for i in range(9)], {}),
    "injected_extra_field": json.dumps({"keywords": [], "filters": {}, "sql": "DROP TABLE"}),
    "undeclared_filter_field": _answer([], {"password": ["x"]}),
    "extra_bound": _answer([], {"year": {"min": 1, "max": 2, "or": 3}}),
    "wrong_type": _answer([], {"year": {"min": "1940"}}),
    "bad_date": _answer([], {"sent": {"from": "1942-02-30"}}),
    "control_chars": _answer(["war\u0000"], {}),
    "huge_answer": _answer(["war"] * 4000, {}),
    "lone_surrogate": '{"keywords": ["\\ud800war"], "filters": {}}',  # valid JSON, no text
}


@pytest.mark.parametrize("content", BAD_OUTPUTS.values(), ids=BAD_OUTPUTS.keys())
def test_schema_violating_output_is_unavailable(
    engine: SearchEngine, chat_standin: ChatStandIn, content: str
) -> None:
    corpus = _corpus(engine, chat_standin)
    chat_standin.content = content
    with pytest.raises(NaturalSearchUnavailable, match="expected shape"):
        corpus.ask(QUESTION)


@pytest.mark.parametrize(
    "behaviour",
    [
        ChatBehaviour.ERROR_500,
        ChatBehaviour.BROKEN_BODY,
        ChatBehaviour.WRONG_SHAPE,
        ChatBehaviour.LIST_BODY,  # these three escaped as TypeError, UnicodeDecodeError
        ChatBehaviour.NOT_UTF8,  # and RecursionError (a 500 over HTTP), uncounted
        ChatBehaviour.DEEP_BODY,
    ],
)
def test_server_faults_are_unavailable(
    engine: SearchEngine, chat_standin: ChatStandIn, behaviour: ChatBehaviour
) -> None:
    corpus = _corpus(engine, chat_standin)
    chat_standin.chat_behaviour = behaviour
    with pytest.raises(NaturalSearchUnavailable):
        corpus.ask(QUESTION)
    text = generate_latest(engine.registry).decode()
    assert f'tandem_nl_requests_total{{corpus="{corpus.name}",outcome="unavailable"}} 1.0' in text


# JSON that is no object, as an HTTP error's body: the client's ResponseError constructor
# calls ``.get`` on it and raised AttributeError, which ``ask`` let escape (review 3).
NON_OBJECT_ERROR_BODIES = {
    "null": b"null",
    "empty-list": b"[]",
    "string": b'"upstream overloaded"',
    "integer": b"123",
    "true": b"true",
}


@pytest.mark.parametrize("path", ["/api/chat", "/api/show"])
@pytest.mark.parametrize(
    "body", NON_OBJECT_ERROR_BODIES.values(), ids=NON_OBJECT_ERROR_BODIES.keys()
)
def test_an_error_body_that_is_no_object_is_unavailable(
    engine: SearchEngine, chat_standin: ChatStandIn, path: str, body: bytes
) -> None:
    corpus = _corpus(engine, chat_standin)
    chat_standin.route("POST", path, lambda request: Reply(500, raw=body))
    with pytest.raises(NaturalSearchUnavailable, match="malformed response") as info:
        corpus.ask(QUESTION)
    assert "overloaded" not in str(info.value)
    text = generate_latest(engine.registry).decode()
    assert f'tandem_nl_requests_total{{corpus="{corpus.name}",outcome="unavailable"}} 1.0' in text


def test_slow_answers_time_out(engine: SearchEngine, chat_standin: ChatStandIn) -> None:
    corpus = _corpus(engine, chat_standin, timeout_s=0.3)
    chat_standin.chat_behaviour = ChatBehaviour.SLOW  # would answer after 5 s
    started = time.monotonic()
    with pytest.raises(NaturalSearchUnavailable, match=r"did not answer within 0\.3 s"):
        corpus.ask(QUESTION)
    assert time.monotonic() - started < chat_standin.chat_delay_s


def test_an_answer_trickled_byte_by_byte_is_dropped_at_the_timeout(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    """Regression: httpx's timeout bounds each read, not the call — a server sending one
    byte every 50 ms (each read quick) kept a 0.3 s question waiting ~10 s, the time the
    whole answer takes to trickle out (~100 s in the review's repro)."""
    corpus = _corpus(engine, chat_standin, timeout_s=0.3)
    chat_standin.chat_behaviour = ChatBehaviour.TRICKLE
    with pytest.raises(NaturalSearchUnavailable, match=r"did not answer within 0\.3 s"):
        corpus.ask(QUESTION)
    # The client hung up while the answer was still trickling out.
    assert chat_standin.hung_up.wait(30)
    assert chat_standin.streamed_bytes < len(json.dumps(chat_standin.content))


def test_a_flood_of_an_answer_is_refused_before_it_is_read(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    """Regression: a server ignoring ``num_predict`` sent a 200 MB message; the client read
    and decoded all of it (~600 MB held) before the 8,192-character cap refused it."""
    corpus = _corpus(engine, chat_standin)
    chat_standin.chat_behaviour = ChatBehaviour.FLOOD
    with pytest.raises(NaturalSearchUnavailable, match="answer longer than 1048576 bytes"):
        corpus.ask(QUESTION)
    assert chat_standin.hung_up.wait(30)
    assert chat_standin.streamed_bytes < FLOOD_BYTES // 4


def test_a_hung_server_fails_the_health_check(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin, timeout_s=30, health_timeout_s=0.3)
    chat_standin.delay_s = 5.0
    chat_standin.behaviour = Behaviour.SLOW  # every endpoint, /api/show included
    started = time.monotonic()
    with pytest.raises(NaturalSearchUnavailable, match=r"within 0\.3 s"):
        corpus.ask(QUESTION)
    assert time.monotonic() - started < chat_standin.delay_s
    assert chat_standin.count("/api/chat") == 0  # the 30 s inference was never started


def test_a_missing_model_names_ollama_pull(engine: SearchEngine, chat_standin: ChatStandIn) -> None:
    corpus = _corpus(engine, chat_standin, model="llama3.2:1b")
    with pytest.raises(NaturalSearchUnavailable, match=r"`ollama pull llama3\.2:1b`"):
        corpus.ask(QUESTION)


def test_an_embedding_model_is_refused(engine: SearchEngine, chat_standin: ChatStandIn) -> None:
    corpus = _corpus(engine, chat_standin, model="standin-embed")
    with pytest.raises(NaturalSearchUnavailable, match="cannot generate text"):
        corpus.ask(QUESTION)
    assert chat_standin.count("/api/chat") == 0


def test_connection_refused_is_unavailable(engine: SearchEngine, chat_standin: ChatStandIn) -> None:
    corpus = _corpus(engine, chat_standin)
    chat_standin.stop()
    with pytest.raises(NaturalSearchUnavailable, match="cannot reach"):
        corpus.ask(QUESTION)
    chat_standin.start()  # back on the same port: the next question works
    assert corpus.ask(QUESTION).interpretation.query == QUESTION


def test_not_configured_is_unavailable(engine: SearchEngine) -> None:
    corpus = engine.create_corpus(CorpusConfig(name="plain", embedder=None))
    with pytest.raises(NaturalSearchUnavailable, match=r"CorpusConfig\.natural"):
        corpus.ask(QUESTION)


def test_question_length_is_validated_before_anything_is_sent(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin)
    for bad in ("x" * 501, "", "   ", "a\x00b", 42):
        with pytest.raises(InvalidArgument):
            corpus.ask(bad)  # type: ignore[arg-type]
    assert chat_standin.count() == 0
    corpus.ask("x" * 500)
    assert chat_standin.count("/api/chat") == 1


def test_rate_limit_admits_the_burst_per_user(
    engine: SearchEngine, chat_standin: ChatStandIn
) -> None:
    corpus = _corpus(engine, chat_standin, requests_per_minute=0.01, burst=3)
    for _ in range(3):
        corpus.ask(QUESTION, user="alice")
    with pytest.raises(RateLimited) as caught:
        corpus.ask(QUESTION, user="alice")
    assert 5_000 < caught.value.retry_after_s <= 6_000  # one token per 6,000 s
    assert "retry after" in str(caught.value)
    corpus.ask(QUESTION, user="bob")  # buckets are per user
    assert chat_standin.count("/api/chat") == 4  # the refused question never left


def test_the_default_rate_limit_is_five_per_minute(chat_standin: ChatStandIn) -> None:
    settings = NaturalLanguage()
    assert (settings.requests_per_minute, settings.bucket_size) == (5.0, 5)
    assert (settings.timeout_s, settings.health_timeout_s) == (30.0, 2.0)


def test_question_text_never_reaches_logs_or_metrics(
    engine: SearchEngine, chat_standin: ChatStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    marker = "Quizzical-Marmalade-7781"
    question = f"letters {marker} about the war?"
    corpus = _corpus(engine, chat_standin, requests_per_minute=0.01, burst=4)
    caplog.set_level(logging.DEBUG)
    chat_standin.content = lambda body: _answer([marker], {"author": [marker]})
    corpus.ask(question)  # answered: the marker is both keyword and unresolved value
    chat_standin.content = '{"broken'
    with pytest.raises(NaturalSearchUnavailable) as broken:
        corpus.ask(question)
    chat_standin.content = lambda body: _answer([marker] * 9, {})
    with pytest.raises(NaturalSearchUnavailable) as bounds:
        corpus.ask(question)
    chat_standin.chat_behaviour = ChatBehaviour.ERROR_500
    with pytest.raises(NaturalSearchUnavailable) as failed:
        corpus.ask(question)
    with pytest.raises(RateLimited) as limited:
        corpus.ask(question)
    with pytest.raises(InvalidArgument) as invalid:
        corpus.ask(question * 20)
    assert "question (" in caplog.text  # metadata was logged...
    assert marker not in caplog.text  # ...the question never was
    for exc in (broken, bounds, failed, limited, invalid):
        assert marker not in str(exc.value)
    exposition = generate_latest(engine.registry).decode()
    assert marker not in exposition
    for outcome, n in (("ok", 1), ("unavailable", 3), ("rate_limited", 1), ("invalid", 1)):
        series = f'tandem_nl_requests_total{{corpus="{corpus.name}",outcome="{outcome}"}} {n}.0'
        assert series in exposition
    assert f'tandem_nl_duration_seconds_count{{corpus="{corpus.name}"}} 6.0' in exposition


def test_plain_search_never_calls_ollama(
    fast_engine: SearchEngine, hash_embedder: SwitchableEmbedder, chat_standin: ChatStandIn
) -> None:
    corpus = fast_engine.create_corpus(
        CorpusConfig(
            name="hybrid",
            embedder=SentenceTransformerEmbedding(model="hash"),
            fields=FIELDS,
            natural=_natural(chat_standin),
        )
    )
    corpus.add(_letters())
    assert corpus.search("war letter", top_k=5)
    assert corpus.search("war", filters=Eq("author", "Emma Goldman"))
    hash_embedder.down = True  # keyword strategy too
    assert corpus.search("war letter", top_k=5)
    chat_standin.stop()  # and Ollama being gone changes nothing
    assert corpus.search("war letter", top_k=5)
    assert chat_standin.count() == 0
