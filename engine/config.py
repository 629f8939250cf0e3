"""Corpus configuration: frozen, validated, persisted as JSON beside the corpus.

The only knob that changes how a corpus searches is ``embedder``: ``None`` means vectors
off (keyword search); anything else means hybrid search whenever the embedder is healthy.
``fusion`` picks how the hybrid strategy merges its two arms (reciprocal rank fusion by
default, or a convex combination of z-scored arm scores); ``rrf_k``, ``weights`` and
``window`` tune it.
``fields`` declares the filterable metadata fields; ``natural`` turns on natural-language
questions (``Corpus.ask``) through a local Ollama model.
"""

from __future__ import annotations

import enum
import urllib.parse
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, Any, Generic, Literal, TypeAlias, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dense import VectorStorage
from dense.hosts import shown_host
from engine.atomic_files import replace_file
from engine.limits import CORPUS_NAME_PATTERN, MAX_LANGUAGE_ID
from sparse.contracts import DEFAULT_TITLE_WEIGHT, MAX_TITLE_WEIGHT

DEFAULT_MODEL = "all-MiniLM-L6-v2"
MAX_FIELDS = 32
"""A corpus declares at most this many filterable fields."""


K = TypeVar("K")
V = TypeVar("V")


class FrozenMap(Mapping[K, V], Generic[K, V]):
    """A read-only, hashable mapping: a frozen config's dict fields cannot change after
    validation, and the config stays hashable."""

    __slots__ = ("_data", "_hash")

    def __init__(self, data: Mapping[K, V]) -> None:
        self._data = dict(data)
        self._hash: int | None = None

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[K]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mapping) and self._data == dict(other)

    def __repr__(self) -> str:
        return f"FrozenMap({self._data!r})"


def _frozen_map(value: Mapping[K, V]) -> FrozenMap[K, V]:
    return value if isinstance(value, FrozenMap) else FrozenMap(value)


def _plain_dict(value: Mapping[K, V]) -> dict[K, V]:
    return dict(value)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A server URL may carry a proxy's credentials: ``repr`` (logs, tracebacks) shows
        # it without them, as every log line naming the host does.
        for name, value in super().__repr_args__():
            yield name, shown_host(value) if name == "host" and isinstance(value, str) else value


class PassageWindows(_Frozen):
    """Embed a long document as the mean of overlapping windows (``dense.passages``)
    instead of letting the model truncate it. ``unit="words"`` (default, any provider):
    windows of ``max_words`` words, one every ``stride_words``. ``unit="pieces"`` (a
    local sentence-transformers model): windows cut by the model's own tokenizer, each
    filling its input exactly, one every half window (``max_words``/``stride_words`` do
    not apply). The title heads every window. Still one vector per document; ingest
    embeds every window (SciFact: 2.0-2.2x the texts). Queries are embedded whole."""

    unit: Literal["words", "pieces"] = "words"
    max_words: Annotated[int, Field(ge=16, le=4096)] = 160
    stride_words: Annotated[int, Field(ge=8, le=4096)] = 80

    @model_validator(mode="after")
    def _stride_within_window(self) -> PassageWindows:
        if self.stride_words > self.max_words:
            raise ValueError("stride_words must not exceed max_words (words would be skipped)")
        return self


class SentenceTransformerEmbedding(_Frozen):
    """A local sentence-transformers model, run in process (name or path). ``passages``
    (``None``: the model truncates long documents) embeds long documents whole."""

    kind: Literal["sentence-transformers"] = "sentence-transformers"
    model: Annotated[str, Field(min_length=1, max_length=512)] = DEFAULT_MODEL
    passages: PassageWindows | None = None


