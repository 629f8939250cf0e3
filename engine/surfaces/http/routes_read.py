"""The public reads: list, search, evidence, sources, grep, ask and recall.

Each one runs its engine call on a worker thread within the request's time budget —
except a search or evidence call on a corpus whose searches are short (no model, a
current keyword index: ``Corpus._searches_are_short``), which runs on the event loop:
handing a ~2 ms search to a thread and back cost about 1 ms on a 2-core machine. They
see public documents only (the engine guarantees it), and their answers carry no mode and
no fallback flag: degradation shows in ``/metrics`` alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypeVar, cast

from fastapi import APIRouter, Path, Request

from engine import Corpus, SearchEngine
from engine.limits import CORPUS_NAME_PATTERN, MAX_OFFSET, page_start
from engine.surfaces.http.caps import within_budget
from engine.surfaces.http.errors import ApiError
from engine.surfaces.http.responses import JsonAnswer
from engine.surfaces.http.schemas import (
    AskRequest,
    AskResponse,
    CorporaResponse,
    ErrorResponse,
    EvidenceRequest,
    EvidenceResponse,
    GrepRequest,
    GrepResponse,
    RecallRequest,
    RecallResponse,
    SearchRequest,
    SearchResponse,
    SourceResponse,
    error_responses,
    grep_body,
    passage_body,
    recalled_body,
    source_body,
)
from engine.surfaces.http.settings import ServerSettings
from engine.surfaces.memory import Memory
from sparse import MAX_QUERY_LENGTH

__all__ = ["CorpusName", "engine_of", "path_source_id", "router", "run_search", "search_passages"]

CorpusName = Annotated[
    str,
    Path(
        pattern=f"^{CORPUS_NAME_PATTERN.pattern}$",
        max_length=64,
        description="Corpus name (see GET /v1/corpora).",
    ),
]

_ERRORS = error_responses(404, 413, 422, 503)
_BODY_ERRORS = error_responses(415)  # a body sent with another Content-Type than JSON

router = APIRouter(prefix="/v1", tags=["read"], responses=_ERRORS)

T = TypeVar("T")


def engine_of(request: Request) -> SearchEngine:
    return _engine_on(request.app)


def _engine_on(app: Any) -> SearchEngine:
    engine: SearchEngine | None = getattr(app.state, "engine", None)
    if engine is None:
        raise ApiError(503, "not_ready", "the engine is not open (starting or stopping)")
    return engine


def _settings(request: Request) -> ServerSettings:
    settings: ServerSettings = request.app.state.settings
    return settings


def _budget(request: Request) -> float:
    return _settings(request).request_budget_s


async def _searching(app: Any, name: str, call: Callable[[Corpus], T]) -> T:
    """``call(corpus)`` in place when the corpus's searches are short, else on a worker
    thread within the time budget (a model call, an index that is behind, a corpus not
    yet open here: anything that may wait)."""
    engine = _engine_on(app)
    corpus = engine._opened(name)
    if corpus is not None and corpus._searches_are_short():
        return call(corpus)
    settings: ServerSettings = app.state.settings
    return await within_budget(lambda: call(engine.corpus(name)), settings.request_budget_s)


def search_passages(corpus: Corpus, body: SearchRequest) -> list[dict[str, object]]:
    """The search route's answer: ``Corpus.search`` passages, ranked from the page start."""
    passages = corpus.search(
        body.query,
        body.top_k,
        body.offset,
        body.language_id,
        filters=cast(Any, body.filters),  # the dict form, or a list of them (AND)
    )
    start = page_start(body.offset) or 0  # past MAX_OFFSET: no passages to number
    return [passage_body(start + i, p) for i, p in enumerate(passages, 1)]


async def run_search(app: Any, name: str, body: SearchRequest) -> list[dict[str, object]]:
    """One search of corpus ``name`` for the route and its fast lane (``search_lane``)."""
    return await _searching(app, name, lambda corpus: search_passages(corpus, body))


@router.get("/corpora", response_model=CorporaResponse, summary="The corpora of this server")
async def list_corpora(request: Request) -> JsonAnswer:
    engine = engine_of(request)
    names = await within_budget(engine.list_corpora, _budget(request))
    return JsonAnswer({"corpora": names})


