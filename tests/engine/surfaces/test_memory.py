"""Agent memory (``engine.surfaces.memory``) in process, and through the MCP tools
``remember``/``recall`` and the ``filters`` argument of ``search_knowledge``."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from mcp.client.session import ClientSession

from engine import Corpus, CorpusConfig, Document, InvalidArgument, SearchEngine, StorageError
from engine.surfaces.memory import MAX_MEMORY_CHARS, Memory, memory_id
from tests.engine.surfaces.test_mcp import expect_tool_error, payload, run_session


@pytest.fixture
def memory(fast_engine: SearchEngine) -> Memory:
    return Memory(fast_engine, embedder="fake-model")  # type: ignore[arg-type]


def test_remember_then_recall_within_a_scope(memory: Memory, fast_engine: SearchEngine) -> None:
    assert memory.recall("anything at all") == []  # nothing remembered, no corpus yet
    first = memory.remember("Alice prefers green tea", "alice", title="drinks")
    assert first.added and first.id == memory_id("Alice prefers green tea", "alice")
    assert not memory.remember("Alice prefers green tea", "alice", title="drinks").added  # once
    memory.remember("Bob prefers green tea too", "bob")
    corpus = fast_engine.corpus("memory")
    assert corpus.config.vectors_enabled  # hybrid: created with the given embedder
    assert len(corpus) == 2
    mine = memory.recall("green tea", "alice")
    assert [(m.id, m.title, m.text) for m in mine] == [
        (first.id, "drinks", "Alice prefers green tea")
    ]
    assert {m.text for m in memory.recall("green tea", top_k=10)} == {
        "Alice prefers green tea",
        "Bob prefers green tea too",
    }
    assert memory.recall("green tea", "carol") == []
    assert memory.recall("x", "alice") == []  # clamped like search: too short, nothing


def test_an_explicit_id_never_replaces_another_scopes_memory(memory: Memory) -> None:
    """Regression: ``remember(..., id=X)`` in one scope silently overwrote scope B's
    memory X (and said ``added=False``)."""
    memory.remember("Alice's doctor is Dr Who", "alice", id="note-1")
    with pytest.raises(InvalidArgument, match="taken in another scope"):
        memory.remember("Bob's unrelated note", "bob", id="note-1")
    assert [m.text for m in memory.recall("doctor", "alice")] == ["Alice's doctor is Dr Who"]
    updated = memory.remember("Alice's doctor is Dr Foster", "alice", id="note-1")
    assert not updated.added  # the same scope may replace its own memory
    assert [m.text for m in memory.recall("doctor", "alice")] == ["Alice's doctor is Dr Foster"]


def test_a_memory_several_scopes_share_is_replaced_by_none_of_them(
    memory: Memory, fast_engine: SearchEngine
) -> None:
    """Review: a document added with two scopes (a keyword field holds a list) was seen
    as holding only its last one, so that scope replaced it — and the other scope lost
    its memory — while the first was told the id was taken."""
    memory.remember("seed", "alice")
    corpus = fast_engine.corpus("memory")
    shared = Document(
        id="team-note",
        text="alice and bob share the deploy key rotation duty",
        fields={"scope": ["alice", "bob"]},
    )
    corpus.add([shared])
    for scope in ("alice", "bob"):
        with pytest.raises(InvalidArgument, match="taken in another scope"):
            memory.remember("bob overwrote this", scope, id="team-note")
    for scope in ("alice", "bob"):
        recalled = [m.text for m in memory.recall("deploy key rotation", scope)]
        assert recalled[0] == shared.text and "bob overwrote this" not in recalled


def test_two_scopes_remembering_one_id_at_once_never_replace_each_other(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the id's scope was checked outside the write lock, so two scopes
    remembering the same id at once both passed the check and one replaced the other
    (146 of 150 racing rounds in a review)."""
    memory.remember("seed", "seed-scope")  # the corpus exists before the race
    real_add = Corpus.add
    outcomes: dict[str, object] = {}

    def bob() -> None:
        try:
            outcomes["bob"] = memory.remember("Bob's note", "bob", id="shared-id")
        except InvalidArgument as exc:
            outcomes["bob"] = exc

    def add_after_bob_tried(self: Corpus, documents: Any, **kwargs: Any) -> Any:
        if "started" not in outcomes:  # Alice's add: let Bob try in between, if he can
            outcomes["started"] = True
            rival = threading.Thread(target=bob)
            rival.start()
            rival.join(timeout=2)  # with the fix he waits for the lock: Alice goes on
            outcomes["rival"] = rival
        return real_add(self, documents, **kwargs)

    monkeypatch.setattr(Corpus, "add", add_after_bob_tried)
    alice = memory.remember("Alice's note", "alice", id="shared-id")
    rival = outcomes["rival"]
    assert isinstance(rival, threading.Thread)
    rival.join(timeout=60)
    assert alice.added
    assert isinstance(outcomes["bob"], InvalidArgument)  # told, not silently replaced
    assert [m.text for m in memory.recall("note", "alice")] == ["Alice's note"]
    assert memory.recall("note", "bob") == []


