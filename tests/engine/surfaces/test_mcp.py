"""``tandem mcp``: the MCP server, driven by the official SDK's own client over stdio.

Each test builds a real engine directory in process, closes it (the server takes the
directory's lock), then starts the installed ``tandem mcp`` as a subprocess and talks to
it with ``mcp.client.stdio.stdio_client`` + ``ClientSession``. The last tests talk to
``build_server`` in process (``run_in_process``), faster, where the check under test is the
server's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult, TextContent

from engine import CorpusConfig, Document, SearchEngine
from engine.limits import MAX_GREP_MATCHES, MAX_GREP_PATTERN, MAX_OFFSET
from engine.surfaces.mcp_server import MAX_AGENT_TOP_K, MAX_QUERY_CHARS, EngineHolder, build_server

TANDEM = shutil.which("tandem")

DOCS = [
    Document(
        id="reset",
        title="Reset your password",
        text="To reset your password open Settings, choose Security and follow the link.",
        url="/help/reset",
    ),
    Document(
        id="billing",
        title="Billing and invoices",
        text="Invoices are sent monthly. Update your credit card under Billing.",
        url="/help/billing",
    ),
    Document(id="docs/a:b@1", title="Odd id", text="An id with path-like characters.", url=""),
    Document(id="backtrack", title="Backtracking bait", text="a" * 5_000 + "!"),
    Document(
        id="staff-only",
        title="Internal password policy",
        text="Staff rotate the vault password every quarter.",
        access_groups=frozenset({"staff"}),
    ),
]
PRIVATE_MARKERS = ("staff-only", "vault", "Internal password policy")

Scenario = Callable[[ClientSession], Awaitable[None]]


def build_engine(path: Path) -> Path:
    with SearchEngine(path) as engine:
        engine.create_corpus(CorpusConfig(name="help", embedder=None)).add(DOCS)
        engine.create_corpus(CorpusConfig(name="empty", embedder=None))
    return path


def run_session(path: Path, scenario: Scenario) -> None:
    if TANDEM is None:
        pytest.fail("the tandem console script is not installed (pip install -e .)")
    # The SDK starts the server with a few safe variables only; PYTHONPATH is passed on so
    # that the server runs the code under test (a worktree's), not the installed package.
    pythonpath = {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
    params = StdioServerParameters(
        command=TANDEM, args=["mcp", "--path", str(path)], env=pythonpath
    )

    async def main() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await scenario(session)

    anyio.run(main)


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, TextContent))


def payload(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, text_of(result)
    assert result.structured_content is not None
    content: dict[str, Any] = result.structured_content
    assert json.loads(text_of(result)) == content
    return content


async def expect_tool_error(
    session: ClientSession, tool: str, arguments: dict[str, Any], *needles: str
) -> str:
    result = await session.call_tool(tool, arguments)
    message = text_of(result)
    assert result.is_error, f"{tool}({str(arguments)[:80]}) did not fail: {message[:200]}"
    assert message and "Traceback" not in message
    assert message.strip() != f"Error executing tool {tool}"  # a reason, not a crash
    assert len(message) < 4_000  # a huge argument is not echoed back in full
    for needle in needles:
        assert needle in message, message
    return message


def test_lists_the_tools_with_capped_schemas(tmp_path: Path) -> None:
    path = build_engine(tmp_path / "engine")

    async def scenario(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {
            "list_corpora",
            "search_knowledge",
            "fetch_source",
            "grep_knowledge",
            "remember",
            "recall",
        }
        search = tools["search_knowledge"].input_schema
        assert search["required"] == ["corpus", "query"]
        # no mode
        assert set(search["properties"]) == {"corpus", "query", "top_k", "offset", "filters"}
        assert search["properties"]["query"]["maxLength"] == MAX_QUERY_CHARS
        assert search["properties"]["top_k"]["maximum"] == MAX_AGENT_TOP_K
        assert search["properties"]["corpus"]["pattern"].startswith("^")
        fetch = tools["fetch_source"].input_schema
        assert fetch["properties"]["source_id"]["maxLength"] == 256
        grep = tools["grep_knowledge"].input_schema
        assert grep["properties"]["pattern"]["maxLength"] == MAX_GREP_PATTERN
        assert grep["properties"]["limit"]["maximum"] == MAX_GREP_MATCHES
        for tool in tools.values():
            assert tool.description

    run_session(path, scenario)


def test_each_tool_answers_from_public_documents_only(tmp_path: Path) -> None:
    path = build_engine(tmp_path / "engine")

    async def scenario(session: ClientSession) -> None:
        corpora = payload(await session.call_tool("list_corpora", {}))
        assert corpora == {"corpora": ["empty", "help"]}

        found = payload(
            await session.call_tool("search_knowledge", {"corpus": "help", "query": "password"})
        )
        assert [p["source_id"] for p in found["passages"]] == ["reset"]
        assert set(found["passages"][0]) == {"source_id", "title", "url", "excerpt"}
        assert found["passages"][0]["url"] == "/help/reset"
        limited = payload(
            await session.call_tool(
                "search_knowledge", {"corpus": "help", "query": "the", "top_k": 1}
            )
        )
        assert len(limited["passages"]) <= 1
        nothing = payload(
            await session.call_tool("search_knowledge", {"corpus": "empty", "query": "password"})
        )
        assert nothing == {"passages": []}

        source = payload(
            await session.call_tool("fetch_source", {"corpus": "help", "source_id": "docs/a:b@1"})
        )
        assert source["text"] == "An id with path-like characters." and source["truncated"] is False

        matches = payload(
            await session.call_tool("grep_knowledge", {"corpus": "help", "pattern": r"pass\w+"})
        )
        assert {m["source_id"] for m in matches["matches"]} == {"reset"}
        fixed = payload(
            await session.call_tool(
                "grep_knowledge", {"corpus": "help", "pattern": "a.b", "fixed": True, "limit": 3}
            )
        )
        assert fixed == {"matches": []}  # "a.b" literally appears nowhere

        for query in ("vault", "Internal password policy", "quarter"):
            hits = await session.call_tool("search_knowledge", {"corpus": "help", "query": query})
            assert not any(m in text_of(hits) for m in PRIVATE_MARKERS)
        grep_private = await session.call_tool(
            "grep_knowledge", {"corpus": "help", "pattern": "vault"}
        )
        assert payload(grep_private) == {"matches": []}
        await expect_tool_error(
            session, "fetch_source", {"corpus": "help", "source_id": "staff-only"}, "not found"
        )

    run_session(path, scenario)


HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("search_knowledge", {"corpus": "help", "query": "x" * 1_000_000}),
    ("search_knowledge", {"corpus": "help", "query": ""}),
    ("search_knowledge", {"corpus": "../../etc", "query": "password"}),
    ("search_knowledge", {"corpus": "help; DROP TABLE documents", "query": "password"}),
    ("search_knowledge", {"corpus": "H" * 100_000, "query": "password"}),
    ("search_knowledge", {"corpus": "help", "query": "password", "top_k": -1}),
    ("search_knowledge", {"corpus": "help", "query": "password", "top_k": 0}),
    ("search_knowledge", {"corpus": "help", "query": "password", "top_k": 10**12}),
    ("search_knowledge", {"corpus": "help", "query": "password", "top_k": "5; DROP"}),
    ("search_knowledge", {"corpus": "help", "query": "password", "top_k": 2.5}),
    ("search_knowledge", {"corpus": "help"}),
    ("search_knowledge", {"corpus": "help", "query": ["password"]}),
    ("search_knowledge", {"corpus": "nope", "query": "password"}),
    ("fetch_source", {"corpus": "help", "source_id": "../../etc/passwd"}),
    ("fetch_source", {"corpus": "help", "source_id": "/etc/passwd"}),
    ("fetch_source", {"corpus": "help", "source_id": "a/../../etc/passwd"}),
    ("fetch_source", {"corpus": "help", "source_id": "x' OR '1'='1"}),
    ("fetch_source", {"corpus": "help", "source_id": "reset\x00"}),
    ("fetch_source", {"corpus": "help", "source_id": "r" * 100_000}),
    ("fetch_source", {"corpus": "help", "source_id": ""}),
    ("fetch_source", {"corpus": "help", "source_id": 42}),
    ("grep_knowledge", {"corpus": "help", "pattern": "("}),
    ("grep_knowledge", {"corpus": "help", "pattern": "a" * 100_000}),
    ("grep_knowledge", {"corpus": "help", "pattern": "\x00"}),
    ("grep_knowledge", {"corpus": "help", "pattern": "a", "limit": -5}),
    ("grep_knowledge", {"corpus": "help", "pattern": "a", "limit": 10**9}),
    ("grep_knowledge", {"corpus": "help", "pattern": "[z-a]"}),
    ("no_such_tool", {}),
]


def test_hostile_arguments_get_tool_errors_and_the_server_keeps_answering(
    tmp_path: Path,
) -> None:
    path = build_engine(tmp_path / "engine")

    async def scenario(session: ClientSession) -> None:
        for tool, arguments in HOSTILE:
            await expect_tool_error(session, tool, arguments)
        messages = [
            await expect_tool_error(
                session, "search_knowledge", {"corpus": "nope", "query": "x y"}, "help"
            ),
            await expect_tool_error(
                session, "grep_knowledge", {"corpus": "help", "pattern": "("}, "regular expression"
            ),
        ]
        assert "available corpora" in messages[0]

        # Odd but valid input is answered, not refused: SQL and FTS syntax are just text.
        for query in ("'; DROP TABLE documents; --", 'password" OR 1=1', "title:* AND NOT", "🔑"):
            result = await session.call_tool("search_knowledge", {"corpus": "help", "query": query})
            assert not any(m in text_of(result) for m in PRIVATE_MARKERS)
            payload(result)
        # A catastrophic regex over a bait document is a tool error naming the time budget
        # (never "no matches"), and the server lives on.
        await expect_tool_error(
            session, "grep_knowledge", {"corpus": "help", "pattern": "(a+)+$"}, "time budget"
        )

        # Still alive and correct after all of that.
        again = payload(
            await session.call_tool("search_knowledge", {"corpus": "help", "query": "invoices"})
        )
        assert [p["source_id"] for p in again["passages"]] == ["billing"]

    run_session(path, scenario)
    with SearchEngine(path) as engine:  # the server exited and released the directory
        assert len(engine.corpus("help")) == len(DOCS)  # nothing was changed or dropped


def test_a_directory_another_process_holds_open_is_served_too(tmp_path: Path) -> None:
    """Several processes may open one engine directory: the server answers while another
    process (here: this test) holds it open, and sees that process's writes."""
    path = build_engine(tmp_path / "engine")
    holder = SearchEngine(path)

    async def scenario(session: ClientSession) -> None:
        found = payload(
            await session.call_tool("search_knowledge", {"corpus": "help", "query": "password"})
        )
        assert [p["source_id"] for p in found["passages"]] == ["reset"]
        holder.corpus("help").add(
            [Document(id="later", title="Added elsewhere", text="zeppelin timetable")]
        )
        later = payload(
            await session.call_tool("search_knowledge", {"corpus": "help", "query": "zeppelin"})
        )
        assert [p["source_id"] for p in later["passages"]] == ["later"]

    try:
        run_session(path, scenario)
    finally:
        holder.close()


