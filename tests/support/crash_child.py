"""Child-process ingest driver for the crash-safety test (run as a script, killed -9).

It opens ``<root>`` with ``SearchEngine``, creates or reopens corpus ``c`` and runs the
deterministic write plan ``plan(b)`` for batches ``start, start+1, ...``. After each
call returns it prints ``ACK <b>`` (flushed): the parent treats exactly those writes as
acknowledged. Around the interesting phases it prints ``BEGIN <phase>`` / ``END <phase>``
(``embed``, ``store``, ``tantivy``, ``faiss-save``) so the parent can aim a SIGKILL into
a phase and classify where each kill landed. The wrappers only print; behaviour is the
engine's own.

Usage: ``python tests/support/crash_child.py ROOT KIND START END [--flush-every N]``
with KIND ``keyword`` | ``hybrid`` | ``real``.
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a script: make the repo root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.fakes import POISON, WordHashEmbedder, factory_for

BATCH_SIZE = 30
CORPUS = "c"
_VOCAB = (
    *("printer", "fuser", "paper", "tray", "network", "invoice", "refund", "parcel"),
    *("locker", "password", "reset", "account", "delivery", "order", "shipping", "error"),
    *("warranty", "battery", "screen", "cable", "router", "signal"),
)

F = TypeVar("F", bound=Callable[..., Any])


# -- the write plan (shared with the parent, which replays it) ------------------------------


@dataclass(frozen=True)
class Op:
    kind: str  # "add" | "update" | "delete"
    ids: tuple[str, ...]
    version: int  # the batch that wrote this version of the text


def plan(b: int) -> Op:
    """Batch ``b``'s write. Updates rewrite an earlier add batch; deletes half of another."""
    if b >= 6 and b % 6 == 5:
        return Op("delete", _add_ids(b - 4)[: BATCH_SIZE // 2], b)
    if b >= 6 and b % 6 == 3:
        return Op("update", _add_ids(b - 3), b)
    return Op("add", _add_ids(b), b)


def _add_ids(b: int) -> tuple[str, ...]:
    return tuple(f"b{b}-{i}" for i in range(BATCH_SIZE))


def origin_batch(doc_id: str) -> int:
    return int(doc_id[1:].split("-")[0])


def is_poisoned(doc_id: str, poison: bool) -> bool:
    """In hybrid runs every 5th add batch cannot be embedded (stays degraded for good)."""
    return poison and origin_batch(doc_id) % 5 == 2


def unique_token(doc_id: str) -> str:
    return "uq" + doc_id.replace("-", "x")


def title_of(doc_id: str, version: int) -> str:
    return f"Document {unique_token(doc_id)} version {version}"


def text_of(doc_id: str, version: int, poison: bool) -> str:
    n = origin_batch(doc_id) * 31 + int(doc_id.split("-")[1]) * 7 + version
    words = [_VOCAB[(n + 3 * k) % len(_VOCAB)] for k in range(40)]
    marker = f" {POISON}" if is_poisoned(doc_id, poison) else ""
    return f"{unique_token(doc_id)} revision v{version}{marker} " + " ".join(words)


def replay(ops: list[Op], poison: bool) -> dict[str, tuple[str, str]]:
    """The store's expected content after ``ops``: id → (title, text)."""
    state: dict[str, tuple[str, str]] = {}
    for op in ops:
        for doc_id in op.ids:
            if op.kind == "delete":
                state.pop(doc_id, None)
            else:
                state[doc_id] = (title_of(doc_id, op.version), text_of(doc_id, op.version, poison))
    return state


# -- the child ------------------------------------------------------------------------------


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _announce(phase: str, fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _say(f"BEGIN {phase}")
        result = fn(*args, **kwargs)
        _say(f"END {phase}")
        return result

    return wrapper  # type: ignore[return-value]


def _instrument(embedder_cls: type | None) -> None:
    from dense import FaissIndex
    from engine.storage import DocumentStore
    from sparse import TantivyIndex

    DocumentStore.upsert = _announce("store", DocumentStore.upsert)  # type: ignore[method-assign]
    DocumentStore.delete = _announce("store", DocumentStore.delete)  # type: ignore[method-assign]
    TantivyIndex.upsert = _announce("tantivy", TantivyIndex.upsert)  # type: ignore[method-assign]
    TantivyIndex.delete = _announce("tantivy", TantivyIndex.delete)  # type: ignore[method-assign]
    FaissIndex.save = _announce("faiss-save", FaissIndex.save)  # type: ignore[method-assign]
    if embedder_cls is not None:
        embedder_cls.embed = _announce("embed", embedder_cls.embed)  # type: ignore[attr-defined]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("kind", choices=["keyword", "hybrid", "real"])
    parser.add_argument("start", type=int)
    parser.add_argument("end", type=int)
    parser.add_argument("--flush-every", type=int, default=3)
    args = parser.parse_args(argv)

    from engine import (
        CorpusConfig,
        CorpusNotFound,
        Document,
        SearchEngine,
        SentenceTransformerEmbedding,
    )

    poison = args.kind == "hybrid"
    factory = None
    embedder_cls: type | None = None
    if args.kind == "hybrid":
        fake = WordHashEmbedder(delay_s=0.004)  # a model-like pause a kill can land in
        fake.refuse_poison = True
        factory = factory_for(fake)
        embedder_cls = WordHashEmbedder
    elif args.kind == "real":
        from dense import SentenceTransformerEmbedder

        embedder_cls = SentenceTransformerEmbedder
    _instrument(embedder_cls)

    engine = SearchEngine(args.root, embedder_factory=factory)
    try:
        corpus = engine.corpus(CORPUS)
    except CorpusNotFound:
        embedder = None if args.kind == "keyword" else SentenceTransformerEmbedding()
        corpus = engine.create_corpus(CorpusConfig(name=CORPUS, embedder=embedder))
    _say("READY")
    for b in range(args.start, args.end):
        op = plan(b)
        if op.kind == "delete":
            corpus.delete(op.ids)
        else:
            corpus.add(
                Document(
                    id=i,
                    title=title_of(i, op.version),
                    text=text_of(i, op.version, poison),
                    url=f"/docs/{i}",
                )
                for i in op.ids
            )
        _say(f"ACK {b}")
        if args.kind != "keyword" and (b + 1) % args.flush_every == 0:
            corpus.flush()
            _say(f"FLUSHED {b}")
    engine.close()
    _say("DONE")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
