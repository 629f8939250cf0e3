"""An MCP server (stdio) that lets an agent answer from Tandem corpora with cited evidence.

Tools: ``list_corpora``, ``search_knowledge``, ``fetch_source`` and ``grep_knowledge``, and
agent memory: ``remember`` and ``recall`` (see ``engine.surfaces.memory``).
Every argument is chosen by a model and therefore untrusted: the input schema carries the
caps and grammars (corpus name, source id, lengths, ``top_k``/``limit`` ranges), the SDK
rejects anything outside them, and whatever the engine still refuses comes back as a tool
error (``isError``) with one readable sentence — never a crash, never a dead server. An
argument a tool does not declare is refused too (``additionalProperties: false`` in its
schema, and checked again on every call, since clients need not validate): ignored, an
``offset`` the tool lacked answered page 1 again, and an ``id`` the tool lacked stored
the memory under another one. Only public documents are ever returned (the engine
enforces it).

The engine directory is opened on the first tool call and held until the server exits;
other processes may use it meanwhile (``tandem add`` beside a running server), and the
server's searches see what they write. A write that waits past the engine's busy timeout
for another one fails with a clear error, and the next call tries again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator
from pydantic_core import PydanticCustomError

from engine import (
    Corpus,
    CorpusNotFound,
    EngineError,
    EngineLocked,
    GrepTimeout,
    InvalidArgument,
    SearchEngine,
    SourceNotFound,
)
from engine.limits import (
    CORPUS_NAME_PATTERN,
    LOOKUP_SOURCE_ID_PATTERN,
    MAX_GREP_MATCHES,
    MAX_GREP_PATTERN,
    MAX_OFFSET,
    MAX_SOURCE_ID_CHARS,
    MAX_TITLE_CHARS,
    SOURCE_ID_PATTERN,
)
from engine.surfaces.json_args import NOT_A_BOOLEAN, Count, Flag
from engine.surfaces.mcp_stdin import repairing_stdin
from engine.surfaces.memory import MAX_MEMORY_CHARS, Memory
from sparse import MAX_QUERY_LENGTH

logger = logging.getLogger(__name__)

MAX_QUERY_CHARS = MAX_QUERY_LENGTH
"""Longest query an agent may send (the engine reads at most this many characters)."""

MAX_AGENT_TOP_K = 50
"""``search_knowledge`` returns at most this many passages: enough evidence, bounded context."""

SERVER_NAME = "tandem"
INSTRUCTIONS = (
    "Search Tandem corpora for evidence. Call list_corpora to see what exists, "
    "search_knowledge for the best passages, fetch_source for one source's full text, "
    "and grep_knowledge for exact strings or patterns. Cite source_id and url. "
    "remember stores a short note under a scope; recall finds notes again."
)

T = TypeVar("T")


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CorpusList(_Out):
    corpora: list[str]


class PassageOut(_Out):
    source_id: str
    title: str
    url: str
    excerpt: str


class SearchOut(_Out):
    passages: list[PassageOut]


class SourceOut(_Out):
    source_id: str
    title: str
    url: str
    text: str
    truncated: bool = Field(description="True when text was cut at the fetch cap.")


class MatchOut(_Out):
    source_id: str
    title: str
    url: str
    line: str = Field(description="The matching line, clipped around the match.")


class GrepOut(_Out):
    matches: list[MatchOut]


class RememberOut(_Out):
    id: str
    scope: str
    added: bool = Field(description="False when the same memory was stored before.")


class MemoryOut(_Out):
    id: str
    title: str
    text: str


class RecallOut(_Out):
    memories: list[MemoryOut]


CorpusName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        pattern=f"^{CORPUS_NAME_PATTERN.pattern}$",
        description="Corpus name (see list_corpora).",
    ),
]
SourceId = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_SOURCE_ID_CHARS,
        pattern=f"^{LOOKUP_SOURCE_ID_PATTERN.pattern}$",
        description="A source_id from search_knowledge or grep_knowledge.",
    ),
]
Query = Annotated[
    str,
    Field(min_length=1, max_length=MAX_QUERY_CHARS, description="What to look for."),
]
TopK = Annotated[
    int, Field(ge=1, le=MAX_AGENT_TOP_K, description="How many passages."), NOT_A_BOOLEAN
]
Offset = Annotated[
    Count,
    Field(
        description=(
            "How many of the best passages to skip, to page on: 0, then top_k, 2 * top_k, "
            f"... (clamped as search clamps it: a negative offset is 0; past {MAX_OFFSET:,} "
            "the page is empty)."
        ),
    ),
]
Pattern = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_GREP_PATTERN,
        description="A regular expression (or plain text when fixed is true).",
    ),
]
Limit = Annotated[
    int, Field(ge=1, le=MAX_GREP_MATCHES, description="Most matches returned."), NOT_A_BOOLEAN
]
Filters = Annotated[
    dict[str, Any] | list[dict[str, Any]] | None,
    Field(
        description=(
            "Only documents whose declared fields match: field name to a value, a list of "
            'values (any of them), or operators, e.g. {"author": "Walter", "year": {"gte": '
            '1942}}; a list of such objects must all match, e.g. [{"tag": "a"}, {"tag": '
            '"b"}] for documents tagged both.'
        ),
    ),
]
Scope = Annotated[
    str,
    Field(
        min_length=1,
        max_length=256,
        description="Whose or which task's memory: an agent, user or project name.",
    ),
]
MemoryText = Annotated[str, Field(min_length=1, max_length=MAX_MEMORY_CHARS)]
MemoryTitle = Annotated[str, Field(max_length=MAX_TITLE_CHARS, description="Optional title.")]
MemoryId = Annotated[
    str | None,
    Field(
        min_length=1,
        max_length=MAX_SOURCE_ID_CHARS,
        pattern=f"^{SOURCE_ID_PATTERN.pattern}$",
        description=(
            "Optional id naming the memory (default: derived from scope and text); "
            "remembering under the same id in the same scope replaces it, an id another "
            "scope holds is refused."
        ),
    ),
]


class _KnownArgumentsOnly(BaseModel):
    """Mixed into each tool's argument model: an argument it does not declare is refused."""

    model_config = ConfigDict(extra="forbid")  # the schema says additionalProperties: false

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, data: Any) -> Any:
        # ``extra="forbid"`` alone refuses them too, with "Extra inputs are not
        # permitted"; this says which arguments the tool does take.
        if isinstance(data, dict):
            known = [field.alias or name for name, field in cls.model_fields.items()]
            unknown = sorted(str(key) for key in data if key not in known)
            if unknown:
                named = ", ".join(repr(name[:64]) for name in unknown[:10])
                raise PydanticCustomError(
                    "unknown_argument",
                    "{unknown}: this tool takes {known}",
                    {
                        "unknown": f"unknown argument{'s' if len(unknown) > 1 else ''} {named}",
                        "known": ", ".join(known) or "no arguments",
                    },
                )
        return data


