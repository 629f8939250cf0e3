"""A tiny help-centre corpus where each arm alone gets some queries wrong.

Lexical queries hinge on an exact code or rare name the embedding blurs; paraphrase
queries share no content words with their answer, so BM25 misses them.
"""

from __future__ import annotations

from engine import Document

DOCS = [
    Document(
        id="err-4471",
        title="Printer error E-4471",
        text="Error E-4471 means the fuser unit overheated. Switch the printer off and "
        "let it cool for thirty minutes.",
        url="/help/e4471",
    ),
    Document(
        id="err-1002",
        title="Printer error E-1002",
        text="Error E-1002 means the paper tray is empty or not seated correctly.",
        url="/help/e1002",
    ),
    Document(
        id="err-3310",
        title="Printer error E-3310",
        text="Error E-3310 indicates a network timeout between the printer and the print server.",
        url="/help/e3310",
    ),
    Document(
        id="overheat",
        title="Why devices get hot",
        text="Electronics produce heat; blocked vents and dust make a device overheat "
        "and shut down to protect itself.",
        url="/help/heat",
    ),
    Document(
        id="password",
        title="Reset your password",
        text="Use the reset link on the sign-in page to choose new credentials. The "
        "link expires after one hour.",
        url="/help/reset",
    ),
    Document(
        id="delivery",
        title="Delivery times",
        text="Orders are dispatched within a day and usually arrive within five business days.",
        url="/help/delivery",
    ),
    Document(
        id="lockers",
        title="Parcel lockers",
        text="Parcel lockers keep a parcel for up to seven days; after that it goes "
        "back to the depot. Long-term storage is not offered.",
        url="/help/lockers",
    ),
    Document(
        id="refund",
        title="Refunds",
        text="Money goes back to the original payment method within ten days of us "
        "receiving the returned item.",
        url="/help/refunds",
    ),
    Document(
        id="invoice",
        title="Invoices",
        text="Invoices are emailed as PDF files and can be downloaded from the billing "
        "page of your account.",
        url="/help/invoices",
    ),
    Document(
        id="kx-4471",
        title="Part KX-4471",
        text="KX-4471 is the fuser assembly for the M400 office printer.",
        url="/parts/4471",
    ),
    Document(
        id="kx-4417",
        title="Part KX-4417",
        text="KX-4417 is the fuser assembly for the M410 office printer.",
        url="/parts/4417",
    ),
    Document(
        id="kx-7441",
        title="Part KX-7441",
        text="KX-7441 is the fuser assembly for the M440 office printer.",
        url="/parts/7441",
    ),
    Document(
        id="kx-1447",
        title="Part KX-1447",
        text="KX-1447 is the fuser assembly for the M401 office printer.",
        url="/parts/1447",
    ),
    Document(
        id="secret",
        title="Internal password escalation runbook",
        text="Staff only: how support escalates password resets for VIP accounts.",
        url="/internal/runbook",
        access_groups=frozenset({"staff"}),
    ),
]

# (query, relevant doc id, kind)
QUERIES = [
    ("KX-4417 fuser", "kx-4417", "lexical"),
    ("fuser for the M440", "kx-7441", "lexical"),
    ("KX-1447", "kx-1447", "lexical"),
    ("I can't remember how to sign in", "password", "paraphrase"),
    ("when will my order show up", "delivery", "paraphrase"),
    ("my device became too warm and switched itself off", "overheat", "paraphrase"),
]
