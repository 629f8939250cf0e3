"""What went wrong talking to an Ollama server: the one mapping for that remote service.

Both Ollama clients in Tandem — the embedder (``dense.ollama``) and the question parser
(``engine.natural``) — catch ``REMOTE_ERRORS`` and describe them with
``describe_failure``; each wraps the sentence in its own exception type. The description
never quotes server-supplied text: a hostile or confused server could echo a query back
into a message that ends up in a log.
"""

from __future__ import annotations

import httpx
import ollama
import pydantic

from dense.hosts import shown_host
from dense.ollama_transport import ResponseTooLarge

__all__ = ["REMOTE_ERRORS", "describe_failure"]

REMOTE_ERRORS: tuple[type[Exception], ...] = (
    ConnectionError,  # the client turns httpx.ConnectError into this
    httpx.HTTPError,  # timeouts, protocol errors, connections cut mid-response, and the
    # bounded transport's limits (``dense.ollama_transport``: a whole call's time, size)
    ollama.ResponseError,  # HTTP status >= 400; 404 for a model that is not pulled
    ollama.RequestError,
    ValueError,  # a body that is not JSON (JSONDecodeError) or not UTF-8 (UnicodeDecodeError)
    RecursionError,  # JSON nested past the interpreter's limit
    TypeError,  # a JSON body that is no object: the client builds ``cls(**body)`` from it
    pydantic.ValidationError,  # an object of the wrong shape
    # An HTTP error (status >= 400, or a redirect, which the client does not follow) whose
    # body is JSON but no object (``null``, ``[]``, ``"text"``, ``123``): the client's
    # ``ResponseError.__init__`` runs ``json.loads(body).get("error", body)`` and
    # suppresses only ``JSONDecodeError``, so the ``.get`` on a list, str, number or None
    # raises AttributeError before any ``ResponseError`` exists (ollama 0.6.3).
    AttributeError,
)
"""The errors a remote call may raise for remote trouble: whatever the server sends, the
call raises one of these (``ValueError``, ``TypeError`` and ``AttributeError`` are that
broad because the client lets the decoder's, the model constructor's and its own error
constructor's errors through; a sweep of statuses and body shapes against ollama 0.6.3
found no other type, and ``tests/dense/test_ollama_error_bodies.py`` keeps the shapes).
The client raises some of them for bad *input* too (``UnicodeEncodeError``,
``ValidationError``): callers check what they send first
(``dense.contracts.checked_texts``), so that what is caught here is the server's doing."""


def describe_failure(exc: Exception, *, model: str, host: str, timeout_s: float) -> str:
    """One sentence saying what failed, fit for a log line and an error message (the
    host without its credentials)."""
    host = shown_host(host)
    if isinstance(exc, ollama.ResponseError):
        if exc.status_code == 404:
            return f"model {model!r} not found at Ollama {host}; run `ollama pull {model}`"
        return f"Ollama at {host} answered HTTP {exc.status_code}"
    if isinstance(exc, ResponseTooLarge):
        return f"Ollama at {host} sent an answer longer than {exc.limit} bytes"
    if isinstance(exc, httpx.TimeoutException):
        return f"Ollama at {host} timed out: did not answer within {timeout_s:g} s"
    if isinstance(exc, ConnectionError | httpx.TransportError):
        return f"cannot reach Ollama at {host} ({type(exc).__name__})"
    return f"Ollama at {host} sent a malformed response ({type(exc).__name__})"