def test_remember_neither_replaces_nor_reveals_a_non_public_document(
    memory: Memory, fast_engine: SearchEngine
) -> None:
    """Regression: ``remember(id=...)`` of a non-public document's id replaced it (made
    public, its access groups dropped) in its scope, and in another scope answered
    differently from an id nobody holds."""
    memory.remember("seed", "alice")
    corpus = fast_engine.corpus("memory")
    private = Document(
        id="hr-note",
        text="salary review",
        access_groups=frozenset({"hr"}),
        fields={"scope": "alice"},
    )
    corpus.add([private])
    for scope in ("alice", "bob"):
        with pytest.raises(InvalidArgument, match="taken in another scope"):
            memory.remember("overwrite attempt", scope, id="hr-note")
    assert corpus._store.get_many(["hr-note"], public_only=False)["hr-note"].text == "salary review"
    assert "hr-note" not in {m.id for m in memory.recall("salary review", "alice", top_k=50)}


def test_remember_without_an_id_neither_replaces_nor_reveals_a_non_public_document(
    memory: Memory, fast_engine: SearchEngine
) -> None:
    """Review: the id ``remember`` derives from scope and text skipped the holder check,
    so remembering the text of a non-public document stored under that id answered
    "added": false (it exists) and replaced it with a public copy."""
    memory.remember("seed", "hr")
    corpus = fast_engine.corpus("memory")
    text = "Payroll cut planned for March"
    private = Document(
        id=memory_id(text, "hr"),
        text=text,
        access_groups=frozenset({"hr"}),
        fields={"scope": "hr"},
    )
    corpus.add([private])
    with pytest.raises(InvalidArgument, match="taken in another scope"):
        memory.remember(text, "hr")
    stored = corpus._store.get_many([private.id], public_only=False)[private.id]
    assert stored.access_groups == frozenset({"hr"})  # still non-public
    assert private.id not in {p.source_id for p in corpus.search("payroll cut march")}
    again = memory.remember("seed", "hr")  # a public memory of its own id: an update
    assert again.added is False


@pytest.mark.parametrize("scope", ["\x85alice", "alice\u200b", "\u202ealice"])
def test_a_scope_that_prints_like_another_is_refused(memory: Memory, scope: str) -> None:
    with pytest.raises(InvalidArgument, match="printable"):
        memory.remember("note", scope)
    with pytest.raises(InvalidArgument, match="printable"):
        memory.recall("note", scope)


@pytest.mark.parametrize("scope", [" bob ", " bob", "bob ", " ", "   "])
def test_a_scope_with_a_space_at_either_end_is_refused(
    memory: Memory, fast_engine: SearchEngine, scope: str
) -> None:
    """Regression: " bob " was a scope of its own that printed like "bob", and "   " was
    taken as a scope."""
    for call in (lambda: memory.remember("note", scope), lambda: memory.recall("note", scope)):
        with pytest.raises(InvalidArgument, match="not starting or ending with a space"):
            call()
    assert "memory" not in fast_engine.list_corpora()
    assert memory.remember("note", "bob").scope == "bob"  # inner spaces are fine: "team a"
    assert memory.remember("note", "team a").scope == "team a"


def test_memory_refuses_what_search_would_refuse(memory: Memory, fast_engine: SearchEngine) -> None:
    for text, scope, needle in [
        ("", "a", "non-empty"),
        ("   ", "a", "non-empty"),
        ("x" * (MAX_MEMORY_CHARS + 1), "a", str(MAX_MEMORY_CHARS)),
        ("note", "", "scope"),
        ("note", "a\nb", "scope"),
        ("note", "s" * 300, "scope"),
    ]:
        with pytest.raises(InvalidArgument, match=needle):
            memory.remember(text, scope)
    with pytest.raises(InvalidArgument, match="id"):
        memory.remember("note", "a", id="two words")
    with pytest.raises(InvalidArgument, match="scope"):
        memory.recall("note", "bad\x00scope")
    fast_engine.create_corpus(CorpusConfig(name="plain", embedder=None))
    with pytest.raises(InvalidArgument, match="not a memory corpus"):
        Memory(fast_engine, "plain").remember("note", "a")


