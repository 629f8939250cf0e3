"""``python -m bench http``: ``tandem serve`` under load (wrk) and fuzzed from its own
OpenAPI schema (schemathesis). A client of the product: it starts the installed
``tandem serve`` and talks HTTP to it; the in-process baseline uses the public API."""

from bench.http.cli import main

__all__ = ["main"]