class OllamaEmbedding(_Frozen):
    """An embedding model served by Ollama (``/api/embed``)."""

    kind: Literal["ollama"] = "ollama"
    model: Annotated[str, Field(min_length=1, max_length=256)]
    host: Annotated[str, Field(min_length=1, max_length=512)] = "http://127.0.0.1:11434"
    timeout_s: Annotated[float, Field(gt=0, le=600)] = 30.0
    health_timeout_s: Annotated[float, Field(gt=0, le=60)] = 2.0
    passages: PassageWindows | None = None

    @field_validator("host")
    @classmethod
    def _dialable(cls, host: str, info: ValidationInfo) -> str:
        """An http(s) URL with a host name and, if any, a port in 1..65535 (``h:99999``
        made a corpus whose every document was stored degraded); a scheme may be left
        out, as the Ollama client allows. Not re-checked in a stored config (``STORED``):
        a corpus an older version created with one still opens."""
        if _stored(info):
            return host
        parts = urllib.parse.urlsplit(host if "://" in host else f"http://{host}")
        try:
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"host {host!r}: {exc}") from None
        if parts.scheme.lower() not in ("http", "https") or not parts.hostname or port == 0:
            raise ValueError(f"host {host!r} is not an http(s) URL with a host name and port")
        return host

    @model_validator(mode="after")
    def _windows_in_words(self) -> OllamaEmbedding:
        if self.passages is not None and self.passages.unit == "pieces":
            raise ValueError("Ollama exposes no tokenizer: use PassageWindows(unit='words')")
        return self


STORED: Mapping[str, bool] = MappingProxyType({"stored": True})
"""The validation context of a config read back from a corpus's ``config.json``
(``CorpusConfig.model_validate(raw, context=STORED)``): rules added after a corpus was
created refuse new configs only — its stored one still opens, read as it always acted."""


def _stored(info: ValidationInfo) -> bool:
    context = info.context
    return isinstance(context, Mapping) and context.get("stored") is True


EmbedderSpec = Annotated[
    SentenceTransformerEmbedding | OllamaEmbedding, Field(discriminator="kind")
]


MIN_WEIGHT = 1e-6
"""The smallest non-zero arm weight (see ``FusionWeights``)."""


class FusionWeights(_Frozen):
    """Per-arm weights in ``Σ w_i / (k + rank_i)``: 0 (the arm does not count) or
    ``MIN_WEIGHT`` to 100 (a weight so small that ``w / (k + rank)`` underflows to 0
    would silently act as 0)."""

    sparse: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0
    dense: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = 1.0

    @field_validator("sparse", "dense")
    @classmethod
    def _zero_or_counted(cls, weight: float, info: ValidationInfo) -> float:
        if 0 < weight < MIN_WEIGHT and not _stored(info):  # an older version took it
            raise ValueError(f"a weight is 0 or at least {MIN_WEIGHT:g}")
        return weight


class RRFFusion(_Frozen):
    """Reciprocal rank fusion (the default): ``Σ w_i / (k + rank_i)`` with the corpus's
    ``rrf_k`` and ``weights`` (see ``fusion.rrf``). Only ranks count."""

    kind: Literal["rrf"] = "rrf"


DEFAULT_DENSE_WEIGHT = 0.45
"""``ZScoreFusion``'s vector-arm weight, chosen on SciFact's training judgements (809
queries, all-MiniLM-L6-v2, window 100: nDCG@10 0.7285 / 0.7325 / 0.7328 / 0.7305 / 0.7268
at 0.30 / 0.40 / 0.45 / 0.50 / 0.60 fusing the bare windows; with completion, the
default since, 0.7263 / 0.7336 / 0.7361 / 0.7338 / 0.7350; with the title weighted 3,
0.7300 / 0.7363 / 0.7385 / 0.7363 / 0.7345: still best at 0.45); never on the judgements
that are reported."""


class ZScoreFusion(_Frozen):
    """A convex combination of z-scored arm scores: each arm's scores are standardised
    over the candidates it scored — its window (``window``) plus, with
    ``complete_windows``, the other arm's extra candidates — then combined as
    ``(1 - dense_weight) * z_keyword + dense_weight * z_vector`` (see
    ``fusion.zscore_fusion``). Unlike RRF the margins count: an arm sure of its first hit
    moves it further than an arm that is not. A documented per-corpus choice, not the
    default: measured, it helps some corpora a lot and others not at all (README)."""

    kind: Literal["zscore"] = "zscore"
    dense_weight: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = DEFAULT_DENSE_WEIGHT


FusionSpec = Annotated[RRFFusion | ZScoreFusion, Field(discriminator="kind")]
FusionName: TypeAlias = Literal["rrf", "zscore"]
"""The shorthand names ``CorpusConfig.fusion`` takes, as a type (run time also takes them
in any case, surrounding spaces ignored)."""
_FUSION_SHORTHANDS: dict[str, type[RRFFusion | ZScoreFusion]] = {
    "rrf": RRFFusion,
    "zscore": ZScoreFusion,
}
FUSION_NAMES: tuple[str, ...] = tuple(_FUSION_SHORTHANDS)
"""The names ``CorpusConfig.fusion`` takes as shorthands (the CLI and HTTP API list them)."""