def test_a_refused_memory_creates_no_corpus(memory: Memory, fast_engine: SearchEngine) -> None:
    """Regression: a ``remember`` the engine refused (a NUL in the text, a bad id) first
    created the hybrid ``memory`` corpus, which stayed behind."""
    with pytest.raises(InvalidArgument, match="NUL"):
        memory.remember("bad\x00text", "agent")
    with pytest.raises(InvalidArgument, match="NUL"):
        memory.remember("fine text", "agent", title="bad\x00title")
    with pytest.raises(InvalidArgument, match="id"):
        memory.remember("fine text", "agent", id="two words")
    assert "memory" not in fast_engine.list_corpora()
    assert memory.remember("fine text", "agent").added  # a valid one still creates it
    assert "memory" in fast_engine.list_corpora()


def test_mcp_remember_recall_and_search_filters(tmp_path: Path) -> None:
    path = tmp_path / "engine"
    with SearchEngine(path) as engine:
        engine.create_corpus(
            CorpusConfig(name="memory", embedder=None, fields={"scope": "keyword"})  # type: ignore[arg-type]
        )
        engine.create_corpus(
            CorpusConfig(name="letters", embedder=None, fields={"year": "integer"})  # type: ignore[arg-type]
        ).add(
            [
                Document(id="l1", text="The war news is grim.", fields={"year": 1942}),
                Document(id="l2", text="The war is over.", fields={"year": 1945}),
                Document(
                    id="l3",
                    text="Secret war plans.",
                    fields={"year": 1945},
                    access_groups=frozenset({"staff"}),
                ),
            ]
        )

    async def scenario(session: ClientSession) -> None:
        stored = payload(
            await session.call_tool(
                "remember", {"text": "The user writes Python", "scope": "project-x"}
            )
        )
        assert stored["added"] is True and stored["scope"] == "project-x"
        await session.call_tool("remember", {"text": "The user writes Rust", "scope": "other"})
        recalled = payload(
            await session.call_tool("recall", {"query": "user writes", "scope": "project-x"})
        )
        assert [m["text"] for m in recalled["memories"]] == ["The user writes Python"]
        everything = payload(await session.call_tool("recall", {"query": "user writes"}))
        assert len(everything["memories"]) == 2
        await expect_tool_error(session, "remember", {"text": "x", "scope": "a\u0007b"}, "scope")
        for padded in (" project-x ", "   "):
            await expect_tool_error(session, "remember", {"text": "x", "scope": padded}, "space")
            await expect_tool_error(session, "recall", {"query": "xy", "scope": padded}, "space")

        late = payload(
            await session.call_tool(
                "search_knowledge",
                {"corpus": "letters", "query": "war", "filters": {"year": {"gte": 1943}}},
            )
        )
        assert [p["source_id"] for p in late["passages"]] == ["l2"]  # never l3 (private)
        # The list form ANDs its objects, as over HTTP and the CLI (it was refused).
        both = payload(
            await session.call_tool(
                "search_knowledge",
                {
                    "corpus": "letters",
                    "query": "war",
                    "filters": [{"year": {"gte": 1943}}, {"year": {"lte": 1945}}],
                },
            )
        )
        assert [p["source_id"] for p in both["passages"]] == ["l2"]
        message = await expect_tool_error(
            session,
            "search_knowledge",
            {"corpus": "letters", "query": "war", "filters": {"yeer": 1}},
            "yeer",
        )
        assert "declared fields" in message

    run_session(path, scenario)


def test_remember_on_a_corpus_closed_meanwhile_is_an_engine_error(
    memory: Memory, fast_engine: SearchEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: with the scope check under the write lock, a corpus closed between
    ``remember`` finding it and writing raised a bare OSError (the lock's), which MCP and
    the HTTP error mapping do not catch; it is a StorageError, as every write's."""
    memory.remember("seed", "alice")
    corpus = fast_engine.corpus("memory")
    corpus.close()
    monkeypatch.setattr(Memory, "_corpus", lambda self, create: corpus)  # the stale object
    for explicit in (None, "note-1"):
        with pytest.raises(StorageError):
            memory.remember("late note", "alice", id=explicit)
