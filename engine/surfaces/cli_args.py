"""The arguments and engine plumbing the ``tandem`` commands share.

Each command takes ``--path`` (the engine directory) and most a corpus name; both are
checked here, before any engine opens, so a bad value is a usage error (exit 2).
"""

from __future__ import annotations

import enum
import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import pydantic
import typer
from rich.console import Console

from engine import (
    Corpus,
    FieldType,
    OllamaEmbedding,
    SearchEngine,
    SentenceTransformerEmbedding,
)
from engine.config import names_no_model
from engine.limits import (
    LOOKUP_SOURCE_ID_RULE,
    MAX_LANGUAGE_ID,
    MAX_TOP_K,
    is_lookup_source_id,
    is_valid_corpus_name,
)
from engine.surfaces.loaders import DOCUMENT_KEYS
from sparse import MAX_TITLE_WEIGHT, Analyzer
from sparse.contracts import is_field_name

DEFAULT_HOME = "tandem-data"
HOME_ENV = "TANDEM_HOME"


class CommandError(Exception):
    """An expected failure with a message meant for the person at the terminal."""


def check_corpus_name(value: str) -> str:
    if not is_valid_corpus_name(value):
        raise typer.BadParameter(
            "must be 1-64 characters of a-z, 0-9, '_' or '-', starting with a letter or digit"
        )
    return value


def check_source_id(value: str) -> str:
    """A source id to look up (``fetch``): one an earlier version stored may hold a
    dot segment that a new document may not (``engine.limits.is_lookup_source_id``)."""
    if not is_lookup_source_id(value):
        raise typer.BadParameter(f"must be {LOOKUP_SOURCE_ID_RULE}")
    return value


QueryArg = Annotated[str, typer.Argument(help="What to look for.", metavar="QUERY")]
TopKOpt = Annotated[
    int, typer.Option("--top-k", "-k", min=1, max=MAX_TOP_K, help="How many passages.")
]
LanguageOpt = Annotated[
    int | None, typer.Option("--language", min=0, help="Only this language id.")
]
FilterOpt = Annotated[
    str | None,
    typer.Option(
        "--filter",
        help='Only documents whose fields match, as JSON: \'{"year": {"gte": 1942}}\'.',
        metavar="JSON",
    ),
]
PathOpt = Annotated[
    Path | None,
    typer.Option(
        "--path",
        "--home",
        help=f"Engine directory (default: ${HOME_ENV}, else ./{DEFAULT_HOME}).",
        show_default=False,
        file_okay=False,
    ),
]
QueryEmbedTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--query-embed-timeout",
        min=0.001,
        max=3600,
        help="Seconds a hybrid search waits for its query's vector before answering from "
        "keywords (counted in tandem_search_fallbacks_total as embedder_timeout). "
        "Default: no deadline.",
        metavar="SECONDS",
    ),
]
CorpusArg = Annotated[
    str, typer.Argument(help="Corpus name.", metavar="CORPUS", callback=check_corpus_name)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON for scripts.")]


class FusionChoice(enum.StrEnum):
    """``--fusion``'s values: the names ``CorpusConfig.fusion`` takes as shorthands."""

    RRF = "rrf"
    ZSCORE = "zscore"


FusionOpt = Annotated[
    FusionChoice,
    typer.Option(
        "--fusion",
        help="How a hybrid search merges its arms: rrf (reciprocal rank fusion, the "
        "default) or zscore (z-scored arm scores; README: measured per corpus).",
    ),
]
TitleWeightOpt = Annotated[
    int,
    typer.Option(
        "--title-weight",
        min=1,
        max=MAX_TITLE_WEIGHT,
        help="How many times the keyword index counts a title ahead of the body "
        "(1: titles that say little).",
    ),
]

NoVectorsOpt = Annotated[
    bool, typer.Option("--no-vectors", help="Keyword search only, no embeddings.")
]


def check_model_name(embedder: str | None) -> None:
    """Refuse a value of ``--embedder`` that names no model ("none", "off", ...): it
    would be looked for as a model (and, online, downloaded); and one the config refuses
    (empty, too long), as a usage error naming the option."""
    if embedder is None:
        return
    if names_no_model(embedder):
        raise typer.BadParameter(
            f"{embedder!r} names no model; a keyword-only corpus is --no-vectors",
            param_hint="--embedder",
        )
    with _usage_error("--embedder"):
        SentenceTransformerEmbedding(model=embedder)


@contextmanager
def _usage_error(option: str) -> Iterator[None]:
    """A value the config models refuse is a usage error of ``option`` (exit 2)."""
    try:
        yield
    except pydantic.ValidationError as exc:
        reasons = "; ".join(str(error["msg"]) for error in exc.errors())
        raise typer.BadParameter(reasons, param_hint=option) from None


def engine_home(ctx: typer.Context, path: Path | None) -> Path:
    """``--path`` on the command, then on ``tandem`` itself, then $TANDEM_HOME, then default."""
    root_path = ctx.find_root().params.get("path")
    chosen = path or root_path or os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Path(chosen)


def existing_engine_home(ctx: typer.Context, path: Path | None) -> Path:
    """The engine directory a command that never makes one works in: it must hold an
    engine already (a ``corpora`` folder), so that a mistyped ``--path`` (``.``, ``~``)
    is an error, not an empty engine written into someone's folder."""
    home = engine_home(ctx, path)
    if not (home / "corpora").is_dir():
        raise CommandError(
            f"no Tandem engine at {home} (use --path or ${HOME_ENV}; 'tandem create' makes one)"
        )
    return home


@contextmanager
def open_engine(
    ctx: typer.Context, path: Path | None, *, create: bool = False
) -> Iterator[SearchEngine]:
    home = engine_home(ctx, path) if create else existing_engine_home(ctx, path)
    engine = SearchEngine(home)
    try:
        yield engine
    finally:
        engine.close()


@contextmanager
def open_corpus(ctx: typer.Context, path: Path | None, name: str) -> Iterator[Corpus]:
    with open_engine(ctx, path) as engine:
        yield engine.corpus(name)


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """rich's own exits 1; a ``BrokenPipeError`` lets ``main`` end quietly with 0, as
        for every other write to a reader that went away (``tandem search ... | head``)."""
        raise BrokenPipeError(errno.EPIPE, "the reader of standard output went away")


def console() -> Console:
    return _Console(highlight=False, soft_wrap=False)


AnalyzerOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--analyzer",
        help="Keyword analyzer for a language id, ID:NAME with NAME one of "
        f"{', '.join(a.value for a in Analyzer)} (repeat for several; id 0 is English "
        "unless named here; an unnamed id gets the CJK fallback).",
        metavar="ID:NAME",
    ),
]


