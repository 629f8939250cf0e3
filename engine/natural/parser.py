"""What ``NaturalSearch`` needs from a question parser (the Ollama one is the only
implementation; importing this module does not import the ``ollama`` client)."""

from __future__ import annotations

from typing import Protocol

from engine.natural.schema import ModelQuery


class QuestionParser(Protocol):
    """Turns a question into a checked ``ModelQuery``.

    Raises ``NaturalSearchUnavailable`` for every failure (never anything else for
    remote trouble). Must not send anything but the question and the field schema.
    """

    def parse(self, question: str) -> ModelQuery: ...