NO_MODEL_NAMES = frozenset({"", "none", "null", "off", "false", "no"})
"""What a person types for "no embedder", never a model name: the surfaces that create a
corpus (CLI, HTTP API) refuse these as a model and point to the keyword-only form. Stored
configs are not re-checked, so a corpus created with one still opens."""


def names_no_model(model: str) -> bool:
    """True for a value in ``NO_MODEL_NAMES`` (any case, surrounding spaces ignored)."""
    return model.strip().lower() in NO_MODEL_NAMES


class FieldType(enum.StrEnum):
    """The type of a filterable field: exact strings, 64-bit integers, or calendar dates."""

    KEYWORD = "keyword"
    INTEGER = "integer"
    DATE = "date"


FieldTypeName: TypeAlias = Literal["keyword", "integer", "date"]
"""``FieldType``'s values, as a type: what ``CorpusConfig(fields={"x": "keyword"})`` takes."""

VectorStorageName: TypeAlias = Literal["float32", "sq8"]
"""``dense.VectorStorage``'s values, as a type: ``CorpusConfig(vector_storage="sq8")``."""


class NaturalLanguage(_Frozen):
    """Natural-language questions (``Corpus.ask``) through a local Ollama chat model.

    ``timeout_s`` bounds one inference, its answer included (an answer still arriving
    after it is dropped at its next chunk: a question waits at most about twice
    ``timeout_s``), ``health_timeout_s`` the check that the server answers and has the
    model. Each user may ask ``requests_per_minute`` questions per minute of each corpus
    on average, in bursts of at most ``burst`` (default: ``requests_per_minute``); the
    allowance lives in the open corpus, so reopening it or changing its config starts
    it afresh.
    """

    model: Annotated[str, Field(min_length=1, max_length=256)] = "llama3.2"
    host: Annotated[str, Field(min_length=1, max_length=512)] = "http://127.0.0.1:11434"
    timeout_s: Annotated[float, Field(gt=0, le=600, allow_inf_nan=False)] = 30.0
    health_timeout_s: Annotated[float, Field(gt=0, le=60, allow_inf_nan=False)] = 2.0
    requests_per_minute: Annotated[float, Field(gt=0, le=100_000, allow_inf_nan=False)] = 5.0
    burst: Annotated[int, Field(ge=1, le=100_000)] | None = None

    @property
    def bucket_size(self) -> int:
        return self.burst if self.burst is not None else max(1, int(self.requests_per_minute))


