"""Natural-language questions (``Corpus.ask``) understood by a local Ollama model.

``OllamaQuestionParser`` is loaded on first use: the ``ollama`` client costs ~0.6 s of
import time, which every ``tandem`` command would otherwise pay.
"""

from typing import TYPE_CHECKING, Any

from engine.natural.answer import Answer, ExtractedValue, Interpretation
from engine.natural.errors import NaturalSearchUnavailable, RateLimited
from engine.natural.parser import QuestionParser
from engine.natural.ratelimit import TokenBucketLimiter
from engine.natural.schema import ModelQuery, output_schema, parse_output
from engine.natural.service import MAX_QUESTION_CHARS, NaturalSearch

if TYPE_CHECKING:
    from engine.natural.ollama_parser import OllamaQuestionParser

__all__ = [
    "MAX_QUESTION_CHARS",
    "Answer",
    "ExtractedValue",
    "Interpretation",
    "ModelQuery",
    "NaturalSearch",
    "NaturalSearchUnavailable",
    "OllamaQuestionParser",
    "QuestionParser",
    "RateLimited",
    "TokenBucketLimiter",
    "output_schema",
    "parse_output",
]


def __getattr__(name: str) -> Any:
    if name == "OllamaQuestionParser":
        from engine.natural.ollama_parser import OllamaQuestionParser

        return OllamaQuestionParser
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
