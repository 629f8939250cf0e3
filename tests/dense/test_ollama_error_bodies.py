"""Odd bodies from the Ollama stand-in, and calls that end in exceptions nobody expected.

Regressions (review 3): an HTTP error whose body is JSON but no object (``null``, ``[]``,
``"text"``, ``123``) made the ``ollama`` client's ``ResponseError`` constructor raise
``AttributeError``, which was no ``REMOTE_ERRORS``: ``embed()`` and ``is_available()``
raised it and the breaker was never told. And an exception other than
``EmbedderUnavailable`` from a call the breaker let through (its half-open trial, say)
left the breaker unreported: the trial was spent and the back-off never grew.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from dense.breaker import BreakerState, CircuitBreaker
from dense.contracts import EmbedderUnavailable
from dense.ollama import OllamaEmbedder
from dense.ollama_errors import REMOTE_ERRORS, describe_failure
from dense.ollama_transport import bounded_client
from tests.support.clock import FakeClock
from tests.support.ollama_standin import OllamaStandIn, Reply, Request, ollama_standin

__all__ = ["ollama_standin"]  # the fixture, re-exported so pytest finds it

MODEL = "standin-embed"
TIMEOUT_S = 10.0  # generous: these requests are expected to be answered at once

# JSON that is no object, as the body of an HTTP error: the client's ResponseError
# constructor calls ``.get`` on it.
NON_OBJECT_BODIES = {
    "null": b"null",
    "empty-list": b"[]",
    "list": b'[{"error": "x"}]',
    "string": b'"upstream overloaded"',
    "integer": b"123",
    "float": b"1.5",
    "true": b"true",
}

# What a confused or hostile server may send, for the sweep of every call the Tandem
# clients make: none of it may raise anything but REMOTE_ERRORS.
SWEEP_BODIES = [
    *NON_OBJECT_BODIES.values(),
    b"",
    b"   ",
    b"\xff\xfe\x00",
    b'{"a": ',
    b"[" * 100_000,
    b"NaN",
    b"{}",
    b'{"error": null}',
    b'{"error": 5}',
    b'{"error": {"nested": [1]}}',
    b'{"error": "\\ud800"}',
    b'{"embeddings": null}',
    b'{"embeddings": 5}',
    b'{"embeddings": "abc"}',
    b'{"embeddings": [null]}',
    b'{"embeddings": [[null]]}',
    b'{"embeddings": [["x"]]}',
    b'{"embeddings": {"a": [1]}}',
    b'{"embeddings": [[1]], "__class__": 1, "model_config": 2, "__dict__": 3}',
    b'{"embeddings": [[' + b"9" * 5000 + b"]]}",
    b'{"capabilities": 5}',
    b'{"capabilities": [1]}',
    b'{"capabilities": {"embedding": 1}}',
    b'{"details": []}',
    b'{"modified_at": "garbage"}',
    b'{"message": null}',
    b'{"message": "hi"}',
    b'{"message": {"content": 5}}',
]
SWEEP_STATUSES = (200, 204, 301, 400, 404, 500)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_embedder(standin: OllamaStandIn, clock: FakeClock) -> OllamaEmbedder:
    breaker = CircuitBreaker(base_backoff_s=5.0, max_backoff_s=40.0, clock=clock)
    return OllamaEmbedder(
        MODEL,
        host=standin.host,
        health_timeout_s=TIMEOUT_S,
        timeout_s=TIMEOUT_S,
        dimension=8,
        breaker=breaker,
    )


def _answer(status: int, body: bytes) -> Reply:
    return Reply(status, raw=body)


# -- the client: what escapes it ------------------------------------------------------------


def test_every_odd_answer_raises_a_remote_error(ollama_standin: OllamaStandIn) -> None:
    """The sweep behind REMOTE_ERRORS' breadth: every call the embedder and the question
    parser make, against every status and body above, raises one of them (or returns),
    and its description quotes nothing of the body."""
    client = bounded_client(ollama_standin.host, timeout_s=TIMEOUT_S, max_bytes=1 << 24)
    calls = {
        "/api/show": lambda: client.show(MODEL).capabilities,
        "/api/embed": lambda: client.embed(model=MODEL, input=["q"]).embeddings,
        "/api/chat": lambda: (
            client.chat(
                model=MODEL, messages=[{"role": "user", "content": "q"}], stream=False
            ).message.content
        ),
    }
    escaped: list[tuple[str, int, bytes, str]] = []
    try:
        for status in SWEEP_STATUSES:
            for body in SWEEP_BODIES:
                reply = _answer(status, body)
                for path, call in calls.items():
                    ollama_standin.route("POST", path, lambda r, reply=reply: reply)
                    try:
                        call()
                    except REMOTE_ERRORS as exc:
                        described = describe_failure(exc, model=MODEL, host="h", timeout_s=1.0)
                        assert "overloaded" not in described
                    except Exception as exc:  # collected, asserted below
                        escaped.append((path, status, body[:40], type(exc).__name__))
    finally:
        client.close()
    assert escaped == []


@pytest.mark.parametrize("body", NON_OBJECT_BODIES.values(), ids=NON_OBJECT_BODIES.keys())
def test_an_error_body_that_is_no_object_is_a_remote_error(
    ollama_standin: OllamaStandIn, body: bytes
) -> None:
    ollama_standin.route("POST", "/api/embed", lambda r: _answer(500, body))
    client = bounded_client(ollama_standin.host, timeout_s=TIMEOUT_S, max_bytes=1 << 20)
    try:
        with pytest.raises(REMOTE_ERRORS) as info:
            client.embed(model=MODEL, input=["q"])
    finally:
        client.close()
    described = describe_failure(info.value, model=MODEL, host="h", timeout_s=1.0)
    assert "malformed response" in described or "HTTP 500" in described


# -- the embedder ------------------------------------------------------------------------


@pytest.mark.parametrize("body", NON_OBJECT_BODIES.values(), ids=NON_OBJECT_BODIES.keys())
def test_embed_error_body_that_is_no_object_opens_the_breaker(
    ollama_standin: OllamaStandIn, clock: FakeClock, body: bytes
) -> None:
    ollama_standin.route("POST", "/api/embed", lambda r: _answer(500, body))
    embedder = make_embedder(ollama_standin, clock)
    with pytest.raises(EmbedderUnavailable, match="malformed response") as info:
        embedder.embed(["one", "two"])
    assert info.value.__cause__ is not None
    assert embedder.breaker.state is BreakerState.OPEN
    assert embedder.breaker.consecutive_failures == 1
    assert not embedder.is_available()
    with pytest.raises(EmbedderUnavailable, match="circuit open"):
        embedder.embed(["three"])
    assert ollama_standin.counts() == {"/api/embed": 1}  # open: no network at all
    embedder.close()


@pytest.mark.parametrize("body", NON_OBJECT_BODIES.values(), ids=NON_OBJECT_BODIES.keys())
def test_health_check_error_body_that_is_no_object_is_false(
    ollama_standin: OllamaStandIn, clock: FakeClock, body: bytes
) -> None:
    """Regression: ``/api/show`` answering ``500 null`` made every ``is_available()``
    raise, and every search ask the server again with no back-off."""
    ollama_standin.route("POST", "/api/show", lambda r: _answer(500, body))
    embedder = make_embedder(ollama_standin, clock)
    for _ in range(5):
        assert embedder.is_available() is False
    assert ollama_standin.counts() == {"/api/show": 1}
    assert embedder.breaker.state is BreakerState.OPEN
    assert embedder.breaker.consecutive_failures == 1
    clock.advance(5.0)
    assert embedder.is_available() is False  # the next window's one probe
    assert ollama_standin.counts() == {"/api/show": 2}
    assert embedder.breaker.consecutive_failures == 2
    embedder.close()


class _Bug(Exception):
    """Stands for any exception that is neither ``EmbedderUnavailable`` nor remote."""


def _raise_bug(*args: object, **kwargs: object) -> object:
    raise _Bug("not remote trouble")


@pytest.fixture
def failing_once(ollama_standin: OllamaStandIn) -> Iterator[OllamaStandIn]:
    """``/api/embed`` fails with a proper Ollama error the first time, then is healthy."""
    healthy = ollama_standin.routes[("POST", "/api/embed")]
    calls = 0

    def embed(request: Request) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 1:
            return Reply(500, {"error": "model runner crashed"})
        return healthy(request)

    ollama_standin.route("POST", "/api/embed", embed)
    yield ollama_standin


def test_an_unexpected_error_in_the_trial_embedding_still_backs_off(
    failing_once: OllamaStandIn, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the trial admitted by a passed health check ended in an exception
    that was no ``EmbedderUnavailable``; the breaker was not told, the trial was spent
    and the window stayed 5 s for ever. Now each such trial doubles it, like any failure."""
    embedder = make_embedder(failing_once, clock)
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["q"])
    breaker = embedder.breaker
    assert breaker.consecutive_failures == 1
    monkeypatch.setattr(embedder, "_embed_batch", _raise_bug)
    for failures, window in ((2, 5.0), (3, 10.0), (4, 20.0), (5, 40.0), (6, 40.0)):
        clock.advance(window - 0.01)
        assert embedder.is_available() is False  # the window holds
        clock.advance(0.01)
        assert embedder.is_available() is True  # the health check passes: a trial
        assert breaker.trial_pending
        with pytest.raises(_Bug):
            embedder.embed(["q"])
        assert breaker.state is BreakerState.OPEN
        assert breaker.consecutive_failures == failures
        assert not breaker.trial_pending
        assert breaker.retry_after_s() == breaker.backoff_s(failures)
        assert embedder.is_available() is False  # no I/O until the next window
        with pytest.raises(EmbedderUnavailable, match="circuit open"):
            embedder.embed(["q"])
    assert failing_once.counts() == {"/api/embed": 1, "/api/show": 5}
    monkeypatch.undo()  # the bug is fixed: the next trial closes the breaker
    clock.advance(40.0)
    assert embedder.is_available()
    assert embedder.embed(["q"]).shape == (1, 8)
    assert breaker.state is BreakerState.CLOSED
    assert breaker.consecutive_failures == 0
    embedder.close()