@router.post(
    "/corpora/{name}/search",
    response_model=SearchResponse,
    summary="The best public passages for a query",
    responses=_BODY_ERRORS,
    description=(
        "The same passages as Corpus.search, in order. Inputs are clamped, never refused: "
        f"the query is trimmed and cut to {MAX_QUERY_LENGTH:,} characters (shorter than 2: "
        "no passages), "
        f"top_k to 1..200, a negative offset to 0 (past {MAX_OFFSET:,}: an empty page), "
        "a negative language_id to 0. No mode is "
        "chosen or reported. A malformed filter is a 422 naming the field."
    ),
)
async def search(request: Request, name: CorpusName, body: SearchRequest) -> JsonAnswer:
    # Well-formed requests are answered by ``search_lane.SearchLane`` before they get
    # here; this route documents the contract and answers what the lane passes on.
    return JsonAnswer({"passages": await run_search(request.app, name, body)})


@router.post(
    "/corpora/{name}/evidence",
    response_model=EvidenceResponse,
    summary="The best sources as one text block for an LLM prompt",
    responses=_BODY_ERRORS,
)
async def evidence(request: Request, name: CorpusName, body: EvidenceRequest) -> JsonAnswer:
    text = await _searching(
        request.app, name, lambda corpus: corpus.evidence(body.query, body.top_k)
    )
    return JsonAnswer({"evidence": text})


@router.get(
    "/corpora/{name}/sources/{source_id:path}",
    response_model=SourceResponse,
    summary="The full text of one public source (capped at 100,000 characters)",
    description="An absent and a non-public id get the same 404.",
)
async def source(request: Request, name: CorpusName, source_id: str) -> JsonAnswer:
    engine = engine_of(request)
    source_id = path_source_id(request, source_id)
    found = await within_budget(
        lambda: engine.corpus(name).fetch_source(source_id), _budget(request)
    )
    return JsonAnswer(source_body(found))


def path_source_id(request: Request, source_id: str) -> str:
    """The source id as the path carried it. Starlette matches a route with a pattern
    ending in ``$``, which lets a final newline go unmatched: ``/sources/a%0A`` reached
    the route as ``a``, and a DELETE removed ``a``. The newline is put back, for the
    engine to treat like any other control character in an id."""
    path = request.scope.get("path", "")
    if isinstance(path, str) and path.endswith("\n") and not source_id.endswith("\n"):
        return source_id + "\n"
    return source_id


@router.post(
    "/corpora/{name}/grep",
    response_model=GrepResponse,
    summary="Exact or regex matches in public sources (for agents and scripts)",
    responses=_BODY_ERRORS,
    description=(
        "Unranked. A pattern that runs out of the grep time budget (2 s) is a 422 "
        "grep_timeout, never an empty list."
    ),
)
async def grep(request: Request, name: CorpusName, body: GrepRequest) -> JsonAnswer:
    engine = engine_of(request)

    def run() -> list[dict[str, object]]:
        return [
            grep_body(m)
            for m in engine.corpus(name).grep(body.pattern, body.limit, fixed=body.fixed)
        ]

    return JsonAnswer({"matches": await within_budget(run, _budget(request))})


@router.post(
    "/corpora/{name}/ask",
    response_model=AskResponse,
    summary="A question in plain language (corpora with questions turned on)",
    responses={**_BODY_ERRORS, 409: {"model": ErrorResponse}, 429: {"model": ErrorResponse}},
)
async def ask(request: Request, name: CorpusName, body: AskRequest) -> JsonAnswer:
    engine = engine_of(request)
    client = request.client.host if request.client is not None else "unknown"

    def run() -> dict[str, object]:
        corpus: Corpus = engine.corpus(name)
        if corpus.config.natural is None:
            raise ApiError(
                409,
                "questions_off",
                f"corpus {name!r} does not answer questions: it was created without a "
                "question model (tandem create NAME --ask-model MODEL)",
            )
        answer = corpus.ask(
            body.question, user=f"http:{client}", top_k=body.top_k, language_id=body.language_id
        )
        return {
            "interpretation": answer.interpretation.to_dict(),
            "passages": [passage_body(i, p) for i, p in enumerate(answer.passages, 1)],
        }

    return JsonAnswer(await within_budget(run, _settings(request).ask_budget_s))


@router.post(
    "/recall",
    response_model=RecallResponse,
    summary="Agent memory: the remembered notes that best match a query",
    responses=_BODY_ERRORS,
    tags=["memory"],
)
async def recall(request: Request, body: RecallRequest) -> JsonAnswer:
    engine = engine_of(request)
    memory = Memory(engine, _settings(request).memory_corpus)
    found = await within_budget(
        lambda: memory.recall(body.query, body.scope, body.top_k), _budget(request)
    )
    return JsonAnswer({"memories": [recalled_body(m) for m in found]})
