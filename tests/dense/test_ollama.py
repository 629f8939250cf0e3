"""OllamaEmbedder against the Ollama stand-in (tests/support/ollama_standin.py), never real Ollama.

Every failure mode ends in ``EmbedderUnavailable`` or ``is_available() == False`` within
the configured timeout, and the circuit breaker keeps a dead or broken server from being
asked more than once per back-off window (proved by the stand-in's request counts).
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import threading
import time
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dense.breaker import BreakerState, CircuitBreaker
from dense.contracts import Embedder, EmbedderUnavailable
from dense.ollama import OllamaEmbedder
from tests.support.clock import FakeClock
from tests.support.ollama_standin import (
    Behaviour,
    OllamaStandIn,
    Reply,
    Request,
    ollama_standin,
    standin_vector,
)

__all__ = ["ollama_standin"]  # the fixture, re-exported so pytest finds it

MODEL = "standin-embed"
# Requests expected to succeed get a generous timeout (a loaded CI box can be slow to
# answer even on loopback); the tests that wait for a timeout set SHORT_TIMEOUT_S.
TIMEOUT_S = 10.0
SHORT_TIMEOUT_S = 0.5
GENEROUS_S = 15.0  # far below the stand-in's 30 s sleep: proves nothing waited for it


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_embedder(
    standin: OllamaStandIn, clock: FakeClock | None = None, **kwargs: object
) -> OllamaEmbedder:
    breaker = CircuitBreaker(base_backoff_s=5.0, max_backoff_s=40.0, clock=clock or FakeClock())
    options: dict[str, object] = {
        "host": standin.host,
        "health_timeout_s": TIMEOUT_S,
        "timeout_s": TIMEOUT_S,
        "breaker": breaker,
    }
    options.update(kwargs)
    return OllamaEmbedder(MODEL, **options)  # type: ignore[arg-type]


def expected(texts: list[str], dimension: int = 8) -> npt.NDArray[np.float64]:
    raw = np.array([standin_vector(t, dimension) for t in texts], dtype=np.float64)
    normalised: npt.NDArray[np.float64] = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    return normalised


# -- healthy -----------------------------------------------------------------------------


def test_constructing_costs_nothing(ollama_standin: OllamaStandIn) -> None:
    embedder: Embedder = make_embedder(ollama_standin)  # statically an Embedder
    assert embedder.name == f"ollama:{MODEL}"
    assert ollama_standin.count() == 0


def test_is_a_runtime_embedder(ollama_standin: OllamaStandIn) -> None:
    # On Python 3.11 isinstance() against a runtime-checkable Protocol reads every
    # property, ``dimension`` included; with the dimension known that costs no request.
    embedder = make_embedder(ollama_standin, dimension=8)
    assert isinstance(embedder, Embedder)
    assert ollama_standin.count() == 0


def test_healthy_embed_shape_dtype_norm_and_order(ollama_standin: OllamaStandIn) -> None:
    texts = ["alpha", "beta", "gamma", "delta", "epsilon"]
    embedder = make_embedder(ollama_standin, batch_size=2)
    vectors = embedder.embed(texts)
    assert vectors.shape == (5, 8)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(vectors, expected(texts), atol=1e-6)
    assert ollama_standin.count("/api/embed") == 3  # batches of 2, 2, 1
    assert ollama_standin.last_body("/api/embed") == {"model": MODEL, "input": ["epsilon"]}


def test_dimension_is_probed_once_then_cached(ollama_standin: OllamaStandIn) -> None:
    ollama_standin.dimension = 13
    embedder = make_embedder(ollama_standin)
    assert embedder.dimension == 13
    assert embedder.dimension == 13
    assert embedder.embed([]).shape == (0, 13)
    assert ollama_standin.count("/api/embed") == 1


def test_given_dimension_needs_no_request(ollama_standin: OllamaStandIn) -> None:
    embedder = make_embedder(ollama_standin, dimension=8)
    assert embedder.dimension == 8
    assert embedder.embed([]).shape == (0, 8)
    assert ollama_standin.count() == 0


def test_health_check_is_cached_while_closed(
    ollama_standin: OllamaStandIn, clock: FakeClock
) -> None:
    embedder = make_embedder(ollama_standin, clock, health_ttl_s=10.0)
    assert all(embedder.is_available() for _ in range(20))
    assert ollama_standin.counts() == {"/api/show": 1}
    clock.advance(10.0)
    assert embedder.is_available()
    assert ollama_standin.counts() == {"/api/show": 2}


@pytest.fixture(scope="module")
def embedders_by_batch_size() -> Iterator[dict[int, OllamaEmbedder]]:
    """One healthy stand-in and one embedder per batch size (HTTP clients are not free)."""
    with OllamaStandIn() as standin:
        embedders = {size: make_embedder(standin, batch_size=size) for size in range(1, 6)}
        yield embedders
        for embedder in embedders.values():
            embedder.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.text(min_size=0, max_size=30), min_size=1, max_size=12),
    batch_size=st.integers(min_value=1, max_value=5),
)
def test_order_is_preserved_for_any_texts_and_batch_size(
    embedders_by_batch_size: dict[int, OllamaEmbedder], texts: list[str], batch_size: int
) -> None:
    embedder = embedders_by_batch_size[batch_size]
    np.testing.assert_allclose(embedder.embed(texts), expected(texts), atol=1e-6)


# -- every failure mode --------------------------------------------------------------------

EMBED_FAILURES = [
    Behaviour.ERROR_500,
    Behaviour.MALFORMED_JSON,
    Behaviour.WRONG_DIMENSION,
    Behaviour.NAN_VALUES,
    Behaviour.EMPTY_EMBEDDINGS,
    Behaviour.EMPTY_VECTOR,
    Behaviour.WRONG_COUNT,
    Behaviour.UNKNOWN_MODEL,
]


@pytest.mark.parametrize("behaviour", EMBED_FAILURES, ids=lambda b: b.value)
def test_embed_failure_raises_and_opens_the_breaker(
    ollama_standin: OllamaStandIn, behaviour: Behaviour
) -> None:
    embedder = make_embedder(ollama_standin, dimension=8)
    ollama_standin.behaviour = behaviour
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["one", "two"])
    assert embedder.breaker.state is BreakerState.OPEN
    requests = ollama_standin.count()
    assert not embedder.is_available()
    with pytest.raises(EmbedderUnavailable, match="circuit open"):
        embedder.embed(["three"])
    assert ollama_standin.count() == requests  # open breaker: no network at all


@pytest.mark.parametrize(
    "behaviour", [Behaviour.ERROR_500, Behaviour.MALFORMED_JSON, Behaviour.UNKNOWN_MODEL]
)
def test_health_check_failure_is_false(ollama_standin: OllamaStandIn, behaviour: Behaviour) -> None:
    ollama_standin.behaviour = behaviour
    embedder = make_embedder(ollama_standin)
    assert embedder.is_available() is False
    assert ollama_standin.counts() == {"/api/show": 1}


def test_unknown_model_is_detected_by_the_health_check(ollama_standin: OllamaStandIn) -> None:
    embedder = OllamaEmbedder("never-pulled", host=ollama_standin.host, health_timeout_s=TIMEOUT_S)
    assert embedder.is_available() is False
    with pytest.raises(EmbedderUnavailable):
        OllamaEmbedder("never-pulled", host=ollama_standin.host).embed(["x"])


def test_remote_errors_keep_their_cause(ollama_standin: OllamaStandIn) -> None:
    ollama_standin.behaviour = Behaviour.UNKNOWN_MODEL
    with pytest.raises(EmbedderUnavailable, match="not found") as info:
        make_embedder(ollama_standin).embed(["x"])
    assert info.value.__cause__ is not None


def test_dimension_change_after_first_seen_is_a_failure(ollama_standin: OllamaStandIn) -> None:
    embedder = make_embedder(ollama_standin)
    assert embedder.embed(["a"]).shape == (1, 8)
    ollama_standin.dimension = 12
    with pytest.raises(EmbedderUnavailable, match="dimension 12, expected 8"):
        embedder.embed(["a"])


@pytest.mark.parametrize(
    ("vectors", "message"),
    [([[1.0, 0.0], [1.0, 0.0, 0.0]], "mixed dimensions"), ([[0.0, 0.0]], "zero vector")],
)
def test_malformed_vectors_are_failures(
    ollama_standin: OllamaStandIn, vectors: list[list[float]], message: str
) -> None:
    def embed(request: Request) -> Reply:
        return Reply(200, {"model": MODEL, "embeddings": vectors})

    ollama_standin.route("POST", "/api/embed", embed)
    with pytest.raises(EmbedderUnavailable, match=message):
        make_embedder(ollama_standin).embed(["t"] * len(vectors))


def test_huge_finite_values_still_give_unit_vectors(ollama_standin: OllamaStandIn) -> None:
    """1e200 squared overflows even float64: the row is scaled before its length is taken."""

    def embed(request: Request) -> Reply:
        return Reply(200, {"model": MODEL, "embeddings": [[1e200, 1e200, 0.0]]})

    ollama_standin.route("POST", "/api/embed", embed)
    vector = make_embedder(ollama_standin).embed(["t"])[0]
    np.testing.assert_allclose(vector, [2**-0.5, 2**-0.5, 0.0], rtol=1e-6)


def test_model_that_cannot_embed_is_unavailable(ollama_standin: OllamaStandIn) -> None:
    ollama_standin.route(
        "POST", "/api/show", lambda r: Reply(200, {"capabilities": ["completion"]})
    )
    assert make_embedder(ollama_standin).is_available() is False


def test_slow_server_times_out_instead_of_hanging(ollama_standin: OllamaStandIn) -> None:
    ollama_standin.behaviour = Behaviour.SLOW
    ollama_standin.delay_s = 30.0
    short = {"timeout_s": SHORT_TIMEOUT_S, "health_timeout_s": SHORT_TIMEOUT_S}
    embedder = make_embedder(ollama_standin, None, dimension=8, **short)
    started = time.monotonic()
    assert embedder.is_available() is False
    with pytest.raises(EmbedderUnavailable, match="circuit open"):
        embedder.embed(["x"])
    fresh = make_embedder(ollama_standin, None, dimension=8, **short)
    with pytest.raises(EmbedderUnavailable, match="timed out"):
        fresh.embed(["x"])
    assert time.monotonic() - started < GENEROUS_S


def _embed_answer(texts: int, dimension: int = 8) -> bytes:
    vectors = [standin_vector(str(i), dimension) for i in range(texts)]
    return json.dumps({"model": MODEL, "embeddings": vectors}).encode()


def test_an_answer_trickled_byte_by_byte_is_dropped_at_the_timeout(
    ollama_standin: OllamaStandIn,
) -> None:
    """Regression: httpx's timeout bounds each read; a server sending one byte every
    50 ms kept a batch with a 0.5 s timeout waiting for its whole answer (~10 s here)."""
    data = _embed_answer(1)

    def trickle(request: Request) -> Reply:
        chunks = (data[i : i + 1] for i in range(len(data)))
        return Reply(200, chunks=chunks, length=len(data), chunk_delay_s=0.05)

    ollama_standin.route("POST", "/api/embed", trickle)
    embedder = make_embedder(ollama_standin, None, dimension=8, timeout_s=SHORT_TIMEOUT_S)
    with pytest.raises(EmbedderUnavailable, match=r"timed out: did not answer within 0\.5 s"):
        embedder.embed(["x"])
    assert ollama_standin.hung_up.wait(GENEROUS_S)
    assert ollama_standin.streamed_bytes < len(data)


def test_a_flood_of_an_answer_is_refused_as_it_arrives(ollama_standin: OllamaStandIn) -> None:
    """A batch's answer past ~1 MiB a text is no embedding: refused before it is read."""
    total = 256 << 20

    def flood(request: Request) -> Reply:
        megabytes = (b" " * (1 << 20) for _ in range(total >> 20))
        return Reply(200, chunks=megabytes, length=total)

    ollama_standin.route("POST", "/api/embed", flood)
    embedder = make_embedder(ollama_standin, None, dimension=8, batch_size=2)
    with pytest.raises(EmbedderUnavailable, match=r"answer longer than 3145728 bytes"):
        embedder.embed(["x", "y"])
    assert ollama_standin.hung_up.wait(GENEROUS_S)
    assert ollama_standin.streamed_bytes < total // 4


