"""A small corpus over eight help-desk topics whose two arms rank it differently: word
overlap drives the keyword arm, ``HashEmbedder`` directions the vector arm."""

from __future__ import annotations

from engine import Document

TOPICS = ["printer", "fuser", "toner", "paper", "network", "driver", "password", "invoice"]


def topic_documents(count: int = 40) -> list[Document]:
    """``doc-00`` … : a title of two topics and a body of one to five of them."""
    return [
        Document(
            id=f"doc-{n:02d}",
            title=f"{TOPICS[n % 8]} {TOPICS[(n * 3) % 8]} guide",
            text=" ".join(TOPICS[(n + i) % 8] for i in range(n % 5 + 1)) + f" note {n}",
        )
        for n in range(count)
    ]
