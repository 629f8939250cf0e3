"""``dense.hosts``: one parser for a host as shown (credentials masked) and as dialled
(credentials split off for Basic authentication, nothing else changed)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ollama._client import _parse_host

from dense.hosts import shown_host, split_credentials

CASES = [
    # host, dialled, credentials, shown
    ("http://127.0.0.1:11434", "http://127.0.0.1:11434", None, "http://127.0.0.1:11434"),
    ("localhost", "localhost", None, "localhost"),
    (
        "http://alice:s3cr%40t@127.0.0.1:11434/x",
        "http://127.0.0.1:11434/x",
        ("alice", "s3cr@t"),
        "http://***@127.0.0.1:11434/x",
    ),
    ("alice:secret@10.0.0.1", "10.0.0.1", ("alice", "secret"), "***@10.0.0.1"),
    ("https://bob@h", "https://h", ("bob", ""), "https://***@h"),
    ("http://u:p@[::1]:11434", "http://[::1]:11434", ("u", "p"), "http://***@[::1]:11434"),
    ("http://h:1/a@b", "http://h:1/a@b", None, "http://h:1/a@b"),  # an @ in the path
]


@pytest.mark.parametrize(("host", "dialled", "credentials", "shown"), CASES)
def test_a_host_is_dialled_without_its_credentials_and_shown_masked(
    host: str, dialled: str, credentials: tuple[str, str] | None, shown: str
) -> None:
    assert split_credentials(host) == (dialled, credentials)
    assert shown_host(host) == shown


def test_a_host_without_a_scheme_keeps_the_clients_default_port() -> None:
    """Audit: splitting the credentials off ``alice:secret@127.0.0.1`` added ``http://``,
    which the ollama client reads as port 80 instead of 11434 — the credentials went in
    clear text to whatever listened there."""
    dialled, _ = split_credentials("alice:secret@127.0.0.1")
    assert _parse_host(dialled) == _parse_host("127.0.0.1") == "http://127.0.0.1:11434"


@given(
    st.sampled_from(["", "http://", "https://"]),
    st.text(alphabet="abc:%@40", max_size=12),
    st.sampled_from(["h", "h:1", "[::1]:2"]),
    st.sampled_from(["", "/", "/p@q"]),
)
def test_what_is_dialled_is_what_is_shown_less_the_mask(
    scheme: str, userinfo: str, address: str, path: str
) -> None:
    host = f"{scheme}{userinfo}@{address}{path}" if userinfo else f"{scheme}{address}{path}"
    dialled, credentials = split_credentials(host)
    assert (credentials is None) == ("***@" not in shown_host(host))
    assert shown_host(host).replace("***@", "", 1) == dialled