class CorpusConfig(_Frozen):
    """How one corpus is built and searched.

    ``embedder`` accepts a model name (shorthand for a sentence-transformers model), an
    explicit ``SentenceTransformerEmbedding`` / ``OllamaEmbedding``, or ``None`` for a
    keyword-only corpus. ``languages`` maps a document's ``language_id`` to the name of a
    keyword analyzer (see ``sparse.Analyzer``); unlisted ids use the default analyzer.
    ``fields`` maps a filterable field's name (``[a-z][a-z0-9_]{0,63}``) to its
    ``FieldType``; documents carry values for them in ``Document.fields`` and searches
    filter on them. ``natural`` (``None``: off) configures ``Corpus.ask``.
    ``fusion`` is ``RRFFusion()`` (default) or ``ZScoreFusion(dense_weight=...)``; the
    names ``"rrf"`` and ``"zscore"`` are shorthands for their defaults.
    ``complete_windows`` (default on): in a hybrid search each arm also ranks the
    candidates only the other arm found, after its own ``window``
    (``engine.search.completion``); off, the two windows are fused as they are.
    ``vector_storage`` is how the vector index's HNSW graph (built from 50,000 vectors)
    holds them: ``float32`` (default, exact scores) or ``sq8`` (8-bit codes, a quarter of
    the memory; candidates re-ranked exactly from the float vectors, which a reopened
    corpus memory-maps). Set at creation.
    ``title_weight`` (1 to ``sparse.MAX_TITLE_WEIGHT``, default
    ``sparse.DEFAULT_TITLE_WEIGHT``, chosen on training judgements): how many times the
    keyword index counts a document's title ahead of its body (BM25F in one field); 1
    treats the title as one more sentence of the body, for corpora whose titles say
    little. Set at creation.
    """

    name: Annotated[str, Field(min_length=1, max_length=64)]
    embedder: EmbedderSpec | None = SentenceTransformerEmbedding()
    rrf_k: Annotated[float, Field(gt=0, le=10_000, allow_inf_nan=False)] = 60.0
    weights: FusionWeights = FusionWeights()
    window: Annotated[int, Field(ge=1, le=500)] = 100
    complete_windows: bool = True
    fusion: FusionSpec = RRFFusion()
    languages: Annotated[
        Mapping[int, str], AfterValidator(_frozen_map), PlainSerializer(_plain_dict)
    ] = FrozenMap({})
    fields: Annotated[
        Mapping[str, FieldType], AfterValidator(_frozen_map), PlainSerializer(_plain_dict)
    ] = FrozenMap({})
    natural: NaturalLanguage | None = None
    vector_storage: VectorStorage = VectorStorage.FLOAT32
    title_weight: Annotated[int, Field(strict=True, ge=1, le=MAX_TITLE_WEIGHT)] = (
        DEFAULT_TITLE_WEIGHT
    )

    if TYPE_CHECKING:
        # What a type checker sees of the constructor (pydantic's own ``__init__`` runs):
        # the fields' types plus the shorthands the validators below turn into them — a
        # model name for ``embedder``, a fusion name, field types and vector storage by
        # value. Without it, ``dataclass_transform`` offers the fields' types only and
        # ``CorpusConfig(embedder="all-MiniLM-L6-v2")`` fails ``mypy --strict``. Keep its
        # parameters in step with the fields (tests/test_readme_types.py checks).
        def __init__(
            self,
            *,
            name: str,
            embedder: SentenceTransformerEmbedding | OllamaEmbedding | str | None = ...,
            rrf_k: float = ...,
            weights: FusionWeights = ...,
            window: int = ...,
            complete_windows: bool = ...,
            fusion: RRFFusion | ZScoreFusion | FusionName = ...,
            languages: Mapping[int, str] = ...,
            fields: Mapping[str, FieldType | FieldTypeName] = ...,
            natural: NaturalLanguage | None = ...,
            vector_storage: VectorStorage | VectorStorageName = ...,
            title_weight: int = ...,
        ) -> None: ...

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
            if names_no_model(value):
                # "none" meant no embedder, and made a hybrid corpus whose every document
                # is degraded (no model of that name loads).
                raise ValueError(
                    f"{value!r} is not a model name; embedder=None makes a keyword-only corpus"
                )
            return SentenceTransformerEmbedding(model=value)
        return value

    @field_validator("fusion", mode="before")
    @classmethod
    def _fusion_shorthand(cls, value: object) -> object:
        if isinstance(value, str):
            spec = _FUSION_SHORTHANDS.get(value.strip().lower())
            if spec is None:
                raise ValueError(
                    f"unknown fusion {value!r}; valid: {', '.join(sorted(_FUSION_SHORTHANDS))}"
                )
            return spec()
        return value

    @field_validator("languages")
    @classmethod
    def _known_analyzers(cls, value: Mapping[int, str]) -> Mapping[int, str]:
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

    @field_validator("fields")
    @classmethod
    def _field_names(cls, value: Mapping[str, FieldType]) -> Mapping[str, FieldType]:
        from sparse.contracts import is_field_name  # lazy: keeps config import light

        if len(value) > MAX_FIELDS:
            raise ValueError(f"{len(value)} filterable fields; the cap is {MAX_FIELDS}")
        for name in value:
            if not is_field_name(name):
                raise ValueError(
                    f"field name {name!r} must be 1-64 characters of a-z, 0-9 or '_', "
                    "starting with a letter"
                )
        return value

    @property
    def vectors_enabled(self) -> bool:
        return self.embedder is not None


def save_config(path: Path, config: CorpusConfig) -> None:
    """Replace ``config.json`` atomically: write a temp file, fsync, rename, fsync the dir."""
    replace_file(path, config.model_dump_json(indent=2), sync_directory=True)