def _strict_tool(fn: Callable[..., Any]) -> Tool:
    """``fn`` as a tool whose schema and argument check refuse undeclared arguments."""
    tool = Tool.from_function(fn)
    loose = tool.fn_metadata.arg_model
    strict = create_model(loose.__name__, __base__=(loose, _KnownArgumentsOnly))
    metadata = tool.fn_metadata.model_copy(update={"arg_model": strict})
    return tool.model_copy(
        update={
            "fn_metadata": metadata,
            "parameters": strict.model_json_schema(by_alias=True),
        }
    )


class EngineHolder:
    """Opens the engine on first use, shares it between tool calls, closes it once."""

    def __init__(self, path: Path, *, query_embed_timeout: float | None = None) -> None:
        self._path = path
        self._query_embed_timeout = query_embed_timeout
        self._engine: SearchEngine | None = None
        self._lock = threading.Lock()

    def engine(self) -> SearchEngine:
        with self._lock:
            if self._engine is None:
                self._engine = SearchEngine(
                    self._path, query_embed_timeout=self._query_embed_timeout
                )
            return self._engine

    def memory(self) -> Memory:
        return Memory(self.engine())

    def close(self) -> None:
        with self._lock:
            if self._engine is not None:
                self._engine.close()
                self._engine = None


