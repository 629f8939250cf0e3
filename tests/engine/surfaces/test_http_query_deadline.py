"""``--query-embed-timeout`` of ``tandem serve`` and ``tandem mcp``: their searches do
not wait on a stuck embedder.

The corpus embeds with the real ``ollama`` client against the Ollama stand-in
(``tests/support/ollama_standin.py``), which is made to hang after the server is ready.
With the deadline a hybrid search answers from keywords and counts ``embedder_timeout``;
without one it would wait out the request budget and answer 503.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from fastapi.testclient import TestClient
from mcp.client.client import Client
from prometheus_client import generate_latest
from pydantic import ValidationError

from engine import CorpusConfig, Document, OllamaEmbedding, SearchEngine
from engine.surfaces.http import ServerSettings, create_app
from engine.surfaces.mcp_server import EngineHolder, build_server
from tests.support.metrics_support import parse, value
from tests.support.ollama_standin import Behaviour, OllamaStandIn, ollama_standin

__all__ = ["ollama_standin"]  # the fixture, re-exported so pytest finds it

DOCS = [
    Document(id="reset", title="Reset your password", text="Open Settings, then Security."),
    Document(id="billing", title="Billing", text="Invoices are sent monthly."),
]


def _home(tmp_path: Path, standin: OllamaStandIn) -> Path:
    home = tmp_path / "home"
    spec = OllamaEmbedding(model="standin-embed", host=standin.host)
    with SearchEngine(home) as engine:
        engine.create_corpus(CorpusConfig(name="help", embedder=spec)).add(DOCS)
    return home


def test_a_stuck_embedder_is_answered_from_keywords_within_the_deadline(
    tmp_path: Path, ollama_standin: OllamaStandIn
) -> None:
    settings = ServerSettings(home=_home(tmp_path, ollama_standin), query_embed_timeout_s=0.5)
    with TestClient(create_app(settings)) as client:
        ollama_standin.delay_s = 60.0  # past the request budget (10 s): only the deadline helps
        ollama_standin.behaviour = Behaviour.SLOW
        answer = client.post("/v1/corpora/help/search", json={"query": "password"})
        assert answer.status_code == 200, answer.text
        passages = answer.json()["passages"]
        assert [(p["source_id"], p["ranks"]["dense"]) for p in passages] == [("reset", None)]
        samples = parse(client.get("/metrics").text)
    fallbacks = value(
        samples, "tandem_search_fallbacks_total", corpus="help", reason="embedder_timeout"
    )
    assert fallbacks == 1


@pytest.mark.parametrize("deadline", [10.0, 30.0])
def test_a_deadline_not_shorter_than_the_request_budget_is_refused(
    tmp_path: Path, deadline: float
) -> None:
    with pytest.raises(ValidationError, match="shorter than the request budget"):
        ServerSettings(home=tmp_path, query_embed_timeout_s=deadline, request_budget_s=10.0)


def test_the_deadline_reaches_the_worker_processes_through_the_environment(
    tmp_path: Path,
) -> None:
    settings = ServerSettings(home=tmp_path, query_embed_timeout_s=2.5)
    assert ServerSettings.model_validate_json(settings.to_env()).query_embed_timeout_s == 2.5


def test_mcp_searches_answer_from_keywords_within_the_deadline(
    tmp_path: Path, ollama_standin: OllamaStandIn
) -> None:
    holder = EngineHolder(_home(tmp_path, ollama_standin), query_embed_timeout=0.5)
    assert holder.engine().corpus("help").search("password")[0].ranks.dense is not None
    ollama_standin.delay_s = 60.0  # from now on, after its health check passed
    ollama_standin.behaviour = Behaviour.SLOW

    async def search() -> str:
        # Without the deadline the call waits for Ollama's own 30 s timeout.
        with anyio.fail_after(25):
            async with Client(build_server(holder)) as client:
                result = await client.call_tool(
                    "search_knowledge", {"corpus": "help", "query": "password"}
                )
        assert not result.is_error
        return str(result.structured_content)

    try:
        answer = anyio.run(search)
        samples = parse(generate_latest(holder.engine().registry).decode())
    finally:
        holder.close()
    assert "reset" in answer and "billing" not in answer
    fallbacks = value(
        samples, "tandem_search_fallbacks_total", corpus="help", reason="embedder_timeout"
    )
    assert fallbacks == 1