def language_analyzers(values: list[str]) -> dict[int, str]:
    """``["1:fr", "2:de"]`` -> ``{1: "fr", 2: "de"}`` (``CorpusConfig.languages``)."""
    valid = ", ".join(a.value for a in Analyzer)
    chosen: dict[int, str] = {}
    for value in values:
        language, sep, name = value.partition(":")
        language_id = int(language) if language.strip().isdigit() else -1
        if not sep or not 0 <= language_id <= MAX_LANGUAGE_ID:
            raise typer.BadParameter(
                f"{value!r}: expected ID:NAME with ID a language id 0..{MAX_LANGUAGE_ID}",
                param_hint="--analyzer",
            )
        try:
            analyzer = Analyzer.from_str(name)
        except ValueError:
            raise typer.BadParameter(
                f"{value!r}: unknown analyzer {name!r}; valid: {valid}", param_hint="--analyzer"
            ) from None
        if language_id in chosen:
            raise typer.BadParameter(
                f"language {language_id} is named twice", param_hint="--analyzer"
            )
        chosen[language_id] = analyzer.value
    return chosen


def field_declarations(values: list[str]) -> dict[str, FieldType]:
    """``["author:keyword", "year:integer"]`` -> ``{"author": KEYWORD, "year": INTEGER}``."""
    valid = ", ".join(t.value for t in FieldType)
    declared: dict[str, FieldType] = {}
    for value in values:
        name, sep, kind = value.partition(":")
        if not sep or not name:
            raise typer.BadParameter(
                f"{value!r}: expected NAME:TYPE with TYPE one of {valid}", param_hint="--field"
            )
        try:
            field_type = FieldType(kind.strip().lower())
        except ValueError:
            raise typer.BadParameter(
                f"{value!r}: unknown type {kind!r}; valid: {valid}", param_hint="--field"
            ) from None
        if not is_field_name(name):
            raise typer.BadParameter(
                f"field name {name!r} must be 1-64 characters of a-z, 0-9 or '_', starting "
                "with a letter",
                param_hint="--field",
            )
        if name in DOCUMENT_KEYS:
            # A line's top-level "title" is the document's title: such a field could only
            # be filled from a "fields" object, which no one would guess.
            raise typer.BadParameter(
                f"{name!r} is a document key in the files 'tandem add' reads; name the "
                f"field otherwise (e.g. doc_{name})",
                param_hint="--field",
            )
        if name in declared:
            raise typer.BadParameter(f"field {name!r} is declared twice", param_hint="--field")
        declared[name] = field_type
    return declared


def ollama_spec(value: str, option: str = "--ollama") -> OllamaEmbedding:
    """``HOST/MODEL`` (``http://h:11434/nomic-embed-text``, ``h:11434/m``) or just ``MODEL``."""
    expected = "expected MODEL or HOST/MODEL, e.g. 127.0.0.1:11434/nomic-embed-text"
    scheme, sep, rest = value.strip().partition("://")
    if not sep:
        scheme, rest = "http", value.strip()
    elif scheme.lower() not in ("http", "https"):
        raise typer.BadParameter(
            f"{value!r}: the scheme must be http or https; {expected}", param_hint=option
        )
    host, slash, model = rest.partition("/")
    if not slash:
        if not host or sep:  # "http://h" names a host and no model
            raise typer.BadParameter(f"{value!r}: {expected}", param_hint=option)
        with _usage_error(option):
            return OllamaEmbedding(model=host)
    if not host or not model:
        raise typer.BadParameter(f"{value!r}: {expected}", param_hint=option)
    with _usage_error(option):
        return OllamaEmbedding(model=model, host=f"{scheme}://{host}")
