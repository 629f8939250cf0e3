"""Corpus configuration: frozen, validated, persisted as JSON beside the corpus.

The only knob that changes how a corpus searches is ``embedder``: ``None`` means vectors
off (keyword search); anything else means hybrid search whenever the embedder is healthy.
``rrf_k``, ``weights`` and ``window`` tune fusion within the hybrid strategy.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from engine.limits import CORPUS_NAME_PATTERN, MAX_LANGUAGE_ID

DEFAULT_MODEL = "all-MiniLM-L6-v2"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SentenceTransformerEmbedding(_Frozen):
    """A local sentence-transformers model, run in process (name or path)."""

    kind: Literal["sentence-transformers"] = "sentence-transformers"
    model: Annotated[str, Field(min_length=1, max_length=512)] = DEFAULT_MODEL


class OllamaEmbedding(_Frozen):
    """An embedding model served by Ollama (``/api/embed``)."""

    kind: Literal["ollama"] = "ollama"
    model: Annotated[str, Field(min_length=1, max_length=256)]
    host: Annotated[str, Field(min_length=1, max_length=512)] = "http://127.0.0.1:11434"
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    health_timeout_s: Annotated[float, Field(gt=0, le=60)] = 2.0


EmbedderSpec = Annotated[
    SentenceTransformerEmbedding | OllamaEmbedding, Field(discriminator="kind")
]


class FusionWeights(_Frozen):
    """Per-arm weights in ``Σ w_i / (k + rank_i)``."""

    sparse: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0
    dense: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0


class CorpusConfig(_Frozen):
    """How one corpus is built and searched.

    ``embedder`` accepts a model name (shorthand for a sentence-transformers model), an
    explicit ``SentenceTransformerEmbedding`` / ``OllamaEmbedding``, or ``None`` for a
    keyword-only corpus. ``languages`` maps a document's ``language_id`` to the name of a
    keyword analyzer (see ``sparse.Analyzer``); unlisted ids use the default analyzer.
    """

    name: Annotated[str, Field(min_length=1, max_length=64)]
    embedder: EmbedderSpec | None = SentenceTransformerEmbedding()
    rrf_k: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] = 60.0
    weights: FusionWeights = FusionWeights()
    window: Annotated[int, Field(ge=1, le=500)] = 100
    languages: dict[int, str] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _name_grammar(cls, value: str) -> str:
        if CORPUS_NAME_PATTERN.fullmatch(value) is None:
            raise ValueError(
                "corpus name must be 1-64 characters of a-z, 0-9, '_' or '-', "
                "starting with a letter or digit"
            )
        return value

    @field_validator("embedder", mode="before")
    @classmethod
    def _model_name_shorthand(cls, value: object) -> object:
        if isinstance(value, str):
            return SentenceTransformerEmbedding(model=value)
        return value

    @field_validator("languages")
    @classmethod
    def _known_analyzers(cls, value: dict[int, str]) -> dict[int, str]:
        from sparse import Analyzer  # lazy: keeps config import light

        valid = {a.value for a in Analyzer}
        for language_id, analyzer in value.items():
            if not 0 <= language_id <= MAX_LANGUAGE_ID:
                raise ValueError(f"language id {language_id} is out of range")
            if analyzer not in valid:
                raise ValueError(
                    f"unknown analyzer {analyzer!r} for language {language_id}; "
                    f"valid: {sorted(valid)}"
                )
        return value

    @property
    def vectors_enabled(self) -> bool:
        return self.embedder is not None
