"""``tandem serve``: the HTTP API under ``/v1``, the search page at ``/``, ``/metrics`` and
health endpoints, one FastAPI app per worker process (see ``app.create_app``)."""

from engine.surfaces.http.app import create_app
from engine.surfaces.http.settings import ServerSettings

__all__ = ["ServerSettings", "create_app"]