def test_a_compressed_answer_is_refused(ollama_standin: OllamaStandIn) -> None:
    """Asked for an uncompressed answer, a server sending gzip is refused: its size on
    the wire says nothing of its size decoded (a few kilobytes can inflate to gigabytes)."""
    data = gzip.compress(_embed_answer(1))
    ollama_standin.route(
        "POST",
        "/api/embed",
        lambda request: Reply(200, raw=data, headers={"Content-Encoding": "gzip"}),
    )
    embedder = make_embedder(ollama_standin, None, dimension=8)
    with pytest.raises(EmbedderUnavailable, match=r"malformed response \(DecodingError\)"):
        embedder.embed(["x"])
    sent = {k.lower(): v for k, v in ollama_standin.last_headers("/api/embed").items()}
    assert sent["accept-encoding"] == "identity"


def test_connection_refused(ollama_standin: OllamaStandIn) -> None:
    embedder = make_embedder(ollama_standin, dimension=8)
    ollama_standin.stop()
    assert embedder.is_available() is False
    with pytest.raises(EmbedderUnavailable, match="circuit open"):
        embedder.embed(["x"])
    with pytest.raises(EmbedderUnavailable, match="cannot reach"):
        make_embedder(ollama_standin).embed(["x"])


# -- the breaker in front of the network -------------------------------------------------------


