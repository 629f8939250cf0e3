"""A server URL as it may be shown (logs, error messages, ``repr``) and as it is dialled.

A host may carry credentials for a proxy in front of the server
(``http://alice:secret@h:11434``): shown as ``http://***@h:11434``, sent as HTTP Basic
authentication to the host without them. One parser reads both ways, so what is shown and
what is dialled never disagree on where the credentials end.
"""

from __future__ import annotations

import urllib.parse

__all__ = ["shown_host", "split_credentials"]


def _parts(url: str) -> tuple[str, str, str]:
    """``url`` as (``scheme://`` or ``""``, the network location, ``/path`` or ``""``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{sep}", netloc, f"{slash}{path}"


def shown_host(url: str) -> str:
    """``url`` without the credentials it may carry for a proxy in front of the server
    (``http://alice:secret@h:11434`` -> ``http://***@h:11434``): a host is named in
    warnings and errors that anyone reading the logs sees."""
    scheme, netloc, path = _parts(url)
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    return f"{scheme}{netloc}{path}"


def split_credentials(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without its ``user:password@``, and those (percent-decoded), or ``None``.
    Nothing else of ``url`` changes: a host without a scheme stays without one, so the
    client still supplies its own default port."""
    scheme, netloc, path = _parts(url)
    if "@" not in netloc:
        return url, None
    userinfo, address = netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    credentials = (urllib.parse.unquote(user), urllib.parse.unquote(password))
    return f"{scheme}{address}{path}", credentials
