"""Whether the Hugging Face Hub can be reached, asked once and quickly.

A model name that is not in the local cache makes sentence-transformers ask the Hub.
On a machine without a route to it, ``huggingface_hub`` retries every file with back-off
(1, 2, 4, 8, 8 s: ~25 s a file, several files), so the first search of a corpus whose
model is missing would stall for minutes before answering from keywords. One bounded
connection attempt first turns that into an immediate, clear ``EmbedderUnavailable``.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 3.0
_OFFLINE_VALUES = frozenset({"1", "true", "yes", "on"})


def hub_endpoint() -> str:
    """The Hub address ``huggingface_hub`` uses (``HF_ENDPOINT``, else the public Hub)."""
    return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when a TCP connection to the Hub's host opens within ``timeout_s`` (name
    resolution included); False at once when ``HF_HUB_OFFLINE`` is set. Never raises."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _OFFLINE_VALUES:
        return False
    parts = urlsplit(hub_endpoint())
    host = parts.hostname
    if not host:
        return False
    try:
        port = parts.port or (80 if parts.scheme == "http" else 443)
    except ValueError:
        return False
    opened: list[bool] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                opened.append(True)
        except (OSError, UnicodeError):
            opened.append(False)

    # Name resolution has no timeout of its own: it runs on a thread we stop waiting for.
    probe = threading.Thread(target=connect, name="tandem-hub-probe", daemon=True)
    probe.start()
    probe.join(timeout_s)
    return bool(opened) and opened[0]


def in_hub_cache(name: str) -> bool:
    """Whether the local Hugging Face cache holds model ``name`` (a bare name also as
    ``sentence-transformers/name``, as sentence-transformers reads it), asked without
    importing torch. True when it cannot tell (no ``huggingface_hub``): the loader
    decides then."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return True
    repos = (name,) if "/" in name else (name, f"sentence-transformers/{name}")
    for repo in repos:
        try:
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return True
        except Exception:  # an invalid repo id is simply not cached
            continue
    return False
