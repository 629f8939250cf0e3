"""A tiny BEIR folder (six help-centre documents, five judged queries) for bench tests."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

TINY_DOCS = [
    (
        "t1",
        "Reset your password",
        "Choose Forgot password on the sign-in page to get a reset link.",
    ),
    (
        "t2",
        "Error E-4021 while syncing",
        "E-4021 means a file name has characters Drive cannot store.",
    ),
    ("t3", "Share a calendar", "Invite colleagues to see your free and busy times."),
    ("t4", "Guest network", "Visitors get internet access without seeing your own devices."),
    (
        "t5",
        "Battery drains quickly",
        "Turn off the always-on display to make the watch last longer.",
    ),
    ("t6", "Port forwarding", "Forward external ports to one device under Advanced, NAT."),
]
TINY_QUERIES = [
    ("q1", "E-4021 sync error", {"t2": 2}),
    ("q2", "forgot my password", {"t1": 2}),
    ("q3", "let coworkers see when I am busy", {"t3": 2, "t6": 0}),
    ("q4", "give visitors wifi", {"t4": 1}),
    ("q5", "a query nobody judged as relevant", {"t5": 0}),
]


def write_beir(root: Path, gzip_corpus: bool = False) -> Path:
    """Write the tiny corpus in BEIR layout under ``root`` and return it."""
    root.mkdir(parents=True, exist_ok=True)
    lines = "".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in TINY_DOCS)
    if gzip_corpus:
        with gzip.open(root / "corpus.jsonl.gz", "wt", encoding="utf-8") as handle:
            handle.write(lines)
    else:
        (root / "corpus.jsonl").write_text(lines, encoding="utf-8")
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t, _ in TINY_QUERIES)
        + json.dumps({"_id": "q9", "text": "unjudged query"})
        + "\n",
        encoding="utf-8",
    )
    (root / "qrels").mkdir(exist_ok=True)
    rows = ["query-id\tcorpus-id\tscore"]
    rows += [f"{q}\t{d}\t{g}" for q, _, judged in TINY_QUERIES for d, g in judged.items()]
    (root / "qrels" / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root
