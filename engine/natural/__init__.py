"""Natural-language questions (``Corpus.ask``) understood by a local Ollama model."""

from engine.natural.answer import Answer, ExtractedValue, Interpretation
from engine.natural.errors import NaturalSearchUnavailable, RateLimited
from engine.natural.ollama_parser import OllamaQuestionParser, QuestionParser
from engine.natural.ratelimit import TokenBucketLimiter
from engine.natural.schema import ModelQuery, output_schema, parse_output
from engine.natural.service import MAX_QUESTION_CHARS, NaturalSearch

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