def test_server_dies_mid_run_and_comes_back(
    ollama_standin: OllamaStandIn, clock: FakeClock
) -> None:
    embedder = make_embedder(ollama_standin, clock)
    assert embedder.embed(["before"]).shape == (1, 8)  # keep-alive connection now pooled
    ollama_standin.stop()
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["during"])
    ollama_standin.start()
    ollama_standin.reset_counts()
    # Back up, but the window (5 s) has not passed: still no network.
    assert not embedder.is_available()
    clock.advance(5.0)
    assert embedder.is_available()  # the one probe
    assert ollama_standin.counts() == {"/api/show": 1}
    # A health check does not close the breaker: it admits one trial embedding.
    assert embedder.breaker.state is BreakerState.HALF_OPEN
    assert embedder.breaker.consecutive_failures == 1
    np.testing.assert_allclose(embedder.embed(["after"]), expected(["after"]), atol=1e-6)
    assert embedder.breaker.state is BreakerState.CLOSED
    assert embedder.breaker.consecutive_failures == 0


def test_one_probe_per_backoff_window(ollama_standin: OllamaStandIn, clock: FakeClock) -> None:
    ollama_standin.behaviour = Behaviour.ERROR_500
    embedder = make_embedder(ollama_standin, clock, dimension=8)

    def hammer() -> None:
        for _ in range(25):
            embedder.is_available()
            with pytest.raises(EmbedderUnavailable):
                embedder.embed(["q"])

    hammer()
    assert ollama_standin.count() == 1  # the first call failed; everything after: no I/O
    for window, expected_total in ((5.0, 2), (10.0, 3), (20.0, 4), (40.0, 5), (40.0, 6)):
        clock.advance(window - 0.01)
        hammer()
        assert ollama_standin.count() == expected_total - 1
        clock.advance(0.01)
        threads = [threading.Thread(target=hammer) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ollama_standin.count() == expected_total  # exactly one probe, many callers
    ollama_standin.behaviour = Behaviour.HEALTHY
    clock.advance(40.0)
    assert embedder.is_available()
    assert embedder.breaker.consecutive_failures == 6  # a health check resets nothing
    assert embedder.embed(["q"]).shape == (1, 8)
    assert embedder.breaker.consecutive_failures == 0


def _failing_embed(request: Request) -> Reply:
    return Reply(500, {"error": "model runner crashed"})


def test_a_passing_health_check_does_not_reset_the_backoff(
    ollama_standin: OllamaStandIn, clock: FakeClock
) -> None:
    """Regression: /api/show healthy, /api/embed failing. The passing health check used
    to close the breaker, so every window stayed the base 5 s and every window's first
    query paid a failed embedding (38 in 4 s with a 0.1 s base); now the window doubles."""
    healthy = ollama_standin.routes[("POST", "/api/embed")]
    ollama_standin.route("POST", "/api/embed", _failing_embed)
    embedder = make_embedder(ollama_standin, clock, dimension=8)

    def query() -> None:  # as the router and the ingest path do
        if embedder.is_available():
            with pytest.raises(EmbedderUnavailable):
                embedder.embed(["q"])

    query()
    assert ollama_standin.counts() == {"/api/show": 1, "/api/embed": 1}
    assert embedder.breaker.consecutive_failures == 1
    for round_, window in enumerate((5.0, 10.0, 20.0, 40.0, 40.0), start=2):
        clock.advance(window - 0.01)
        for _ in range(10):
            query()
        assert ollama_standin.count("/api/embed") == round_ - 1  # the window holds
        clock.advance(0.01)
        for _ in range(10):
            query()
        assert ollama_standin.counts() == {"/api/show": round_, "/api/embed": round_}
        assert embedder.breaker.consecutive_failures == round_
    ollama_standin.route("POST", "/api/embed", healthy)  # the runner is back
    clock.advance(40.0)
    assert embedder.is_available()
    np.testing.assert_allclose(embedder.embed(["q"]), expected(["q"]), atol=1e-6)
    assert embedder.breaker.state is BreakerState.CLOSED
    assert embedder.breaker.consecutive_failures == 0
    embedder.close()


def test_only_the_trial_embedding_reaches_a_stalled_server(
    ollama_standin: OllamaStandIn, clock: FakeClock
) -> None:
    """Regression: with /api/embed stalling, the query that passed the health check
    closed the breaker, and every query arriving while its embedding hung sent another
    one (each waiting out the timeout). Now the others fail at once, with no request."""
    arrived = threading.Event()
    release = threading.Event()

    def stalled(request: Request) -> Reply:  # the first request hangs, any other fails
        if not arrived.is_set():
            arrived.set()
            release.wait(GENEROUS_S)
        return _failing_embed(request)

    ollama_standin.route("POST", "/api/embed", _failing_embed)
    embedder = make_embedder(ollama_standin, clock, dimension=8)
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["q"])
    ollama_standin.route("POST", "/api/embed", stalled)
    clock.advance(5.0)
    errors: list[EmbedderUnavailable] = []

    def trial() -> None:
        assert embedder.is_available()
        try:
            embedder.embed(["q"])
        except EmbedderUnavailable as exc:
            errors.append(exc)

    thread = threading.Thread(target=trial)
    thread.start()
    try:
        assert arrived.wait(GENEROUS_S)  # the trial embedding is in flight
        for _ in range(10):
            if embedder.is_available():
                with pytest.raises(EmbedderUnavailable, match="circuit open"):
                    embedder.embed(["q"])
        assert ollama_standin.counts() == {"/api/embed": 2, "/api/show": 1}
    finally:
        release.set()
        thread.join(GENEROUS_S)
        embedder.close()
    assert len(errors) == 1
    assert embedder.breaker.consecutive_failures == 2