def test_mcp_refuses_a_missing_engine_directory(tmp_path: Path) -> None:
    assert TANDEM is not None
    ghost = tmp_path / "ghost"
    result = subprocess.run(
        [TANDEM, "mcp", "--path", str(ghost)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    assert result.stderr.startswith("tandem: error: no Tandem engine at")
    assert not ghost.exists()


# -- in process: the SDK's own client against ``build_server``, no schema check on its side --


def run_in_process(path: Path, scenario: Scenario) -> None:
    """``scenario`` against the server in this process. Its client does not validate
    arguments against the tools' schemas, so what the server refuses is the server's own
    check (as for any client that sends what it likes)."""
    holder = EngineHolder(path)

    async def main() -> None:
        async with Client(build_server(holder)) as client:
            await scenario(client)  # type: ignore[arg-type]  # the same calls as a session

    try:
        anyio.run(main)
    finally:
        holder.close()


UNDECLARED: list[tuple[str, dict[str, Any]]] = [
    ("list_corpora", {"corpus": "help"}),
    ("search_knowledge", {"corpus": "help", "query": "password", "mode": "keyword"}),
    ("search_knowledge", {"corpus": "help", "query": "password", "page": 2}),
    ("fetch_source", {"corpus": "help", "source_id": "reset", "max_chars": 10}),
    ("grep_knowledge", {"corpus": "help", "pattern": "reset", "ignore_case": True}),
    ("remember", {"text": "a note", "scope": "bob", "tags": ["x"]}),
    ("recall", {"query": "a note", "scope": "bob", "offset": 5}),
]


def test_an_argument_a_tool_does_not_declare_is_refused(tmp_path: Path) -> None:
    """Regression: undeclared arguments were dropped in silence, so an agent paging with
    ``offset`` got page 1 again and one naming a memory with ``id`` got another id."""
    path = build_engine(tmp_path / "engine")

    async def scenario(session: ClientSession) -> None:
        for tool in (await session.list_tools()).tools:
            assert tool.input_schema["additionalProperties"] is False, tool.name
        for tool, arguments in UNDECLARED:
            declared = next(iter(arguments)) if tool != "list_corpora" else "no arguments"
            extra = list(arguments)[-1]
            await expect_tool_error(
                session, tool, arguments, f"unknown argument {extra!r}", declared
            )
        message = await expect_tool_error(
            session,
            "search_knowledge",
            {"corpus": "help", "query": "password", "mode": "x", "Top_K": 3},
            "unknown arguments 'Top_K', 'mode'",
        )
        assert "corpus, query, top_k, offset, filters" in message

    run_in_process(path, scenario)
    with SearchEngine(path) as engine:
        assert "memory" not in engine.list_corpora()  # the refused remember stored nothing


def test_search_knowledge_pages_with_offset_clamped_like_search(tmp_path: Path) -> None:
    path = tmp_path / "engine"
    with SearchEngine(path) as engine:
        engine.create_corpus(CorpusConfig(name="many", embedder=None)).add(
            [
                Document(id=f"d{i:02d}", title=f"Password article {i}", text=f"password {i}")
                for i in range(30)
            ]
        )
        expected = {
            offset: [p.source_id for p in engine.corpus("many").search("password", 5, offset)]
            for offset in (0, 5, 25)
        }
    assert expected[0] != expected[5] and len(expected[25]) == 5

    async def scenario(session: ClientSession) -> None:
        async def page(offset: Any) -> list[str]:
            arguments = {"corpus": "many", "query": "password", "top_k": 5, "offset": offset}
            found = payload(await session.call_tool("search_knowledge", arguments))
            return [p["source_id"] for p in found["passages"]]

        for offset, ids in expected.items():
            assert await page(offset) == ids
        assert await page(-5) == expected[0]  # clamped, not refused
        for past in (MAX_OFFSET + 1, 10**30):  # no page there: an agent paging stops
            assert await page(past) == []

    run_in_process(path, scenario)


def test_remember_takes_an_id_as_the_http_route_does(tmp_path: Path) -> None:
    path = build_engine(tmp_path / "engine")

    async def scenario(session: ClientSession) -> None:
        arguments = {"text": "use the blue key", "scope": "bob", "id": "door-key"}
        stored = payload(await session.call_tool("remember", arguments))
        assert stored == {"id": "door-key", "scope": "bob", "added": True}
        replaced = {"text": "use the red key", "scope": "bob", "id": "door-key"}
        assert payload(await session.call_tool("remember", replaced))["added"] is False
        await expect_tool_error(
            session,
            "remember",
            {"text": "mine now", "scope": "eve", "id": "door-key"},
            "taken in another scope",
        )
        await expect_tool_error(
            session, "remember", {"text": "x y", "scope": "bob", "id": "two words"}, "id"
        )
        recalled = payload(await session.call_tool("recall", {"query": "key", "scope": "bob"}))
        assert [(m["id"], m["text"]) for m in recalled["memories"]] == [
            ("door-key", "use the red key")
        ]

    run_in_process(path, scenario)


def test_a_boolean_is_not_a_count_and_only_true_or_false_is_a_flag(tmp_path: Path) -> None:
    """Regression: ``top_k: true`` was read as 1 and ``fixed: "yes"`` as true."""
    path = build_engine(tmp_path / "engine")

    async def scenario(session: ClientSession) -> None:
        search = {"corpus": "help", "query": "password"}
        await expect_tool_error(session, "search_knowledge", {**search, "top_k": True}, "top_k")
        await expect_tool_error(session, "search_knowledge", {**search, "offset": True}, "offset")
        grep = {"corpus": "help", "pattern": "password"}
        await expect_tool_error(session, "grep_knowledge", {**grep, "limit": True}, "limit")
        await expect_tool_error(session, "grep_knowledge", {**grep, "fixed": "yes"}, "fixed")
        one = payload(await session.call_tool("search_knowledge", {**search, "top_k": 1}))
        assert len(one["passages"]) == 1

    run_in_process(path, scenario)
