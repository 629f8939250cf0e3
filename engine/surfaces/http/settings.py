"""What one ``tandem serve`` needs to know: the engine directory, the write token, the caps.

Worker processes are separate interpreters; they receive the settings as JSON in the
environment variable ``TANDEM_SERVE_SETTINGS`` (never the token itself: a worker reads it
from ``token_file`` or from ``TANDEM_API_TOKEN``, as the parent did).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.errors import InvalidArgument
from engine.limits import CORPUS_NAME_PATTERN
from engine.surfaces.loaders import MAX_LINE_BYTES

__all__ = [
    "MIN_TOKEN_CHARS",
    "SETTINGS_ENV",
    "TOKEN_ENV",
    "ServerSettings",
    "load_token",
]

SETTINGS_ENV = "TANDEM_SERVE_SETTINGS"
TOKEN_ENV = "TANDEM_API_TOKEN"
MIN_TOKEN_CHARS = 16
_MIB = 1024 * 1024


class ServerSettings(BaseModel):
    """One server's configuration (frozen). Sizes are bytes, budgets seconds.

    - ``max_body_bytes``: every request body except document uploads (search, grep, ...);
      a longer body is refused with 413 before it is read.
    - ``max_upload_bytes``: a ``POST .../documents`` body (spooled to disk, not memory).
    - ``max_line_bytes``: one NDJSON line of an upload.
    - ``request_budget_s``: wall time a read (search, evidence, grep, recall) may take;
      past it the answer is a 503 ``time_budget_exceeded``. ``ask_budget_s`` for ``ask``.
      Writes are never cut off part-way (the body caps bound them instead).
    - ``query_embed_timeout_s``: the engine's ``query_embed_timeout`` (``None``, the
      default: none). Past it a hybrid search answers from keywords instead of waiting
      for a stuck embedder until ``request_budget_s`` turns it into a 503, so it must be
      shorter than ``request_budget_s``. The model loads before ``/readyz`` answers, so a
      few seconds are enough here (not the 30 s a cold process needs).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    home: Path
    token_file: Path | None = None
    memory_corpus: Annotated[str, Field(pattern=f"^{CORPUS_NAME_PATTERN.pattern}$")] = "memory"
    max_body_bytes: Annotated[int, Field(ge=1024, le=64 * _MIB)] = 1 * _MIB
    max_upload_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * _MIB)] = 256 * _MIB
    max_line_bytes: Annotated[int, Field(ge=1024, le=MAX_LINE_BYTES)] = MAX_LINE_BYTES
    request_budget_s: Annotated[float, Field(gt=0, le=3600)] = 10.0
    ask_budget_s: Annotated[float, Field(gt=0, le=3600)] = 60.0
    query_embed_timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = None
    multiprocess_metrics: bool = False

    @model_validator(mode="after")
    def _deadline_inside_the_budget(self) -> ServerSettings:
        deadline = self.query_embed_timeout_s
        if deadline is not None and deadline >= self.request_budget_s:
            raise ValueError(
                f"the query-embedding deadline ({deadline:g} s) must be shorter than the "
                f"request budget ({self.request_budget_s:g} s): a search waiting longer gets "
                "a 503 before it could answer from keywords"
            )
        return self

    def to_env(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_env(cls) -> ServerSettings:
        raw = os.environ.get(SETTINGS_ENV)
        if not raw:
            raise InvalidArgument(f"{SETTINGS_ENV} is not set (start the server with tandem serve)")
        return cls.model_validate_json(raw)


def load_token(settings: ServerSettings) -> str | None:
    """The write token: ``token_file``'s content, else ``$TANDEM_API_TOKEN``, else ``None``.

    Raises ``InvalidArgument`` for an unreadable file, or a token shorter than
    ``MIN_TOKEN_CHARS`` or with other characters than printable ASCII (surrounding
    whitespace is ignored): HTTP carries header values as bytes that clients send in
    ASCII (httpx refuses anything else, curl sends UTF-8 that the server reads as
    Latin-1), so any other token could never be given back.
    """
    if settings.token_file is not None:
        try:
            token = settings.token_file.read_text("utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidArgument(
                f"cannot read the token file {settings.token_file}: {exc}"
            ) from exc
        source = f"token file {settings.token_file}"
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
        source = f"${TOKEN_ENV}"
        if not token:
            return None
    if len(token) < MIN_TOKEN_CHARS or not all("!" <= ch <= "~" for ch in token):
        raise InvalidArgument(
            f"the API token from {source} must be at least {MIN_TOKEN_CHARS} characters, "
            "printable ASCII without spaces; make one with: python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'"
        )
    return token