# -- arguments and logs ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"timeout_s": 0},
        {"health_timeout_s": -1.0},
        {"batch_size": 0},
        {"dimension": 0},
        {"health_ttl_s": -1.0},
    ],
)
def test_bad_arguments_are_rejected(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        OllamaEmbedder(MODEL, **kwargs)  # type: ignore[arg-type]


def test_blank_model_and_single_string_are_rejected(ollama_standin: OllamaStandIn) -> None:
    with pytest.raises(ValueError):
        OllamaEmbedder("  ")
    with pytest.raises(ValueError):
        make_embedder(ollama_standin).embed("not a list")


def test_logs_never_carry_text(
    ollama_standin: OllamaStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "my-secret-query-text"
    caplog.set_level(logging.DEBUG)
    embedder = make_embedder(ollama_standin)
    embedder.embed([secret])
    ollama_standin.behaviour = Behaviour.NAN_VALUES
    with pytest.raises(EmbedderUnavailable) as info:
        embedder.embed([secret])
    assert caplog.records  # something was logged, just not the text
    assert secret not in caplog.text
    assert secret not in str(info.value)


def test_credentials_in_the_host_are_sent_as_basic_authentication(
    ollama_standin: OllamaStandIn,
) -> None:
    """Regression: the ``ollama`` client rebuilds its base URL from the host name alone,
    so a proxy's credentials in the host (``http://user:secret@proxy:11434``, which the
    README offers) were never sent and every call behind that proxy failed."""
    address = ollama_standin.host.removeprefix("http://")
    host = f"http://alice:s3cr%40t@{address}"  # percent-encoded, as in any URL: s3cr@t
    embedder = make_embedder(ollama_standin, host=host)
    assert embedder.is_available()
    assert embedder.embed(["x"]).shape == (1, ollama_standin.dimension)
    expected = "Basic " + base64.b64encode(b"alice:s3cr@t").decode()
    for path in ("/api/show", "/api/embed"):
        sent = {k.lower(): v for k, v in ollama_standin.last_headers(path).items()}
        assert sent.get("authorization") == expected, path
    embedder.close()
    plain = make_embedder(ollama_standin)
    plain.embed(["y"])
    sent = {k.lower() for k in ollama_standin.last_headers("/api/embed")}
    assert "authorization" not in sent  # none invented for a host without credentials
    plain.close()


@pytest.mark.parametrize("status", [400, 413])
def test_a_text_the_server_refuses_does_not_open_the_breaker(
    ollama_standin: OllamaStandIn, clock: FakeClock, status: int
) -> None:
    # One document past the model's context ("input length exceeds the context length",
    # HTTP 400) opened the breaker — shared by every corpus on the model — at each retry.
    original = ollama_standin.routes[("POST", "/api/embed")]

    def embed(request: Request) -> Reply:
        raw = request.body.get("input", [])
        if any("too long" in text for text in ([raw] if isinstance(raw, str) else raw)):
            return Reply(status, {"error": "input length exceeds the context length"})
        return original(request)

    ollama_standin.route("POST", "/api/embed", embed)
    embedder = make_embedder(ollama_standin, clock)
    for _ in range(3):
        with pytest.raises(EmbedderUnavailable, match=f"HTTP {status}"):
            embedder.embed(["fine", "too long"])
        assert embedder._breaker.state is BreakerState.CLOSED
        np.testing.assert_allclose(embedder.embed(["fine"]), expected(["fine"]), rtol=1e-6)
    ollama_standin.behaviour = Behaviour.ERROR_500  # the server's trouble, as before
    with pytest.raises(EmbedderUnavailable):
        embedder.embed(["fine"])
    assert embedder._breaker.state is BreakerState.OPEN