def test_an_unexpected_error_while_closed_opens_the_breaker(
    ollama_standin: OllamaStandIn, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    embedder = make_embedder(ollama_standin, clock)
    assert embedder.is_available()
    assert embedder.embed(["q"]).shape == (1, 8)
    monkeypatch.setattr(embedder, "_validated", _raise_bug)
    with pytest.raises(_Bug):
        embedder.embed(["q"])
    assert embedder.breaker.state is BreakerState.OPEN
    assert embedder.breaker.consecutive_failures == 1
    assert embedder._healthy_until == -math.inf  # a stale passed check is not trusted
    assert embedder.is_available() is False
    embedder.close()


def test_an_unexpected_error_in_the_health_probe_is_reported(
    ollama_standin: OllamaStandIn, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The probe ``allow()`` granted must report whatever ends it: an exception that is
    no remote trouble propagates, but opens the breaker (the window grows) first."""
    embedder = make_embedder(ollama_standin, clock)
    monkeypatch.setattr(embedder._health_client, "show", _raise_bug)
    with pytest.raises(_Bug):
        embedder.is_available()
    breaker = embedder.breaker
    assert breaker.state is BreakerState.OPEN
    assert breaker.consecutive_failures == 1
    assert embedder.is_available() is False  # open: answered without the probe
    clock.advance(5.0)
    with pytest.raises(_Bug):
        embedder.is_available()  # the half-open probe
    assert breaker.state is BreakerState.OPEN
    assert breaker.consecutive_failures == 2
    assert breaker.retry_after_s() == breaker.backoff_s(2)
    monkeypatch.undo()
    clock.advance(10.0)
    assert embedder.is_available()
    assert embedder.embed(["q"]).shape == (1, 8)
    assert breaker.state is BreakerState.CLOSED
    embedder.close()


def test_credentials_in_the_host_are_never_shown(caplog: pytest.LogCaptureFixture) -> None:
    """Regression: a host carrying a proxy's credentials (``http://user:secret@h``) was
    named as it is in warnings, error messages and the config's ``repr``."""
    from engine import CorpusConfig, OllamaEmbedding

    host = "http://alice:s3cr3t-token@127.0.0.1:1"  # port 1: refused at once
    embedder = OllamaEmbedder("m", host=host, timeout_s=5, health_timeout_s=5)
    with caplog.at_level("DEBUG"):
        embedder.is_available()
        with pytest.raises(EmbedderUnavailable) as failed:
            embedder.embed(["text"])
    shown = [str(failed.value), *(r.getMessage() for r in caplog.records)]
    assert any("***@127.0.0.1:1" in line for line in shown)
    assert not [line for line in shown if "s3cr3t" in line]
    config = CorpusConfig(name="a", embedder=OllamaEmbedding(model="m", host=host))
    assert "s3cr3t" not in repr(config) and "***@127.0.0.1:1" in repr(config)
    assert config.embedder is not None and config.embedder.host == host  # still dialled
