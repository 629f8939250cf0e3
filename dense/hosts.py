"""A server URL as it may be shown: in logs, error messages and ``repr``."""

from __future__ import annotations

__all__ = ["shown_host"]


def shown_host(url: str) -> str:
    """``url`` without the credentials it may carry for a proxy in front of the server
    (``http://alice:secret@h:11434`` -> ``http://***@h:11434``): a host is named in
    warnings and errors that anyone reading the logs sees."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    netloc, slash, path = rest.partition("/")
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    return f"{scheme}{sep}{netloc}{slash}{path}"