@contextmanager
def _tool_errors(holder: EngineHolder) -> Iterator[None]:
    """The one place where engine errors become tool errors an agent can read."""
    try:
        yield
    except ToolError:
        raise
    except CorpusNotFound as exc:
        known = ", ".join(holder.engine().list_corpora()) or "none"
        raise ToolError(f"{exc}; available corpora: {known}") from exc
    except SourceNotFound as exc:
        raise ToolError(f"{exc} (unknown or not public)") from exc
    except EngineLocked as exc:
        raise ToolError(
            "another write to this corpus is in progress (another process); try again later"
        ) from exc
    except InvalidArgument as exc:
        raise ToolError(f"invalid argument: {exc}") from exc
    except GrepTimeout as exc:
        raise ToolError(str(exc)) from exc
    except EngineError as exc:
        logger.warning("tool call failed: %s", type(exc).__name__)
        raise ToolError("the search engine could not complete this call") from exc


def _with_corpus(holder: EngineHolder, name: str, action: Callable[[Corpus], T]) -> T:
    with _tool_errors(holder):
        return action(holder.engine().corpus(name))


def build_server(holder: EngineHolder) -> MCPServer:
    """An ``MCPServer`` whose tools read the engine held by ``holder``."""

    def list_corpora() -> CorpusList:
        """Names of the corpora that can be searched."""
        with _tool_errors(holder):
            return CorpusList(corpora=holder.engine().list_corpora())

    def search_knowledge(
        corpus: CorpusName,
        query: Query,
        top_k: TopK = 8,
        offset: Offset = 0,
        filters: Filters = None,
    ) -> SearchOut:
        """The best passages for a query, best first: source_id, title, url, excerpt.

        ``offset`` pages on (the next page starts at offset + top_k); ``filters``
        (optional) keeps only documents whose declared fields match."""
        # A list of filter objects is AND-ed, as Corpus.search reads it (its hint names
        # the dict and JSON forms only).
        given = cast(Any, filters)
        passages = _with_corpus(
            holder, corpus, lambda c: c.search(query, top_k=top_k, offset=offset, filters=given)
        )
        return SearchOut(
            passages=[
                PassageOut(source_id=p.source_id, title=p.title, url=p.url, excerpt=p.excerpt)
                for p in passages
            ]
        )

    def fetch_source(corpus: CorpusName, source_id: SourceId) -> SourceOut:
        """The full text of one source (capped; truncated says whether it was cut)."""
        s = _with_corpus(holder, corpus, lambda c: c.fetch_source(source_id))
        return SourceOut(
            source_id=s.source_id, title=s.title, url=s.url, text=s.text, truncated=s.truncated
        )

    def grep_knowledge(
        corpus: CorpusName, pattern: Pattern, limit: Limit = 20, fixed: Flag = False
    ) -> GrepOut:
        """Exact or regex matches in the sources' text (unranked), for precise look-ups."""
        found = _with_corpus(holder, corpus, lambda c: c.grep(pattern, limit, fixed=fixed))
        return GrepOut(
            matches=[
                MatchOut(source_id=m.source_id, title=m.title, url=m.url, line=m.line)
                for m in found
            ]
        )

    def remember(
        text: MemoryText, scope: Scope, title: MemoryTitle = "", id: MemoryId = None
    ) -> RememberOut:
        """Store a short note under a scope, to recall later (same text twice: stored once)."""
        with _tool_errors(holder):
            done = holder.memory().remember(text, scope, title=title, id=id)
        return RememberOut(id=done.id, scope=done.scope, added=done.added)

    def recall(query: Query, scope: Scope | None = None, top_k: TopK = 5) -> RecallOut:
        """The remembered notes that best match a query, best first (within scope if given)."""
        with _tool_errors(holder):
            found = holder.memory().recall(query, scope, top_k)
        return RecallOut(memories=[MemoryOut(id=m.id, title=m.title, text=m.text) for m in found])

    tools = (list_corpora, search_knowledge, fetch_source, grep_knowledge, remember, recall)
    return MCPServer(
        SERVER_NAME,
        instructions=INSTRUCTIONS,
        log_level="WARNING",
        tools=[_strict_tool(fn) for fn in tools],
    )


def serve_stdio(path: Path, *, query_embed_timeout: float | None = None) -> None:
    """Serve the engine at ``path`` over stdio until the client disconnects (hybrid
    searches wait for their query's vector at most ``query_embed_timeout`` seconds, as
    ``SearchEngine``'s option of that name)."""
    holder = EngineHolder(path, query_embed_timeout=query_embed_timeout)
    try:
        with repairing_stdin():  # lines the SDK would drop unanswered (``mcp_stdin``)
            build_server(holder).run("stdio")
    finally:
        holder.close()
