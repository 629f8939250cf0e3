"""A document the provider always refuses is found and held back, so repairs heal the
documents behind it (``engine.write.repair_plan``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import CorpusConfig, Document, SearchEngine
from engine.write import repair_plan
from engine.write.repair_plan import FIRST_WAIT_S, LONGEST_WAIT_S, MAX_WAITING, RepairPlan
from tests.support.fakes import POISON, WordHashEmbedder, factory_for


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _oldest(ids: list[str]) -> object:
    return lambda limit: ids[:limit]


def test_a_failed_batch_halves_the_next_and_a_success_doubles_it_back() -> None:
    ids = [f"d{i}" for i in range(100)]
    plan = RepairPlan(_Clock())
    assert plan.next_batch(64, _oldest(ids)) == ids[:64]
    plan.failed(ids[:64])
    assert plan.next_batch(64, _oldest(ids)) == ids[:32]
    plan.failed(ids[:32])
    assert len(plan.next_batch(64, _oldest(ids))) == 16
    plan.healed(ids[:16])
    assert len(plan.next_batch(64, _oldest(ids[16:]))) == 32
    plan.healed(ids[16:48])
    assert len(plan.next_batch(64, _oldest(ids[48:]))) == 52  # cap 64: the caller's size


def test_a_document_failing_alone_waits_outside_the_batches_with_a_growing_back_off() -> None:
    clock = _Clock()
    ids = ["bad", "a", "b", "c"]
    plan = RepairPlan(clock)
    plan.failed(ids)  # cap 2
    plan.failed(ids[:2])  # cap 1
    assert plan.next_batch(10, _oldest(ids)) == ["bad"]
    plan.failed(["bad"])
    assert plan.held_back == 1
    assert plan.next_batch(10, _oldest(ids)) == ["a", "b", "c"]  # found: full size again
    waits = []
    for _ in range(10):
        before = clock.now
        clock.now += FIRST_WAIT_S / 2
        assert "bad" not in plan.next_batch(10, _oldest(ids))
        while plan.next_batch(10, _oldest(ids)) != ["bad"]:
            clock.now += 1.0
        waits.append(clock.now - before)
        plan.failed(["bad"])  # tried alone when due, failing again
    assert waits[0] <= FIRST_WAIT_S + 1 and waits[1] >= 2 * FIRST_WAIT_S
    assert max(waits) <= LONGEST_WAIT_S + 1 and waits[-1] >= LONGEST_WAIT_S
    plan.healed(["bad"])
    assert plan.held_back == 0


def test_the_documents_held_back_are_bounded() -> None:
    plan = RepairPlan(_Clock())
    for i in range(MAX_WAITING + 10):
        plan.failed([f"d{i}"])
    assert plan.held_back == MAX_WAITING


def test_repairs_heal_every_document_but_the_one_the_provider_refuses(tmp_path: Path) -> None:
    """Regression: embedding is one call per batch, and a repair always took the oldest
    degraded documents, so one refused document failed every repair and nothing behind it
    ever healed (found with Ollama answering HTTP 500 for a text past its context)."""
    fake = WordHashEmbedder()
    with SearchEngine(tmp_path, embedder_factory=factory_for(fake)) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder="word-hash"))
        fake.refuse_poison = True
        docs = [Document(id="bad", text=f"alpha {POISON}")]
        docs += [Document(id=f"d{i}", text=f"alpha bravo {i}") for i in range(40)]
        assert corpus.add(docs).degraded == 41  # one batch: all of it stored degraded
        calls = fake.calls
        for _ in range(12):  # each failed batch halves the next
            corpus.repair(batch_size=64)
        assert corpus.stats()["degraded"] == 1
        assert corpus.repair() == 0  # held back: not asked again before its wait is over
        # The add tried all 41 (its batch, then its heal); then 20, 10, 5, 2 and 1 fail,
        # and the 40 behind the refused one heal in one call.
        assert fake.calls - calls == 6
        hits = corpus.search("alpha bravo 7", top_k=3)
        assert hits[0].source_id == "d7" and hits[0].ranks.dense is not None
        fake.refuse_poison = False
        corpus.add([Document(id="bad", text="alpha fixed")])  # a new text embeds at once
        assert corpus.stats()["degraded"] == 0


def test_a_held_back_document_due_again_never_uses_up_a_repair_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a held-back document whose wait was over was tried alone and, failing
    again, ended the repair pass, so documents degraded since then never healed while
    refused ones kept coming due."""
    monkeypatch.setattr(repair_plan, "FIRST_WAIT_S", 0.0)  # held back, always due
    fake = WordHashEmbedder()
    with SearchEngine(tmp_path, embedder_factory=factory_for(fake)) as eng:
        corpus = eng.create_corpus(CorpusConfig(name="c", embedder="word-hash"))
        fake.refuse_poison = True
        corpus.add([Document(id="bad", text=f"alpha {POISON}")])  # fails alone: held back
        fake.down = True
        corpus.add([Document(id=f"d{i}", text=f"alpha bravo {i}") for i in range(20)])
        fake.down = False
        calls = fake.calls
        assert corpus.repair() == 20  # the retry fails, the others heal in the same pass
        # The retry, the 20; the next round (a wait of 0) retries once more, and stops.
        assert fake.calls - calls == 3 and corpus.stats()["degraded"] == 1
