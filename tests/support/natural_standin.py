"""The Ollama stand-in, extended with ``POST /api/chat`` for natural-language questions.

A STAND-IN for tests only (see ``tests/support/ollama_standin.py``). ``ChatStandIn`` adds one
route through the stand-in's ``route()`` mechanism and leaves every existing behaviour
alone. What the chat "model" answers is set per test: ``content`` (the message text, or
a function of the request body), or a ``ChatBehaviour`` fault. Every chat request body
is recorded so tests can assert exactly what left the engine.
"""

from __future__ import annotations

import enum
import itertools
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.support.ollama_standin import DEFAULT_MODEL, OllamaStandIn, Reply, Request

CHAT_MODEL = "standin-chat"
FLOOD_BYTES = 200 << 20

Content = str | Callable[[Any], str]


class ChatBehaviour(enum.Enum):
    ANSWER = "answer"  # 200 with ``content`` as the assistant message
    SLOW = "slow"  # wait ``chat_delay_s`` first (only /api/chat; /api/show stays fast)
    ERROR_500 = "error_500"
    BROKEN_BODY = "broken_body"  # 200 with a truncated JSON body
    WRONG_SHAPE = "wrong_shape"  # 200 with JSON that is not a chat response
    LIST_BODY = "list_body"  # 200 with a JSON array where an object belongs
    NOT_UTF8 = "not_utf8"  # 200 with bytes that are not UTF-8
    DEEP_BODY = "deep_body"  # 200 with JSON nested past the interpreter's limit
    TRICKLE = "trickle"  # a valid answer, one byte every ``trickle_s`` (each read is quick)
    FLOOD = "flood"  # a valid answer whose message is ``FLOOD_BYTES`` long, sent at once


class ChatStandIn(OllamaStandIn):
    """An ``OllamaStandIn`` that also serves a chat model (``CHAT_MODEL``)."""

    def __init__(self, *, chat_delay_s: float = 5.0) -> None:
        super().__init__(models=(DEFAULT_MODEL, CHAT_MODEL))
        self.content: Content = json.dumps({"keywords": [], "filters": {}})
        self.chat_behaviour = ChatBehaviour.ANSWER
        self.chat_delay_s = chat_delay_s
        self.trickle_s = 0.05
        self._chat_lock = threading.Lock()
        self._chat_bodies: list[Any] = []
        self._release = threading.Event()
        self.route("POST", "/api/chat", self._chat)
        self.route("POST", "/api/show", self._show_chat)

    @property
    def chat_bodies(self) -> list[Any]:
        with self._chat_lock:
            return list(self._chat_bodies)

    def stop(self) -> None:
        self._release.set()  # wake a slow chat answer
        super().stop()

    def _show_chat(self, request: Request) -> Reply:
        """``/api/show`` as before, but the chat model reports the completion capability."""
        reply = self._show(request)
        body = request.body if isinstance(request.body, dict) else {}
        if reply.status == 200 and body.get("model") == CHAT_MODEL:
            return Reply(200, {**reply.payload, "capabilities": ["completion"]})
        return reply

    def _chat(self, request: Request) -> Reply:
        body = request.body
        with self._chat_lock:
            self._chat_bodies.append(body)
        model = body.get("model") if isinstance(body, dict) else None
        if model not in self.models:
            return Reply(404, {"error": f"model {model!r} not found, try pulling it first"})
        behaviour = self.chat_behaviour
        if behaviour is ChatBehaviour.SLOW:
            self._release.wait(self.chat_delay_s)
        elif behaviour is ChatBehaviour.ERROR_500:
            return Reply(500, {"error": "stand-in: internal server error"})
        elif behaviour is ChatBehaviour.BROKEN_BODY:
            return Reply(200, raw=b'{"model": "x", "message": {"role": "assist')
        elif behaviour is ChatBehaviour.WRONG_SHAPE:
            return Reply(200, {"model": model, "message": "not an object", "done": 7})
        elif behaviour is ChatBehaviour.LIST_BODY:
            return Reply(200, raw=b"[1, 2]")
        elif behaviour is ChatBehaviour.NOT_UTF8:
            return Reply(200, raw=b'{"model": "\xff\xfe"}')
        elif behaviour is ChatBehaviour.DEEP_BODY:
            return Reply(200, raw=b"[" * 100_000 + b"]" * 100_000)
        elif behaviour is ChatBehaviour.FLOOD:
            head, tail = json.dumps(_answer(model, "\0")).encode().split(b"\\u0000")
            megabytes = (b"a" * (1 << 20) for _ in range(FLOOD_BYTES >> 20))
            chunks = itertools.chain((head,), megabytes, (tail,))
            return Reply(200, chunks=chunks, length=len(head) + FLOOD_BYTES + len(tail))
        content = self.content(body) if callable(self.content) else self.content
        if behaviour is ChatBehaviour.TRICKLE:
            data = json.dumps(_answer(model, content)).encode()
            trickled = (data[i : i + 1] for i in range(len(data)))
            return Reply(200, chunks=trickled, length=len(data), chunk_delay_s=self.trickle_s)
        return Reply(200, _answer(model, content))


def _answer(model: object, content: str) -> dict[str, Any]:
    return {
        "model": model,
        "created_at": "2024-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": content},
        "done": True,
        "done_reason": "stop",
    }
